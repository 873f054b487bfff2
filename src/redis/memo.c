/* memo.c: what SQL last said of a user, kept in Redis for the farm (the
 * request path's memo, core/cred.h), under prefix + "m:" + hex(user id):
 *   "m1:" state hex(digest ^ pad) hex64(confirmed) ":" hex(tag)
 * the pad an HMAC of the user id and the time under the memo subkey
 * (core/cred.h: authn_hmac_memo_pad), so that Redis holds no unkeyed
 * digest of a stored hash (one who holds a copy of the users table could
 * map each key to its user, and see whose hash changed); the tag made
 * with the pepper over the user id and all before it, as a
 * user's entries are (commands.c): a value another key held, another
 * pepper made, or anyone altered does not verify, and is no memo. So a
 * Redis that lies can neither extend a grant (a memo is only ever what
 * the source said, at the time it said it) nor end one (no state it
 * could write verifies). */
#include "conn.h"
#include "values.h"

#include <string.h>

#include <apr_strings.h>
#include <hiredis/hiredis.h>

/* "m1:", the state, hex(digest), hex64(confirmed) */
#define MEMO_BODY (3 + 1 + KEY_HEX + 16)

size_t authn_hmac_memo_encode(const authn_hmac_mac_t *mac,
                              const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                              const authn_hmac_memo_t *m,
                              char out[AUTHN_HMAC_MEMO_VALUE_MAX])
{
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];
    char *o = out;
    int i;

    if (m->state < AUTHN_HMAC_MEMO_HASH || m->state > AUTHN_HMAC_MEMO_LOCKED ||
        m->confirmed < 0)
        return 0;
    *o++ = 'm';
    *o++ = '1';
    *o++ = ':';
    *o++ = (char)('0' + m->state);
    authn_hmac_memo_pad(mac, uid, m->confirmed, d);
    for (i = 0; i < AUTHN_HMAC_DIGEST_LEN; i++)
        d[i] ^= m->digest[i];
    o = put_hex(o, d, AUTHN_HMAC_DIGEST_LEN);
    o = put_hex64(o, (uint64_t)m->confirmed);
    return authn_hmac_value_seal(mac, uid, out, o);
}

int authn_hmac_memo_decode(const authn_hmac_mac_t *mac,
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           const char *v, size_t len, authn_hmac_memo_t *m)
{
    char buf[AUTHN_HMAC_MEMO_VALUE_MAX];
    unsigned char pad[AUTHN_HMAC_DIGEST_LEN];
    int ok, i;

    memset(m, 0, sizeof(*m));
    if (len != MEMO_BODY + 1 + KEY_HEX)
        return 0;
    memcpy(buf, v, len);
    buf[len] = '\0';
    ok = memcmp(buf, "m1:", 3) == 0 && buf[MEMO_BODY] == ':' &&
         buf[3] >= '0' + AUTHN_HMAC_MEMO_HASH &&
         buf[3] <= '0' + AUTHN_HMAC_MEMO_LOCKED &&
         authn_hmac_value_sealed(mac, uid, buf, MEMO_BODY) &&
         get_hex(buf + 4, m->digest, AUTHN_HMAC_DIGEST_LEN) &&
         get_hex64(buf + 4 + KEY_HEX, &m->confirmed);
    if (!ok) {
        memset(m, 0, sizeof(*m));
        return 0;
    }
    m->state = buf[3] - '0';
    authn_hmac_memo_pad(mac, uid, m->confirmed, pad);
    for (i = 0; i < AUTHN_HMAC_DIGEST_LEN; i++)
        m->digest[i] ^= pad[i];
    return 1;
}

authn_hmac_redis_rc authn_hmac_redis_memo_get(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    apr_time_t deadline, authn_hmac_memo_t *m, int *found, const char **why,
    apr_pool_t *p)
{
    const char *k = authn_hmac_redis_key(conf, "m:", uid, p);
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, strlen(k)};
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;

    memset(m, 0, sizeof(*m));
    *found = 0;
    rc = authn_hmac_redis_command(c, 2, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type == REDIS_REPLY_STRING)
        *found = authn_hmac_memo_decode(mac, uid, r->str, r->len, m) ? 1 : -1;
    else if (r->type != REDIS_REPLY_NIL)
        rc = authn_hmac_redis_unexpected("GET", r, why, p);
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_rc authn_hmac_redis_memo_set(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    const authn_hmac_memo_t *m, apr_interval_time_t life, apr_time_t deadline,
    const char **why, apr_pool_t *p)
{
    char value[AUTHN_HMAC_MEMO_VALUE_MAX];
    const char *k = authn_hmac_redis_key(conf, "m:", uid, p);
    const char *px = apr_psprintf(p, "%" APR_INT64_T_FMT,
                                  life / 1000 > 1000 ? life / 1000 : 1000);
    const char *argv[5] = {"SET", k, value, "PX", px};
    size_t lens[5];
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;

    lens[0] = 3;
    lens[1] = strlen(k);
    lens[2] = authn_hmac_memo_encode(mac, uid, m, value);
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
