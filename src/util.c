/* util.c: parsers for directive values and the status query, and the
 * status rendering. */
#include "authn_hmac.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <apr_lib.h>
#include <apr_strings.h>

/* Parses digits then an optional one-letter unit from units/mults. */
static const char *parse_scaled(const char *arg, const char *units,
                                const uint64_t *mults, uint64_t *out)
{
    const char *p = arg, *u;
    uint64_t v = 0, m = 1;

    if (!arg || !apr_isdigit(*p))
        return "not a number";
    for (; apr_isdigit(*p); p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return "too large";
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (*p) {
        if (p[1] || !(u = strchr(units, apr_tolower(*p))))
            return "unknown unit";
        m = mults[u - units];
    }
    if (v && m > UINT64_MAX / v)
        return "too large";
    *out = v * m;
    return NULL;
}

const char *authn_hmac_parse_size(const char *arg, uint64_t *out)
{
    static const uint64_t mults[] = {UINT64_C(1) << 10, UINT64_C(1) << 20,
                                     UINT64_C(1) << 30};

    return parse_scaled(arg, "kmg", mults, out);
}

const char *authn_hmac_parse_seconds(const char *arg, uint64_t *out)
{
    static const uint64_t mults[] = {1, 60, 3600, 86400};

    return parse_scaled(arg, "smhd", mults, out);
}

const char *authn_hmac_parse_uint(const char *arg, uint64_t max, uint64_t *out)
{
    static const uint64_t none[] = {1};
    uint64_t v = 0;
    const char *err = parse_scaled(arg, "", none, &v);

    if (!err && v > max)
        err = "too large";
    if (!err)
        *out = v;
    return err;
}

int authn_hmac_status_wants_json(const char *args)
{
    const char *p = args;

    while (p && *p) {
        size_t n = strcspn(p, "&;");
        size_t k = strcspn(p, "=&;");

        if (k > n)
            k = n;
        if (k == 4 && memcmp(p, "json", 4) == 0)
            return 1;
        p += n;
        if (*p)
            p++;
    }
    return 0;
}

const authn_hmac_counter_info_t authn_hmac_counter_info[] = {
#define AUTHN_HMAC_COUNTER_INFO(id, name, help) {name, help},
    AUTHN_HMAC_COUNTERS(AUTHN_HMAC_COUNTER_INFO)
#undef AUTHN_HMAC_COUNTER_INFO
};

const char *authn_hmac_status_format(const authn_hmac_stats_t *s, int json,
                                     apr_time_t now, apr_pool_t *p)
{
    const char *name[AUTHN_HMAC_C_COUNT + 16];
    uint64_t val[AUTHN_HMAC_C_COUNT + 16];
    uint64_t v = s->counter[AUTHN_HMAC_C_VERIFICATIONS];
    const char *out = json ? "{" : "";
    int c, n = 0;

    for (c = 0; c < AUTHN_HMAC_C_COUNT; c++, n++) {
        name[n] = authn_hmac_counter_info[c].name;
        val[n] = s->counter[c];
    }
    name[n] = "verify_avg_usec";
    val[n++] = v ? s->counter[AUTHN_HMAC_C_VERIFY_USEC] / v : 0;
    name[n] = "redis";
    val[n++] = (uint64_t)s->redis;
    name[n] = "redis_breaker_open";
    val[n++] = s->redis_breaker;
    name[n] = "redis_connections";
    val[n++] = s->redis_conns;
    name[n] = "entries";
    val[n++] = s->entries;
    name[n] = "slots";
    val[n++] = s->slots;
    name[n] = "negative_entries";
    val[n++] = s->negative_entries;
    name[n] = "negative_slots";
    val[n++] = s->negative_slots;
    name[n] = "verifying";
    val[n++] = s->verifying;
    name[n] = "verify_waiting";
    val[n++] = s->waiting;
    name[n] = "max_verifications";
    val[n++] = s->max_verifications;
    name[n] = "cache_bytes";
    val[n++] = s->bytes;
    name[n] = "uptime_sec";
    val[n++] = now > s->started ? (uint64_t)apr_time_sec(now - s->started) : 0;
    for (c = 0; c < n; c++)
        out = json ? apr_psprintf(p, "%s%s\n  \"%s\": %" APR_UINT64_T_FMT, out,
                                  c ? "," : "", name[c], val[c])
                   : apr_psprintf(p, "%s%s: %" APR_UINT64_T_FMT "\n", out,
                                  name[c], val[c]);
    return json ? apr_pstrcat(p, out, "\n}\n", NULL) : out;
}
