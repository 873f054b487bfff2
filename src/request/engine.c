/* engine.c: the request path: the tiers in order and the one exit.
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
 * (see authn_hmac_engine_run() at the end).
 * Beside this file (engine_int.h says what they share): the request's
 * Redis session (session.c: each Redis operation waits at most the
 * configured timeout, and a request's first Redis failure ends its use of
 * Redis, but for clearing its farm marker), the pacing of its waits
 * (pace.c), the throttle's tiers and a guess's count (throttle.c), and the
 * sources' paths: the htpasswd file's (htpasswd.c, with the writer rule),
 * a DBM file's (dbm.c) and the others' (source.c).
 *
 * No httpd here: the module adapts the outcome to an authn_status, and unit
 * tests drive the engine with a fake verifier.
 */
#include "engine_int.h"
#include "core/util.h"

#include <string.h>

#include <bsd/string.h>

const char *authn_hmac_outcome_name(authn_hmac_outcome o)
{
    static const char *const names[] = {
        "hit",          "redis-hit",    "verified",   "denied",
        "negative-hit", "unknown-user", "busy",       "error",
        "coalesced",    "throttled",    "offline-hit"};

    return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "error";
}

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

static apr_interval_time_t wider(apr_interval_time_t a, apr_interval_time_t b)
{
    return a > b ? a : b;
}

/* A wrapped provider's entry that is no hit (verified at v, last used at
 * u): past its recheck (an ask is then a recheck), and whether the source
 * confirmed it within the offline grace, in use as long (an error of the
 * source then grants it). */
static void judge(req_t *q, apr_time_t v, apr_time_t u)
{
    const authn_hmac_policy_t *sec = q->sec;

    if (!q->c->ask || q->never || v > q->t0)
        return;
    if (q->t0 - v < sec->max_age && q->t0 - u < sec->ttl)
        q->stale = 1;
    if (q->t0 - v < sec->offline_grace && q->t0 - u < sec->offline_grace)
        q->offline = 1;
}

/* 64 bits of a MAC of what names the user's id (uid_scope, else scope):
 * the credential's source, for its outage record; of its user's id, if
 * uid (the user's word for that record). Never 0. */
static uint64_t source_word(const req_t *q, int uid)
{
    const authn_hmac_cred_t *c = q->c;
    unsigned char id[AUTHN_HMAC_KEY_LEN];
    uint64_t w;

    if (uid)
        user_id(q->e->mac, c, id);
    else if (c->uid_scope)
        authn_hmac_user_id(q->e->mac, c->uid_scope, c->uid_scope_len, "", 0,
                           id);
    else
        authn_hmac_user_id(q->e->mac, c->scope, c->scope_len, "", 0, id);
    memcpy(&w, id, sizeof(w));
    explicit_bzero(id, sizeof(id));
    return w ? w : 1;
}

/* A wrapped provider's answer, at the exit: an error grants a credential
 * it confirmed within the offline grace (offline-hit), and nothing else,
 * during an outage of the source: once it has failed for two distinct
 * users with no answer since (one account's error, as a directory may
 * refuse an inactivated account, is its answer, as without the cache: an
 * error); an answer ends an outage, and a refusal takes the credential's
 * entry out (here and in the farm's Redis): it is no longer one the
 * source confirmed. */
static void offline(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;

    if (!q->c->ask || q->never)
        return;
    if (q->ran && q->o == AUTHN_HMAC_ERROR) {
        if (!authn_hmac_outage_error(e, source_word(q, 0), source_word(q, 1),
                                     q->t0) ||
            !q->offline)
            return;
        q->o = AUTHN_HMAC_OFFLINE_HIT;
        authn_hmac_offline_served(e, "AuthHMACProvider's check failed",
                                  q->baton);
        return;
    }
    if (q->ran) {
        authn_hmac_outage_answer(e, source_word(q, 0));
        authn_hmac_offline_answered(e, q->baton);
    }
    if (q->result == 0 && q->cache && (q->stale || q->offline)) {
        authn_hmac_table_forget(e->table, q->key, q->uid);
        authn_hmac_session_forget(&q->rq, q->key, q->uid, q->t0, q->keep);
    }
}

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
    authn_hmac_req_mark(q);
    if (e->redis)
        authn_hmac_session_refresh(e, q->baton, q->p, q->key, q->uid, q->t0,
                                   verified, q->keep);
    count(e, AUTHN_HMAC_C_HITS, 1);
    count(e, AUTHN_HMAC_C_PREVIOUS_HITS, 1);
    q->o = AUTHN_HMAC_HIT;
    return 1;
}

