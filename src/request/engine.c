/* engine.c: the request path, in one place.
 *
 * A credential (scope, user, password, stored hash) goes through the tiers
 * in order, each a function that answers or passes on (see check()), and
 * comes out of one exit (finish) as an outcome:
 *   0. from_ban: a client banned by the throttle for this user is refused
 *      before the caches are asked (throttled); one banned for all users
 *      is served only the entries marked for it (its users logged in
 *      before the ban: from_shm), and anything else from it is refused
 *      and counted as a guess of its user+client pair;
 *   1. from_shm, shared memory: the credential MAC among the user's
 *      entries (hit; AuthHMACCacheTTL is an idle timeout: a hit once half
 *      of it has passed extends the entry, in shared memory and Redis, up
 *      to AuthHMACCacheMaxAge from its verification, and marks it for the
 *      client);
 *      With a previous pepper (AuthHMACPepperFile's second file), a miss
 *      looks there under it too (from_previous), and so does a miss in
 *      Redis (3): an entry found is a hit, stored again under the current
 *      pepper with the time of its verification (previous_hits);
 *   2. from_negative, the negative region of shared memory: the same wrong
 *      password seen within the negative TTL is denied again without the
 *      verifier (negative-hit);
 *   3. from_redis, when configured: the user's entry, whose tag must
 *      verify (redis-hit; a value that does not verify is a miss, counted
 *      and logged once);
 *   4. from_flight: concurrent misses of the same credential, in any
 *      process of the server, run the verifier once: the others wait for
 *      its result (coalesced), for at most twice the usual verification
 *      time, and verify by themselves if its runner died or is late;
 *   5. from_throttle: a client at its limit of wrong passwords (in the
 *      server, or the farm's, whose bans carry a tag) is refused without a
 *      verification (throttled); else its guess takes a place in the
 *      count, and a wrong password it verifies is counted at the exit
 *      (src/shm/throttle.c). After the flight: the requests waiting for one
 *      verification are one guess;
 *   6. from_farm: across a farm, a marker in Redis makes one server verify
 *      a credential and the others wait for its result (at most 3 s, then
 *      they verify by themselves);
 *   7. from_verifier (apr_password_validate in the module): verified or
 *      denied. A verification takes a turn in the server's queue (at most
 *      max_verifications run at once, backlog more wait; busy beyond that;
 *      one client cannot hold it against the others), and runs in the
 *      request's own thread at its own priority.
 * finish() stores what the request learned (verified: shared memory and
 * Redis; a mismatch: the negative region), ends the flight it ran, posts
 * the farm claim's result, counts a guess and wipes the keys, whatever
 * tier answered.
 * An unknown user, or a locked line, takes the same path against a dummy
 * hash that no password matches (authn_hmac_dummy_hash), and is refused
 * (see run() at the end). authn_hmac_check_user looks the user up in the
 * htpasswd file first, and applies the writer rule: any answer but a
 * grant (a deny, busy) from a reading of a file changed or read less than
 * a second ago waits for the file to be quiet, and is checked again if the
 * quiet file changed the user's answer; the same wait for every such
 * answer, none for a grant.
 * Each Redis operation waits at most the configured timeout, and a
 * request's first Redis failure ends its use of Redis (but for clearing its
 * farm marker).
 *
 * No httpd here: the module adapts the outcome to an authn_status, and unit
 * tests drive the engine with a fake verifier.
 */
#include "request/engine.h"
#include "core/cred.h"
#include "shm/flight.h"
#include "sources/htpasswd.h"
#include "shm/queue.h"
#include "redis/redis.h"
#include "request/annex.h"
#include "shm/table.h"
#include "core/util.h"

#include <string.h>
#include <time.h>

#include <unistd.h>

#include <apr_lib.h>
#include <apr_strings.h>
#include <bsd/string.h>

static void count(const authn_hmac_engine_t *e, enum authn_hmac_counter c,
                  uint64_t n)
{
    authn_hmac_table_count(e->table, c, n);
}

/* One request's use of Redis: each operation (connect, AUTH and SELECT if
 * needed, the command and its whole reply) has one deadline of the timeout,
 * and the request's first failure ends its use of Redis. */
typedef struct {
    const authn_hmac_engine_t *e;
    void *baton;
    apr_pool_t *p;
    int off;                 /* a failure or the breaker: no more Redis */
    int probe;               /* this request probes a half-open breaker */
    apr_time_t started;      /* monotonic, of the current operation */
    authn_hmac_entries_t es; /* the user's entries that GET found */
} redis_req;

/* Whether why is a refusal by Redis's ACL (NOPERM, or a script's "can't
 * run this command", which does not name it) to log now: a configuration
 * error, not an outage. A rare one, such as a script's DEL when a ban
 * starts, never opens the breaker and was logged at debug only. At most
 * once a minute per process. */
static int acl_refusal(const char *why, apr_time_t now)
{
    static apr_time_t last;

    return (strstr(why, "NOPERM") || strstr(why, "can't run this command")) &&
           authn_hmac_log_due(&last, now, apr_time_from_sec(60));
}

/* After a Redis operation: gives the connection back (or drops it), keeps
 * the shared health, and logs an outage once and its end once. */
static void redis_end(redis_req *rq, authn_hmac_redis_conn_t *conn,
                      authn_hmac_redis_rc rc, const char *why)
{
    const authn_hmac_engine_t *e = rq->e;
    authn_hmac_redis_health_t *h = authn_hmac_annex_redis_health(e->table);
    apr_time_t now = authn_hmac_monotonic();
    apr_interval_time_t outage = 0;

    /* NB: failed ones too (a timeout shows as the timeout): what the request
     * waited. An unknown user makes the same calls as a known one. */
    authn_hmac_table_observe(e->table, AUTHN_HMAC_H_REDIS,
                             now > rq->started ? (uint64_t)(now - rq->started)
                                               : 0);
    if (conn)
        authn_hmac_redis_pool_release(e->redis, conn,
                                      rc != AUTHN_HMAC_REDIS_OK);
    if (rc == AUTHN_HMAC_REDIS_OK) {
        if (authn_hmac_redis_succeeded(h, rq->started, now, rq->probe, &outage))
            authn_hmac_logf(
                e->log, rq->baton, AUTHN_HMAC_LOG_NOTICE,
                "AHMAC0005: Redis at %s is back after %" APR_TIME_T_FMT " s",
                e->redis_name, apr_time_sec(outage));
        rq->probe = 0;
        return;
    }
    rq->off = 1;
    count(e,
          rc == AUTHN_HMAC_REDIS_TIMEOUT ? AUTHN_HMAC_C_REDIS_TIMEOUTS
                                         : AUTHN_HMAC_C_REDIS_ERRORS,
          1);
    if (authn_hmac_redis_failed(h, rq->started, now, rq->probe, why))
        authn_hmac_logf(
            e->log, rq->baton, AUTHN_HMAC_LOG_WARNING,
            "AHMAC0004: Redis at %s is unavailable (%s); using shared "
            "memory and "
            "bcrypt until it is back",
            e->redis_name, why);
    else if (acl_refusal(why, now))
        authn_hmac_logf(e->log, rq->baton, AUTHN_HMAC_LOG_WARNING,
                        "AHMAC0032: Redis at %s refused a command of the "
                        "module (%s): its ACL user lacks a command the "
                        "module sends (docs/security.md lists them); "
                        "logged at most once a minute per process",
                        e->redis_name, why);
    else
        authn_hmac_logf(e->log, rq->baton, AUTHN_HMAC_LOG_DEBUG,
                        "Redis at %s: %s", e->redis_name, why);
}

/* A pooled Redis connection and the deadline of the operation; NULL when
 * this request is done with Redis, the breaker is open, or Redis cannot be
 * reached. */
