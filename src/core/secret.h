/* core/secret.h: secrets (the pepper, the Redis password, the TLS
 * client key) in locked pages kept out of core dumps. */
#ifndef AUTHN_HMAC_SECRET_H
#define AUTHN_HMAC_SECRET_H

#include <stddef.h>

#include <apr_pools.h>

#define AUTHN_HMAC_PEPPER_MIN 32   /* bytes */
#define AUTHN_HMAC_SECRET_MAX 1024 /* bytes */

/* A secret held in its own locked, never-dumped page; wiped when its pool
 * is cleared. */
typedef struct {
    unsigned char *data;
    size_t len;
} authn_hmac_secret_t;

/* Reads a secret file that must belong to the current user (or root), must
 * not be accessible by group or others, and must hold min..max bytes.
 * On failure returns a message (in p) naming the problem, else NULL. */
const char *authn_hmac_secret_read(authn_hmac_secret_t **out, const char *path,
                                   size_t min, size_t max, apr_pool_t *p);

/* Fills a new secret with len random bytes. */
apr_status_t authn_hmac_secret_random(authn_hmac_secret_t **out, size_t len,
                                      apr_pool_t *p);

/* The same, for a pool that outlives the code that made it (httpd's
 * process pool outlives the module, which is unloaded first): no cleanup
 * is registered; the page, locked and out of core dumps, ends with the
 * process. */
apr_status_t authn_hmac_secret_random_retained(authn_hmac_secret_t **out,
                                               size_t len, apr_pool_t *p);

/* A new zeroed secret of len bytes, on page boundaries. */
apr_status_t authn_hmac_secret_alloc(authn_hmac_secret_t **out, size_t len,
                                     apr_pool_t *p);

/* Locks the secret's pages again: a child of fork() does not inherit the
 * parent's locks (it does keep their exclusion from core dumps). */
void authn_hmac_secret_relock(const authn_hmac_secret_t *secret);

/* Wipes and unmaps the secret now (a child that does not need it). */
void authn_hmac_secret_wipe(authn_hmac_secret_t *secret);

#endif /* AUTHN_HMAC_SECRET_H */
