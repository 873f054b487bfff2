/* sql.c: the request path from SQL (request/sql.h). The stored hash is in
 * the credential's keys (its digest: authn_hmac_cred_digest), so a hit
 * needs the hash's digest, not the hash: what the query last said of a
 * user, its memo (state: a hash, no such user, locked; the digest; when),
 * is kept in shared memory for the server (shm/memo.h) and, with Redis,
 * in Redis for the farm (tagged: redis/memo.c). Then:
 *   - a memo younger than AuthHMACRecheck: the keys are made from its
 *     digest (an unknown or locked user's: the dummy, as ever) and only
 *     the cache tiers run (ban, shared memory, negative, Redis): a hit, a
 *     negative hit or a ban answers, and the database is not asked;
 *   - else (no memo, a stale one, or a miss: a login) the query runs, its
 *     answer is the new memo (here and in Redis), and the credential is
 *     checked as the other sources' are (source.c) with the hash it gave.
 *     A stale memo's query runs once per user for the server (single
 *     flight, keyed by a MAC of the user's id: the others wait, then take
 *     the memo) and, with Redis, once for the farm (a claim, SET NX PX:
 *     the other servers wait on it, then read its memo; a failed query
 *     ends the wait at once), counted as rechecks; no request waits more
 *     than SOURCE_WAIT for another's query;
 *   - the query fails (an error, not "no row"): a credential whose user's
 *     memo was confirmed within AuthHMACOfflineGrace is served if its
 *     grant is still cached (looked up with an idle timeout of the grace;
 *     its max age still applies): offline-hit. Nothing else is granted.
 * Known, unknown and locked users take the same path: a memo is kept for
 * each, and a miss always queries. */
#include "request/sql.h"
#include "engine_int.h"
#include "shm/memo.h"
#include "sources/index.h"

#include <string.h>

/* How long a request waits for another's query (a server's, or the
 * farm's claim), then asks by itself: mod_dbd sets no timeout of its own,
 * and a query that takes longer is not a recheck's. */
#define SOURCE_WAIT apr_time_from_sec(3)
/* What a memo's known user stands for in the cred: the verifier never
 * sees it (only the cache tiers run from a memo). */
#define MEMO_HASH "$memo$"

typedef struct {
    const authn_hmac_engine_t *e;
    const authn_hmac_policy_t *pol;
    authn_hmac_source_t *s;
    authn_hmac_cred_t *c;
    void *baton;
    apr_pool_t *p;
    unsigned char uid[AUTHN_HMAC_KEY_LEN];
    unsigned char qkey[AUTHN_HMAC_KEY_LEN]; /* the query's flight, claim */
    redis_req rq;
    authn_hmac_memo_t m; /* the newest memo at hand (state 0: none) */
} sql_t;

static int fresh(const sql_t *q, const authn_hmac_memo_t *m,
                 apr_interval_time_t life, apr_time_t now)
{
    return m->state && m->confirmed <= now + AUTHN_HMAC_MEMO_SKEW &&
           now - m->confirmed < life;
}

/* r is a later answer than m's (or m is of a clock stepped back since:
 * ahead of now by more than the skew, it never stands). */
static int newer(const authn_hmac_memo_t *r, const authn_hmac_memo_t *m,
                 apr_time_t now)
{
    return r->confirmed > m->confirmed ||
           m->confirmed > now + AUTHN_HMAC_MEMO_SKEW;
}

/* The memo of shared memory, else (not fresh) Redis's, kept in q->m: 1
 * if it is fresh. One from Redis is taken (and kept here) only if it is
 * fresh: a Redis that replays an old memo (it verifies: it was true once)
 * must not stand for the source's word, nor reach offline(), which rests
 * only on this server's own answers and on memos fresh when taken. */
static int memo_find(sql_t *q, apr_time_t now)
{
    authn_hmac_memo_t r;

    (void)authn_hmac_memo_lookup(q->e->table, q->uid, &q->m);
    if (fresh(q, &q->m, q->pol->recheck, now))
        return 1;
    if (!authn_hmac_session_memo_get(&q->rq, q->uid, &r) ||
        !fresh(q, &r, q->pol->recheck, now) || !newer(&r, &q->m, now))
        return 0;
    q->m = r;
    authn_hmac_memo_store(q->e->table, q->uid, &r, now);
    /* NB: another server's fresh answer: the source answers again. */
    authn_hmac_offline_answered(q->e, q->baton);
    return 1;
}

/* The cache tiers only, with the memo's keys (idle: an idle timeout in
 * place of the section's, and no negative cache: offline grace). */