static authn_hmac_redis_conn_t *redis_begin(redis_req *rq, apr_time_t *deadline)
{
    const authn_hmac_engine_t *e = rq->e;
    authn_hmac_redis_health_t *h = authn_hmac_annex_redis_health(e->table);
    authn_hmac_redis_conn_t *conn = NULL;
    apr_interval_time_t timeout;
    const char *why = "";
    authn_hmac_redis_rc rc;
    int go;

    if (rq->off)
        return NULL;
    timeout = apr_time_from_msec(e->redis_conf->timeout_ms);
    rq->started = authn_hmac_monotonic();
    go = authn_hmac_redis_allowed(h, rq->started,
                                  timeout + apr_time_from_sec(1));
    if (!go) {
        count(e, AUTHN_HMAC_C_REDIS_SKIPPED, 1);
        rq->off = 1;
        return NULL;
    }
    rq->probe = go == 2;
    *deadline = rq->started + timeout;
    rc = authn_hmac_redis_pool_acquire(e->redis, &conn, *deadline, &why, rq->p);
    if (rc != AUTHN_HMAC_REDIS_OK) {
        redis_end(rq, NULL, rc, why);
        return NULL;
    }
    return conn;
}

/* What a look in Redis counts and tells: a miss (the request's first look
 * at the current pepper's entry), and a value that does not verify. */
enum { LOOK_MISS = 1, LOOK_FORGED = 2 };

/* Looks the user's entry (uid, under mac) up in Redis into es: 1 with the
 * credential's times (key's) if it is there and live. A value whose tag
 * does not verify is a miss, whoever wrote it. Only a hit is counted,
 * unless look says more. */
static int redis_lookup(redis_req *rq, const authn_hmac_mac_t *mac,
                        const unsigned char *key, const unsigned char *uid,
                        authn_hmac_entries_t *es, apr_time_t now,
                        const authn_hmac_policy_t *pol, int never, int look,
                        apr_time_t *verified, apr_time_t *used)
{
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn = redis_begin(rq, &deadline);
    authn_hmac_value_state st = AUTHN_HMAC_VALUE_NONE;
    const char *why = "";
    authn_hmac_redis_rc rc;
    int found;

    if (!conn)
        return 0;
    rc = authn_hmac_redis_get(conn, e->redis_conf, mac, uid, deadline, es, &st,
                              &why, rq->p);
    redis_end(rq, conn, rc, why);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return 0;
    if (st == AUTHN_HMAC_VALUE_FORGED && (look & LOOK_FORGED)) {
        count(e, AUTHN_HMAC_C_REDIS_FORGED, 1);
        authn_hmac_logf(
            e->log, rq->baton,
            authn_hmac_redis_forged_first(
                authn_hmac_annex_redis_health(e->table))
                ? AUTHN_HMAC_LOG_WARNING
                : AUTHN_HMAC_LOG_DEBUG,
            "AHMAC0006: Redis returned an entry that does not verify "
            "(forged, "
            "damaged, or written with another pepper); treated as a "
            "miss. Is %s the farm's Redis?",
            e->redis_name);
    }
    found = st == AUTHN_HMAC_VALUE_VALID && !never &&
            authn_hmac_entries_find(es, key, now, pol->ttl, pol->max_age,
                                    verified, used);
    if (found || (look & LOOK_MISS))
        count(e, found ? AUTHN_HMAC_C_REDIS_HITS : AUTHN_HMAC_C_REDIS_MISSES,
              1);
    return found;
}

/* Makes the credential, verified at verified (now, or under the previous
 * pepper before), the user's first entry in Redis, keeping the most
 * recently used other one that GET found. */
static void redis_store(redis_req *rq, const unsigned char *key,
                        const unsigned char *uid, apr_time_t verified,
                        apr_time_t now, apr_interval_time_t max_age)
{
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn;
    const char *why = "";
    authn_hmac_redis_rc rc;

    authn_hmac_entries_add(&rq->es, key, verified, now);
    conn = redis_begin(rq, &deadline);
    if (!conn)
        return;
    rc = authn_hmac_redis_set(conn, e->redis_conf, e->mac, uid, &rq->es, now,
                              max_age, deadline, &why, rq->p);
    redis_end(rq, conn, rc, why);
}

/* Single flight across the farm, through a marker in Redis (see
 * redis/commands.c): 1 if this server claimed the credential's
 * verification (token is then the claim's, for farm_result), 0 if another
 * server runs it, -1 without Redis. */
static int farm_claim(redis_req *rq, const unsigned char *key,
                      apr_interval_time_t hold, char *token)
{
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn = redis_begin(rq, &deadline);
    authn_hmac_redis_rc rc;
    const char *why = "";
    int won = 0;

    if (!conn)
        return -1;
    rc = authn_hmac_redis_flight_claim(conn, e->redis_conf, e->mac, key, hold,
                                       deadline, token, &won, &why, rq->p);
    redis_end(rq, conn, rc, why);
    return rc != AUTHN_HMAC_REDIS_OK ? -1 : won;
}

/* Waits for another server's result: 1 granted, 0 refused, -1 none (it
 * gave up, died, is late, or Redis failed: verify here), 2 a grant that
 * ended before this server came (its entry is in Redis: look again). A
 * result rests on a tag only the pepper makes; any other value is no
 * result. */
static int farm_wait(redis_req *rq, const unsigned char *key, apr_time_t until)
{
    const authn_hmac_engine_t *e = rq->e;
    struct timespec nap = {0, 20000000}; /* 20 ms */

    int first;

    for (first = 1; authn_hmac_monotonic() < until; first = 0) {
        apr_time_t deadline = 0;
        authn_hmac_redis_conn_t *conn;
        authn_hmac_farm_state st = AUTHN_HMAC_FARM_NONE;
        authn_hmac_redis_rc rc;
        const char *why = "";

        if (!first)
            nanosleep(&nap, NULL);
        if (!(conn = redis_begin(rq, &deadline)))
            return -1;
        rc = authn_hmac_redis_flight_poll(conn, e->redis_conf, e->mac, key,
                                          apr_time_now(), deadline, &st, &why,
                                          rq->p);
        redis_end(rq, conn, rc, why);
        if (rc != AUTHN_HMAC_REDIS_OK)
            return -1;
        /* NB: a result already there when this server came is of a
         * verification that ended before: a refusal is not taken (a wrong
         * password is not shared outside its burst): verify here, as a
         * flight of shared memory would; but a grant stored its entry in
         * Redis before it posted its result (finish): that entry is the
         * answer, if it verifies. */
        if (first && st == AUTHN_HMAC_FARM_GRANTED)
            return 2;
        if (first && st == AUTHN_HMAC_FARM_REFUSED) {
            count(e, AUTHN_HMAC_C_FARM_LATE, 1);
            return -1;
        }
        if (first && st != AUTHN_HMAC_FARM_RUNNING)
            st = AUTHN_HMAC_FARM_NONE;
        switch (st) {
        case AUTHN_HMAC_FARM_RUNNING:
            continue;
        case AUTHN_HMAC_FARM_GRANTED:
            return 1;
        case AUTHN_HMAC_FARM_REFUSED:
            return 0;
        case AUTHN_HMAC_FARM_FORGED:
            count(e, AUTHN_HMAC_C_REDIS_FORGED, 1);
            return -1;
        default:
            return -1;
        }
    }
    count(e, AUTHN_HMAC_C_FARM_TIMEOUTS, 1);
    return -1;
}

/* The claimed verification's result for the farm's waiters, who poll for
 * it, for two seconds; -1 clears it (they verify by themselves). Only on
 * the marker of this claim (token): a late runner leaves another's alone. */
static void farm_result(redis_req *rq, const unsigned char *key,
                        const char *token, int result)
{
    const apr_interval_time_t hold = apr_time_from_sec(2);
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn;
    authn_hmac_redis_rc rc;
    const char *why = "";

    /* NB: even after a failure in this request (the breaker still
     * decides): a marker left "running" would hold the farm's waiters. */
    rq->off = 0;
    if (!(conn = redis_begin(rq, &deadline)))
        return;
    rc = authn_hmac_redis_flight_result(conn, e->redis_conf, e->mac, key, token,
                                        result, apr_time_now(), hold, deadline,
                                        &why, rq->p);
    redis_end(rq, conn, rc, why);
}

