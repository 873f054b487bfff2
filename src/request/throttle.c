/* throttle.c: the throttle's part of a request (the records and bans
 * themselves are src/shm/throttle.c's): the ids of the request's client
 * and user, its two tiers (0. from_ban, before the caches; 5.
 * from_throttle, after the server's flight), the marks that tell whom a
 * client's ban still serves, and a guess's count at the one exit (here and,
 * with Redis, in the farm), told once when it starts a ban; and the count
 * of a guess held for the writer rule (authn_hmac_count_held). */
#include "engine_int.h"
#include "core/util.h"

#include <string.h>

#include <apr_lib.h>
#include <bsd/string.h>

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
uint32_t authn_hmac_req_client_mark(req_t *q)
{
    uint32_t m;

    throttle_ids(q);
    memcpy(&m, q->ids.client, sizeof(m));
    return m ? m : 1;
}

/* The credential's entry, stored or refreshed for this request, is marked
 * for its client (throttle.h: whom a client's ban still serves). */
void authn_hmac_req_mark(req_t *q)
{
    if (authn_hmac_throttle_on(&q->e->throttle))
        authn_hmac_table_mark(q->e->table, q->key, q->uid,
                              authn_hmac_req_client_mark(q));
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
int authn_hmac_req_client_banned(req_t *q)
{
    apr_time_t until[2] = {q->t0 + q->e->throttle.ban,
                           q->t0 + q->e->throttle.ban};
    authn_hmac_held_t *h = q->c->hold;
    /* NB: a wrong password for a user the ban still serves (an entry
     * marked for this client) is an answer from the cache: counted for
     * the client too, which seals its ban at the limit. */
    int oracle = authn_hmac_table_user_marked(q->e->table, q->uid,
                                              authn_hmac_req_client_mark(q));

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
int authn_hmac_req_from_ban(req_t *q)
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

/* 5. The throttle: a client at its limit of wrong passwords, for this
 * user or for all, in this server or (with Redis) in the farm, is refused
 * without a verification; else its guess takes a place in the count
 * (counted at the one exit), so that concurrent guesses never pass the
 * limit. NB: after the server's flight: the requests that wait for one
 * verification of a credential are one guess, the runner's. A ban the
 * farm knows (its tag verified) is kept here for what remains of it, and
 * told here (from_ban). */
int authn_hmac_req_from_throttle(req_t *q)
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
    authn_hmac_session_banned(&q->rq, &q->ids, until);
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

    if (fresh && (farm = authn_hmac_session_guessed(&q->rq, &q->ids, fp))) {
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

void authn_hmac_req_guessed(req_t *q, int failed)
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

void authn_hmac_count_held(const authn_hmac_engine_t *e,
                           const authn_hmac_cred_t *c,
                           const authn_hmac_held_t *h, void *baton,
                           apr_pool_t *p)
{
    authn_hmac_policy_t pol = {1, 1, 0, 0, 0, 0, 0};
    apr_time_t now = apr_time_now(), until[2];
    int fresh = 0, started;
    req_t q;

    if (!h->what || !authn_hmac_throttle_on(&e->throttle))
        return;
    authn_hmac_req_begin(&q, e, &pol, c, NULL, 0, 0, baton, p);
    q.ids = h->ids;
    q.ids_made = 1;
    authn_hmac_session_begin(&q.rq, e, baton, p, !e->redis || h->redis_off);
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
