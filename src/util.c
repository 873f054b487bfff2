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

authn_hmac_format_t authn_hmac_status_query(const char *args)
{
    const char *p = args;

    while (p && *p) {
        size_t n = strcspn(p, "&;");
        size_t k = strcspn(p, "=&;");

        if (k > n)
            k = n;
        if (k == 4 && memcmp(p, "json", 4) == 0)
            return AUTHN_HMAC_FMT_JSON;
        if (k == 10 && memcmp(p, "prometheus", 10) == 0)
            return AUTHN_HMAC_FMT_PROMETHEUS;
        p += n;
        if (*p)
            p++;
    }
    return AUTHN_HMAC_FMT_TEXT;
}

const authn_hmac_counter_info_t authn_hmac_counter_info[] = {
#define C                                             0
#define G                                             1
#define AUTHN_HMAC_COUNTER_INFO(id, kind, name, help) {name, help, kind},
    AUTHN_HMAC_COUNTERS(AUTHN_HMAC_COUNTER_INFO)
#undef AUTHN_HMAC_COUNTER_INFO
#undef C
#undef G
};

/* The gauges the status page adds to the counters, in this order. */
static const authn_hmac_counter_info_t gauges[] = {
    {"verify_avg_usec", "average microseconds of a verification", 1},
    {"redis", "1 if a Redis server is configured", 1},
    {"redis_breaker_open", "1 while the breaker skips Redis", 1},
    {"redis_connections", "open Redis connections, all processes", 1},
    {"entries", "shared-memory slots holding an entry", 1},
    {"slots", "entries shared memory can hold", 1},
    {"negative_entries", "slots of the negative cache in use", 1},
    {"negative_slots", "entries the negative cache can hold", 1},
    {"verifying", "verifications running now, all processes", 1},
    {"verify_waiting", "verifications waiting for a turn now", 1},
    {"max_verifications",
     "verifications allowed at once "
     "(AuthHMACMaxVerifications)",
     1},
    {"cache_bytes", "size of the shared-memory segment", 1},
    {"uptime_sec", "seconds since the cache was made", 1},
};

#define NGAUGES (sizeof(gauges) / sizeof(gauges[0]))

static const char *line(authn_hmac_format_t f, const char *out, int first,
                        const authn_hmac_counter_info_t *i, uint64_t v,
                        apr_pool_t *p)
{
    switch (f) {
    case AUTHN_HMAC_FMT_JSON:
        return apr_psprintf(p, "%s%s\n  \"%s\": %" APR_UINT64_T_FMT, out,
                            first ? "" : ",", i->name, v);
    case AUTHN_HMAC_FMT_PROMETHEUS:
        return apr_psprintf(p,
                            "%s# HELP authn_hmac_%s%s %s\n"
                            "# TYPE authn_hmac_%s%s %s\n"
                            "authn_hmac_%s%s %" APR_UINT64_T_FMT "\n",
                            out, i->name, i->gauge ? "" : "_total", i->help,
                            i->name, i->gauge ? "" : "_total",
                            i->gauge ? "gauge" : "counter", i->name,
                            i->gauge ? "" : "_total", v);
    case AUTHN_HMAC_FMT_AUTO:
        return apr_psprintf(p, "%sauthn_hmac_%s: %" APR_UINT64_T_FMT "\n", out,
                            i->name, v);
    case AUTHN_HMAC_FMT_HTML:
        return apr_psprintf(p,
                            "%s<tr><td>%s</td><td>%" APR_UINT64_T_FMT
                            "</td><td>%s</td></tr>\n",
                            out, i->name, v, i->help);
    default:
        return apr_psprintf(p, "%s%s: %" APR_UINT64_T_FMT "\n", out, i->name,
                            v);
    }
}

const char *authn_hmac_status_format(const authn_hmac_stats_t *s,
                                     authn_hmac_format_t f, apr_time_t now,
                                     apr_pool_t *p)
{
    uint64_t v = s->counter[AUTHN_HMAC_C_VERIFICATIONS];
    uint64_t g[NGAUGES] = {
        v ? s->counter[AUTHN_HMAC_C_VERIFY_USEC] / v : 0,
        (uint64_t)s->redis,
        s->redis_breaker,
        s->redis_conns,
        s->entries,
        s->slots,
        s->negative_entries,
        s->negative_slots,
        s->verifying,
        s->waiting,
        s->max_verifications,
        s->bytes,
        now > s->started ? (uint64_t)apr_time_sec(now - s->started) : 0,
    };
    const char *out = "";
    size_t c;

    if (f == AUTHN_HMAC_FMT_JSON)
        out = "{";
    else if (f == AUTHN_HMAC_FMT_HTML)
        out =
            "<h2>mod_authn_hmac</h2>\n<table>\n"
            "<tr><th>counter</th><th>value</th><th>what it counts</th></tr>\n";
    for (c = 0; c < AUTHN_HMAC_C_COUNT; c++)
        out =
            line(f, out, c == 0, &authn_hmac_counter_info[c], s->counter[c], p);
    for (c = 0; c < NGAUGES; c++)
        out = line(f, out, 0, &gauges[c], g[c], p);
    if (f == AUTHN_HMAC_FMT_JSON)
        return apr_pstrcat(p, out, "\n}\n", NULL);
    if (f == AUTHN_HMAC_FMT_HTML)
        return apr_pstrcat(p, out, "</table>\n", NULL);
    return out;
}