/* A ban or a count of the throttle in Redis that does not verify: no
 * ban, no count; counted and told once, as a forged entry is. */
static void throttle_forged(redis_req *rq)
{
    const authn_hmac_engine_t *e = rq->e;

    count(e, AUTHN_HMAC_C_REDIS_FORGED, 1);
    authn_hmac_logf(
        e->log, rq->baton,
        authn_hmac_redis_forged_first(authn_hmac_annex_redis_health(e->table))
            ? AUTHN_HMAC_LOG_WARNING
            : AUTHN_HMAC_LOG_DEBUG,
        "AHMAC0038: Redis returned a ban or a count of the throttle that "
        "does not verify (forged, copied from another key, past its end, or "
        "written with another pepper); ignored. Is %s the farm's Redis?",
        e->redis_name);
}

#define BAN_SLACK apr_time_from_sec(5)

/* The farm's bans for ids: when each ends (until[0] the pair's, [1] the
 * client's; 0: none, and always without Redis). A value whose tag does not
 * verify is no ban: counted and told once, as a forged entry is. */
static void farm_banned(redis_req *rq, const authn_hmac_throttle_ids_t *ids,
                        apr_time_t until[2])
{
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn = redis_begin(rq, &deadline);
    authn_hmac_redis_rc rc;
    const char *why = "";
    apr_time_t now = apr_time_now();
    int forged = 0, i;

    until[0] = until[1] = 0;
    if (!conn)
        return;
    rc = authn_hmac_redis_throttle_banned(conn, e->redis_conf, e->mac,
                                          ids->pair, ids->client, deadline,
                                          until, &forged, &why, rq->p);
    redis_end(rq, conn, rc, why);
    if (rc != AUTHN_HMAC_REDIS_OK) {
        until[0] = until[1] = 0;
        return;
    }
    /* NB: a tagged ban past its end (Redis expires it with it: a farm's
     * clocks differ by far less than the slack) is one written back. */
    for (i = 0; i < 2; i++)
        if (until[i] && until[i] + BAN_SLACK < now) {
            forged |= 1 << i;
            until[i] = 0;
        }
    if (forged)
        throttle_forged(rq);
}

/* A new guess (fp its fingerprint), counted in the farm: the bans it
 * started there. */
static int farm_guessed(redis_req *rq, const authn_hmac_throttle_ids_t *ids,
                        uint64_t fp)
{
    const authn_hmac_engine_t *e = rq->e;
    const authn_hmac_throttle_conf_t *tc = &e->throttle;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn = redis_begin(rq, &deadline);
    authn_hmac_redis_rc rc;
    const char *why = "";
    int started = 0, forged = 0;

    if (!conn)
        return 0;
    rc = authn_hmac_redis_throttle_fail(
        conn, e->redis_conf, e->mac, ids->pair, ids->client, fp,
        tc->max_failures, tc->max_client_failures, tc->window, tc->ban,
        apr_time_now(), deadline, &started, &forged, &why, rq->p);
    redis_end(rq, conn, rc, why);
    /* NB: counts that other guesses kept changing: this one is not counted
     * in the farm (authn_hmac_redis_throttle_fail says why), and told. */
    if (rc == AUTHN_HMAC_REDIS_OK && *why)
        authn_hmac_logf(e->log, rq->baton, AUTHN_HMAC_LOG_DEBUG,
                        "Redis at %s: %s", e->redis_name, why);
    /* NB: a count that does not verify is no count (a Redis can hide
     * guesses, never add one). */
    if (forged)
        throttle_forged(rq);
    return rc == AUTHN_HMAC_REDIS_OK ? started : 0;
}

/* A hit that wrote the entry's last use in shared memory writes it in
 * Redis too, so that the farm's other servers see the credential in use:
 * GET the user's entries, give this one its last use (now), SET. As rare
 * as the shared-memory refresh (once per entry per half TTL); a failure
 * only skips it. The request state is built here, off the common hit. */
static void redis_refresh(const authn_hmac_engine_t *e, void *baton,
                          apr_pool_t *p, const unsigned char *key,
                          const unsigned char *uid, apr_time_t now,
                          apr_time_t verified, apr_interval_time_t max_age)
{
    redis_req rq;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn;
    authn_hmac_value_state st = AUTHN_HMAC_VALUE_NONE;
    const char *why = "";
    authn_hmac_redis_rc rc;

    memset(&rq, 0, sizeof(rq));
    rq.e = e;
    rq.baton = baton;
    rq.p = p;
    if (!(conn = redis_begin(&rq, &deadline)))
        return;
    rc = authn_hmac_redis_get(conn, e->redis_conf, e->mac, uid, deadline,
                              &rq.es, &st, &why, p);
    redis_end(&rq, conn, rc, why);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return;
    /* NB: a value that does not verify is replaced, as after a
     * verification; one that is gone (evicted, flushed) is written again. */
    if (st != AUTHN_HMAC_VALUE_VALID)
        rq.es.n = 0;
    authn_hmac_entries_add(&rq.es, key, verified, now);
    if (!(conn = redis_begin(&rq, &deadline)))
        return;
    rc = authn_hmac_redis_set(conn, e->redis_conf, e->mac, uid, &rq.es, now,
                              max_age, deadline, &why, p);
    redis_end(&rq, conn, rc, why);
}

int authn_hmac_redis_check(const authn_hmac_engine_t *e, void *baton,
                           const char **why, apr_pool_t *p)
{
    authn_hmac_redis_health_t *h;
    authn_hmac_redis_conn_t *conn = NULL;
    authn_hmac_redis_rc rc;
    apr_interval_time_t timeout;
    apr_time_t deadline;
    redis_req rq;
    int go;

    *why = "";
    if (!e->redis) {
        *why = "no Redis client in this process";
        return 0;
    }
    h = authn_hmac_annex_redis_health(e->table);
    memset(&rq, 0, sizeof(rq));
    rq.e = e;
    rq.baton = baton;
    rq.p = p;
    timeout = apr_time_from_msec(e->redis_conf->timeout_ms);
    rq.started = authn_hmac_monotonic();
    deadline = rq.started + timeout;
    /* NB: the check is of Redis, whatever the breaker says; but it tells
     * the breaker only what a request there and then would: as a request
     * while it is closed, as its one probe when it is due (an answer then
     * closes it, as the requests' probe's does), nothing while it waits (a
     * check every few seconds would else undo its backoff). */
    go =
        authn_hmac_redis_allowed(h, rq.started, timeout + apr_time_from_sec(1));
    rc = authn_hmac_redis_pool_acquire(e->redis, &conn, deadline, why, p);
    if (rc == AUTHN_HMAC_REDIS_OK)
        rc = authn_hmac_redis_probe(conn, e->redis_conf, deadline, why, p);
    /* NB: no reason with an answer (a new connection's steps leave theirs). */
    if (rc == AUTHN_HMAC_REDIS_OK)
        *why = "";
    /* NB: an ACL without +get is a configuration error the requests meet
     * too; told by the check, left to them for the breaker. */
    if ((rc == AUTHN_HMAC_REDIS_ERROR && conn && strstr(*why, "NOPERM")) ||
        !go) {
        if (conn)
            authn_hmac_redis_pool_release(e->redis, conn,
                                          rc != AUTHN_HMAC_REDIS_OK);
        return rc == AUTHN_HMAC_REDIS_OK;
    }
    rq.probe = go == 2;
    redis_end(&rq, conn, rc, *why);
    return rc == AUTHN_HMAC_REDIS_OK;
}

const char *authn_hmac_outcome_name(authn_hmac_outcome o)
{
    static const char *const names[] = {
        "hit",          "redis-hit", "verified", "denied",    "negative-hit",
        "unknown-user", "busy",      "error",    "coalesced", "throttled"};

    return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "error";
}

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
static apr_interval_time_t farm_time(const authn_hmac_engine_t *e)
{
    apr_interval_time_t w = 2 * expected_verify(e) + apr_time_from_sec(1);

    return w < apr_time_from_sec(3) ? w : apr_time_from_sec(3);
}

