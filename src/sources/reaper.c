/* reaper.c: a thread of each process that lets go of a shared version
 * the server has replaced, for views that get no request. */
#include "userfile.h"

#include <apr_thread_cond.h>
#include <apr_thread_proc.h>

/* NB: a test build (AUTHN_HMAC_TESTING) lets a test reap by hand. */
#ifdef AUTHN_HMAC_TESTING
#define REAPABLE
void authn_hmac_reap(authn_hmac_userfile_t *uf);
#else
#define REAPABLE static
#endif

/* A process that gets no request holds the version it used last until its
 * next one, though the server has replaced it (a prefork child among many
 * idle ones): its memory would not go back. A thread of each process lets
 * go of such a version within a second; the next request takes the new
 * one. */
#define REAP_EVERY apr_time_from_sec(1)
#define REAP_MAX   64

static struct {
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *cond;
    apr_thread_t *thread;
    int stop;
    authn_hmac_userfile_t *ufs[REAP_MAX];
    unsigned n;
} reaper;

REAPABLE void authn_hmac_reap(authn_hmac_userfile_t *uf)
{
    generation_t *g;
    uint64_t v = __atomic_load_n(&uf->current_version, __ATOMIC_RELAXED);

    if (!uf->share || !v || authn_hmac_share_version(uf->share, uf->slot) == v)
        return;
    if (apr_thread_mutex_trylock(uf->lock) != APR_SUCCESS)
        return; /* a request is at it: it will take the new one */
    /* NB: read under the lock: a request's rebuild frees the generation
     * it replaces once no lookup counted in the stripes reads it, and the
     * reaper is not counted there. */
    g = uf->current;
    PAUSE_POINT(5);
    if (g && g->version &&
        authn_hmac_share_version(uf->share, uf->slot) != g->version)
        authn_hmac_uf_publish(uf, NULL);
    apr_thread_mutex_unlock(uf->lock);
}

static void *APR_THREAD_FUNC reaper_main(apr_thread_t *t, void *data)
{
    unsigned i;

    (void)data;
    apr_thread_mutex_lock(reaper.lock);
    while (!reaper.stop) {
        (void)apr_thread_cond_timedwait(reaper.cond, reaper.lock, REAP_EVERY);
        for (i = 0; i < reaper.n && !reaper.stop; i++)
            authn_hmac_reap(reaper.ufs[i]);
    }
    apr_thread_mutex_unlock(reaper.lock);
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static apr_status_t reaper_stop(void *data)
{
    apr_status_t rv;

    (void)data;
    if (!reaper.thread)
        return APR_SUCCESS;
    apr_thread_mutex_lock(reaper.lock);
    reaper.stop = 1;
    apr_thread_cond_signal(reaper.cond);
    apr_thread_mutex_unlock(reaper.lock);
    apr_thread_join(&rv, reaper.thread);
    reaper.thread = NULL;
    reaper.n = 0;
    return APR_SUCCESS;
}

apr_status_t authn_hmac_userfile_reaper(authn_hmac_userfile_t *uf,
                                        apr_pool_t *pchild)
{
    apr_status_t rv = APR_SUCCESS;

    if (!uf->share || !uf->lock || reaper.n == REAP_MAX)
        return APR_SUCCESS;
    if (!reaper.thread) {
        reaper.stop = 0;
        rv = apr_thread_mutex_create(&reaper.lock, APR_THREAD_MUTEX_DEFAULT,
                                     pchild);
        if (rv == APR_SUCCESS)
            rv = apr_thread_cond_create(&reaper.cond, pchild);
        if (rv == APR_SUCCESS)
            rv = apr_thread_create(&reaper.thread, NULL, reaper_main, NULL,
                                   pchild);
        if (rv != APR_SUCCESS)
            return rv;
        /* NB: before pchild's subpools (the views') go. */
        apr_pool_pre_cleanup_register(pchild, NULL, reaper_stop);
    }
    apr_thread_mutex_lock(reaper.lock);
    reaper.ufs[reaper.n++] = uf;
    apr_thread_mutex_unlock(reaper.lock);
    return APR_SUCCESS;
}
