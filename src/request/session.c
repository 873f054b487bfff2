/* session.c: a request's Redis session (redis_req, engine_int.h): what
 * the tiers read and write in Redis (the user's entries, the farm's
 * single-flight marker, the throttle's bans and counts) and the breaker's
 * shared health that each operation keeps; and the status page's check
 * of Redis. Each operation (connect, AUTH and SELECT if needed, the
 * command and its whole reply) has one deadline of the configured
 * timeout, and a request's first failure ends its use of Redis (but for
 * clearing its farm marker). Rests on the Redis client (redis/redis.h)
 * and the shared segment's health and counters (shm/table.h). */
#include "engine_int.h"
#include "annex.h"
#include "core/util.h"

#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

void authn_hmac_session_begin(redis_req *rq, const authn_hmac_engine_t *e,
                              void *baton, apr_pool_t *p, int off)
{
    memset(rq, 0, sizeof(*rq));
    rq->e = e;
    rq->baton = baton;
    rq->p = p;
    rq->off = off;
}

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

/* Looks the user's entry (uid, under mac) up in Redis into es: 1 with the
 * credential's times (key's) if it is there and live. A value whose tag
 * does not verify is a miss, whoever wrote it. Only a hit is counted,
 * unless look says more. */
int authn_hmac_session_lookup(redis_req *rq, const authn_hmac_mac_t *mac,
                              const unsigned char *key,
                              const unsigned char *uid,
                              authn_hmac_entries_t *es, apr_time_t now,
                              const authn_hmac_policy_t *pol, int never,
                              int look, apr_time_t *verified, apr_time_t *used)
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
void authn_hmac_session_store(redis_req *rq, const unsigned char *key,
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
 * verification (token is then the claim's, for authn_hmac_session_result), 0 if
 * another server runs it, -1 without Redis. */
int authn_hmac_session_claim(redis_req *rq, const unsigned char *key,
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
int authn_hmac_session_wait(redis_req *rq, const unsigned char *key,
                            apr_time_t until)
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
         * Redis before it posted its result (finish, engine.c): that entry is
         * the answer, if it verifies. */
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
void authn_hmac_session_result(redis_req *rq, const unsigned char *key,
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

/* What SQL last said of the user (uid), from Redis: 1 with *m, else 0
 * (none, Redis off or failed, or a value that does not verify: counted as
 * forged, as an entry's is). */
int authn_hmac_session_memo_get(redis_req *rq, const unsigned char *uid,
                                authn_hmac_memo_t *m)
{
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn = redis_begin(rq, &deadline);
    authn_hmac_redis_rc rc;
    const char *why = "";
    int found = 0;

    memset(m, 0, sizeof(*m));
    if (!conn)
        return 0;
    rc = authn_hmac_redis_memo_get(conn, e->redis_conf, e->mac, uid, deadline,
                                   m, &found, &why, rq->p);
    redis_end(rq, conn, rc, why);
    if (rc == AUTHN_HMAC_REDIS_OK && found < 0)
        count(e, AUTHN_HMAC_C_REDIS_FORGED, 1);
    return rc == AUTHN_HMAC_REDIS_OK && found > 0;
}

/* The user's memo, written to Redis for life. */
void authn_hmac_session_memo_set(redis_req *rq, const unsigned char *uid,
                                 const authn_hmac_memo_t *m,
                                 apr_interval_time_t life)
{
    const authn_hmac_engine_t *e = rq->e;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn = redis_begin(rq, &deadline);
    authn_hmac_redis_rc rc;
    const char *why = "";

    if (!conn)
        return;
    rc = authn_hmac_redis_memo_set(conn, e->redis_conf, e->mac, uid, m, life,
                                   deadline, &why, rq->p);
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
void authn_hmac_session_banned(redis_req *rq,
                               const authn_hmac_throttle_ids_t *ids,
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
int authn_hmac_session_guessed(redis_req *rq,
                               const authn_hmac_throttle_ids_t *ids,
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

void authn_hmac_session_forget(redis_req *rq, const unsigned char *key,
                               const unsigned char *uid, apr_time_t now,
                               apr_interval_time_t max_age)
{
    const authn_hmac_engine_t *e = rq->e;
    authn_hmac_entries_t *es = &rq->es;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn;
    const char *why = "";
    authn_hmac_redis_rc rc;
    int i, j, n = es->n;

    for (i = j = 0; i < n; i++)
        if (CRYPTO_memcmp(es->e[i].mac, key, AUTHN_HMAC_KEY_LEN) != 0)
            es->e[j++] = es->e[i];
    es->n = j;
    if (j == n || !(conn = redis_begin(rq, &deadline)))
        return;
    rc = j ? authn_hmac_redis_set(conn, e->redis_conf, e->mac, uid, es, now,
                                  max_age, deadline, &why, rq->p)
           : authn_hmac_redis_del(conn, e->redis_conf, uid, deadline, &why,
                                  rq->p);
    redis_end(rq, conn, rc, why);
}

/* A hit that wrote the entry's last use in shared memory writes it in
 * Redis too, so that the farm's other servers see the credential in use:
 * GET the user's entries, give this one its last use (now), SET. As rare
 * as the shared-memory refresh (once per entry per half TTL); a failure
 * only skips it. The request state is built here, off the common hit. */
void authn_hmac_session_refresh(const authn_hmac_engine_t *e, void *baton,
                                apr_pool_t *p, const unsigned char *key,
                                const unsigned char *uid, apr_time_t now,
                                apr_time_t verified,
                                apr_interval_time_t max_age)
{
    redis_req rq;
    apr_time_t deadline = 0;
    authn_hmac_redis_conn_t *conn;
    authn_hmac_value_state st = AUTHN_HMAC_VALUE_NONE;
    const char *why = "";
    authn_hmac_redis_rc rc;

    authn_hmac_session_begin(&rq, e, baton, p, 0);
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
    authn_hmac_session_begin(&rq, e, baton, p, 0);
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