/* 1. Shared memory: the credential MAC among the user's entries. A miss
 * is counted here, and the miss path's Redis state made. */
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
            if (q->client_ban &&
                !authn_hmac_table_marked(e->table, q->key, q->uid,
                                         authn_hmac_req_client_mark(q)))
                return authn_hmac_req_client_banned(q);
            /* NB: no lock and no write unless half the TTL has passed
             * since the entry's last use was written. */
            if (authn_hmac_table_refresh(e->table, q->key, q->uid, q->t0,
                                         pol->ttl, pol->max_age, &used)) {
                authn_hmac_req_mark(q);
                if (e->redis)
                    authn_hmac_session_refresh(e, q->baton, q->p, q->key,
                                               q->uid, q->t0, verified,
                                               q->keep);
            }
            count(e, AUTHN_HMAC_C_HITS, 1);
            q->o = AUTHN_HMAC_HIT;
            return 1;
        }
        if (!q->client_ban && from_previous(q))
            return 1;
        if (q->c->ask && authn_hmac_table_lookup(
                             e->table, q->key, q->uid, q->t0,
                             wider(pol->ttl, q->sec->offline_grace),
                             wider(q->sec->max_age, q->sec->offline_grace),
                             &verified, &used))
            judge(q, verified, used);
    }
    if (q->client_ban)
        return authn_hmac_req_client_banned(q);
    count(e, AUTHN_HMAC_C_MISSES, 1);
    /* NB: after the hit path, which needs none of this. */
    authn_hmac_session_begin(&q->rq, e, q->baton, q->p, !e->redis || !q->cache);
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

    int asked = !q->rq.off;

    if (!q->cache)
        return 0;
    if (authn_hmac_session_lookup(
            &q->rq, e->mac, q->key, q->uid, &q->rq.es, q->t0, q->pol, q->never,
            again ? 0 : LOOK_MISS | LOOK_FORGED, &verified, &used)) {
        authn_hmac_table_store(e->table, q->key, q->uid, verified, used,
                               q->pol->ttl);
        authn_hmac_req_mark(q);
        q->o = AUTHN_HMAC_REDIS_HIT;
        return 1;
    }
    /* NB: an offline grant rests on this server's own entry (from_shm);
     * where Redis answered, the farm's entry may veto it (one that a
     * server took out at a refusal is no candidate), never add one: a
     * replayed value revives nothing. */
    if (!again && asked && !q->rq.off && q->c->ask) {
        int mine = q->offline;

        q->offline = 0;
        if (authn_hmac_entries_find(
                &q->rq.es, q->key, q->t0,
                wider(q->sec->ttl, q->sec->offline_grace),
                wider(q->sec->max_age, q->sec->offline_grace), &verified,
                &used))
            judge(q, verified, used);
        q->offline = q->offline && mine;
    }
    /* NB: the previous pepper's entry, for every first look that missed
     * (an unknown user's too: the same GETs on the wire); found, it is
     * stored again under the current pepper, here and in Redis, with the
     * time of its verification. */
    if (again || !e->mac_prev)
        return 0;
    prev_keys(q);
    if (!authn_hmac_session_lookup(&q->rq, e->mac_prev, q->pkey, q->puid, &prev,
                                   q->t0, q->pol, q->never, LOOK_FORGED,
                                   &verified, &used))
        return 0;
    authn_hmac_table_store(e->table, q->key, q->uid, verified, q->t0,
                           q->pol->ttl);
    authn_hmac_req_mark(q);
    authn_hmac_session_store(&q->rq, q->key, q->uid, verified, q->t0, q->keep);
    count(e, AUTHN_HMAC_C_PREVIOUS_HITS, 1);
    q->o = AUTHN_HMAC_REDIS_HIT;
    return 1;
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
    q->wait = authn_hmac_pace_flight(q->e);
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
    q->farm = authn_hmac_session_claim(&q->rq, q->key, q->wait, q->token);
    if (q->farm != 0 ||
        (got = authn_hmac_session_wait(&q->rq, q->key,
                                       authn_hmac_monotonic() +
                                           authn_hmac_pace_farm(q->e))) < 0)
        return 0;
    if (got == 2) {
        /* A grant that ended between this request's look in Redis and its
         * claim: the entry it stored answers (authn_hmac_session_lookup stores
         * it here with its own times), and this server's flight takes it. */
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

    if (!authn_hmac_pace_turn(e, q->c, &turn)) {
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
    if (q->stale)
        count(e, AUTHN_HMAC_C_RECHECKS, 1);
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

/* The one exit: stores what the request learned, ends its flight, writes
 * a verified credential to Redis, posts the farm claim's result, and wipes
 * the keys. */
static authn_hmac_outcome finish(req_t *q)
{
    const authn_hmac_engine_t *e = q->e;
    int verified;

    offline(q);
    verified = q->o == AUTHN_HMAC_VERIFIED && q->result > 0 && q->cache;
    if (q->cache && q->learned) {
        if (q->result > 0) {
            authn_hmac_table_store(e->table, q->key, q->uid, q->learned,
                                   q->learned, q->pol->ttl);
            authn_hmac_req_mark(q);
        }
        else if (q->result == 0 && q->negative)
            authn_hmac_negative_store(e->table, q->nkey, q->uid, q->learned,
                                      q->learned + q->pol->negative_ttl);
    }
    if (q->flight == AUTHN_HMAC_FLIGHT_RUN)
        authn_hmac_flight_end(e->table, &q->fl, q->key, q->result,
                              authn_hmac_monotonic());
    if (verified)
        authn_hmac_session_store(&q->rq, q->key, q->uid, q->learned, q->learned,
                                 q->keep);
    /* NB: the farm's waiters take a refusal only where this section keeps
     * refusals; else they verify by themselves. */
    if (q->farm == 1)
        authn_hmac_session_result(&q->rq, q->key, q->token,
                                  q->result == 0 && !q->negative ? -1
                                                                 : q->result);
    /* NB: a wrong password this request verified is a guess (one that
     * coalesced on another's verification is the same password); so is
     * a source's error not served offline where a grace could serve one
     * (else, during an outage, wrong passwords uncounted beside a right
     * one served offline: an oracle). */
    if (q->entered)
        authn_hmac_req_guessed(q, q->ran &&
                                      (q->result == 0 || q->unkept ||
                                       (q->c->ask && q->o == AUTHN_HMAC_ERROR &&
                                        q->sec->offline_grace > 0)));
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
void authn_hmac_req_begin(req_t *q, const authn_hmac_engine_t *e,
                          const authn_hmac_policy_t *pol,
                          const authn_hmac_cred_t *c, const char *hash,
                          size_t hash_len, int never, void *baton,
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
    /* NB: a wrapped provider's grant is a hit until its recheck; Redis
     * keeps it for the offline grace if that is longer. */
    q->sec = pol;
    q->hit = *pol;
    q->keep = pol->max_age;
    if (c->ask) {
        if (pol->recheck < pol->max_age)
            q->hit.max_age = pol->recheck;
        q->keep = wider(pol->max_age, pol->offline_grace);
    }
    q->pol = &q->hit;
    q->stale = 0;
    q->offline = 0;
}

/* The tiers in order, each answering or passing on, then the one exit. */
static authn_hmac_outcome check(const authn_hmac_engine_t *e,
                                const authn_hmac_policy_t *pol,
                                const authn_hmac_cred_t *c, const char *hash,
                                size_t hash_len, int never, void *baton,
                                apr_pool_t *p)
{
    req_t q;

    authn_hmac_req_begin(&q, e, pol, c, hash, hash_len, never, baton, p);
    keys(&q);
    if (authn_hmac_req_from_ban(&q) || from_shm(&q) || from_negative(&q) ||
        from_redis(&q, 0))
        return finish(&q);
    /* NB: the cache tiers only (src/request/sql.c): no one answered. */
    if (pol->cached_only)
        q.o = AUTHN_HMAC_PASS;
    else if (!from_flight(&q) && !authn_hmac_req_from_throttle(&q) &&
             !from_farm(&q))
        from_verifier(&q);
    return finish(&q);
}

/* One pass down the tiers; the outcome is counted by authn_hmac_engine_tally().
 */
authn_hmac_outcome authn_hmac_engine_run(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         const authn_hmac_cred_t *c,
                                         void *baton, apr_pool_t *p)
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
    return o == AUTHN_HMAC_BUSY || o == AUTHN_HMAC_THROTTLED ||
                   o == AUTHN_HMAC_PASS
               ? o
               : refused;
}

/* Counts a request's outcome (its final one): a password refused, or an
 * unknown user (an unknown or locked user's, even when busy). */
void authn_hmac_engine_tally(const authn_hmac_engine_t *e,
                             const authn_hmac_cred_t *c, authn_hmac_outcome o)
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
    authn_hmac_outcome o = authn_hmac_engine_run(e, pol, c, baton, p);

    authn_hmac_engine_tally(e, c, o);
    return o;
}
