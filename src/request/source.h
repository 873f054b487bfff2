/* request/source.h: the request path from a source of stored hashes
 * other than the htpasswd file (a DBM file, SQL): the source gives the
 * user's hash, or none, and this checks the credential as the htpasswd
 * path does, with an unknown user's dummy made from another user's hash
 * (src/request/source.c). */
#ifndef AUTHN_HMAC_SOURCE_H
#define AUTHN_HMAC_SOURCE_H

#include "apr_pools.h"

#include "request/engine.h"

typedef struct authn_hmac_source_t authn_hmac_source_t;

/* A source's state in this process (made in p, which it lives in; usable
 * by any thread once made): the template of its unknown users' dummy. */
authn_hmac_source_t *authn_hmac_source_make(apr_pool_t *p);

/* Whether the source has a template yet (the first hash of a user it
 * found, its salt made plain); a source that can read another user's hash
 * (a DBM file's first record) gives it to the next call as other while it
 * has none. */
int authn_hmac_source_has_template(authn_hmac_source_t *s);

/* The template of the source's unknown users' dummy: the first hash it
 * found in this process, its salt made plain, else a bcrypt of cost 10. */
const char *authn_hmac_source_template(authn_hmac_source_t *s);

/* Checks c against hash, the user's stored hash (NULL: no such user; a
 * locked one counts as the file's locked lines do), as authn_hmac_check
 * does. An unknown or locked user is checked against a dummy made from the
 * template (the first hash this source found in this process, else other's,
 * else a bcrypt of cost 10: a fresh process that has found no user yet). c's
 * hash, dummy and ids are set here. */
authn_hmac_outcome authn_hmac_check_hash(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         authn_hmac_source_t *s,
                                         authn_hmac_cred_t *c, const char *hash,
                                         const char *other, void *baton,
                                         apr_pool_t *p);

#endif /* AUTHN_HMAC_SOURCE_H */
