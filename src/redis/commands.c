/* commands.c: what the module keeps in Redis, and the commands that keep
 * it.
 *
 * Nothing Redis answers is trusted. A user's entry, under prefix +
 * hex(user id), holds at most AUTHN_HMAC_PER_USER credential MACs with their
 * times, and a tag over them made with a subkey of the pepper (see cred.c):
 * a value that does not verify is a miss, whoever wrote it. The farm's
 * single-flight markers are tagged the same way, and so are the farm
 * throttle's counts and bans (farm_throttle.c). */
#include "conn.h"
#include "values.h"
#include "core/cred.h"

#include <string.h>

#include <apr_strings.h>
#include <hiredis/hiredis.h>
#include <openssl/crypto.h>

/* ------------------------------------------------- entries and values */

#define ENTRY_HEX (KEY_HEX + 32) /* mac, verified, used */

const char *authn_hmac_redis_key(const authn_hmac_redis_conf_t *conf,
                                 const char *kind, const unsigned char *id,
                                 apr_pool_t *p)
{
    size_t pl = strlen(conf->prefix), kl = strlen(kind);
    char *k = apr_palloc(p, pl + kl + KEY_HEX + 1);

    memcpy(k, conf->prefix, pl);
    memcpy(k + pl, kind, kl);
    *put_hex(k + pl + kl, id, AUTHN_HMAC_KEY_LEN) = '\0';
    return k;
}

size_t authn_hmac_value_seal(const authn_hmac_mac_t *mac,
                             const unsigned char *id, char *out, char *o)
{
    unsigned char tag[AUTHN_HMAC_KEY_LEN];

    authn_hmac_value_tag(mac, id, out, (size_t)(o - out), tag);
    *o++ = ':';
    o = put_hex(o, tag, sizeof(tag));
    *o = '\0';
    return (size_t)(o - out);
}

authn_hmac_redis_rc authn_hmac_redis_unexpected(const char *cmd,
                                                const redisReply *r,
                                                const char **why, apr_pool_t *p)
{
    *why = apr_psprintf(p, "%s: unexpected answer (%s)", cmd,
                        authn_hmac_redis_reply_error(r, p));
    return AUTHN_HMAC_REDIS_ERROR;
}

int authn_hmac_value_sealed(const authn_hmac_mac_t *mac,
                            const unsigned char *id, const char *buf,
                            size_t body)
{
    unsigned char want[AUTHN_HMAC_KEY_LEN], got[AUTHN_HMAC_KEY_LEN];
    int ok;

    if (!get_hex(buf + body + 1, got, sizeof(got)))
        return 0;
    authn_hmac_value_tag(mac, id, buf, body, want);
    ok = CRYPTO_memcmp(want, got, sizeof(want)) == 0;
    explicit_bzero(want, sizeof(want));
    return ok;
}

size_t authn_hmac_value_encode(const authn_hmac_mac_t *mac,
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               const authn_hmac_entries_t *es,
                               char out[AUTHN_HMAC_VALUE_MAX])
{
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
    return authn_hmac_value_seal(mac, uid, out, o);
}

int authn_hmac_value_decode(const authn_hmac_mac_t *mac,
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, authn_hmac_entries_t *es)
{
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
        buf[0] != '0' + AUTHN_HMAC_VALUE_VERSION || buf[body] != ':')
        return 0;
    ok = authn_hmac_value_sealed(mac, uid, buf, body);
    for (i = 0; ok && i < n; i++) {
        const char *e = buf + 1 + (size_t)i * (1 + ENTRY_HEX);

        ok = e[0] == ':' && get_hex(e + 1, es->e[i].mac, AUTHN_HMAC_KEY_LEN) &&
             get_hex64(e + 1 + KEY_HEX, &es->e[i].verified) &&
             get_hex64(e + 1 + KEY_HEX + 16, &es->e[i].used);
    }
    es->n = ok ? n : 0;
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
    const char *k = authn_hmac_redis_key(conf, "", uid, p);
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
        (void)authn_hmac_redis_unexpected("GET", get, why, p);
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
    const char *k = authn_hmac_redis_key(conf, "", uid, p), *px;
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

authn_hmac_redis_rc
authn_hmac_redis_del(authn_hmac_redis_conn_t *c,
                     const authn_hmac_redis_conf_t *conf,
                     const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                     apr_time_t deadline, const char **why, apr_pool_t *p)
{
    const char *k = authn_hmac_redis_key(conf, "", uid, p);
    const char *argv[2] = {"DEL", k};
    size_t lens[2] = {3, strlen(k)};
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;

    rc = authn_hmac_redis_command(c, 2, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER) {
        *why = apr_psprintf(p, "DEL refused: %s",
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

    /* NB: "F" as the body: a user entry's body starts with its version. */
    authn_hmac_value_tag(mac, key, "F", 1, fid);
    return authn_hmac_redis_key(conf, "f:", fid, p);
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
    else if (r->type != REDIS_REPLY_NIL)
        rc = authn_hmac_redis_unexpected("GET", r, why, p);
    freeReplyObject(r);
    return rc;
}
