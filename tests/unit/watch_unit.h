/* watch_unit.h: what the unit tests of the watcher and the index
 * (test_watch, test_watch_writers) share: a file written, lookups of
 * alice, and the pause points (PAUSE_POINT in src/sources/userfile.h)
 * where a test stops one thread's lookup until it lets it go on. */
#ifndef AUTHN_HMAC_WATCH_UNIT_H
#define AUTHN_HMAC_WATCH_UNIT_H

#include "sources/userfile.h"
#include "testing/testing.h"
#include "unit.h"
#include "users_file.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int alice_is(authn_hmac_userfile_t *uf, const char *want,
                           apr_pool_t *p)
{
    const char *hash = NULL;
    size_t len = 0;

    return authn_hmac_userfile_lookup(uf, "alice", &hash, &len, NULL, NULL,
                                      p) == APR_SUCCESS &&
           strcmp(hash, want) == 0;
}

static inline apr_status_t settled_lookup(authn_hmac_userfile_t *uf,
                                          const char *user, const char **hash,
                                          size_t *len, apr_pool_t *p)
{
    return authn_hmac_userfile_lookup_settled(uf, user, NULL, NULL, 0, hash,
                                              len, NULL, NULL, p);
}

typedef struct {
    authn_hmac_userfile_t *uf;
    int ok;
} lookup_t;

static inline void *late_lookup(void *arg)
{
    lookup_t *l = arg;
    apr_pool_t *p;

    if (apr_pool_create_unmanaged(&p) != APR_SUCCESS)
        abort();
    l->ok = alice_is(l->uf, "BBBB", p);
    apr_pool_destroy(p);
    return NULL;
}

/* One thread's lookups stop once at each point asked for (see
 * PAUSE_POINT in src/sources/userfile.h) until released. */
static pthread_mutex_t pause_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pause_cv = PTHREAD_COND_INITIALIZER;
static pthread_t paused;
static int pausing, pause_at[6], stopped_at;

static inline void pause_point(int n)
{
    pthread_mutex_lock(&pause_mu);
    if (pausing && pthread_equal(pthread_self(), paused) && pause_at[n]) {
        pause_at[n] = 0;
        stopped_at = n;
        pthread_cond_broadcast(&pause_cv);
        while (stopped_at == n)
            pthread_cond_wait(&pause_cv, &pause_mu);
    }
    pthread_mutex_unlock(&pause_mu);
}

static inline void wait_stopped(int n)
{
    pthread_mutex_lock(&pause_mu);
    while (stopped_at != n)
        pthread_cond_wait(&pause_cv, &pause_mu);
    pthread_mutex_unlock(&pause_mu);
}

static inline void resume(int then_at)
{
    pthread_mutex_lock(&pause_mu);
    pause_at[then_at] = 1;
    stopped_at = 0;
    pthread_cond_broadcast(&pause_cv);
    pthread_mutex_unlock(&pause_mu);
}

typedef struct {
    authn_hmac_userfile_t *uf;
    const char *want; /* NULL: any hash */
    int ok, done;
} looker_t;

static inline void *look_alice(void *arg)
{
    looker_t *l = arg;
    apr_pool_t *p;
    const char *hash = NULL;
    size_t len = 0;

    pthread_mutex_lock(&pause_mu);
    if (!l->want)
        paused = pthread_self();
    pthread_mutex_unlock(&pause_mu);
    if (apr_pool_create_unmanaged(&p) != APR_SUCCESS)
        abort();
    l->ok = authn_hmac_userfile_lookup(l->uf, "alice", &hash, &len, NULL, NULL,
                                       p) == APR_SUCCESS &&
            (!l->want || strcmp(hash, l->want) == 0);
    apr_pool_destroy(p);
    __atomic_store_n(&l->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

#endif
