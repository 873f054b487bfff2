/* request/dbm.h: the request path from users in a DBM file, as htdbm
 * writes them (the key the user's name, the value "hash[:extra]"), a
 * source of stored hashes beside the htpasswd file (src/request/dbm.c;
 * the file's reading is sources/dbm.h's). */
#ifndef AUTHN_HMAC_DBM_H
#define AUTHN_HMAC_DBM_H

#include "apr_pools.h"

#include "request/engine.h"
#include "request/source.h"
#include "sources/dbm.h" /* authn_hmac_dbm_type_check */

/* A DBM file's state in this process, made in p, which it lives in; usable
 * by any thread once made: the file at path (absolute) with the memo of
 * what it answered while it has not changed (sources/dbm.h), and the
 * source's template of unknown users' dummy. */
typedef struct authn_hmac_dbm_t authn_hmac_dbm_t;
authn_hmac_dbm_t *authn_hmac_dbm_make(const char *path, apr_pool_t *p);

/* The request path from the DBM file d, of type: looks c->user up (the
 * value's hash: up to its first ':') and checks the credential as
 * authn_hmac_check_hash does. The file is opened read-only, as
 * mod_authn_dbm does, and closed at once (a gdbm reader that kept it open
 * would lock htdbm out); a writer's lock is waited for up to 250 ms.
 * AUTHN_HMAC_ERROR with *rv the error when the file cannot be read; else
 * *rv is APR_SUCCESS. */
authn_hmac_outcome authn_hmac_check_dbm(const authn_hmac_engine_t *e,
                                        const authn_hmac_policy_t *pol,
                                        authn_hmac_dbm_t *d, const char *type,
                                        authn_hmac_cred_t *c, void *baton,
                                        apr_pool_t *p, apr_status_t *rv);

#endif /* AUTHN_HMAC_DBM_H */