/* How long a waiter waits for the runner of its credential: about twice
 * the usual time, and a second more for a machine whose cores are busy
 * with other verifications (a waiter that gave up too soon would add one
 * more), and the runner's time in the verification queue. */
static apr_interval_time_t flight_time(const authn_hmac_engine_t *e)
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
static int take_turn(const authn_hmac_engine_t *e, const authn_hmac_cred_t *c,
                     authn_hmac_turn_t *turn)
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

/* One credential's way down the tiers, against hash. never: hash is a
 * dummy (an unknown or locked user's), which no password matches; the way
 * is a known user's, Redis calls and all, but nothing on it grants or is
 * stored as granted.
 *
 * Each tier answers (returns 1, the outcome in o) or passes on (returns
 * 0). What a tier takes on that must be given back or handed on is kept
 * here for the one exit (finish): the flight this request runs, its farm
 * claim, what it learned of the credential and when, and the keys. */
typedef struct {
    const authn_hmac_engine_t *e;
    const authn_hmac_policy_t *pol;
    const authn_hmac_cred_t *c;
    const char *hash;
    size_t hash_len;
    int never;
    int cache, negative; /* the section caches; and keeps refusals */
    void *baton;
    apr_pool_t *p;
    apr_time_t t0; /* when the request came (the caches' time) */
    unsigned char key[AUTHN_HMAC_KEY_LEN];  /* the credential MAC */
    unsigned char nkey[AUTHN_HMAC_KEY_LEN]; /* its negative MAC */
    unsigned char uid[AUTHN_HMAC_KEY_LEN];
    unsigned char pkey[AUTHN_HMAC_KEY_LEN]; /* key under the previous pepper */
    unsigned char puid[AUTHN_HMAC_KEY_LEN]; /* uid under it */
    int pkeys;                              /* made (on the first miss) */
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];
    redis_req rq; /* made by the first miss: the hit needs none of it */
    authn_hmac_flight_rc flight; /* RUN: this request's flight to end */
    authn_hmac_flight_t fl;      /* its run (RUN or WAIT) */
    apr_interval_time_t wait;    /* how long the flight's waiters wait */
    int farm;                    /* 1: this server's claim across the farm */
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1];
    /* What the request learned of the credential, for the caches, the
     * flight's waiters and the farm's: 1 granted, 0 refused (a mismatch),
     * -1 nothing; at `learned` (0: nothing to store). */
    int result;
    apr_time_t learned;
    apr_interval_time_t took; /* the verification, on the monotonic clock */
    int ran;                  /* this request ran the verifier */
    int unkept;               /* a wrapped provider's refusal, not kept */
    int ids_made;             /* the throttle's ids are made */
    unsigned char tuid[AUTHN_HMAC_KEY_LEN]; /* their user id (folded) */
    int entered;    /* this request's guess has a place */
    int client_ban; /* its client is banned for all users */
    authn_hmac_throttle_ids_t ids;
    authn_hmac_outcome o;
} req_t;

/* The user's id under mac: of its uid_scope where it has one. */
static void user_id(const authn_hmac_mac_t *mac, const authn_hmac_cred_t *c,
                    unsigned char uid[AUTHN_HMAC_KEY_LEN])
{
    if (c->uid_scope)
        authn_hmac_user_id(mac, c->uid_scope, c->uid_scope_len, c->user,
                           c->user_len, uid);
    else
        authn_hmac_user_id(mac, c->scope, c->scope_len, c->user, c->user_len,
                           uid);
}

/* The request's time, and with a cache or the throttle its keys: the
 * credential MAC and the user's id. */
static void keys(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_cred_t *c = q->c;

    q->t0 = apr_time_now();
    if (!q->cache && !authn_hmac_throttle_on(&e->throttle))
        return;
    if (c->digest && !q->never)
        memcpy(q->d, c->digest, sizeof(q->d));
    else
        authn_hmac_cred_digest(c->scope, c->scope_len, c->user, c->user_len,
                               q->hash, q->hash_len, q->d);
    authn_hmac_cred_mac(e->mac, q->d, c->password, c->password_len, q->key);
    if (c->uid)
        memcpy(q->uid, c->uid, sizeof(q->uid));
    else
        user_id(e->mac, c, q->uid);
}

/* The credential's key and the user's id under the previous pepper, made
 * once, on the first miss. */
static void prev_keys(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_cred_t *c = q->c;

    if (q->pkeys)
        return;
    authn_hmac_cred_mac(e->mac_prev, q->d, c->password, c->password_len,
                        q->pkey);
    user_id(e->mac_prev, c, q->puid);
    q->pkeys = 1;
}

/* The throttle's ids of the request's client and user, made once: of the
 * name as the source matches it (folded where it folds). */
static void throttle_ids(req_t *q)
{
    const authn_hmac_cred_t *c = q->c;
    char name[256];
    size_t b = 0, n = c->user_len, i;

    if (q->ids_made)
        return;
    q->ids_made = 1;
    if (!c->fold) {
        memcpy(q->tuid, q->uid, sizeof(q->tuid));
        authn_hmac_throttle_ids(q->e->mac, c->client, q->uid, &q->ids);
        return;
    }
    while (b < n && apr_isspace(c->user[b]))
        b++;
    while (n > b && apr_isspace(c->user[n - 1]))
        n--;
    n = n - b < sizeof(name) ? n - b : sizeof(name);
    for (i = 0; i < n; i++)
        name[i] = (char)apr_tolower(c->user[b + i]);
    if (c->uid_scope)
        authn_hmac_user_id(q->e->mac, c->uid_scope, c->uid_scope_len, name, n,
                           q->tuid);
    else
        authn_hmac_user_id(q->e->mac, c->scope, c->scope_len, name, n, q->tuid);
    authn_hmac_throttle_ids(q->e->mac, c->client, q->tuid, &q->ids);
}

/* A refusal by the throttle, for either tier that gives it. */
static int throttled(req_t *q)
{
    count(q->e, AUTHN_HMAC_C_THROTTLED, 1);
    q->o = AUTHN_HMAC_THROTTLED;
    return 1;
}

/* A wrong password's fingerprint for the throttle: a word of a MAC of
 * the user (as the throttle names it: throttle_ids first) and the
 * password alone, so that a user's old typos stay repeats when the stored
 * hash changes (a password change). NB: "P" first, as no other tagged
 * body begins. */
static uint64_t fingerprint(const req_t *q)
{
    unsigned char body[1 + 256], tag[AUTHN_HMAC_KEY_LEN];
    size_t n = q->c->password_len < 256 ? q->c->password_len : 256;
    uint64_t fp;

    body[0] = 'P';
    memcpy(body + 1, q->c->password, n);
    authn_hmac_value_tag(q->e->mac, q->tuid, body, 1 + n, tag);
    memcpy(&fp, tag, sizeof(fp));
    explicit_bzero(body, sizeof(body));
    explicit_bzero(tag, sizeof(tag));
    return fp;
}

/* The client's mark on an entry: a word of its throttle id. */
static uint32_t client_mark(req_t *q)
{
    uint32_t m;

    throttle_ids(q);
    memcpy(&m, q->ids.client, sizeof(m));
    return m ? m : 1;
}

/* The credential's entry, stored or refreshed for this request, is marked
 * for its client (throttle.h: whom a client's ban still serves). */
static void mark(req_t *q)
{
    if (authn_hmac_throttle_on(&q->e->throttle))
        authn_hmac_table_mark(q->e->table, q->key, q->uid, client_mark(q));
}

/* A ban, started here or taken from the farm (origin), told once with the
 * client (the log's) and the user, counted, and written in the book of
 * bans with its end (until[0] the pair's, until[1] the client's). */