static authn_hmac_outcome cached(sql_t *q, apr_interval_time_t idle)
{
    authn_hmac_cred_t *c = q->c;
    authn_hmac_policy_t pol = *q->pol;
    const char *tmpl = authn_hmac_source_template(q->s);

    pol.cached_only = 1;
    if (idle) {
        pol.ttl = idle;
        pol.negative_ttl = 0;
    }
    c->hash = q->m.state == AUTHN_HMAC_MEMO_HASH     ? MEMO_HASH
              : q->m.state == AUTHN_HMAC_MEMO_LOCKED ? "!"
                                                     : NULL;
    c->hash_len = c->hash ? strlen(c->hash) : 0;
    c->locked = q->m.state == AUTHN_HMAC_MEMO_LOCKED;
    c->dummy_hash = tmpl;
    c->dummy_hash_len = strlen(tmpl);
    c->uid = q->uid;
    c->digest = q->m.state == AUTHN_HMAC_MEMO_HASH ? q->m.digest : NULL;
    return authn_hmac_engine_run(q->e, &pol, c, q->baton, q->p);
}

/* A final outcome, counted. */
static authn_hmac_outcome tally(sql_t *q, authn_hmac_outcome o)
{
    authn_hmac_engine_tally(q->e, q->c, o);
    return o;
}

/* Another server's query, through Redis: waits on its claim until it
 * ends (answered or failed: an outage makes no one wait out SOURCE_WAIT)
 * or until (monotonic), then reads the memo it left. 1 if a fresh one
 * came; 0 (this request asks) if none did. */
static int farm_wait(sql_t *q, apr_time_t until)
{
    authn_hmac_memo_t r;
    apr_time_t now;

    /* NB: the claim ends with -1 whatever its query said (a result would
     * keep the marker, and the next stale request of the same user would
     * issue other commands than another user's); the memo tells. */
    (void)authn_hmac_session_wait(&q->rq, q->qkey, until);
    if (!authn_hmac_session_memo_get(&q->rq, q->uid, &r))
        return 0;
    now = apr_time_now();
    if (!newer(&r, &q->m, now) || !fresh(q, &r, q->pol->recheck, now))
        return 0;
    q->m = r;
    authn_hmac_memo_store(q->e->table, q->uid, &r, now);
    authn_hmac_offline_answered(q->e, q->baton);
    return 1;
}

/* The memo of the query's answer (hash: NULL, no such user), here and in
 * Redis, for at least the recheck and the grace. */
static void remember(sql_t *q, const char *hash, apr_time_t now)
{
    const authn_hmac_cred_t *c = q->c;
    apr_interval_time_t life = q->pol->recheck > q->pol->offline_grace
                                   ? q->pol->recheck
                                   : q->pol->offline_grace;
    size_t len = hash ? strlen(hash) : 0;

    memset(&q->m, 0, sizeof(q->m));
    q->m.state = !hash                               ? AUTHN_HMAC_MEMO_NONE
                 : authn_hmac_hash_locked(hash, len) ? AUTHN_HMAC_MEMO_LOCKED
                                                     : AUTHN_HMAC_MEMO_HASH;
    if (q->m.state == AUTHN_HMAC_MEMO_HASH)
        authn_hmac_cred_digest(c->scope, c->scope_len, c->user, c->user_len,
                               hash, len, q->m.digest);
    q->m.confirmed = now;
    authn_hmac_memo_store(q->e->table, q->uid, &q->m, now);
    authn_hmac_session_memo_set(&q->rq, q->uid, &q->m, life);
}

/* The query failed: a credential confirmed within the grace, still
 * cached, is served; else the error. */
static authn_hmac_outcome offline(sql_t *q, const char *why)
{
    authn_hmac_outcome o;

    if (q->pol->offline_grace <= 0 ||
        !fresh(q, &q->m, q->pol->offline_grace, apr_time_now()))
        return AUTHN_HMAC_ERROR;
    o = cached(q, q->pol->offline_grace);
    if (o != AUTHN_HMAC_HIT && o != AUTHN_HMAC_REDIS_HIT)
        return AUTHN_HMAC_ERROR;
    authn_hmac_offline_served(q->e, why, q->baton);
    return AUTHN_HMAC_OFFLINE_HIT;
}

/* A stale memo's query, once for the server and the farm: 1 if another's
 * answer came (a fresh memo in q->m), else 0 with this request to ask
 * (fl, farm: what it holds, for done()). */
