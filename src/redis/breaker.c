/* breaker.c: Redis health, shared by every process.
 *
 * The shared health state keeps an outage logged once for all processes,
 * and a circuit breaker on a monotonic clock: after BREAKER_AFTER failed
 * incidents (operations that failed together count once) within
 * BREAKER_WINDOW Redis is skipped for 2, 4, 8 then 16 s (an outage,
 * logged when it begins and when it ends); when that wait ends, one
 * request probes Redis (half open) while the others keep skipping it. */
#include "redis/redis.h"
#include "core/util.h"

#include <string.h>

#define BREAKER_AFTER     3 /* incidents within BREAKER_WINDOW */
#define BREAKER_WINDOW    apr_time_from_sec(10)
#define BREAKER_MAX_SHIFT 3 /* backoff 2, 4, 8, 16 s */

/* ------------------------------------------------------- shared health */

static int64_t backoff(uint64_t opens)
{
    unsigned shift =
        opens < BREAKER_MAX_SHIFT ? (unsigned)opens : BREAKER_MAX_SHIFT;

    return apr_time_from_sec((apr_time_t)2 << shift);
}

int authn_hmac_redis_allowed(authn_hmac_redis_health_t *h, apr_time_t now,
                             apr_interval_time_t probe_window)
{
    int64_t until = __atomic_load_n(&h->breaker_until, __ATOMIC_ACQUIRE);

    if (until == 0)
        return 1;
    if (now < until)
        return 0;
    /* NB: half open. The wait is over: the one request that moves the end
     * of the wait on by a probe's length probes Redis; the others keep
     * skipping it until the probe succeeds (closing the breaker) or fails
     * (opening it for the next backoff). A probe that never reports, from
     * a process that died, is replaced once its window is over. */
    if (__atomic_compare_exchange_n(&h->breaker_until, &until,
                                    now + probe_window, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
        return 2;
    return 0;
}

int authn_hmac_redis_breaker_open(authn_hmac_redis_health_t *h)
{
    return __atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED) != 0;
}

/* Whether a failure of an operation begun at `started` is a new incident:
 * one begun after the last failure was seen. Operations that were in
 * flight together when Redis (or this machine) stalled fail together, and
 * are one incident however many there were. */
static int new_incident(authn_hmac_redis_health_t *h, apr_time_t started,
                        apr_time_t now)
{
    int64_t last = __atomic_load_n(&h->last_failure, __ATOMIC_RELAXED);

    while (started > last)
        if (__atomic_compare_exchange_n(&h->last_failure, &last, now, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* The breaker's reason, why ("" clears it), under a lock word that
 * readers check (reason_seq); a writer that finds another inside leaves it
 * the word, unless that one began a second ago or more (it died inside:
 * taken over; the time is in the word itself, read in one load). now is
 * monotonic; APR_INT64_MAX takes over in any case (a restart). */
static void set_reason(authn_hmac_redis_health_t *h, const char *why,
                       apr_time_t now)
{
    uint64_t w = __atomic_load_n(&h->reason_seq, __ATOMIC_RELAXED), next, done;
    int force = now == APR_INT64_MAX;
    char *r = h->reason;
    size_t i, n;

    if ((w & 1) && !force && now - (apr_time_t)(w >> 1) < apr_time_from_sec(1))
        return;
    next = ((uint64_t)(force ? 0 : now) << 1) | 1;
    if (next == w ||
        !__atomic_compare_exchange_n(&h->reason_seq, &w, next, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    /* NB: byte by byte, atomically: readers copy it at the same time. */
    n = strnlen(why, sizeof(h->reason) - 1);
    for (i = 0; i < n; i++)
        __atomic_store_n(&r[i], why[i], __ATOMIC_RELAXED);
    __atomic_store_n(&r[n], '\0', __ATOMIC_RELAXED);
    /* NB: the next even count, after every write done (one taken over
     * included); and only if this writer still holds the word. */
    done = __atomic_add_fetch(&h->reason_done, 2, __ATOMIC_RELAXED);
    (void)__atomic_compare_exchange_n(&h->reason_seq, &next, done, 0,
                                      __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

int authn_hmac_redis_health_read(const authn_hmac_redis_health_t *h,
                                 apr_time_t *up_since,
                                 char reason[AUTHN_HMAC_REDIS_REASON_MAX])
{
    int tries, i;

    *up_since = __atomic_load_n(&h->up_since, __ATOMIC_RELAXED);
    reason[0] = '\0';
    for (tries = 0; tries < 100; tries++) {
        uint64_t s1 = __atomic_load_n(&h->reason_seq, __ATOMIC_ACQUIRE);

        if (s1 & 1)
            continue;
        for (i = 0; i < AUTHN_HMAC_REDIS_REASON_MAX; i++)
            reason[i] = __atomic_load_n(&h->reason[i], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&h->reason_seq, __ATOMIC_RELAXED) == s1)
            break;
    }
    reason[AUTHN_HMAC_REDIS_REASON_MAX - 1] = '\0';
    /* NB: a reason only while the breaker is open (a clear that lost a
     * race with a late failure's reason left it there). */
    if (tries == 100 || !__atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED))
        reason[0] = '\0';
    return *up_since != 0 &&
           !__atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED) &&
           __atomic_load_n(&h->down_since, __ATOMIC_RELAXED) == 0;
}

void authn_hmac_redis_health_stats(const authn_hmac_redis_health_t *h,
                                   authn_hmac_stats_t *out)
{
    out->redis_breaker =
        __atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED) != 0;
    out->redis_conns = (uint64_t)__atomic_load_n(&h->conns, __ATOMIC_RELAXED);
    out->redis_tls_handshakes =
        __atomic_load_n(&h->tls_handshakes, __ATOMIC_RELAXED);
    out->redis_tls_resumed = __atomic_load_n(&h->tls_resumed, __ATOMIC_RELAXED);
}

int authn_hmac_redis_failed(authn_hmac_redis_health_t *h, apr_time_t started,
                            apr_time_t now, int probe, const char *why)
{
    int64_t zero = 0;
    int64_t window = __atomic_load_n(&h->window, __ATOMIC_RELAXED);
    apr_interval_time_t span = BREAKER_WINDOW;
    uint64_t n;

    /* Failures are counted over a window, not "in a row": successes in
     * between do not hide a Redis that fails one command in two. NB: the
     * window holds BREAKER_AFTER operations as long as this one, or a
     * Redis that times out every command under a long timeout (incidents
     * at least a timeout apart) would never open it (found by review: from
     * a 5 s timeout on, it never did). Only a failure that counts moves
     * the window on. */
    if (now - started > 0 &&
        (now - started) * BREAKER_AFTER + apr_time_from_sec(1) > span)
        span = (now - started) * BREAKER_AFTER + apr_time_from_sec(1);
    if (new_incident(h, started, now) || probe) {
        if (now - window > span &&
            __atomic_compare_exchange_n(&h->window, &window, now, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
        n = __atomic_add_fetch(&h->failures, 1, __ATOMIC_RELAXED);
    }
    else
        n = __atomic_load_n(&h->failures, __ATOMIC_RELAXED);
    if (probe) {
        uint64_t opens = __atomic_fetch_add(&h->opens, 1, __ATOMIC_RELAXED);

        __atomic_store_n(&h->breaker_until, now + backoff(opens),
                         __ATOMIC_RELEASE);
    }
    else if (n >= BREAKER_AFTER) {
        /* NB: a burst of failures from requests that were all in flight
         * opens the breaker once: only the one that swaps the closed state
         * for an open one moves the backoff on. */
        uint64_t opens = __atomic_load_n(&h->opens, __ATOMIC_RELAXED);

        if (__atomic_compare_exchange_n(&h->breaker_until, &zero,
                                        now + backoff(opens), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            __atomic_add_fetch(&h->opens, 1, __ATOMIC_RELAXED);
        zero = 0;
    }
    /* NB: the outage begins when the breaker opens, not at the first
     * failure: one command that missed its timeout on a loaded machine is
     * counted (and logged at debug) but is not an outage to warn about. */
    if (!authn_hmac_redis_breaker_open(h))
        return 0;
    set_reason(h, why ? why : "", now);
    __atomic_store_n(&h->up_since, 0, __ATOMIC_RELAXED);
    if (!__atomic_compare_exchange_n(&h->down_since, &zero, now, 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    __atomic_add_fetch(&h->epoch, 1, __ATOMIC_RELAXED);
    return 1;
}

int authn_hmac_redis_succeeded(authn_hmac_redis_health_t *h, apr_time_t started,
                               apr_time_t now, int probe,
                               apr_interval_time_t *outage)
{
    int64_t since = __atomic_load_n(&h->down_since, __ATOMIC_RELAXED);
    int ended = 0;

    /* NB: an answer to a command sent before the outage began proves
     * nothing about now. The outage ends first, then the breaker closes: a
     * failure racing with this one opens a new outage, which the next
     * success ends; a probe's success closes the breaker in any case. */
    if (since != 0 && started > since &&
        __atomic_compare_exchange_n(&h->down_since, &since, 0, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        *outage = now - since;
        ended = 1;
    }
    if (ended || probe) {
        __atomic_store_n(&h->opens, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&h->breaker_until, 0, __ATOMIC_RELEASE);
        set_reason(h, "", now);
    }
    /* NB: since the first answer, or the end of the last outage. */
    if ((ended || probe || !__atomic_load_n(&h->up_since, __ATOMIC_RELAXED)) &&
        !__atomic_load_n(&h->down_since, __ATOMIC_RELAXED)) {
        int64_t zero = 0;

        (void)__atomic_compare_exchange_n(&h->up_since, &zero, apr_time_now(),
                                          0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED);
    }
    /* NB: other successes leave the window's failures counted. */
    if (probe)
        __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
    return ended;
}

void authn_hmac_redis_health_restart(authn_hmac_redis_health_t *h)
{
    __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->window, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->opens, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->down_since, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->last_failure, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->forged_warned, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->epoch, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&h->up_since, 0, __ATOMIC_RELAXED);
    set_reason(h, "", APR_INT64_MAX);
    __atomic_store_n(&h->breaker_until, 0, __ATOMIC_RELEASE);
}

void authn_hmac_redis_breaker_reset(authn_hmac_redis_health_t *h)
{
    __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->opens, 0, __ATOMIC_RELAXED);
    set_reason(h, "", authn_hmac_monotonic());
    __atomic_store_n(&h->breaker_until, 0, __ATOMIC_RELEASE);
}

int authn_hmac_redis_forged_first(authn_hmac_redis_health_t *h)
{
    uint64_t zero = 0;

    return __atomic_compare_exchange_n(&h->forged_warned, &zero, 1, 0,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