static void ban_told(req_t *q, int started, const char *origin,
                     const apr_time_t until[2])
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_throttle_conf_t *tc = &e->throttle;
    int i;

    if (!started)
        return;
    count(e, AUTHN_HMAC_C_BANS, 1);
    for (i = 0; i < 2; i++)
        if (started & (1 << i))
            authn_hmac_throttle_book(e->table, &q->ids, 1 << i, q->c->client,
                                     q->c->user, q->c->user_len, until[i]);
    authn_hmac_logf(
        e->log, q->baton, AUTHN_HMAC_LOG_WARNING,
        "AHMAC0029: user %.*s: client refused for %" APR_TIME_T_FMT
        " s without a verification: %s (AuthHMAC%s %d within %" APR_TIME_T_FMT
        " s)%s",
        (int)q->c->user_len, q->c->user, apr_time_sec(tc->ban),
        started & AUTHN_HMAC_BAN_PAIR ? "too many failures for this user"
                                      : "too many failures for all users",
        started & AUTHN_HMAC_BAN_PAIR ? "MaxFailures" : "MaxClientFailures",
        started & AUTHN_HMAC_BAN_PAIR ? tc->max_failures
                                      : tc->max_client_failures,
        apr_time_sec(tc->window), origin);
}

/* A request refused because its client is banned for all users (and the
 * credential is not one of the client's own logged-in users'): a guess,
 * counted for its user+client pair, without a verification. */
static int client_banned(req_t *q)
{
    apr_time_t until[2] = {q->t0 + q->e->throttle.ban,
                           q->t0 + q->e->throttle.ban};
    authn_hmac_held_t *h = q->c->hold;
    /* NB: a wrong password for a user the ban still serves (an entry
     * marked for this client) is an answer from the cache: counted for
     * the client too, which seals its ban at the limit. */
    int oracle =
        authn_hmac_table_user_marked(q->e->table, q->uid, client_mark(q));

    if (h) {
        h->what = 2;
        h->oracle = oracle;
        h->redis_off = 1; /* NB: a refusal by a ban asks Redis nothing */
        h->fp = fingerprint(q);
        h->ids = q->ids;
    }
    else
        ban_told(q,
                 authn_hmac_throttle_refused(q->e->table, &q->e->throttle,
                                             &q->ids, fingerprint(q), oracle,
                                             q->t0),
                 "", until);
    return throttled(q);
}

/* 0. A ban in force on the client for this user, or a limit that a guess
 * under way may reach: refused before the caches are asked. A banned
 * guesser whose guesses were still checked against cached credentials
 * would guess at the server's speed, not bcrypt's (a right guess a hit, a
 * wrong one a quick refusal). A ban on the client for all users (or its
 * limit reached with the guesses under way) refuses everything from it
 * but the entries marked for it: the users logged in from there before
 * (client_ban, from_shm). The user at any other address is served. NB:
 * the hit path only reads one word while no record refuses anywhere, and
 * takes no lock when one does. */
static int from_ban(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    int bans;

    if (!authn_hmac_throttle_on(&e->throttle) ||
        !authn_hmac_throttle_any(e->table, q->t0))
        return 0;
    throttle_ids(q);
    bans = authn_hmac_throttle_banned(e->table, &e->throttle, &q->ids, q->t0);
    if (bans & (AUTHN_HMAC_BAN_PAIR | AUTHN_HMAC_BAN_SEALED))
        return throttled(q);
    q->client_ban = bans != 0;
    return 0;
}

/* 1. Shared memory: the credential MAC among the user's entries. A miss
 * is counted here, and the miss path's Redis state made. */
/* 1b. Shared memory under the previous pepper: an entry found there is
 * a hit, stored again under the current pepper (here, and in Redis), with
 * the time of its verification. NB: an unknown user looks too. */
static int from_previous(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_policy_t *pol = q->pol;
    apr_time_t verified = 0, used = 0;

    if (!e->mac_prev)
        return 0;
    prev_keys(q);
    if (!authn_hmac_table_lookup(e->table, q->pkey, q->puid, q->t0, pol->ttl,
                                 pol->max_age, &verified, &used) ||
        q->never)
        return 0;
    authn_hmac_table_store(e->table, q->key, q->uid, verified, q->t0, pol->ttl);
    mark(q);
    if (e->redis)
        redis_refresh(e, q->baton, q->p, q->key, q->uid, q->t0, verified,
                      pol->max_age);
    count(e, AUTHN_HMAC_C_HITS, 1);
    count(e, AUTHN_HMAC_C_PREVIOUS_HITS, 1);
    q->o = AUTHN_HMAC_HIT;
    return 1;
}

static int from_shm(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_policy_t *pol = q->pol;
    apr_time_t verified = 0, used = 0;

    if (q->cache) {
        if (authn_hmac_table_lookup(e->table, q->key, q->uid, q->t0, pol->ttl,
                                    pol->max_age, &verified, &used) &&
            !q->never) {
            /* NB: a client banned for all users keeps only its own
             * logged-in users (their entries marked for it): any other
             * hit from there would answer a sprayer's guess. */
            if (q->client_ban && !authn_hmac_table_marked(
                                     e->table, q->key, q->uid, client_mark(q)))
                return client_banned(q);
            /* NB: no lock and no write unless half the TTL has passed
             * since the entry's last use was written. */
            if (authn_hmac_table_refresh(e->table, q->key, q->uid, q->t0,
                                         pol->ttl, pol->max_age, &used)) {
                mark(q);
                if (e->redis)
                    redis_refresh(e, q->baton, q->p, q->key, q->uid, q->t0,
                                  verified, pol->max_age);
            }
            count(e, AUTHN_HMAC_C_HITS, 1);
            q->o = AUTHN_HMAC_HIT;
            return 1;
        }
        if (!q->client_ban && from_previous(q))
            return 1;
    }
    if (q->client_ban)
        return client_banned(q);
    count(e, AUTHN_HMAC_C_MISSES, 1);
    /* NB: after the hit path, which needs none of this. */
    memset(&q->rq, 0, sizeof(q->rq));
    q->rq.e = e;
    q->rq.baton = q->baton;
    q->rq.p = q->p;
    q->rq.off = !e->redis || !q->cache;
    return 0;
}

/* 2. The negative region: the same wrong password seen within the
 * negative TTL. NB: before Redis: a password the verifier refused for this
 * very hash has nothing to find there, and an unknown user's repeat
 * (dummy_verify) never asks Redis either, so a Redis round trip would tell
 * the names apart. */
static int from_negative(req_t *q)
{
    const authn_hmac_cred_t *c = q->c;

    if (!q->negative)
        return 0;
    /* NB: negative implies cache: the digest was made by from_shm. */
    authn_hmac_cred_negative(q->e->mac, q->d, c->password, c->password_len,
                             q->nkey);
    if (!authn_hmac_negative_lookup(q->e->table, q->nkey, q->uid, q->t0))
        return 0;
    count(q->e, AUTHN_HMAC_C_NEGATIVE_HITS, 1);
    q->o = AUTHN_HMAC_NEGATIVE_HIT;
    return 1;
}

/* 3. Redis, when configured: the user's entry, whose tag must verify
 * (again: a second look, see from_farm). */
static int from_redis(req_t *q, int again)
{
    const authn_hmac_engine_t *e = q->e;
    apr_time_t verified = 0, used = 0;
    authn_hmac_entries_t prev;

    if (!q->cache)
        return 0;
    if (redis_lookup(&q->rq, e->mac, q->key, q->uid, &q->rq.es, q->t0, q->pol,
                     q->never, again ? 0 : LOOK_MISS | LOOK_FORGED, &verified,
                     &used)) {
        authn_hmac_table_store(e->table, q->key, q->uid, verified, used,
                               q->pol->ttl);
        mark(q);
        q->o = AUTHN_HMAC_REDIS_HIT;
        return 1;
    }
    /* NB: the previous pepper's entry, for every first look that missed
     * (an unknown user's too: the same GETs on the wire); found, it is
     * stored again under the current pepper, here and in Redis, with the
     * time of its verification. */
    if (again || !e->mac_prev)
        return 0;
    prev_keys(q);
    if (!redis_lookup(&q->rq, e->mac_prev, q->pkey, q->puid, &prev, q->t0,
                      q->pol, q->never, LOOK_FORGED, &verified, &used))
        return 0;
    authn_hmac_table_store(e->table, q->key, q->uid, verified, q->t0,
                           q->pol->ttl);
    mark(q);
    redis_store(&q->rq, q->key, q->uid, verified, q->t0, q->pol->max_age);
    count(e, AUTHN_HMAC_C_PREVIOUS_HITS, 1);
    q->o = AUTHN_HMAC_REDIS_HIT;
    return 1;
}

