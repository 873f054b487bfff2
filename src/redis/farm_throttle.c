/* farm_throttle.c: the throttle across a farm (shm/throttle.h is a
 * server's own), in Redis: the bans in force, and each wrong guess counted
 * for the pair (client, user) and the client, compare-and-set, so that
 * the servers of a farm share the counts. Every ban and count is tagged
 * with the pepper, as the user entries are (commands.c): a Redis can hide
 * guesses, never add one, nor ban anyone. */
#include "conn.h"
#include "values.h"

#include <string.h>

#include <apr_strings.h>
#include <hiredis/hiredis.h>

/* A ban's value: "B:" hex(until, µs) ":" hex(tag), the tag over the
 * rest under the ban's key's id: only a server of the farm (the pepper)
 * makes one, for that very key. */
#define BAN_BODY ((size_t)2 + 16)
#define BAN_LEN  (BAN_BODY + 1 + KEY_HEX)

typedef char ban_len_is_kept[BAN_LEN == AUTHN_HMAC_BAN_LEN ? 1 : -1];

size_t authn_hmac_ban_encode(const authn_hmac_mac_t *mac,
                             const unsigned char id[AUTHN_HMAC_KEY_LEN],
                             apr_time_t until, char out[AUTHN_HMAC_BAN_LEN + 1])
{
    char *o = out;

    *o++ = 'B';
    *o++ = ':';
    o = put_hex64(o, (uint64_t)until);
    return authn_hmac_value_seal(mac, id, out, o);
}

int authn_hmac_ban_decode(const authn_hmac_mac_t *mac,
                          const unsigned char id[AUTHN_HMAC_KEY_LEN],
                          const char *v, size_t len, apr_time_t *until)
{
    char buf[BAN_LEN + 1];
    int ok;

    *until = 0;
    if (len != BAN_LEN || v[0] != 'B' || v[1] != ':' || v[BAN_BODY] != ':')
        return 0;
    memcpy(buf, v, len);
    buf[len] = '\0';
    ok = authn_hmac_value_sealed(mac, id, buf, BAN_BODY) &&
         get_hex64(buf + 2, until);
    if (!ok)
        *until = 0;
    return ok;
}

