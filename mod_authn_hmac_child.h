/*
 * mod_authn_hmac_child.h: a child's own state (mod_authn_hmac.c), set in
 * child_init, nothing in the parent: its Redis pool, its engine, and its
 * registry of the files named in .htaccess.
 */
#ifndef MOD_AUTHN_HMAC_CHILD_H
#define MOD_AUTHN_HMAC_CHILD_H

#include "apr_hash.h"
#include "apr_thread_mutex.h"

#include "redis/redis.h"
#include "redis/sentinel.h"
#include "request/engine.h"
#include "sources/htpasswd.h"

/* Files named only in .htaccess, read per request in a child: a registry
 * of the child's, under a lock and bounded. */
typedef struct {
    apr_pool_t *pool; /* its own; NULL: no registry */
    apr_thread_mutex_t *lock;
    apr_hash_t *files; /* path -> authn_hmac_userfile_t */
    authn_hmac_budget_t budget;
} hmac_htaccess_t;

typedef struct {
    hmac_htaccess_t htaccess;
    authn_hmac_redis_pool_t *redis_pool;
    authn_hmac_sentinel_t *sentinel; /* its discovery of the primary */
    authn_hmac_engine_t engine;
} hmac_child_t;

extern hmac_child_t hmac_child;

/* The index of the file at path, named in .htaccess (its section lives
 * for one request, in pool): NULL if none can be set up. */
authn_hmac_userfile_t *hmac_htaccess_userfile(const char *path,
                                              apr_pool_t *pool);

#endif
