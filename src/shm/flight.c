/* flight.c: single flight in the server.
 *
 * Concurrent misses of one credential, in any process of the server, run
 * one verification: AUTHN_HMAC_FLIGHTS flights in the shared segment
 * (table.c lays it out), each the credential MAC, its runner and its
 * state. The runner claims a flight under the writers' mutex; waiters poll
 * it without a lock (a sequence counter, as the table's slots have) and
 * learn only their own credential's result; a runner that died or is past
 * its time is taken over.
 */
#include "shm/flight.h"
#include "table_int.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define FLIGHTS AUTHN_HMAC_FLIGHTS /* per server */

/* A verification in flight, or just done. */
enum { FLIGHT_FREE, FLIGHT_RUNNING, FLIGHT_GRANTED, FLIGHT_REFUSED };

typedef struct {
    uint32_t seq; /* odd while a writer is inside */
    uint32_t state;
    int64_t pid;     /* of the runner */
    int64_t started; /* monotonic */
    int64_t done;    /* monotonic */
    uint64_t key[4]; /* the credential MAC */
} flight_t;

typedef char
    flight_is_as_laid_out[sizeof(flight_t) == AUTHN_HMAC_FLIGHT_BYTES ? 1 : -1];

/* Writes a flight; the caller holds the writers' mutex. */
static void flight_write(flight_t *f, uint32_t state, const unsigned char *key,
                         int64_t pid, int64_t started, int64_t done)
{
    uint32_t seq = __atomic_load_n(&f->seq, __ATOMIC_RELAXED);
    uint64_t k[4];
    int i;

    memcpy(k, key, sizeof(k));
    if (!(seq & 1))
        __atomic_store_n(&f->seq, ++seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&f->state, state, __ATOMIC_RELAXED);
    __atomic_store_n(&f->pid, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&f->started, started, __ATOMIC_RELAXED);
    __atomic_store_n(&f->done, done, __ATOMIC_RELAXED);
    for (i = 0; i < 4; i++)
        __atomic_store_n(&f->key[i], k[i], __ATOMIC_RELAXED);
    __atomic_store_n(&f->seq, seq + 1, __ATOMIC_RELEASE);
}

/* A consistent copy of a flight; 0 if a writer kept it busy. */
static int flight_read(const flight_t *f, flight_t *copy)
{
    int i, k;

    for (i = 0; i < AUTHN_HMAC_READ_TRIES; i++) {
        uint32_t s1 = __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE);

        if (s1 & 1)
            continue;
        copy->state = __atomic_load_n(&f->state, __ATOMIC_RELAXED);
        copy->pid = __atomic_load_n(&f->pid, __ATOMIC_RELAXED);
        copy->started = __atomic_load_n(&f->started, __ATOMIC_RELAXED);
        copy->done = __atomic_load_n(&f->done, __ATOMIC_RELAXED);
        for (k = 0; k < 4; k++)
            copy->key[k] = __atomic_load_n(&f->key[k], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&f->seq, __ATOMIC_RELAXED) == s1)
            return 1;
    }
    return 0;
}

