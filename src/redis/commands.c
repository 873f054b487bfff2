/* commands.c: what the module keeps in Redis, and the commands that keep
 * it.
 *
 * Nothing Redis answers is trusted. A user's entry, under prefix +
 * hex(user id), holds at most AUTHN_HMAC_PER_USER credential MACs with their
 * times, and a tag over them made with a subkey of the pepper (see cred.c):
 * a value that does not verify is a miss, whoever wrote it. The farm's
 * single-flight markers are tagged the same way. */
#include "conn.h"
#include "core/cred.h"

#include <string.h>

#include <apr_strings.h>
#include <hiredis/hiredis.h>
#include <openssl/crypto.h>

#define CLOCK_SKEW_USEC 5000000 /* between the servers of a farm */

/* ------------------------------------------------- entries and values */

static const char hexdigits[] = "0123456789abcdef";

static char *put_hex(char *o, const unsigned char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        *o++ = hexdigits[b[i] >> 4];
        *o++ = hexdigits[b[i] & 15];
    }
    return o;
}

static char *put_hex64(char *o, uint64_t v)
{
    unsigned char b[8];
    int i;

    for (i = 7; i >= 0; i--, v >>= 8)
        b[i] = (unsigned char)v;
    return put_hex(o, b, sizeof(b));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Strict lowercase hex; 0 for anything else. */
static int get_hex(const char *s, unsigned char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hi < 0 ? -1 : hexval(s[2 * i + 1]);

        if (lo < 0)
            return 0;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return 1;
}

static int get_hex64(const char *s, int64_t *v)
{
    unsigned char b[8];
    uint64_t u = 0;
    int i;

    if (!get_hex(s, b, sizeof(b)))
        return 0;
    for (i = 0; i < 8; i++)
        u = (u << 8) | b[i];
    if (u > (uint64_t)INT64_MAX)
        return 0;
    *v = (int64_t)u;
    return 1;
}

#define KEY_HEX   ((size_t)2 * AUTHN_HMAC_KEY_LEN)
#define ENTRY_HEX (KEY_HEX + 32) /* mac, verified, used */

size_t authn_hmac_value_encode(const authn_hmac_mac_t *mac,
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               const authn_hmac_entries_t *es,
                               char out[AUTHN_HMAC_VALUE_MAX])
{
    unsigned char tag[AUTHN_HMAC_KEY_LEN];
    char *o = out;
    int i;

    if (es->n < 1 || es->n > AUTHN_HMAC_PER_USER)
        return 0;
    *o++ = '0' + AUTHN_HMAC_VALUE_VERSION;
    for (i = 0; i < es->n; i++) {
        *o++ = ':';
        o = put_hex(o, es->e[i].mac, AUTHN_HMAC_KEY_LEN);
        o = put_hex64(o, (uint64_t)es->e[i].verified);
        o = put_hex64(o, (uint64_t)es->e[i].used);
    }
    authn_hmac_value_tag(mac, uid, out, (size_t)(o - out), tag);
    *o++ = ':';
    o = put_hex(o, tag, sizeof(tag));
    *o = '\0';
    return (size_t)(o - out);
}

int authn_hmac_value_decode(const authn_hmac_mac_t *mac,
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, authn_hmac_entries_t *es)
{
    unsigned char want[AUTHN_HMAC_KEY_LEN], got[AUTHN_HMAC_KEY_LEN];
    char buf[AUTHN_HMAC_VALUE_MAX];
    size_t body;
    int n, i, ok;

    es->n = 0;
    /* NB: a value of another version (an older server of the farm wrote
     * it, or a newer one) is no one's forgery: a plain miss, neither
     * counted nor logged as forged, and replaced once verified. Its tag is
     * not checked: it could say nothing this version reads. */
    if (len >= 1 && v[0] >= '0' && v[0] <= '9' &&
        v[0] != '0' + AUTHN_HMAC_VALUE_VERSION)
        return -1;
    /* "V" (":" entry){1,PER_USER} ":" tag, every field of fixed width. */
    if (len < 2 + 1 + KEY_HEX || len >= sizeof(buf))
        return 0;
    body = len - 1 - KEY_HEX;
    if ((body - 1) % (1 + ENTRY_HEX) != 0)
        return 0;
    n = (int)((body - 1) / (1 + ENTRY_HEX));
    memcpy(buf, v, len);
    buf[len] = '\0';
    if (n < 1 || n > AUTHN_HMAC_PER_USER ||
        buf[0] != '0' + AUTHN_HMAC_VALUE_VERSION || buf[body] != ':' ||
        !get_hex(buf + body + 1, got, sizeof(got)))
        return 0;
    authn_hmac_value_tag(mac, uid, buf, body, want);
    ok = CRYPTO_memcmp(want, got, sizeof(want)) == 0;
    for (i = 0; ok && i < n; i++) {
        const char *e = buf + 1 + (size_t)i * (1 + ENTRY_HEX);

        ok = e[0] == ':' && get_hex(e + 1, es->e[i].mac, AUTHN_HMAC_KEY_LEN) &&
             get_hex64(e + 1 + KEY_HEX, &es->e[i].verified) &&
             get_hex64(e + 1 + KEY_HEX + 16, &es->e[i].used);
    }
    es->n = ok ? n : 0;
    explicit_bzero(want, sizeof(want));
    return ok;
}

int authn_hmac_entries_find(const authn_hmac_entries_t *es,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl,
                            apr_interval_time_t max_age, apr_time_t *verified,
                            apr_time_t *used)
{
    int i, found = 0;

    for (i = 0; i < es->n; i++) {
        apr_time_t when = es->e[i].verified, last = es->e[i].used;

        if (CRYPTO_memcmp(es->e[i].mac, key, AUTHN_HMAC_KEY_LEN) != 0)
            continue;
        /* NB: the times are another server's clock, which may run a little
         * ahead of this one's: up to CLOCK_SKEW_USEC they are taken as now
         * (shared memory then holds no time "in the future"); further is
         * odd, and not trusted. */
        if (when > now + CLOCK_SKEW_USEC || last > now + CLOCK_SKEW_USEC)
            continue;
        if (when > now)
            when = now;
        if (last > now)
            last = now;
        if (now - when >= max_age || now - last >= ttl)
            continue; /* too old, or idle too long, for this section */
        *verified = when;
        *used = last;
        found = 1;
    }
    return found;
}

void authn_hmac_entries_add(authn_hmac_entries_t *es,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t verified, apr_time_t used)
{
    authn_hmac_entries_t old = *es;
    int i, j;

    /* The new entry, with the later times of its own old one (another
     * server may have refreshed it since this one read it); then the most
     * recently used others. NB: none is dropped for being idle: idle for
     * one section may be live for another, and the value's PX bounds them
     * all (authn_hmac_redis_set). */
    es->n = 1;
    memcpy(es->e[0].mac, key, AUTHN_HMAC_KEY_LEN);
    es->e[0].verified = verified;
    es->e[0].used = used;
    /* NB: used is now, for the callers: times more than the skew allowed
     * ahead of it come from a clock that is wrong. Kept, they would make
     * the entry unreadable (entries_find does not trust them) until that
     * time came, whoever verified it again; so they are dropped. */
    for (i = 0, j = 0; i < old.n; i++)
        if (old.e[i].verified <= used + CLOCK_SKEW_USEC &&
            old.e[i].used <= used + CLOCK_SKEW_USEC)
            old.e[j++] = old.e[i];
    old.n = j;
    for (i = 0; i < old.n; i++)
        if (CRYPTO_memcmp(old.e[i].mac, key, AUTHN_HMAC_KEY_LEN) == 0) {
            if (old.e[i].verified > es->e[0].verified)
                es->e[0].verified = old.e[i].verified;
            if (old.e[i].used > es->e[0].used)
                es->e[0].used = old.e[i].used;
        }
    while (es->n < AUTHN_HMAC_PER_USER) {
        int best = -1;

        for (i = 0; i < old.n; i++) {
            int dup = CRYPTO_memcmp(old.e[i].mac, key, AUTHN_HMAC_KEY_LEN) == 0;

            for (j = 1; j < es->n && !dup; j++)
                dup =
                    memcmp(old.e[i].mac, es->e[j].mac, AUTHN_HMAC_KEY_LEN) == 0;
            if (!dup && (best < 0 || old.e[i].used > old.e[best].used))
                best = i;
        }
        if (best < 0)
            break;
        es->e[es->n++] = old.e[best];
    }
}

/* prefix + lowercase hex of the user id. */
static const char *redis_key(const authn_hmac_redis_conf_t *conf,
                             const unsigned char *uid, apr_pool_t *p)
{
    size_t pl = strlen(conf->prefix);
    char *k = apr_palloc(p, pl + KEY_HEX + 1);

    memcpy(k, conf->prefix, pl);
    *put_hex(k + pl, uid, AUTHN_HMAC_KEY_LEN) = '\0';
    return k;
}

authn_hmac_redis_rc
authn_hmac_redis_interpret(const redisReply *get, const authn_hmac_mac_t *mac,
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           authn_hmac_entries_t *es, authn_hmac_value_state *st)
{
    es->n = 0;
    *st = AUTHN_HMAC_VALUE_NONE;
    if (!get)
        return AUTHN_HMAC_REDIS_ERROR;
    if (get->type == REDIS_REPLY_NIL)
        return AUTHN_HMAC_REDIS_OK;
    if (get->type != REDIS_REPLY_STRING)
        return AUTHN_HMAC_REDIS_ERROR;
    switch (authn_hmac_value_decode(mac, uid, get->str, get->len, es)) {
    case 1:
        *st = AUTHN_HMAC_VALUE_VALID;
        break;
    case -1:
        *st = AUTHN_HMAC_VALUE_OTHER;
        break;
    default:
        *st = AUTHN_HMAC_VALUE_FORGED;
    }
    return AUTHN_HMAC_REDIS_OK;
}

authn_hmac_redis_rc authn_hmac_redis_get(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    apr_time_t deadline, authn_hmac_entries_t *es, authn_hmac_value_state *st,
    const char **why, apr_pool_t *p)
{
    const char *k = redis_key(conf, uid, p);
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, strlen(k)};
    redisReply *get = NULL;
    authn_hmac_redis_rc rc;

    es->n = 0;
    *st = AUTHN_HMAC_VALUE_NONE;
    rc = authn_hmac_redis_command(c, 2, argv, lens, deadline, &get, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    rc = authn_hmac_redis_interpret(get, mac, uid, es, st);
    if (rc != AUTHN_HMAC_REDIS_OK)
        *why = apr_psprintf(p, "GET: unexpected answer (%s)",
                            authn_hmac_redis_reply_error(get, p));
    freeReplyObject(get);
    return rc;
}

/* NB: the key lives until its newest entry's verification is max_age old
 * (max_age: the storing section's), whatever the TTLs: each reader applies
 * its own idle timeout to the entry's last use, and a key that expired with
 * one section's idle timeout would be gone for a section of a longer one
 * (which would then verify again: the fight this format ends). The cost is
 * an idle user's key kept up to max_age (a few hundred bytes; Redis's
 * maxmemory policy may evict it sooner, which only costs a verification).
 * Bounded: never more than max_age from now, whatever the times say. A
 * refresh does not move it (the verification times stay), so that a key
 * does not outlive its entries. A section with a longer max age than the
 * storing one loses the key sooner than it would allow, and verifies once
 * more then. */
authn_hmac_redis_rc authn_hmac_redis_set(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    const authn_hmac_entries_t *es, apr_time_t now, apr_interval_time_t max_age,
    apr_time_t deadline, const char **why, apr_pool_t *p)
{
    char value[AUTHN_HMAC_VALUE_MAX];
    const char *k = redis_key(conf, uid, p), *px;
    const char *argv[5] = {"SET", k, value, "PX", NULL};
    size_t lens[5];
    apr_time_t last = 0;
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;
    int i;

    for (i = 0; i < es->n; i++)
        if (es->e[i].verified > last)
            last = es->e[i].verified;
    last = last > now ? now + max_age : last + max_age;
    if (last <= now + 1000)
        return AUTHN_HMAC_REDIS_OK;
    px = apr_psprintf(p, "%" APR_INT64_T_FMT, (last - now) / 1000);
    argv[4] = px;
    lens[0] = 3;
    lens[1] = strlen(k);
    lens[2] = authn_hmac_value_encode(mac, uid, es, value);
    lens[3] = 2;
    lens[4] = strlen(px);
    if (!lens[2])
        return AUTHN_HMAC_REDIS_OK;
    rc = authn_hmac_redis_command(c, 5, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        *why = apr_psprintf(p, "SET refused: %s",
                            authn_hmac_redis_reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_rc authn_hmac_redis_probe(authn_hmac_redis_conn_t *c,
                                           const authn_hmac_redis_conf_t *conf,
                                           apr_time_t deadline,
                                           const char **why, apr_pool_t *p)
{
    const char *argv[2] = {"GET", apr_pstrcat(p, conf->prefix, "check", NULL)};
    size_t lens[2] = {3, strlen(argv[1])};
    redisReply *r = NULL;
    authn_hmac_redis_rc rc =
        authn_hmac_redis_command(c, 2, argv, lens, deadline, &r, why, p);

    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
        *why = apr_psprintf(p, "GET refused: %s",
                            authn_hmac_redis_reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------- single flight in a farm */

/* "F" result ":" hex(expires) ":" hex(tag) */
#define FLIGHT_BODY  (2 + 1 + 16)
#define FLIGHT_VALUE (FLIGHT_BODY + 1 + KEY_HEX)

/* The runner's result, written (or, for none, the marker deleted) only if
 * the marker is still the runner's own "R" + token: a runner that took
 * longer than its hold finds its marker expired, and maybe claimed by
 * another server, whose marker it must leave alone (else that server's
 * waiters would run bcrypt too). One command, whatever the result, so
 * that the Redis traffic of a first try is the same for every user. */
static const char flight_cas[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "if ARGV[2] == '' then return redis.call('DEL', KEYS[1]) end "
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1";

static const char *flight_key(const authn_hmac_redis_conf_t *conf,
                              const authn_hmac_mac_t *mac,
                              const unsigned char *key, apr_pool_t *p)
{
    unsigned char fid[AUTHN_HMAC_KEY_LEN];
    size_t pl = strlen(conf->prefix);
    char *k = apr_palloc(p, pl + 2 + KEY_HEX + 1);

    /* NB: "F" as the body: a user entry's body starts with its version. */
    authn_hmac_value_tag(mac, key, "F", 1, fid);
    memcpy(k, conf->prefix, pl);
    memcpy(k + pl, "f:", 2);
    *put_hex(k + pl + 2, fid, sizeof(fid)) = '\0';
    return k;
}

static void flight_tag(const authn_hmac_mac_t *mac, const unsigned char *key,
                       const char *body, char *out)
{
    unsigned char tag[AUTHN_HMAC_KEY_LEN];

    authn_hmac_value_tag(mac, key, body, FLIGHT_BODY, tag);
    put_hex(out, tag, sizeof(tag));
}

authn_hmac_farm_state
authn_hmac_flight_interpret(const authn_hmac_mac_t *mac,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, apr_time_t now)
{
    char want[KEY_HEX];
    unsigned char token[(AUTHN_HMAC_FLIGHT_TOKEN_LEN - 1) / 2];
    int64_t expires = 0;
    int ok;

    /* NB: a bare "R" is a claim of a server from before owner tokens. */
    if (len > 0 && v[0] == 'R' &&
        (len == 1 || (len == AUTHN_HMAC_FLIGHT_TOKEN_LEN &&
                      get_hex(v + 1, token, sizeof(token)))))
        return AUTHN_HMAC_FARM_RUNNING;
    if (len != FLIGHT_VALUE || v[0] != 'F' || (v[1] != '0' && v[1] != '1') ||
        v[2] != ':' || v[FLIGHT_BODY] != ':' || !get_hex64(v + 3, &expires))
        return AUTHN_HMAC_FARM_FORGED;
    flight_tag(mac, key, v, want);
    ok = CRYPTO_memcmp(want, v + FLIGHT_BODY + 1, KEY_HEX) == 0;
    explicit_bzero(want, sizeof(want));
    if (!ok)
        return AUTHN_HMAC_FARM_FORGED;
    if (expires <= now || expires > now + apr_time_from_sec(60))
        return AUTHN_HMAC_FARM_NONE; /* over, or a clock far off */
    return v[1] == '1' ? AUTHN_HMAC_FARM_GRANTED : AUTHN_HMAC_FARM_REFUSED;
}

/* Runs a command whose answer is +OK, or nil for SET NX that did not set. */
static authn_hmac_redis_rc run_set(authn_hmac_redis_conn_t *c, int argc,
                                   const char **argv, const size_t *lens,
                                   apr_time_t deadline, int *set,
                                   const char **why, apr_pool_t *p)
{
    redisReply *r = NULL;
    authn_hmac_redis_rc rc =
        authn_hmac_redis_command(c, argc, argv, lens, deadline, &r, why, p);

    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    *set = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!*set && r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_INTEGER) {
        *why = apr_psprintf(p, "%s refused: %s", argv[0],
                            authn_hmac_redis_reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_rc authn_hmac_redis_flight_claim(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_interval_time_t hold, apr_time_t deadline,
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1], int *won, const char **why,
    apr_pool_t *p)
{
    const char *k = flight_key(conf, mac, key, p);
    const char *px = apr_psprintf(p, "%" APR_INT64_T_FMT, hold / 1000 + 1);
    const char *argv[6] = {"SET", k, token, "NX", "PX", px};
    size_t lens[6];
    unsigned char r[(AUTHN_HMAC_FLIGHT_TOKEN_LEN - 1) / 2];
    apr_status_t rv;
    int i;

    *won = 0;
    /* NB: unique, not secret: whoever can write Redis can delete any
     * marker anyway (more bcrypt, never a grant). */
    if ((rv = apr_generate_random_bytes(r, sizeof(r))) != APR_SUCCESS) {
        token[0] = '\0';
        *why = apr_psprintf(p, "no random token for the farm marker (%d)", rv);
        return AUTHN_HMAC_REDIS_ERROR;
    }
    token[0] = 'R';
    *put_hex(token + 1, r, sizeof(r)) = '\0';
    for (i = 0; i < 6; i++)
        lens[i] = strlen(argv[i]);
    return run_set(c, 6, argv, lens, deadline, won, why, p);
}

authn_hmac_redis_rc authn_hmac_redis_flight_result(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    const char *token, int result, apr_time_t now, apr_interval_time_t hold,
    apr_time_t deadline, const char **why, apr_pool_t *p)
{
    const char *k = flight_key(conf, mac, key, p);
    const char *px = apr_psprintf(p, "%" APR_INT64_T_FMT, hold / 1000 + 1);
    char v[FLIGHT_VALUE + 1], *o = v;
    const char *argv[7] = {"EVAL", flight_cas, "1", k, token, v, px};
    size_t lens[7];
    int i, set = 0;

    if (result >= 0) {
        *o++ = 'F';
        *o++ = result ? '1' : '0';
        *o++ = ':';
        o = put_hex64(o, (uint64_t)(now + hold));
        *o++ = ':';
        flight_tag(mac, key, v, o);
        o += KEY_HEX;
    }
    *o = '\0'; /* empty: no result, delete */
    for (i = 0; i < 7; i++)
        lens[i] = strlen(argv[i]);
    return run_set(c, 7, argv, lens, deadline, &set, why, p);
}

authn_hmac_redis_rc authn_hmac_redis_flight_poll(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_time_t deadline, authn_hmac_farm_state *st,
    const char **why, apr_pool_t *p)
{
    const char *k = flight_key(conf, mac, key, p);
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, strlen(k)};
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;

    *st = AUTHN_HMAC_FARM_NONE;
    rc = authn_hmac_redis_command(c, 2, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type == REDIS_REPLY_STRING)
        *st = authn_hmac_flight_interpret(mac, key, r->str, r->len, now);
    else if (r->type != REDIS_REPLY_NIL) {
        *why = apr_psprintf(p, "GET: unexpected answer (%s)",
                            authn_hmac_redis_reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------ the throttle across a farm */

/* prefix + kind ("t:" a count, "b:" a ban) + hex(id). */
static const char *throttle_key(const authn_hmac_redis_conf_t *conf,
                                const char *kind, const unsigned char *id,
                                apr_pool_t *p)
{
    size_t pl = strlen(conf->prefix);
    char *k = apr_palloc(p, pl + 2 + KEY_HEX + 1);

    memcpy(k, conf->prefix, pl);
    memcpy(k + pl, kind, 2);
    *put_hex(k + pl + 2, id, AUTHN_HMAC_KEY_LEN) = '\0';
    return k;
}

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
    unsigned char tag[AUTHN_HMAC_KEY_LEN];
    char *o = out;

    *o++ = 'B';
    *o++ = ':';
    o = put_hex64(o, (uint64_t)until);
    authn_hmac_value_tag(mac, id, out, BAN_BODY, tag);
    *o++ = ':';
    o = put_hex(o, tag, sizeof(tag));
    *o = '\0';
    return (size_t)(o - out);
}

int authn_hmac_ban_decode(const authn_hmac_mac_t *mac,
                          const unsigned char id[AUTHN_HMAC_KEY_LEN],
                          const char *v, size_t len, apr_time_t *until)
{
    unsigned char want[AUTHN_HMAC_KEY_LEN], got[AUTHN_HMAC_KEY_LEN];
    char buf[BAN_LEN + 1];
    int ok;

    *until = 0;
    if (len != BAN_LEN || v[0] != 'B' || v[1] != ':' || v[BAN_BODY] != ':')
        return 0;
    memcpy(buf, v, len);
    buf[len] = '\0';
    if (!get_hex(buf + BAN_BODY + 1, got, sizeof(got)))
        return 0;
    authn_hmac_value_tag(mac, id, buf, BAN_BODY, want);
    ok = CRYPTO_memcmp(want, got, sizeof(want)) == 0 &&
         get_hex64(buf + 2, until);
    explicit_bzero(want, sizeof(want));
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
    const char *argv[3] = {"MGET", throttle_key(conf, "b:", pair, p),
                           throttle_key(conf, "b:", client, p)};
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
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        *why = apr_psprintf(p, "MGET: unexpected answer (%s)",
                            authn_hmac_redis_reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
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
    static const char digits[] = "0123456789abcdef";
    unsigned char tag[AUTHN_HMAC_KEY_LEN];
    char *o = out;
    int i;

    *o++ = 'C';
    *o++ = ':';
    o = put_hex64(o, (uint64_t)start);
    *o++ = ':';
    for (i = 7; i >= 0; i--)
        *o++ = digits[(n >> (4 * i)) & 15];
    *o++ = ':';
    o = put_hex64(o, fp);
    authn_hmac_value_tag(mac, id, out, COUNT_BODY, tag);
    *o++ = ':';
    o = put_hex(o, tag, sizeof(tag));
    *o = '\0';
    return (size_t)(o - out);
}

int authn_hmac_count_decode(const authn_hmac_mac_t *mac,
                            const unsigned char id[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, apr_time_t *start,
                            uint32_t *n, uint64_t *fp)
{
    unsigned char want[AUTHN_HMAC_KEY_LEN], got[AUTHN_HMAC_KEY_LEN], b[4];
    unsigned char l[8];
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
    if (!get_hex(buf + COUNT_BODY + 1, got, sizeof(got)))
        return 0;
    authn_hmac_value_tag(mac, id, buf, COUNT_BODY, want);
    /* NB: the fingerprint is any 64-bit word (get_hex64 takes times). */
    ok = CRYPTO_memcmp(want, got, sizeof(want)) == 0 &&
         get_hex64(buf + 2, start) && get_hex(buf + 19, b, sizeof(b)) &&
         get_hex(buf + 28, l, sizeof(l));
    explicit_bzero(want, sizeof(want));
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

authn_hmac_redis_rc authn_hmac_redis_throttle_fail(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char pair[AUTHN_HMAC_KEY_LEN],
    const unsigned char client[AUTHN_HMAC_KEY_LEN], uint64_t fp,
    int max_failures, int max_client_failures, apr_interval_time_t window,
    apr_interval_time_t ban, apr_time_t now, apr_time_t deadline, int *started,
    int *forged, const char **why, apr_pool_t *p)
{
    const unsigned char *ids[2] = {pair, client};
    const int limits[2] = {max_failures, max_client_failures};
    char *g = apr_pstrcat(p, throttle_key(conf, "g:", pair, p),
                          "0000000000000000", NULL);
    const char *rargv[8], *wargv[16];
    size_t rlens[8], lens[16];
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;
    apr_time_t start[2];
    uint32_t n[2];
    int i, tries, mine;

    *started = 0;
    *forged = 0;
    /* NB: the guess's fingerprint (a word of a MAC of user and password)
     * after the pair's id. */
    put_hex64(g + strlen(g) - 16, fp);
    rargv[0] = "EVAL";
    rargv[1] = throttle_read;
    rargv[2] = "3";
    rargv[3] = g;
    rargv[4] = throttle_key(conf, "t:", pair, p);
    rargv[5] = throttle_key(conf, "t:", client, p);
    rargv[6] = apr_psprintf(p, "%" APR_INT64_T_FMT, window / 1000 + 1);
    wargv[0] = "EVAL";
    wargv[1] = throttle_write;
    wargv[2] = "4";
    wargv[3] = rargv[4];
    wargv[4] = rargv[5];
    wargv[5] = throttle_key(conf, "b:", pair, p);
    wargv[6] = throttle_key(conf, "b:", client, p);
    wargv[13] = apr_psprintf(p, "%" APR_INT64_T_FMT, ban / 1000 + 1);
    for (tries = 0; tries < THROTTLE_TRIES; tries++) {
        rargv[7] = tries ? "1" : ""; /* a retry: the mark is this guess's */
        for (i = 0; i < 8; i++)
            rlens[i] = strlen(rargv[i]);
        rc = authn_hmac_redis_command(c, 8, rargv, rlens, deadline, &r, why, p);
        if (rc != AUTHN_HMAC_REDIS_OK)
            return rc;
        if (!tries && r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
            freeReplyObject(r); /* a repeat the farm saw */
            return rc;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            *why = apr_psprintf(p, "EVAL: unexpected answer (%s)",
                                authn_hmac_redis_reply_error(r, p));
            freeReplyObject(r);
            return AUTHN_HMAC_REDIS_ERROR;
        }
        mine = 0;
        for (i = 0; i < 2; i++) {
            const redisReply *v = r->element[i];
            int str = v->type == REDIS_REPLY_STRING;
            uint64_t last = 0;

            /* NB: what was read, as it was (a forged value too), for the
             * write to compare. */
            wargv[14 + i] = str ? apr_pstrmemdup(p, v->str, v->len) : "";
            lens[14 + i] = str ? v->len : 0;
            start[i] = 0;
            n[i] = 0;
            if (count_of(mac, ids[i], v, now, window, &start[i], &n[i], &last,
                         forged) &&
                last == fp)
                mine = 1;
        }
        freeReplyObject(r);
        /* NB: a count whose last guess is this one already counts it (this
         * server's write landed, whatever Redis answered it): never twice.
         * Its bans, if it started any, are in Redis; this server tells
         * none it cannot be sure of. */
        if (mine)
            return AUTHN_HMAC_REDIS_OK;
        for (i = 0; i < 2; i++) {
            char *v = apr_palloc(p, COUNT_LEN + 1);
            int full;

            n[i]++;
            full = limits[i] > 0 && n[i] >= (uint32_t)limits[i];
            wargv[11 + i] = "";
            if (full) {
                /* NB: the count starts again with the ban. */
                char *b = apr_palloc(p, AUTHN_HMAC_BAN_LEN + 1);

                (void)authn_hmac_ban_encode(mac, ids[i], now + ban, b);
                wargv[11 + i] = b;
                start[i] = now;
                n[i] = 0;
            }
            (void)count_encode(mac, ids[i], start[i], n[i], fp, v);
            wargv[7 + 2 * i] = v;
            wargv[8 + 2 * i] = apr_psprintf(
                p, "%" APR_INT64_T_FMT, (start[i] + window - now) / 1000 + 1);
        }
        for (i = 0; i < 14; i++)
            lens[i] = strlen(wargv[i]);
        rc = authn_hmac_redis_command(c, 16, wargv, lens, deadline, &r, why, p);
        if (rc != AUTHN_HMAC_REDIS_OK)
            return rc;
        if (r->type == REDIS_REPLY_INTEGER && r->integer == -1) {
            freeReplyObject(r); /* counted meanwhile: read again */
            continue;
        }
        /* NB: the bans started are the ones this server counted to their
         * limit from counts whose tags verified, whatever Redis answers
         * (it says which it kept: one in force there already). */
        if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 &&
            r->integer <= 3)
            *started = (wargv[11][0] ? 1 : 0) | (wargv[12][0] ? 2 : 0);
        else {
            *why = apr_psprintf(p, "EVAL: unexpected answer (%s)",
                                authn_hmac_redis_reply_error(r, p));
            rc = AUTHN_HMAC_REDIS_ERROR;
        }
        freeReplyObject(r);
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