static int another(sql_t *q, authn_hmac_flight_t *fl, authn_hmac_flight_rc *rc,
                   int *farm, char *token)
{
    apr_time_t until = authn_hmac_monotonic() + SOURCE_WAIT;

    *rc = authn_hmac_flight_begin(q->e->table, q->qkey, authn_hmac_monotonic(),
                                  SOURCE_WAIT, fl);
    if (*rc == AUTHN_HMAC_FLIGHT_WAIT) {
        (void)authn_hmac_flight_wait(q->e->table, fl, q->qkey, until);
        *rc = AUTHN_HMAC_FLIGHT_NONE;
        return authn_hmac_memo_lookup(q->e->table, q->uid, &q->m) &&
               fresh(q, &q->m, q->pol->recheck, apr_time_now());
    }
    *farm = authn_hmac_session_claim(&q->rq, q->qkey, SOURCE_WAIT, token);
    if (*farm == 0)
        return farm_wait(q, until);
    /* NB: another's query may have ended (and its flight, its claim)
     * between this request's reading of the memo and its own flight and
     * claim: its memo, read again, is fresh (else two queries). */
    return memo_find(q, apr_time_now());
}

/* Ends the query's flight and claim (their waiters read the memo). */
static void done(sql_t *q, authn_hmac_flight_t *fl, authn_hmac_flight_rc rc,
                 int farm, const char *token, int answered)
{
    if (rc == AUTHN_HMAC_FLIGHT_RUN)
        authn_hmac_flight_end(q->e->table, fl, q->qkey, answered ? 1 : -1,
                              authn_hmac_monotonic());
    if (farm == 1)
        authn_hmac_session_result(&q->rq, q->qkey, token, -1);
}

/* The query, and the check with its hash; stale: the memo was (a recheck,
 * once for the server and the farm). */
static authn_hmac_outcome ask(sql_t *q, authn_hmac_lookup_fn lookup, void *ctx,
                              int stale, const char **why)
{
    authn_hmac_flight_t fl = {-1, 0};
    authn_hmac_flight_rc rc = AUTHN_HMAC_FLIGHT_NONE;
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1] = "";
    const char *hash = NULL;
    authn_hmac_outcome o;
    int farm = -1;

    if (stale && another(q, &fl, &rc, &farm, token) &&
        (o = cached(q, 0)) != AUTHN_HMAC_PASS) {
        done(q, &fl, rc, farm, token, 0);
        return tally(q, o);
    }
    if (stale)
        count(q->e, AUTHN_HMAC_C_RECHECKS, 1);
    if (lookup(ctx, q->c->user, &hash, why) != 0) {
        done(q, &fl, rc, farm, token, 0);
        return tally(q, offline(q, *why));
    }
    *why = NULL;
    authn_hmac_offline_answered(q->e, q->baton);
    remember(q, hash, apr_time_now());
    done(q, &fl, rc, farm, token, 1);
    return authn_hmac_check_hash(q->e, q->pol, q->s, q->c, hash, NULL, q->baton,
                                 q->p);
}

authn_hmac_outcome
authn_hmac_check_sql(const authn_hmac_engine_t *e,
                     const authn_hmac_policy_t *pol, authn_hmac_source_t *s,
                     authn_hmac_cred_t *c, authn_hmac_lookup_fn lookup,
                     void *ctx, void *baton, apr_pool_t *p, const char **why)
{
    sql_t q;
    authn_hmac_outcome o;
    const char *hash = NULL;

    *why = NULL;
    /* NB: no cache, or a recheck of 0: the query at every request. */
    if (pol->ttl <= 0 || pol->recheck <= 0) {
        if (lookup(ctx, c->user, &hash, why) != 0)
            return AUTHN_HMAC_ERROR;
        authn_hmac_offline_answered(e, baton);
        return authn_hmac_check_hash(e, pol, s, c, hash, NULL, baton, p);
    }
    memset(&q, 0, sizeof(q));
    q.e = e;
    q.pol = pol;
    q.s = s;
    q.c = c;
    q.baton = baton;
    q.p = p;
    /* NB: the memo's scope names the database (uid_scope: the query on
     * this server of the configuration): another server's database may
     * say another thing of the same user with the same query. */
    if (c->uid_scope)
        authn_hmac_user_id(e->mac, c->uid_scope, c->uid_scope_len, c->user,
                           c->user_len, q.uid);
    else
        authn_hmac_user_id(e->mac, c->scope, c->scope_len, c->user, c->user_len,
                           q.uid);
    authn_hmac_cred_mac(e->mac, q.uid, "\001sql-query", 10, q.qkey);
    authn_hmac_session_begin(&q.rq, e, baton, p, !e->redis);
    if (memo_find(&q, apr_time_now())) {
        if ((o = cached(&q, 0)) != AUTHN_HMAC_PASS)
            return tally(&q, o);
        /* NB: a miss (a login, a wrong password) always asks: the hash. */
        return ask(&q, lookup, ctx, 0, why);
    }
    return ask(&q, lookup, ctx, 1, why);
}