authn_hmac_flight_rc authn_hmac_flight_begin(
    authn_hmac_table_t *t, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_interval_time_t stale_after, authn_hmac_flight_t *fl)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    flight_t *f = s->flights, *claim = NULL;
    authn_hmac_flight_rc rc = AUTHN_HMAC_FLIGHT_NONE;
    int i;

    if (!s->mutex || apr_global_mutex_lock(s->mutex) != APR_SUCCESS)
        return AUTHN_HMAC_FLIGHT_NONE;
    /* Under the mutex no one else writes, so plain reads are safe. The
     * same credential running: wait for it, unless its runner died or is
     * past its time, in which case take it over. */
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE; i++) {
        if (f[i].state != FLIGHT_RUNNING ||
            CRYPTO_memcmp(f[i].key, key, AUTHN_HMAC_KEY_LEN) != 0)
            continue;
        if (now - f[i].started < stale_after && authn_hmac_alive(f[i].pid)) {
            fl->slot = i;
            fl->run = f[i].started;
            rc = AUTHN_HMAC_FLIGHT_WAIT;
        }
        else
            claim = &f[i];
    }
    /* Else a free flight, or the one that ended longest ago, or a runner
     * that died or is past its time. NB: a flight of this credential that
     * ended is run again, not reused (its result was for those who waited;
     * the caches answer later requests, as configured), and in another
     * place when there is one: a waiter that has not looked since it ended
     * still finds its result there. */
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE && !claim; i++)
        if (f[i].state == FLIGHT_FREE)
            claim = &f[i];
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE; i++)
        if ((f[i].state == FLIGHT_GRANTED || f[i].state == FLIGHT_REFUSED) &&
            (!claim ||
             (claim->state != FLIGHT_FREE && claim->state != FLIGHT_RUNNING &&
              f[i].done < claim->done)))
            claim = &f[i];
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE && !claim; i++)
        if (now - f[i].started >= stale_after || !authn_hmac_alive(f[i].pid))
            claim = &f[i];
    if (rc == AUTHN_HMAC_FLIGHT_NONE && claim) {
        /* NB: a run is its place and its start, which only grows in a
         * place: a waiter tells its run from a later one. */
        int64_t started = now > claim->started ? now : claim->started + 1;

        flight_write(claim, FLIGHT_RUNNING, key, (int64_t)getpid(), started, 0);
        fl->slot = (int)(claim - f);
        fl->run = started;
        rc = AUTHN_HMAC_FLIGHT_RUN;
    }
    apr_global_mutex_unlock(s->mutex);
    return rc;
}

void authn_hmac_flight_end(authn_hmac_table_t *t, const authn_hmac_flight_t *fl,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           int result, apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    flight_t *f = (flight_t *)s->flights + fl->slot;

    if (apr_global_mutex_lock(s->mutex) != APR_SUCCESS)
        return;
    /* NB: only if it is still this run (it may have been taken over, by
     * another thread of this process too). No result (-1) frees it: its
     * waiters verify by themselves. */
    if (f->state == FLIGHT_RUNNING && f->started == fl->run &&
        f->pid == (int64_t)getpid() &&
        CRYPTO_memcmp(f->key, key, AUTHN_HMAC_KEY_LEN) == 0)
        flight_write(f,
                     result > 0    ? FLIGHT_GRANTED
                     : result == 0 ? FLIGHT_REFUSED
                                   : FLIGHT_FREE,
                     key, f->pid, f->started, now);
    apr_global_mutex_unlock(s->mutex);
}

int authn_hmac_flight_wait(authn_hmac_table_t *t, const authn_hmac_flight_t *fl,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           apr_time_t deadline)
{
    const flight_t *f =
        (const flight_t *)authn_hmac_table_parts(t)->flights + fl->slot;
    struct timespec nap = {0, 2000000}; /* 2 ms */
    int polls = 0;

    for (;;) {
        flight_t copy;
        int mine;

        if (flight_read(f, &copy)) {
            /* NB: this run, not a later one of the same credential: a
             * waiter that looked on a later run would wait for it too. */
            mine = copy.started == fl->run &&
                   CRYPTO_memcmp(copy.key, key, AUTHN_HMAC_KEY_LEN) == 0;
            if (!mine || copy.state == FLIGHT_FREE)
                return -1; /* reused, or no result: verify */
            if (copy.state == FLIGHT_GRANTED)
                return 1;
            if (copy.state == FLIGHT_REFUSED)
                return 0;
            if (++polls % 25 == 0 && !authn_hmac_alive(copy.pid))
                return -1; /* the runner died */
        }
        if (authn_hmac_monotonic() >= deadline)
            return -1;
        nanosleep(&nap, NULL);
    }
}
