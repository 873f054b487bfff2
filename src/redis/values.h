/* values.h: the pieces of the tagged values the module keeps in Redis,
 * shared by the commands (commands.c: a user's entries, the farm's single
 * flight) and the farm's throttle (farm_throttle.c): strict lowercase hex,
 * the keys under the prefix, and a value's tag. Private to src/redis/. */
#ifndef AUTHN_HMAC_REDIS_VALUES_H
#define AUTHN_HMAC_REDIS_VALUES_H

#include "redis/redis.h"

#define CLOCK_SKEW_USEC 5000000 /* between the servers of a farm */
#define KEY_HEX         ((size_t)2 * AUTHN_HMAC_KEY_LEN)

static inline char *put_hex(char *o, const unsigned char *b, size_t n)
{
    static const char hexdigits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        *o++ = hexdigits[b[i] >> 4];
        *o++ = hexdigits[b[i] & 15];
    }
    return o;
}

static inline char *put_hex64(char *o, uint64_t v)
{
    unsigned char b[8];
    int i;

    for (i = 7; i >= 0; i--, v >>= 8)
        b[i] = (unsigned char)v;
    return put_hex(o, b, sizeof(b));
}

static inline int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Strict lowercase hex; 0 for anything else. */
static inline int get_hex(const char *s, unsigned char *b, size_t n)
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

static inline int get_hex64(const char *s, int64_t *v)
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

/* prefix + kind ("": a user's entry; "f:" a flight's marker, "t:" a
 * count, "b:" a ban, "g:" a guess's mark) + hex(id). */
const char *authn_hmac_redis_key(const authn_hmac_redis_conf_t *conf,
                                 const char *kind, const unsigned char *id,
                                 apr_pool_t *p);

/* Ends the value being written at out, whose body runs up to o: ":"
 * hex(tag) and a NUL, the tag made with the pepper over the body and id.
 * Returns the value's length. */
size_t authn_hmac_value_seal(const authn_hmac_mac_t *mac,
                             const unsigned char *id, char *out, char *o);

/* Whether the value in buf (NUL-terminated), of body bytes then ":" and
 * the hex of its tag, carries the tag made for id. */
int authn_hmac_value_sealed(const authn_hmac_mac_t *mac,
                            const unsigned char *id, const char *buf,
                            size_t body);

/* The answer r was not one that cmd gives: AUTHN_HMAC_REDIS_ERROR, with
 * *why saying so and giving r's text (r stays the caller's to free). */
authn_hmac_redis_rc authn_hmac_redis_unexpected(const char *cmd,
                                                const struct redisReply *r,
                                                const char **why,
                                                apr_pool_t *p);

#endif /* AUTHN_HMAC_REDIS_VALUES_H */
