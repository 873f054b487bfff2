/* pace.c: the pacing of a request's waits: how long a verification
 * usually takes here (the average the counters keep), and from it how long
 * a request waits for a turn in the verification queue, for the runner of
 * its credential's flight, and for another server's result; the
 * Retry-After of a busy answer; and the turn itself (shm/queue.h), fair
 * between clients. */
#include "engine_int.h"
#include "core/util.h"

/* How long a verification usually takes here: the average so far (timed on
 * the monotonic clock), from 10 ms to 10 s; 3 s before the first. */
static apr_interval_time_t expected_verify(const authn_hmac_engine_t *e)
{
    uint64_t n = authn_hmac_table_counter(e->table, AUTHN_HMAC_C_VERIFICATIONS);
    uint64_t us = authn_hmac_table_counter(e->table, AUTHN_HMAC_C_VERIFY_USEC);
    uint64_t avg = n ? us / n : 0;

    if (!n)
        return apr_time_from_sec(3);
    if (avg < (uint64_t)apr_time_from_msec(10))
        return apr_time_from_msec(10);
    if (avg > (uint64_t)apr_time_from_sec(10))
        return apr_time_from_sec(10);
    return (apr_interval_time_t)avg;
}

/* How long a waiting verification may wait for its turn: twice the time
 * the ones ahead of it should take, and a second; at most a minute. */
static apr_interval_time_t patience(const authn_hmac_engine_t *e)
{
    apr_interval_time_t w =
        2 * expected_verify(e) * (e->backlog / e->max_verifications + 1) +
        apr_time_from_sec(1);

    return w < apr_time_from_sec(60) ? w : apr_time_from_sec(60);
}

/* How long a server waits for another server's result: twice the usual
 * time and a second, at most 3 s (a Redis that keeps saying "running" must
 * not hold a request longer; the server then verifies by itself). */
apr_interval_time_t authn_hmac_pace_farm(const authn_hmac_engine_t *e)
{
    apr_interval_time_t w = 2 * expected_verify(e) + apr_time_from_sec(1);

    return w < apr_time_from_sec(3) ? w : apr_time_from_sec(3);
}

/* How long a waiter waits for the runner of its credential: about twice
 * the usual time, and a second more for a machine whose cores are busy
 * with other verifications (a waiter that gave up too soon would add one
 * more), and the runner's time in the verification queue. */
apr_interval_time_t authn_hmac_pace_flight(const authn_hmac_engine_t *e)
{
    return 2 * expected_verify(e) + apr_time_from_sec(1) +
           (e->max_verifications > 0 ? patience(e) : 0);
}

int authn_hmac_retry_after(const authn_hmac_engine_t *e)
{
    apr_interval_time_t w =
        e->max_verifications > 0
            ? expected_verify(e) * (e->backlog / e->max_verifications + 1)
            : 0;
    int s = (int)apr_time_sec(w + APR_USEC_PER_SEC - 1);

    return s < 1 ? 1 : s > 60 ? 60 : s;
}

/* A client for the queue's fairness: its IPv4 address, or the /64 of its
 * IPv6 address (authn_hmac_client_bytes), hashed with FNV-1a; not a
 * secret, and a collision only makes two clients one. */
static uint64_t client_hash(const char *client)
{
    uint64_t h = 14695981039346656037ULL;
    unsigned char a[16];
    size_t i, n = authn_hmac_client_bytes(client, a);

    for (i = 0; i < n; i++)
        h = (h ^ a[i]) * 1099511628211ULL;
    return h;
}

/* A turn in the server's verification queue: 1 with a place that runs
 * (give it back with authn_hmac_queue_leave), 0 when busy. */
int authn_hmac_pace_turn(const authn_hmac_engine_t *e,
                         const authn_hmac_cred_t *c, authn_hmac_turn_t *turn)
{
    authn_hmac_queue_rc rc;
    apr_interval_time_t wait;

    turn->place = -1;
    if (e->max_verifications <= 0)
        return 1;
    wait = patience(e);
    rc = authn_hmac_queue_enter(e->table, client_hash(c->client),
                                e->max_verifications, e->backlog, wait, turn);
    if (rc == AUTHN_HMAC_QUEUE_WAIT) {
        count(e, AUTHN_HMAC_C_QUEUED, 1);
        if (authn_hmac_queue_wait(e->table, turn, e->max_verifications,
                                  authn_hmac_monotonic() + wait))
            return 1;
        turn->place = -1;
        rc = AUTHN_HMAC_QUEUE_BUSY;
    }
    if (rc == AUTHN_HMAC_QUEUE_BUSY) {
        count(e, AUTHN_HMAC_C_BUSY, 1);
        authn_hmac_table_gauge(e->table, AUTHN_HMAC_C_BUSY_LAST,
                               (uint64_t)apr_time_sec(apr_time_now()));
        return 0;
    }
    return 1;
}
