/* Unit tests of src/redis/breaker.c: the shared health state and the
 * breaker (no server needed). */
#include "redis/redis.h"
#include "shm/table.h"
#include "unit.h"

#include <string.h>

#define SEC(n) apr_time_from_sec(n)

static void test_health(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1);
    apr_interval_time_t outage = 0;

    (void)p;
    memset(&h, 0, sizeof(h));
    CHECK(authn_hmac_redis_allowed(&h, now, w) == 1);
    /* A failure or two (a loaded machine) are not an outage. */
    CHECK(authn_hmac_redis_failed(&h, now - 2, now - 2, 0, "refused") == 0);
    CHECK(authn_hmac_redis_failed(&h, now - 1, now - 1, 0, "refused") == 0);
    CHECK(h.down_since == 0 && h.epoch == 0);
    CHECK(authn_hmac_redis_allowed(&h, now, w) == 1);
    /* The third opens the breaker: the outage begins, logged once. */
    CHECK(authn_hmac_redis_failed(&h, now, now, 0, "refused") == 1);
    CHECK(authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_failed(&h, now + 1, now + 1, 0, "refused") == 0);
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(2) - 1, w));
    /* More failures of requests already in flight do not push it further. */
    authn_hmac_redis_failed(&h, now - 10, now, 0, "refused");
    authn_hmac_redis_failed(&h, now - 10, now, 0, "refused");
    authn_hmac_redis_failed(&h, now - 10, now, 0, "refused");
    authn_hmac_redis_failed(&h, now - 10, now, 0, "refused");
    /* Half open: when the wait ends one request probes, the others skip. */
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2), w) == 2);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2), w) == 0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2) + w - 1, w) == 0);
    /* The probe fails: open again, for longer (backoff 4 s). */
    authn_hmac_redis_failed(&h, now + SEC(2), now + SEC(2), 1, "refused");
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(6) - 1, w));
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6), w) == 2);
    /* A probe that never reports (its process died) is replaced once its
     * window is over. */
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6) + w - 1, w) == 0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6) + w, w) == 2);
    /* An answer to a command sent before the outage began ends nothing. */
    CHECK(authn_hmac_redis_succeeded(&h, now - 1, now + SEC(7), 0, &outage) ==
          0);
    CHECK(authn_hmac_redis_breaker_open(&h));
    /* The probe succeeds: the outage ends once, with its length, and the
     * breaker closes. */
    CHECK(authn_hmac_redis_succeeded(&h, now + SEC(7), now + SEC(7), 1,
                                     &outage) == 1 &&
          outage == SEC(7));
    CHECK(!authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_succeeded(&h, now + SEC(8), now + SEC(8), 0,
                                     &outage) == 0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(8), w) == 1);
    CHECK(h.epoch == 1); /* connections made before it are stale */
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9), now + SEC(9), 0,
                                  "refused") == 0);
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9) + 1, now + SEC(9) + 1, 0,
                                  "refused") == 0);
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9) + 2, now + SEC(9) + 2, 0,
                                  "refused") == 1); /* a new one */
    CHECK(h.epoch == 2);
    /* The forged-value warning is given once. */
    CHECK(authn_hmac_redis_forged_first(&h) == 1);
    CHECK(authn_hmac_redis_forged_first(&h) == 0);
}

/* A Redis that answers one command in two in time opens the breaker: the
 * successes between its failures do not hide it (found by review: the
 * count was "in a row" and any success reset it). */
static void test_breaker_sees_intermittent_failures(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1), o = 0;
    int i;

    (void)p;
    memset(&h, 0, sizeof(h));
    for (i = 0; i < 3; i++) {
        authn_hmac_redis_succeeded(&h, now + i, now + i, 0, &o);
        authn_hmac_redis_failed(&h, now + i, now + i, 0, "refused");
    }
    CHECK(authn_hmac_redis_breaker_open(&h));
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(1), w));
    /* Sporadic failures, farther apart than the window, do not. */
    memset(&h, 0, sizeof(h));
    for (i = 0; i < 10; i++) {
        authn_hmac_redis_failed(&h, now + SEC(11) * i, now + SEC(11) * i, 0,
                                "refused");
        authn_hmac_redis_succeeded(&h, now + SEC(11) * i + 1,
                                   now + SEC(11) * i + 1, 0, &o);
    }
    CHECK(!authn_hmac_redis_breaker_open(&h));
}

/* Requests that were in flight together when Redis stalled past the
 * timeout fail together: one incident, not an outage (CI: 8 requests that
 * waited through one 60 ms stall under load opened the breaker and logged
 * an outage). Failures of operations begun after it are new incidents. */
static void test_failures_in_flight_together_are_one_incident(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1);
    int i;

    (void)p;
    memset(&h, 0, sizeof(h));
    for (i = 0; i < 16; i++)
        CHECK(authn_hmac_redis_failed(&h, now - 50000 + i, now + i, 0,
                                      "refused") == 0);
    CHECK(!authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_allowed(&h, now + 100, w) == 1);
    CHECK(h.down_since == 0 && h.epoch == 0);
    /* Begun after the first incident was seen: a second, then a third. */
    CHECK(authn_hmac_redis_failed(&h, now + 100, now + 50100, 0, "refused") ==
          0);
    CHECK(authn_hmac_redis_failed(&h, now + 50200, now + 100200, 0,
                                  "refused") == 1);
    CHECK(authn_hmac_redis_breaker_open(&h));
}