/* 5. The throttle: a client at its limit of wrong passwords, for this
 * user or for all, in this server or (with Redis) in the farm, is refused
 * without a verification; else its guess takes a place in the count
 * (counted at the one exit), so that concurrent guesses never pass the
 * limit. NB: after the server's flight: the requests that wait for one
 * verification of a credential are one guess, the runner's. A ban the
 * farm knows (its tag verified) is kept here for what remains of it, and
 * told here (from_ban). */
static int from_throttle(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_throttle_conf_t *tc = &e->throttle;
    apr_time_t until[2];
    int refused, fresh, took = 0;

    if (!authn_hmac_throttle_on(tc))
        return 0;
    throttle_ids(q);
    refused =
        authn_hmac_throttle_enter(e->table, tc, &q->ids, q->t0, &q->entered);
    farm_banned(&q->rq, &q->ids, until);
    if (until[0])
        took |= authn_hmac_throttle_ban(e->table, tc, &q->ids,
                                        AUTHN_HMAC_BAN_PAIR, q->t0, until[0]);
    if (until[1])
        took |= authn_hmac_throttle_ban(e->table, tc, &q->ids,
                                        AUTHN_HMAC_BAN_CLIENT, q->t0, until[1]);
    if (until[0] > q->t0 + tc->ban)
        until[0] = q->t0 + tc->ban;
    if (until[1] > q->t0 + tc->ban)
        until[1] = q->t0 + tc->ban;
    ban_told(q, took, " (from the farm's Redis)", until);
    refused |= (until[0] > q->t0 ? AUTHN_HMAC_BAN_PAIR : 0) |
               (until[1] > q->t0 ? AUTHN_HMAC_BAN_CLIENT : 0);
    if (!refused)
        return 0;
    if (q->entered)
        (void)authn_hmac_throttle_leave(e->table, tc, &q->ids, 0, 0, q->t0,
                                        &fresh);
    q->entered = 0;
    return throttled(q);
}

/* A coalesced answer: got 1 granted, 0 refused (never grants). */
static int coalesced(req_t *q, int got)
{
    got = got && !q->never;
    count(q->e, AUTHN_HMAC_C_COALESCED, 1);
    q->o = got ? AUTHN_HMAC_COALESCED : AUTHN_HMAC_DENIED;
    return got;
}

/* What a second look in shared memory finds, now: 1 the credential
 * cached, 0 its refusal kept, -1 neither. */
static int stored(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    apr_time_t now = apr_time_now(), verified, used;

    if (authn_hmac_table_lookup(e->table, q->key, q->uid, now, q->pol->ttl,
                                q->pol->max_age, &verified, &used) &&
        !q->never)
        return 1;
    if (q->negative &&
        authn_hmac_negative_lookup(e->table, q->nkey, q->uid, now))
        return 0;
    return -1;
}

/* 4. Single flight in the server: the result of a concurrent request's
 * verification of the same credential, in any process; else this request
 * runs it (a flight to end), or verifies alone (no room, or the runner
 * died or is late). */
static int from_flight(req_t *q)
{
    apr_time_t mono;
    int got;

    if (!q->cache)
        return 0;
    mono = authn_hmac_monotonic();
    q->wait = flight_time(q->e);
    q->flight =
        authn_hmac_flight_begin(q->e->table, q->key, mono, q->wait, &q->fl);
    /* NB: a run of the credential that ended after this request's look in
     * the caches stored its result before it ended: a second look finds
     * it (else a second verification), and this run gives it on. */
    if (q->flight == AUTHN_HMAC_FLIGHT_RUN) {
        if ((got = stored(q)) < 0)
            return 0;
        q->result = coalesced(q, got);
        return 1;
    }
    if (q->flight != AUTHN_HMAC_FLIGHT_WAIT ||
        (got = authn_hmac_flight_wait(q->e->table, &q->fl, q->key,
                                      mono + q->wait)) < 0)
        return 0;
    coalesced(q, got);
    return 1;
}

/* 6. Single flight across the farm: this server runs it unless another
 * already does, whose result is then this one's (and is stored here, and
 * given to this server's flight). */
static int from_farm(req_t *q)
{
    int got;

    if (!q->cache)
        return 0;
    q->farm = farm_claim(&q->rq, q->key, q->wait, q->token);
    if (q->farm != 0 ||
        (got = farm_wait(&q->rq, q->key,
                         authn_hmac_monotonic() + farm_time(q->e))) < 0)
        return 0;
    if (got == 2) {
        /* A grant that ended between this request's look in Redis and its
         * claim: the entry it stored answers (redis_lookup stores it here
         * with its own times), and this server's flight takes it. */
        if (!from_redis(q, 1))
            return 0;
        q->result = 1;
        return 1;
    }
    q->learned = apr_time_now();
    q->result = coalesced(q, got);
    return 1;
}

/* 7. The verifier, in a turn of the server's queue: answers always. */
static int from_verifier(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    authn_hmac_turn_t turn;
    apr_time_t m0, m1;
    apr_status_t rv;

    if (!take_turn(e, q->c, &turn)) {
        q->o = AUTHN_HMAC_BUSY;
        return 1;
    }
    /* NB: the duration on the monotonic clock: a step of the wall clock
     * must not make the usual time, and so every wait, unbounded. */
    /* NB: in the request's own thread, at the request's own priority: a
     * request that waits for a verification (its own, a flight's or the
     * farm's) never waits on a thread that runs below it. What keeps
     * cached users served during a flood is the cap on verifications at
     * once and the throttle, not a lower priority: in the idle class, a
     * login beside busy pages of its own server took 18 s (stock
     * mod_authn_file: 0.5 s). */
    m0 = authn_hmac_monotonic();
    rv = q->c->ask ? q->c->ask(q->c->ask_ctx, q->c->password)
                   : e->verify(q->c->password, q->hash);
    m1 = authn_hmac_monotonic();
    authn_hmac_queue_leave(e->table, &turn);
    q->learned = apr_time_now();
    q->took = m1 - m0;
    q->ran = 1;
    if (q->never) {
        count(e, AUTHN_HMAC_C_DUMMY_VERIFICATIONS, 1);
        /* NB: cannot be (see authn_hmac_dummy_hash); and never a grant. */
        if (rv == APR_SUCCESS)
            rv = APR_EGENERAL;
    }
    else {
        /* NB: dummies stay out of the histogram as out of these counters:
         * what it tells of unknown users, dummy_verifications tells
         * already, and its percentiles are those of real logins. */
        count(e, AUTHN_HMAC_C_VERIFICATIONS, 1);
        count(e, AUTHN_HMAC_C_VERIFY_USEC, (uint64_t)q->took);
        authn_hmac_table_observe(e->table, AUTHN_HMAC_H_VERIFY,
                                 (uint64_t)q->took);
    }
    if (rv == APR_SUCCESS) {
        q->result = 1;
        q->o = AUTHN_HMAC_VERIFIED;
        return 1;
    }
    /* NB: a wrapped provider's answer that may not be kept (it renamed
     * the user; its configuration is not one section's): granted or
     * refused, and nothing learned (not cached, nor given to waiters). */
    if (q->c->ask && (rv == APR_INCOMPLETE || rv == APR_NOTFOUND)) {
        q->o = rv == APR_INCOMPLETE ? AUTHN_HMAC_VERIFIED : AUTHN_HMAC_DENIED;
        q->unkept = rv == APR_NOTFOUND;
        return 1;
    }
    /* NB: only a mismatch is remembered, and shared with waiters: the
     * same input gives it again. Any other failure (out of memory) may
     * not: the waiters verify by themselves. */
    q->result = rv == APR_EMISMATCH ? 0 : -1;
    /* NB: a wrapped provider's error (its directory down) is the
     * provider's answer, as without the cache: an error. */
    q->o =
        rv != APR_EMISMATCH && q->c->ask ? AUTHN_HMAC_ERROR : AUTHN_HMAC_DENIED;
    return 1;
}

