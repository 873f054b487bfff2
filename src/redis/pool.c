/* pool.c: the idle connections of one process, for its threads, above
 * the connection (conn.c). Where they go comes from an address source
 * that the pool does not name: a fixed server (server.c) or the primary
 * that Sentinel discovery names (sentinel.c), set by whoever configures
 * the pool. A connection is taken per operation and given back, or closed
 * if it failed; a failure is told to the source, which may look again. */
#include "conn.h"
#include "core/util.h"

#include <string.h>

#include <apr_thread_mutex.h>

struct authn_hmac_redis_pool {
    const authn_hmac_redis_conf_t *conf;
    apr_thread_mutex_t *lock;
    authn_hmac_redis_conn_t **idle;
    int nidle, max;
    authn_hmac_redis_health_t *health; /* shared by all processes */
    authn_hmac_redis_source_t src;
    /* The source's last address (naddr 0: none, and none says why), its
     * generation, and the name its certificate must carry ("": the TLS
     * context's own). */
    authn_hmac_redis_addr_t addr[AUTHN_HMAC_REDIS_ADDRS];
    int naddr;
    const char *none;
    uint64_t gen;
    char peer[AUTHN_HMAC_REDIS_HOST_MAX];
};

/* Closes a connection and counts it gone. */
static void pool_close(authn_hmac_redis_pool_t *rp, authn_hmac_redis_conn_t *c)
{
    authn_hmac_redis_close(c);
    __atomic_sub_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
}

/* Takes the source's address if it is new, and drops the connections to
 * the old one. Under the lock. */
static void pool_follow(authn_hmac_redis_pool_t *rp)
{
    const char *why = "no Redis server set";
    int r = rp->src.addr ? rp->src.addr(rp->src.baton, &rp->gen, rp->addr,
                                        &rp->naddr, rp->peer, &why)
                         : -1;

    if (r < 0)
        rp->none = why;
    if (r != 1)
        return;
    while (rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
}

/* A failure of the server (no connection, a timeout, a refusal such as
 * READONLY or LOADING), told to the source. */
static void pool_suspect(authn_hmac_redis_pool_t *rp)
{
    if (rp->src.suspect)
        rp->src.suspect(rp->src.baton);
}

/* A connection to the source's address (copied under the lock: another
 * thread may take a new one meanwhile). */
static authn_hmac_redis_rc pool_connect(authn_hmac_redis_pool_t *rp,
                                        authn_hmac_redis_conn_t **out,
                                        apr_time_t deadline, const char **why,
                                        apr_pool_t *p)
{
    authn_hmac_redis_addr_t addr[AUTHN_HMAC_REDIS_ADDRS];
    char peer[AUTHN_HMAC_REDIS_HOST_MAX];
    const char *none;
    uint64_t gen;
    int naddr, resumed = 0;
    authn_hmac_redis_rc rc;

    apr_thread_mutex_lock(rp->lock);
    naddr = rp->naddr;
    none = rp->none;
    memcpy(addr, rp->addr, sizeof(addr));
    memcpy(peer, rp->peer, sizeof(peer));
    gen = rp->gen;
    apr_thread_mutex_unlock(rp->lock);
    if (!naddr) {
        *why = none;
        return AUTHN_HMAC_REDIS_ERROR;
    }
    rc = authn_hmac_redis_connect(rp->conf, addr, naddr, *peer ? peer : NULL,
                                  deadline, out, &resumed, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    (*out)->gen = gen;
    if (rp->conf->tls) {
        __atomic_add_fetch(&rp->health->tls_handshakes, 1, __ATOMIC_RELAXED);
        if (resumed)
            __atomic_add_fetch(&rp->health->tls_resumed, 1, __ATOMIC_RELAXED);
    }
    return AUTHN_HMAC_REDIS_OK;
}

static apr_status_t pool_cleanup(void *data)
{
    authn_hmac_redis_pool_t *rp = data;

    while (rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
    return APR_SUCCESS;
}

apr_status_t authn_hmac_redis_pool_create(authn_hmac_redis_pool_t **out,
                                          const authn_hmac_redis_conf_t *conf,
                                          int max_idle,
                                          authn_hmac_redis_health_t *health,
                                          apr_pool_t *p)
{
    authn_hmac_redis_pool_t *rp = apr_pcalloc(p, sizeof(*rp));
    apr_status_t rv;

    rp->conf = conf;
    rp->max = max_idle > 0 ? max_idle : 1;
    rp->idle =
        apr_pcalloc(p, sizeof(authn_hmac_redis_conn_t *) * (size_t)rp->max);
    rp->health = health;
    rp->none = "no Redis server set";
    rv = apr_thread_mutex_create(&rp->lock, APR_THREAD_MUTEX_DEFAULT, p);
    if (rv != APR_SUCCESS)
        return rv;
    apr_pool_cleanup_register(p, rp, pool_cleanup, apr_pool_cleanup_null);
    *out = rp;
    return APR_SUCCESS;
}

void authn_hmac_redis_pool_use(authn_hmac_redis_pool_t *rp,
                               authn_hmac_redis_source_t src)
{
    apr_thread_mutex_lock(rp->lock);
    rp->src = src;
    rp->naddr = 0;
    rp->gen = 0;
    pool_follow(rp);
    apr_thread_mutex_unlock(rp->lock);
}

authn_hmac_redis_rc authn_hmac_redis_pool_acquire(authn_hmac_redis_pool_t *rp,
                                                  authn_hmac_redis_conn_t **c,
                                                  apr_time_t deadline,
                                                  const char **why,
                                                  apr_pool_t *p)
{
    uint64_t epoch = __atomic_load_n(&rp->health->epoch, __ATOMIC_RELAXED);
    authn_hmac_redis_rc rc;

    *c = NULL;
    apr_thread_mutex_lock(rp->lock);
    pool_follow(rp);
    /* NB: a connection made before the last outage began (seen by any
     * process) is presumed dead: this process may have skipped Redis the
     * whole time, with the breaker open, and never noticed. */
    while (!*c && rp->nidle > 0) {
        *c = rp->idle[--rp->nidle];
        /* NB: an idle connection with bytes to read (a late answer, or a
         * server closing it) would answer the next command out of step. */
        if ((*c)->epoch != epoch || !authn_hmac_redis_conn_idle_ok(*c)) {
            pool_close(rp, *c);
            *c = NULL;
        }
    }
    apr_thread_mutex_unlock(rp->lock);
    if (*c)
        return AUTHN_HMAC_REDIS_OK;
    rc = pool_connect(rp, c, deadline, why, p);
    if (rc == AUTHN_HMAC_REDIS_OK && *c) {
        (*c)->epoch = epoch;
        __atomic_add_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
    }
    else
        pool_suspect(rp);
    return rc;
}

void authn_hmac_redis_pool_release(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t *c, int broken)
{
    if (broken)
        pool_suspect(rp);
    apr_thread_mutex_lock(rp->lock);
    /* NB: a connection to an address that is not the newest is not kept. */
    if (!broken && rp->nidle < rp->max && c->gen == rp->gen) {
        rp->idle[rp->nidle++] = c;
        c = NULL;
    }
    /* NB: one broken connection means the server went away or restarted:
     * the idle ones are most likely dead too. Drop them, so that recovery
     * is not delayed by one failure per stale connection. */
    while (broken && rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
    apr_thread_mutex_unlock(rp->lock);
    if (c)
        pool_close(rp, c);
}