authn_hmac_redis_rc authn_hmac_redis_throttle_banned(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char pair[AUTHN_HMAC_KEY_LEN],
    const unsigned char client[AUTHN_HMAC_KEY_LEN], apr_time_t deadline,
    apr_time_t until[2], int *forged, const char **why, apr_pool_t *p)
{
    const char *argv[3] = {"MGET", authn_hmac_redis_key(conf, "b:", pair, p),
                           authn_hmac_redis_key(conf, "b:", client, p)};
    const unsigned char *ids[2] = {pair, client};
    size_t lens[3] = {4, strlen(argv[1]), strlen(argv[2])};
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;
    size_t i;

    until[0] = until[1] = 0;
    *forged = 0;
    rc = authn_hmac_redis_command(c, 3, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        rc = authn_hmac_redis_unexpected("MGET", r, why, p);
    /* NB: a value is a ban only if its tag verifies for this key: else
     * anything that can write the prefix could refuse any client (its
     * logged-in users too). One that does not is ignored and counted. */
    for (i = 0; rc == AUTHN_HMAC_REDIS_OK && i < 2; i++) {
        const redisReply *v = r->element[i];

        if (v->type == REDIS_REPLY_NIL)
            continue;
        if (v->type != REDIS_REPLY_STRING ||
            !authn_hmac_ban_decode(mac, ids[i], v->str, v->len, &until[i]))
            *forged |= 1 << i;
    }
    freeReplyObject(r);
    return rc;
}

/* A count's value: "C:" hex(window's start, µs) ":" hex(count) ":"
 * hex(the last guess's fingerprint) ":" hex(tag), the tag over the rest
 * under the count key's id, as a ban's: whatever else writes Redis can
 * hide guesses (delete or roll back a count), never add one, and so never
 * bring a ban. The last guess names the write: a retry that finds its own
 * guess there (a write that landed, whatever Redis answered) counts it
 * no more. */
#define COUNT_BODY ((size_t)2 + 16 + 1 + 8 + 1 + 16)
#define COUNT_LEN  (COUNT_BODY + 1 + KEY_HEX)

static size_t count_encode(const authn_hmac_mac_t *mac,
                           const unsigned char id[AUTHN_HMAC_KEY_LEN],
                           apr_time_t start, uint32_t n, uint64_t fp, char *out)
{
    unsigned char b[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    char *o = out;

    *o++ = 'C';
    *o++ = ':';
    o = put_hex64(o, (uint64_t)start);
    *o++ = ':';
    o = put_hex(o, b, sizeof(b));
    *o++ = ':';
    o = put_hex64(o, fp);
    return authn_hmac_value_seal(mac, id, out, o);
}

int authn_hmac_count_decode(const authn_hmac_mac_t *mac,
                            const unsigned char id[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, apr_time_t *start,
                            uint32_t *n, uint64_t *fp)
{
    unsigned char b[4], l[8];
    char buf[COUNT_LEN + 1];
    int ok, i;

    *start = 0;
    *n = 0;
    *fp = 0;
    if (len != COUNT_LEN || v[0] != 'C' || v[1] != ':' || v[18] != ':' ||
        v[27] != ':' || v[COUNT_BODY] != ':')
        return 0;
    memcpy(buf, v, len);
    buf[len] = '\0';
    /* NB: the fingerprint is any 64-bit word (get_hex64 takes times). */
    ok = authn_hmac_value_sealed(mac, id, buf, COUNT_BODY) &&
         get_hex64(buf + 2, start) && get_hex(buf + 19, b, sizeof(b)) &&
         get_hex(buf + 28, l, sizeof(l));
    if (!ok) {
        *start = 0;
        return 0;
    }
    for (i = 0; i < 8; i++)
        *fp = *fp << 8 | l[i];
    *n = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
         b[3];
    return 1;
}

/* A new wrong guess: unless the farm saw this one of the pair's within
 * the window (a stale client's password, sent to every server: its mark,
 * g:, is there), the pair's and the client's counts as they are. A second
 * read of the same guess (ARGV[2] not '': its write found the counts
 * changed) neither sets nor asks the mark, which its first read set. */
static const char throttle_read[] =
    "if ARGV[2] == '' and "
    "   not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then "
    "  return 0 "
    "end "
    "return {redis.call('GET', KEYS[2]) or '', "
    "        redis.call('GET', KEYS[3]) or ''}";

/* Compare and set: unless both counts are still the values read (ARGV[8]
 * and ARGV[9], '' for none), nothing is written and the answer is -1:
 * another server (or thread) counted a guess of the pair or the client
 * since, and this one's count would overwrite it. Else the counts written
 * back, each for what remains of its window, and the bans that a count at
 * its limit started (tagged by the server that counted, "" for none),
 * unless one is in force. */
static const char throttle_write[] =
    "if (redis.call('GET', KEYS[1]) or '') ~= ARGV[8] or "
    "   (redis.call('GET', KEYS[2]) or '') ~= ARGV[9] then "
    "  return -1 "
    "end "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4]) "
    "local started = 0 "
    "for i = 1, 2 do "
    "  if ARGV[4 + i] ~= '' and "
    "     redis.call('SET', KEYS[2 + i], ARGV[4 + i], 'NX', 'PX', ARGV[7]) "
    "  then started = started + i end "
    "end "
    "return started";

/* Reads and compare-and-set writes of one guess's counts, at most: each
 * try that fails saw another guess of the pair or the client counted. */
#define THROTTLE_TRIES 4

/* The count of id as the farm has it, at now: (start, n) and its last
 * guess, and 1; else a new window and 0: for none, one past or one that
 * does not verify (*forged then). NB: a window another server started
 * after this one took its now (it counted a guess at the same moment), or
 * on a clock a little ahead, starts up to CLOCK_SKEW_USEC "in the
 * future": taken as now, its count kept (a new window over it would lose
 * that guess); further is odd, and not trusted. */
static int count_of(const authn_hmac_mac_t *mac, const unsigned char *id,
                    const redisReply *v, apr_time_t now,
                    apr_interval_time_t window, apr_time_t *start, uint32_t *n,
                    uint64_t *last, int *forged)
{
    int got = v->type == REDIS_REPLY_STRING && v->len > 0;

    if (got &&
        !authn_hmac_count_decode(mac, id, v->str, v->len, start, n, last)) {
        *forged = 1;
        got = 0;
    }
    if (*start > now + CLOCK_SKEW_USEC || now - *start >= window) {
        *start = now;
        *n = 0;
        got = 0;
    }
    if (*start > now)
        *start = now;
    return got;
}

/* One guess being counted: the EVALs' words (the read's, and the
 * write's, which the read and the counting fill in) and the counts read. */
typedef struct {
    const authn_hmac_mac_t *mac;
    const unsigned char *ids[2]; /* the pair's, the client's */
    int limits[2];
    uint64_t fp;
    apr_interval_time_t window, ban;
    apr_time_t now, deadline;
    const char *rargv[8], *wargv[16];
    size_t rlens[8], lens[16];
    apr_time_t start[2];
    uint32_t n[2];
} guess_t;

/* The keys and the words that stay the same from one try to the next. */
static void guess_keys(guess_t *g, const authn_hmac_redis_conf_t *conf,
                       apr_pool_t *p)
{
    const unsigned char *pair = g->ids[0], *client = g->ids[1];
    char *mark = apr_pstrcat(p, authn_hmac_redis_key(conf, "g:", pair, p),
                             "0000000000000000", NULL);

    /* NB: the guess's fingerprint (a word of a MAC of user and password)
     * after the pair's id. */
    put_hex64(mark + strlen(mark) - 16, g->fp);
    g->rargv[0] = "EVAL";
    g->rargv[1] = throttle_read;
    g->rargv[2] = "3";
    g->rargv[3] = mark;
    g->rargv[4] = authn_hmac_redis_key(conf, "t:", pair, p);
    g->rargv[5] = authn_hmac_redis_key(conf, "t:", client, p);
    g->rargv[6] = apr_psprintf(p, "%" APR_INT64_T_FMT, g->window / 1000 + 1);
    g->wargv[0] = "EVAL";
    g->wargv[1] = throttle_write;
    g->wargv[2] = "4";
    g->wargv[3] = g->rargv[4];
    g->wargv[4] = g->rargv[5];
    g->wargv[5] = authn_hmac_redis_key(conf, "b:", pair, p);
    g->wargv[6] = authn_hmac_redis_key(conf, "b:", client, p);
    g->wargv[13] = apr_psprintf(p, "%" APR_INT64_T_FMT, g->ban / 1000 + 1);
}

/* The read of try number `tries`: the counts, into g. *done is 1 if the
 * guess needs no write: a repeat the farm saw, or one a count already
 * holds. */
static authn_hmac_redis_rc guess_read(authn_hmac_redis_conn_t *c, guess_t *g,
                                      int tries, int *done, int *forged,
                                      const char **why, apr_pool_t *p)
{
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;
    int i;

    *done = 0;
    g->rargv[7] = tries ? "1" : ""; /* a retry: the mark is this guess's */
    for (i = 0; i < 8; i++)
        g->rlens[i] = strlen(g->rargv[i]);
    rc = authn_hmac_redis_command(c, 8, g->rargv, g->rlens, g->deadline, &r,
                                  why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (!tries && r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
        freeReplyObject(r); /* a repeat the farm saw */
        *done = 1;
        return rc;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        rc = authn_hmac_redis_unexpected("EVAL", r, why, p);
        freeReplyObject(r);
        return rc;
    }
    for (i = 0; i < 2; i++) {
        const redisReply *v = r->element[i];
        int str = v->type == REDIS_REPLY_STRING;
        uint64_t last = 0;

        /* NB: what was read, as it was (a forged value too), for the
         * write to compare. */
        g->wargv[14 + i] = str ? apr_pstrmemdup(p, v->str, v->len) : "";
        g->lens[14 + i] = str ? v->len : 0;
        g->start[i] = 0;
        g->n[i] = 0;
        if (count_of(g->mac, g->ids[i], v, g->now, g->window, &g->start[i],
                     &g->n[i], &last, forged) &&
            last == g->fp)
            *done = 1;
    }
    freeReplyObject(r);
    /* NB: a count whose last guess is this one already counts it (this
     * server's write landed, whatever Redis answered it): never twice.
     * Its bans, if it started any, are in Redis; this server tells none
     * it cannot be sure of. */
    return AUTHN_HMAC_REDIS_OK;
}

/* The counts read, raised by the guess, as the write's words: each
 * tagged, for what remains of its window; one at its limit starts a ban
 * (tagged) and starts again. */
static void guess_count(guess_t *g, apr_pool_t *p)
{
    int i;

    for (i = 0; i < 2; i++) {
        char *v = apr_palloc(p, COUNT_LEN + 1);
        int full;

        g->n[i]++;
        full = g->limits[i] > 0 && g->n[i] >= (uint32_t)g->limits[i];
        g->wargv[11 + i] = "";
        if (full) {
            /* NB: the count starts again with the ban. */
            char *b = apr_palloc(p, AUTHN_HMAC_BAN_LEN + 1);

            (void)authn_hmac_ban_encode(g->mac, g->ids[i], g->now + g->ban, b);
            g->wargv[11 + i] = b;
            g->start[i] = g->now;
            g->n[i] = 0;
        }
        (void)count_encode(g->mac, g->ids[i], g->start[i], g->n[i], g->fp, v);
        g->wargv[7 + 2 * i] = v;
        g->wargv[8 + 2 * i] =
            apr_psprintf(p, "%" APR_INT64_T_FMT,
                         (g->start[i] + g->window - g->now) / 1000 + 1);
    }
    for (i = 0; i < 14; i++)
        g->lens[i] = strlen(g->wargv[i]);
}

/* The compare-and-set write: *again is 1 if the counts changed since
 * they were read (nothing written: read again). */
static authn_hmac_redis_rc guess_write(authn_hmac_redis_conn_t *c, guess_t *g,
                                       int *again, int *started,
                                       const char **why, apr_pool_t *p)
{
    redisReply *r = NULL;
    authn_hmac_redis_rc rc = authn_hmac_redis_command(c, 16, g->wargv, g->lens,
                                                      g->deadline, &r, why, p);

    *again = 0;
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER && r->integer == -1) {
        freeReplyObject(r); /* counted meanwhile: read again */
        *again = 1;
        return rc;
    }
    /* NB: the bans started are the ones this server counted to their
     * limit from counts whose tags verified, whatever Redis answers (it
     * says which it kept: one in force there already). */
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && r->integer <= 3)
        *started = (g->wargv[11][0] ? 1 : 0) | (g->wargv[12][0] ? 2 : 0);
    else
        rc = authn_hmac_redis_unexpected("EVAL", r, why, p);
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_rc authn_hmac_redis_throttle_fail(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char pair[AUTHN_HMAC_KEY_LEN],
    const unsigned char client[AUTHN_HMAC_KEY_LEN], uint64_t fp,
    int max_failures, int max_client_failures, apr_interval_time_t window,
    apr_interval_time_t ban, apr_time_t now, apr_time_t deadline, int *started,
    int *forged, const char **why, apr_pool_t *p)
{
    guess_t *g = apr_pcalloc(p, sizeof(*g));
    authn_hmac_redis_rc rc;
    int tries, done, again;

    *started = 0;
    *forged = 0;
    g->mac = mac;
    g->ids[0] = pair;
    g->ids[1] = client;
    g->limits[0] = max_failures;
    g->limits[1] = max_client_failures;
    g->fp = fp;
    g->window = window;
    g->ban = ban;
    g->now = now;
    g->deadline = deadline;
    guess_keys(g, conf, p);
    for (tries = 0; tries < THROTTLE_TRIES; tries++) {
        rc = guess_read(c, g, tries, &done, forged, why, p);
        if (rc != AUTHN_HMAC_REDIS_OK || done)
            return rc;
        guess_count(g, p);
        rc = guess_write(c, g, &again, started, why, p);
        if (rc != AUTHN_HMAC_REDIS_OK || !again)
            return rc;
    }
    /* NB: the counts changed under every try: at least as many other
     * guesses of the pair or the client were counted meanwhile, and this
     * one is not counted in the farm (it is in this server's shared
     * memory), and told (*why, with no error: no one is refused for it,
     * and Redis is not failing). Writing it anyway, over counts this
     * server did not read, would roll back the ones counted meanwhile:
     * more guesses lost than this one. */
    *why = apr_psprintf(p,
                        "the throttle's counts in Redis changed under each of "
                        "%d tries: this guess is not counted in the farm",
                        THROTTLE_TRIES);
    return AUTHN_HMAC_REDIS_OK;
}