/* The end of a guess that took a place: failed, a wrong password it
 * verified, is counted by the throttle, here and in the farm, unless the
 * client sent it lately; a ban it starts is told once, with the client
 * (the log's) and the user. */
/* A wrong password counted (fresh: not a repeat here) in the farm, the
 * bans started here or there told. */
static void counted(req_t *q, uint64_t fp, int fresh, int started,
                    apr_time_t now)
{
    const authn_hmac_engine_t *e = q->e;
    const authn_hmac_throttle_conf_t *tc = &e->throttle;
    apr_time_t until[2];
    int farm;

    if (fresh && (farm = farm_guessed(&q->rq, &q->ids, fp))) {
        if (farm & AUTHN_HMAC_BAN_PAIR)
            started |= authn_hmac_throttle_ban(
                e->table, tc, &q->ids, AUTHN_HMAC_BAN_PAIR, now, now + tc->ban);
        if (farm & AUTHN_HMAC_BAN_CLIENT)
            started |= authn_hmac_throttle_ban(e->table, tc, &q->ids,
                                               AUTHN_HMAC_BAN_CLIENT, now,
                                               now + tc->ban);
    }
    until[0] = until[1] = now + tc->ban;
    ban_told(q, started, "", until);
}

static void guessed(req_t *q, int failed)
{
    const authn_hmac_engine_t *e = q->e;
    authn_hmac_held_t *h = q->c->hold;
    uint64_t fp = fingerprint(q);
    apr_time_t now = apr_time_now();
    int fresh, started;

    /* NB: held for the caller (the writer rule): the place is given back,
     * and the wrong password counted once the answer stands. */
    started = authn_hmac_throttle_leave(e->table, &e->throttle, &q->ids, fp,
                                        failed && !h, now, &fresh);
    q->entered = 0;
    if (h && failed) {
        h->what = 1;
        h->redis_off = q->rq.off;
        h->fp = fp;
        h->ids = q->ids;
        return;
    }
    counted(q, fp, fresh, started, now);
}

/* The one exit: stores what the request learned, ends its flight, writes
 * a verified credential to Redis, posts the farm claim's result, and wipes
 * the keys. */
static authn_hmac_outcome finish(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    int verified = q->o == AUTHN_HMAC_VERIFIED && q->result > 0 && q->cache;

    if (q->cache && q->learned) {
        if (q->result > 0) {
            authn_hmac_table_store(e->table, q->key, q->uid, q->learned,
                                   q->learned, q->pol->ttl);
            mark(q);
        }
        else if (q->result == 0 && q->negative)
            authn_hmac_negative_store(e->table, q->nkey, q->uid, q->learned,
                                      q->learned + q->pol->negative_ttl);
    }
    if (q->flight == AUTHN_HMAC_FLIGHT_RUN)
        authn_hmac_flight_end(e->table, &q->fl, q->key, q->result,
                              authn_hmac_monotonic());
    if (verified)
        redis_store(&q->rq, q->key, q->uid, q->learned, q->learned,
                    q->pol->max_age);
    /* NB: the farm's waiters take a refusal only where this section keeps
     * refusals; else they verify by themselves. */
    if (q->farm == 1)
        farm_result(&q->rq, q->key, q->token,
                    q->result == 0 && !q->negative ? -1 : q->result);
    /* NB: a wrong password this request verified is a guess (one that
     * coalesced on another's verification is the same password). */
    if (q->entered)
        guessed(q, q->ran && (q->result == 0 || q->unkept));
    explicit_bzero(q->key, sizeof(q->key));
    explicit_bzero(q->nkey, sizeof(q->nkey));
    explicit_bzero(q->pkey, sizeof(q->pkey));
    if (q->o == AUTHN_HMAC_VERIFIED && q->result > 0)
        authn_hmac_logf(e->log, q->baton, AUTHN_HMAC_LOG_DEBUG,
                        "verified in %" APR_TIME_T_FMT " us, cached", q->took);
    return q->o;
}

/* A request at the top of the tiers: nothing taken on yet. NB: the keys
 * and the Redis state are made by the tiers that need them (a hit makes
 * no Redis state, nor zeroes it). */
static void begin(req_t *q, const authn_hmac_engine_t *e,
                  const authn_hmac_policy_t *pol, const authn_hmac_cred_t *c,
                  const char *hash, size_t hash_len, int never, void *baton,
                  apr_pool_t *p)
{
    q->e = e;
    q->pol = pol;
    q->c = c;
    q->hash = hash;
    q->hash_len = hash_len;
    q->never = never;
    q->cache = pol->ttl > 0;
    q->negative = q->cache && pol->negative_ttl > 0;
    q->baton = baton;
    q->p = p;
    q->flight = AUTHN_HMAC_FLIGHT_NONE;
    q->fl.slot = -1;
    q->fl.run = 0;
    q->farm = -1;
    q->result = -1;
    q->learned = 0;
    q->took = 0;
    q->ran = 0;
    q->unkept = 0;
    q->ids_made = 0;
    q->pkeys = 0;
    q->entered = 0;
    q->client_ban = 0;
    q->o = AUTHN_HMAC_ERROR;
}

void authn_hmac_count_held(const authn_hmac_engine_t *e,
                           const authn_hmac_cred_t *c,
                           const authn_hmac_held_t *h, void *baton,
                           apr_pool_t *p)
{
    authn_hmac_policy_t pol = {1, 1, 0, 0};
    apr_time_t now = apr_time_now(), until[2];
    int fresh = 0, started;
    req_t q;

    if (!h->what || !authn_hmac_throttle_on(&e->throttle))
        return;
    begin(&q, e, &pol, c, NULL, 0, 0, baton, p);
    q.ids = h->ids;
    q.ids_made = 1;
    memset(&q.rq, 0, sizeof(q.rq));
    q.rq.e = e;
    q.rq.baton = baton;
    q.rq.p = p;
    q.rq.off = !e->redis || h->redis_off;
    if (h->what == 2) {
        until[0] = until[1] = now + e->throttle.ban;
        ban_told(&q,
                 authn_hmac_throttle_refused(e->table, &e->throttle, &q.ids,
                                             h->fp, h->oracle, now),
                 "", until);
        return;
    }
    started = authn_hmac_throttle_count(e->table, &e->throttle, &q.ids, h->fp,
                                        now, &fresh);
    counted(&q, h->fp, fresh, started, now);
}

/* The tiers in order, each answering or passing on, then the one exit. */
static authn_hmac_outcome check(const authn_hmac_engine_t *e,
                                const authn_hmac_policy_t *pol,
                                const authn_hmac_cred_t *c, const char *hash,
                                size_t hash_len, int never, void *baton,
                                apr_pool_t *p)
{
    req_t q;

    begin(&q, e, pol, c, hash, hash_len, never, baton, p);
    keys(&q);
    if (!from_ban(&q) && !from_shm(&q) && !from_negative(&q) &&
        !from_redis(&q, 0) && !from_flight(&q) && !from_throttle(&q) &&
        !from_farm(&q))
        from_verifier(&q);
    return finish(&q);
}