/* A Redis that never answers, under the longest timeouts: every command
 * times out, so incidents come a timeout apart, and three of them still
 * open the breaker (found by review: from a 5 s timeout on, the 10 s
 * window never held three). */
static void test_long_timeouts_still_open_the_breaker(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), t;
    int i;

    (void)p;
    for (t = SEC(5); t <= SEC(10); t += SEC(5)) {
        memset(&h, 0, sizeof(h));
        for (i = 0; i < 2; i++)
            CHECK(authn_hmac_redis_failed(&h, now + i * (t + 1),
                                          now + i * (t + 1) + t, 0,
                                          "refused") == 0);
        CHECK(authn_hmac_redis_failed(&h, now + 2 * (t + 1),
                                      now + 2 * (t + 1) + t, 0,
                                      "refused") == 1);
        CHECK(authn_hmac_redis_breaker_open(&h));
    }
}

/* A breaker left open with no outage recorded (a failure racing with the
 * success that ended the outage) is closed by the next successful probe
 * (found by review: it stayed open until Redis failed again). */
static void test_probe_closes_a_breaker_without_outage(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1), o = 0;

    (void)p;
    memset(&h, 0, sizeof(h));
    h.breaker_until = now; /* open, its wait over; down_since is 0 */
    CHECK(authn_hmac_redis_allowed(&h, now, w) == 2);
    authn_hmac_redis_succeeded(&h, now, now + 10, 1, &o);
    CHECK(!authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_allowed(&h, now + 20, w) == 1);
}

/* What the status page reads: up (since when) or not, and the breaker's
 * reason while it is open, cleared when it closes and by a restart. */
static void test_health_read(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), since = 0, o = 0;
    char why[AUTHN_HMAC_REDIS_REASON_MAX];
    char longer[AUTHN_HMAC_REDIS_REASON_MAX * 2];
    int i;

    (void)p;
    memset(&h, 0, sizeof(h));
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0);
    CHECK(since == 0 && why[0] == '\0'); /* never answered yet */
    authn_hmac_redis_succeeded(&h, now, now + 1, 0, &o);
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 1);
    CHECK(since > 0 && why[0] == '\0');
    /* Failures that leave the breaker closed: still up, no reason. */
    authn_hmac_redis_failed(&h, now + 2, now + 2, 0, "timeout");
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 1 && !why[0]);
    authn_hmac_redis_failed(&h, now + 3, now + 3, 0, "timeout");
    authn_hmac_redis_failed(&h, now + 4, now + 4, 0, "connect: refused");
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0);
    CHECK(since == 0 && strcmp(why, "connect: refused") == 0);
    /* The failed probe's reason is the last one. */
    authn_hmac_redis_failed(&h, now + SEC(2), now + SEC(2), 1, "AUTH refused");
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0);
    CHECK(strcmp(why, "AUTH refused") == 0);
    /* Closed: up again, since now, no reason. */
    authn_hmac_redis_succeeded(&h, now + SEC(7), now + SEC(7), 1, &o);
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 1);
    CHECK(since > 0 && why[0] == '\0');
    /* A reason too long is cut, never past its place. */
    for (i = 0; i < (int)sizeof(longer) - 1; i++)
        longer[i] = 'x';
    longer[sizeof(longer) - 1] = '\0';
    for (i = 0; i < 3; i++)
        authn_hmac_redis_failed(&h, now + SEC(30) + i, now + SEC(30) + i, 0,
                                longer);
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0);
    CHECK(strlen(why) == AUTHN_HMAC_REDIS_REASON_MAX - 1);
    /* A writer that died inside (its count left odd): its word is taken
     * over after a second, not kept from every later writer. */
    authn_hmac_redis_succeeded(&h, now + SEC(40), now + SEC(40), 1, &o);
    h.reason_seq = (uint64_t)(now + SEC(41)) << 1 | 1; /* began at 41 s */
    for (i = 0; i < 3; i++)
        authn_hmac_redis_failed(&h, now + SEC(41) + i, now + SEC(41) + i, 0,
                                "timeout");
    CHECK(authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0 && !why[0]);
    authn_hmac_redis_failed(&h, now + SEC(43), now + SEC(43), 1, "refused");
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0);
    CHECK(strcmp(why, "refused") == 0 && !(h.reason_seq & 1));
    /* A restart: nothing known. */
    authn_hmac_redis_health_restart(&h);
    CHECK(authn_hmac_redis_health_read(&h, &since, why) == 0);
    CHECK(since == 0 && why[0] == '\0');
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_health, p);
    RUN(test_breaker_sees_intermittent_failures, p);
    RUN(test_failures_in_flight_together_are_one_incident, p);
    RUN(test_long_timeouts_still_open_the_breaker, p);
    RUN(test_probe_closes_a_breaker_without_outage, p);
    RUN(test_health_read, p);
    return unit_end();
}