/* One pass down the tiers; the outcome is counted by tally(). */
static authn_hmac_outcome run(const authn_hmac_engine_t *e,
                              const authn_hmac_policy_t *pol,
                              const authn_hmac_cred_t *c, void *baton,
                              apr_pool_t *p)
{
    authn_hmac_outcome refused, o;
    char dummy[AUTHN_HMAC_DUMMY_MAX];
    size_t len;

    if (c->hash && !authn_hmac_hash_locked(c->hash, c->hash_len))
        return check(e, pol, c, c->hash, c->hash_len, 0, baton, p);
    /* An unknown user, or a locked line ("carol:", "dave:!"): a known
     * user's wrong password, against a dummy hash of the file's typical
     * scheme and cost that no password matches. The same shared-memory,
     * negative-cache and Redis calls, the same farm marker, the same queue
     * and verification: neither the time nor the Redis traffic of a first
     * try or a repeat tells the names apart, and no password is told from
     * another (the dummy is no user's hash). */
    refused =
        c->hash || c->locked ? AUTHN_HMAC_DENIED : AUTHN_HMAC_UNKNOWN_USER;
    if (!pol->hide_unknown || !c->dummy_hash ||
        !(len = authn_hmac_dummy_hash(e->mac, c->dummy_hash, c->dummy_hash_len,
                                      dummy)))
        return refused;
    o = check(e, pol, c, dummy, len, 1, baton, p);
    return o == AUTHN_HMAC_BUSY || o == AUTHN_HMAC_THROTTLED ? o : refused;
}

/* Counts a request's outcome (its final one): a password refused, or an
 * unknown user (an unknown or locked user's, even when busy). */
static void tally(const authn_hmac_engine_t *e, const authn_hmac_cred_t *c,
                  authn_hmac_outcome o)
{
    if (c->hash && !authn_hmac_hash_locked(c->hash, c->hash_len)) {
        if (o == AUTHN_HMAC_DENIED)
            count(e, AUTHN_HMAC_C_DENIED, 1);
        return;
    }
    count(e,
          c->hash || c->locked ? AUTHN_HMAC_C_DENIED
                               : AUTHN_HMAC_C_UNKNOWN_USER,
          1);
}

authn_hmac_outcome authn_hmac_check(const authn_hmac_engine_t *e,
                                    const authn_hmac_policy_t *pol,
                                    const authn_hmac_cred_t *c, void *baton,
                                    apr_pool_t *p)
{
    authn_hmac_outcome o = run(e, pol, c, baton, p);

    tally(e, c, o);
    return o;
}

/* ------------------------------------------ from the htpasswd file */

/* A user's answer from the file. */
typedef struct {
    apr_status_t rv; /* APR_SUCCESS, APR_NOTFOUND, AUTHN_HMAC_LOCKED */
    const char *hash;
    size_t hash_len;
    unsigned char uid[AUTHN_HMAC_KEY_LEN];
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN];
} found_t;

/* Whether o grants; any other answer (a deny, busy, an error) from an
 * unsettled reading falls under the writer rule. */
static int granted(authn_hmac_outcome o)
{
    return o == AUTHN_HMAC_HIT || o == AUTHN_HMAC_REDIS_HIT ||
           o == AUTHN_HMAC_VERIFIED || o == AUTHN_HMAC_COALESCED;
}

/* The credential, with the user's answer f. */
static void with(authn_hmac_cred_t *c, const found_t *f)
{
    int known = f->rv == APR_SUCCESS;

    c->hash = known ? f->hash : NULL;
    c->hash_len = known ? f->hash_len : 0;
    c->dummy_hash = known ? NULL : f->hash;
    c->dummy_hash_len = known ? 0 : f->hash_len;
    c->locked = f->rv == AUTHN_HMAC_LOCKED;
    c->uid = known ? f->uid : NULL;
    c->digest = known ? f->digest : NULL;
}

/* Whether the user's answer changed: came, went, or another hash. */
static int changed(const found_t *a, const found_t *b)
{
    return a->rv != b->rv ||
           (a->rv == APR_SUCCESS &&
            (a->hash_len != b->hash_len || strcmp(a->hash, b->hash) != 0));
}

/* The monotonic clock to a tick (a few ms, earlier: a reading is then
 * taken for younger than it is), at a few ns where a precise one takes
 * more: the hit path takes it. */
static apr_time_t coarse_monotonic(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (apr_time_t)ts.tv_sec * APR_USEC_PER_SEC +
           (apr_time_t)(ts.tv_nsec / 1000);
}

static int found(apr_status_t rv)
{
    return rv == APR_SUCCESS || rv == APR_NOTFOUND || rv == AUTHN_HMAC_LOCKED;
}

authn_hmac_outcome authn_hmac_check_user(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         authn_hmac_userfile_t *uf,
                                         authn_hmac_cred_t *c,
                                         authn_hmac_log_fn bad, void *baton,
                                         apr_pool_t *p, apr_status_t *rv)
{
    apr_time_t since = coarse_monotonic();
    authn_hmac_reading_t rd;
    authn_hmac_outcome o;
    authn_hmac_held_t held;
    found_t first, then;
    int unsettled;

    first.rv = authn_hmac_userfile_lookup_id(
        uf, c->user, e->mac, c->scope, c->scope_len, &first.hash,
        &first.hash_len, first.uid, first.digest, bad, baton, p, &rd);
    *rv = found(first.rv) ? APR_SUCCESS : first.rv;
    if (*rv != APR_SUCCESS)
        return AUTHN_HMAC_ERROR;
    /* NB: an answer the reading could not give (torn, or the user's line
     * the last, maybe cut) is asked of the quiet file before any
     * verification: checked after a first one against the dummy, it would
     * cost a known user a second one that an unknown user's deny never
     * makes. A torn reading is unsure even past the bound (settle's last
     * look): its answer is never taken, a torn index's locked line no
     * more than its user's hash. */
    if (rd.unsure) {
        then.rv = authn_hmac_userfile_settle(
            uf, c->user, e->mac, c->scope, c->scope_len, &then.hash,
            &then.hash_len, then.uid, then.digest, bad, baton, p, &rd,
            authn_hmac_monotonic());
        with(c, found(then.rv) && !rd.unsure ? &then : &first);
        o = run(e, pol, c, baton, p);
        goto done;
    }
    with(c, &first);
    /* NB: from a reading the writer rule may ask again, a wrong password's
     * count waits for the answer that stands: a right password that a
     * half-written file missed is never counted. */
    memset(&held, 0, sizeof(held));
    unsettled = authn_hmac_userfile_unsettled(&rd, since);
    c->hold = unsettled ? &held : NULL;
    o = run(e, pol, c, baton, p);
    c->hold = NULL;
    /* The writer rule: any answer but a grant from a reading that a
     * writer may have left half done is asked again of the quiet file, and
     * checked again only if that changed the user's answer. NB: a busy
     * too: a cached user missing from a half-written file takes the dummy
     * verification's way, and a full queue answered it busy (a 503) where
     * the quiet file holds its cached credential. The wait is the same for
     * every such answer (a wrong password, an unknown or a locked user,
     * busy, throttled). */
    if (!granted(o) && unsettled) {
        then.rv = authn_hmac_userfile_settle(
            uf, c->user, e->mac, c->scope, c->scope_len, &then.hash,
            &then.hash_len, then.uid, then.digest, bad, baton, p, &rd,
            authn_hmac_monotonic());
        if (found(then.rv) && !rd.unsure && changed(&first, &then)) {
            with(c, &then);
            o = run(e, pol, c, baton, p);
            held.what = 0; /* the second answer counted itself */
        }
        else
            with(c, &first);
        /* NB: a settled answer that could not be read is not counted;
         * one the same as the first is, quiet file or not (a file whose
         * time is in the future never looks quiet: counting would stop). */
        if (!found(then.rv) || rd.unsure)
            held.what = 0;
    }
    if (!granted(o))
        authn_hmac_count_held(e, c, &held, baton, p);
done:
    tally(e, c, o);
    c->uid = NULL; /* this function's */
    c->digest = NULL;
    return o;
}
