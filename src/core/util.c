/* util.c: the monotonic clock, parsers for directive values and the status
 * query, and the status rendering. */
#include "core/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <apr_lib.h>
#include <apr_strings.h>

apr_time_t authn_hmac_monotonic(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_time_t)ts.tv_sec * APR_USEC_PER_SEC +
           (apr_time_t)(ts.tv_nsec / 1000);
}

int authn_hmac_log_due(apr_time_t *last, apr_time_t now,
                       apr_interval_time_t interval)
{
    apr_time_t seen = __atomic_load_n(last, __ATOMIC_RELAXED);

    return (seen == 0 || now - seen >= interval) &&
           __atomic_compare_exchange_n(last, &seen, now, 0, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}

/* A unit: its letter, as a suggestion writes it ('\0': none, for the base
 * unit of sizes), and its multiple. units[0] is the base unit. */
typedef struct {
    char letter;
    uint64_t mult;
} unit_t;

/* The unit letter c names in units (any case), or n. */
static size_t find_unit(const unit_t *units, size_t n, char c)
{
    size_t u;

    for (u = 0; u < n; u++)
        if (units[u].letter && apr_tolower(units[u].letter) == apr_tolower(c))
            break;
    return u;
}

/* A value with a fraction, v + frac / scale in units[u] ("1.5h"), as a
 * whole number in that unit or the largest smaller one that holds it
 * exactly ("90m"); NULL if none does. */
static const char *whole_in_smaller_unit(uint64_t v, uint64_t frac,
                                         uint64_t scale, const unit_t *units,
                                         size_t u, apr_pool_t *p)
{
    uint64_t total; /* the amount in base units, times scale */

    if (v > (UINT64_MAX - frac) / scale ||
        v * scale + frac > UINT64_MAX / units[u].mult)
        return NULL;
    total = (v * scale + frac) * units[u].mult;
    for (;; u--) {
        if (units[u].mult <= UINT64_MAX / scale &&
            total % (units[u].mult * scale) == 0) {
            const char *n = apr_psprintf(p, "%" APR_UINT64_T_FMT,
                                         total / (units[u].mult * scale));

            return units[u].letter ? apr_psprintf(p, "%s%c", n, units[u].letter)
                                   : n;
        }
        if (u == 0)
            return NULL;
    }
}

/* What a value with a unit that units (n of them) do not have is. */
#define UNKNOWN_UNIT(n)                                                        \
    ((n) == 1 ? "not a whole number" : "not a number with a known unit")

/* Parses digits then an optional one-letter unit of units. A fraction is
 * refused, saying (if p) how to write the same amount as a whole number. */
static const char *parse_scaled(const char *arg, const unit_t *units, size_t n,
                                uint64_t *out, apr_pool_t *p)
{
    const char *s = arg, *whole;
    uint64_t v = 0, m = 1, frac = 0, scale = 1;
    size_t u = 0;

    if (!arg || !apr_isdigit(*s))
        return "not a number";
    for (; apr_isdigit(*s); s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return "too large";
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (*s == '.' && apr_isdigit(s[1])) {
        for (s++; apr_isdigit(*s) && scale < UINT64_C(1000000000); s++) {
            frac = frac * 10 + (uint64_t)(*s - '0');
            scale *= 10;
        }
        if (*s)
            u = s[1] ? n : find_unit(units, n, *s);
        if (u >= n)
            return apr_isdigit(*s) ? "too long a fraction" : UNKNOWN_UNIT(n);
        if (!p || n == 1)
            return "a fraction, which is not accepted";
        whole = whole_in_smaller_unit(v, frac, scale, units, u, p);
        if (!whole)
            return "a fraction, which is not accepted; no smaller unit "
                   "makes it whole: round it";
        return apr_pstrcat(p, "a fraction, which is not accepted: write ",
                           whole, NULL);
    }
    if (*s) {
        u = find_unit(units, n, *s);
        if (s[1] || u >= n)
            return UNKNOWN_UNIT(n);
        m = units[u].mult;
    }
    if (v && m > UINT64_MAX / v)
        return "too large";
    *out = v * m;
    return NULL;
}

const char *authn_hmac_parse_size(const char *arg, uint64_t *out, apr_pool_t *p)
{
    static const unit_t units[] = {{'\0', 1},
                                   {'K', UINT64_C(1) << 10},
                                   {'M', UINT64_C(1) << 20},
                                   {'G', UINT64_C(1) << 30}};

    return parse_scaled(arg, units, 4, out, p);
}

const char *authn_hmac_parse_seconds(const char *arg, uint64_t *out,
                                     apr_pool_t *p)
{
    static const unit_t units[] = {
        {'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};

    return parse_scaled(arg, units, 4, out, p);
}

const char *authn_hmac_parse_uint(const char *arg, uint64_t max, uint64_t *out)
{
    static const unit_t none[] = {{'\0', 1}};
    uint64_t v = 0;
    const char *err = parse_scaled(arg, none, 1, &v, NULL);

    if (!err && v > max)
        err = "too large";
    if (!err)
        *out = v;
    return err;
}

/* The index in keys (NULL-terminated) of the first of them that the
 * query string args has as a key (before any "="), or -1. */
static int query_first(const char *args, const char *const *keys)
{
    const char *p = args;
    int i;

    while (p && *p) {
        size_t n = strcspn(p, "&;");
        size_t k = strcspn(p, "=&;");

        if (k > n)
            k = n;
        for (i = 0; keys[i]; i++)
            if (k == strlen(keys[i]) && memcmp(p, keys[i], k) == 0)
                return i;
        p += n;
        if (*p)
            p++;
    }
    return -1;
}

authn_hmac_format_t authn_hmac_status_query(const char *args)
{
    static const char *const keys[] = {"json", "prometheus", NULL};
    static const authn_hmac_format_t fmt[] = {AUTHN_HMAC_FMT_JSON,
                                              AUTHN_HMAC_FMT_PROMETHEUS};
    int i = query_first(args, keys);

    return i < 0 ? AUTHN_HMAC_FMT_TEXT : fmt[i];
}

int authn_hmac_status_check(const char *args)
{
    static const char *const keys[] = {"check", NULL};

    return query_first(args, keys) == 0;
}

const authn_hmac_counter_info_t authn_hmac_counter_info[] = {
#define C 0
#define G 1
#define U 2
#define AUTHN_HMAC_COUNTER_INFO(id, kind, name, help)                          \
    {name, help, (kind) == G, (kind) == U},
    AUTHN_HMAC_COUNTERS(AUTHN_HMAC_COUNTER_INFO)
#undef AUTHN_HMAC_COUNTER_INFO
#undef C
#undef G
#undef U
};

const char *const authn_hmac_histogram_name[] = {
#define AUTHN_HMAC_HISTOGRAM_NAME(id, name, help) name,
    AUTHN_HMAC_HISTOGRAMS(AUTHN_HMAC_HISTOGRAM_NAME)
#undef AUTHN_HMAC_HISTOGRAM_NAME
};

const char *const authn_hmac_histogram_help[] = {
#define AUTHN_HMAC_HISTOGRAM_HELP(id, name, help) help,
    AUTHN_HMAC_HISTOGRAMS(AUTHN_HMAC_HISTOGRAM_HELP)
#undef AUTHN_HMAC_HISTOGRAM_HELP
};

/* Bcrypt costs 3 ms at cost 5 (htpasswd -B), 0.2 s at 12, seconds at 15
 * and more on a busy machine; a Redis round trip 0.1 ms on a LAN, up to
 * the timeout (AuthHMACRedisTimeout, 1 s at most is sensible). */
const uint64_t
    authn_hmac_bucket_bounds[AUTHN_HMAC_H_COUNT][AUTHN_HMAC_BUCKETS] = {
        {1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
         2500000, 5000000, 10000000, UINT64_MAX},
        {100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
         500000, 1000000, UINT64_MAX},
};

/* The gauges the status page adds to the counters, in this order. NB: each
 * help text stands alone (Prometheus shows it alone), and names carry base
 * units only (seconds, bytes). */
static const authn_hmac_counter_info_t gauges[] = {
    {"pepper_random",
     "1 if the pepper is random (no AuthHMACPepperFile): the cache is lost at "
     "each stop, and no other server shares it",
     1, 0},
    {"redis", "1 if a Redis server is configured", 1, 0},
    {"redis_sentinel", "1 if the Redis primary is found through Sentinel", 1,
     0},
    {"redis_up",
     "1 while Redis answers: configured, the breaker closed, no outage", 1, 0},
    {"redis_up_since_seconds",
     "since when Redis answers, in seconds since the Unix epoch; 0: not now", 1,
     0},
    {"redis_breaker_open", "1 while the breaker skips Redis", 1, 0},
    {"redis_primary_since_seconds",
     "when the Sentinels named the current primary, in seconds since the "
     "Unix epoch; 0: none known, or no Sentinel",
     1, 0},
    {"sentinel_discoveries", "discoveries of the primary through Sentinel", 0,
     0},
    {"sentinel_switches", "primaries the Sentinels named in place of another",
     0, 0},
    {"redis_connections", "open Redis connections, all processes", 1, 0},
    {"redis_tls_handshakes", "TLS connections made to Redis", 0, 0},
    {"redis_tls_resumed",
     "TLS connections to Redis that resumed a session (no full handshake)", 0,
     0},
    {"entries", "shared-memory slots holding an entry", 1, 0},
    {"slots", "entries shared memory can hold", 1, 0},
    {"negative_entries", "slots of the negative cache in use", 1, 0},
    {"negative_slots", "entries the negative cache can hold", 1, 0},
    {"verifying", "verifications running now, all processes", 1, 0},
    {"verify_waiting", "verifications waiting for a turn now", 1, 0},
    {"max_verifications",
     "verifications allowed at once "
     "(AuthHMACMaxVerifications)",
     1, 0},
    {"bans_active",
     "bans in force in this server (AuthHMACMaxFailures, "
     "AuthHMACMaxClientFailures); listed on the text and JSON pages",
     1, 0},
    {"cache_bytes", "size of the shared-memory segment", 1, 0},
    {"start_time_seconds",
     "when the shared-memory segment was made, in seconds since the Unix "
     "epoch",
     1, 0},
};

#define NGAUGES (sizeof(gauges) / sizeof(gauges[0]))

/* Only on a page asked for with ?check, after its probe. */
static const authn_hmac_counter_info_t check_gauge = {
    "redis_check",
    "1 if Redis answered this page's probe (?check: a PING within "
    "AuthHMACRedisTimeout)",
    1, 0};

/* usec microseconds as seconds, exactly: "0.25", "3", "0.000104". */
static const char *seconds(uint64_t usec, apr_pool_t *p)
{
    char *s = apr_psprintf(p, "%" APR_UINT64_T_FMT ".%06u", usec / 1000000,
                           (unsigned)(usec % 1000000));
    size_t n = strlen(s);

    while (s[n - 1] == '0')
        s[--n] = '\0';
    if (s[n - 1] == '.')
        s[n - 1] = '\0';
    return s;
}

static const char *line(authn_hmac_format_t f, const char *out, int first,
                        const authn_hmac_counter_info_t *i, uint64_t n,
                        apr_pool_t *p)
{
    const char *v =
        i->usec ? seconds(n, p) : apr_psprintf(p, "%" APR_UINT64_T_FMT, n);
    const char *total = i->gauge ? "" : "_total";

    switch (f) {
    case AUTHN_HMAC_FMT_JSON:
        return apr_psprintf(p, "%s%s\n  \"%s\": %s", out, first ? "" : ",",
                            i->name, v);
    case AUTHN_HMAC_FMT_PROMETHEUS:
        return apr_psprintf(p,
                            "%s# HELP authn_hmac_%s%s %s\n"
                            "# TYPE authn_hmac_%s%s %s\n"
                            "authn_hmac_%s%s %s\n",
                            out, i->name, total, i->help, i->name, total,
                            i->gauge ? "gauge" : "counter", i->name, total, v);
    case AUTHN_HMAC_FMT_AUTO:
        return apr_psprintf(p, "%sauthn_hmac_%s: %s\n", out, i->name, v);
    case AUTHN_HMAC_FMT_HTML:
        return apr_psprintf(p, "%s<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n",
                            out, i->name, v, i->help);
    default:
        return apr_psprintf(p, "%s%s: %s\n", out, i->name, v);
    }
}

/* A histogram in Prometheus's text format: cumulative buckets, the last
 * one +Inf, then _sum and _count. */
static const char *histogram(const char *out, enum authn_hmac_histogram h,
                             const authn_hmac_histogram_t *hist, apr_pool_t *p)
{
    const char *name = authn_hmac_histogram_name[h];
    uint64_t n = 0;
    unsigned b;

    out = apr_psprintf(p,
                       "%s# HELP authn_hmac_%s %s\n"
                       "# TYPE authn_hmac_%s histogram\n",
                       out, name, authn_hmac_histogram_help[h], name);
    for (b = 0; b < AUTHN_HMAC_BUCKETS; b++) {
        uint64_t le = authn_hmac_bucket_bounds[h][b];

        n += hist->bucket[b];
        out = apr_psprintf(
            p, "%sauthn_hmac_%s_bucket{le=\"%s\"} %" APR_UINT64_T_FMT "\n", out,
            name, le == UINT64_MAX ? "+Inf" : seconds(le, p), n);
    }
    return apr_psprintf(p,
                        "%sauthn_hmac_%s_sum %s\n"
                        "authn_hmac_%s_count %" APR_UINT64_T_FMT "\n",
                        out, name, seconds(hist->sum_usec, p), name, n);
}

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0 (RFC 3629:
 * no overlong form, no surrogate, nothing past U+10FFFF). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t n, i;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    for (i = 1; i < n; i++) {
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
            return 0;
    }
    return n;
}

/* s as f shows a string: JSON's escapes, a Prometheus label's, HTML's;
 * else control characters as '?'. Bytes that are not UTF-8 (a name a
 * client sent, cut) are '?' too: every page stays valid UTF-8. */
static const char *quoted(authn_hmac_format_t f, const char *s, apr_pool_t *p)
{
    char *out = apr_palloc(p, strlen(s) * 6 + 1), *o = out;
    int json = f == AUTHN_HMAC_FMT_JSON, prom = f == AUTHN_HMAC_FMT_PROMETHEUS;

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        size_t n = utf8_len((const unsigned char *)s);

        if (c >= 0x80) {
            if (n) {
                memcpy(o, s, n);
                o += n;
                s += n - 1;
            }
            else
                *o++ = '?';
            continue;
        }

        if ((json || prom) && (c == '"' || c == '\\'))
            o += apr_snprintf(o, 7, "\\%c", c);
        else if (json && (c < 0x20 || c == 0x7f))
            o += apr_snprintf(o, 7, "\\u%04x", c);
        else if (prom && c == '\n')
            o += apr_snprintf(o, 7, "\\n");
        else if (f == AUTHN_HMAC_FMT_HTML && strchr("<>&\"", c))
            o += apr_snprintf(o, 7, "&#%d;", c);
        else
            *o++ = (char)(c < 0x20 || c == 0x7f ? '?' : c);
    }
    *o = '\0';
    return out;
}

/* The Redis tier's words: the primary and the breaker's reason; for
 * Prometheus an info metric whose labels carry them. */
static const char *words(authn_hmac_format_t f, const char *out,
                         const authn_hmac_stats_t *s, apr_pool_t *p)
{
    const char *primary = quoted(f, s->redis_primary, p);
    const char *reason = quoted(f, s->redis_reason, p);
    const char *check = quoted(f, s->redis_check_reason, p);

    switch (f) {
    case AUTHN_HMAC_FMT_JSON:
        return apr_psprintf(p,
                            "%s,\n  \"redis_primary\": \"%s\""
                            ",\n  \"redis_breaker_reason\": \"%s\"%s%s%s",
                            out, primary, reason,
                            s->checked ? ",\n  \"redis_check_reason\": \"" : "",
                            s->checked ? check : "", s->checked ? "\"" : "");
    case AUTHN_HMAC_FMT_PROMETHEUS:
        return apr_psprintf(
            p,
            "%s# HELP authn_hmac_redis_info the Redis primary (the server, "
            "or the one the Sentinels named; \"\": none known), the "
            "breaker's last reason while it is open, and with ?check why "
            "the probe failed\n"
            "# TYPE authn_hmac_redis_info gauge\n"
            "authn_hmac_redis_info{primary=\"%s\",breaker_reason=\"%s\"%s%s%s} "
            "1\n",
            out, primary, reason, s->checked ? ",check_reason=\"" : "",
            s->checked ? check : "", s->checked ? "\"" : "");
    case AUTHN_HMAC_FMT_AUTO:
        return apr_psprintf(p,
                            "%sauthn_hmac_redis_primary: %s\n"
                            "authn_hmac_redis_breaker_reason: %s\n",
                            out, primary, reason);
    case AUTHN_HMAC_FMT_HTML:
        return apr_psprintf(p,
                            "%s<tr><td>redis_primary</td><td>%s</td><td>the "
                            "Redis primary</td></tr>\n"
                            "<tr><td>redis_breaker_reason</td><td>%s</td>"
                            "<td>the breaker's last reason while it is "
                            "open</td></tr>\n",
                            out, primary, reason);
    default:
        return apr_psprintf(
            p, "%sredis_primary: %s\nredis_breaker_reason: %s\n%s%s%s", out,
            primary, reason, s->checked ? "redis_check_reason: " : "",
            s->checked ? check : "", s->checked ? "\n" : "");
    }
}

/* The bans in force, on the text and JSON pages: the client, the user
 * (or all users), the seconds left and the ban's key in the farm's Redis
 * (after AuthHMACRedisPrefix). */
static const char *bans(authn_hmac_format_t f, const char *out,
                        const authn_hmac_stats_t *s, apr_pool_t *p)
{
    int i;

    if (f != AUTHN_HMAC_FMT_JSON && f != AUTHN_HMAC_FMT_TEXT)
        return out;
    if (f == AUTHN_HMAC_FMT_JSON)
        out = apr_pstrcat(p, out, ",\n  \"bans_in_force\": [", NULL);
    for (i = 0; i < s->nbans; i++) {
        const authn_hmac_ban_t *b = &s->bans[i];
        apr_time_t left = b->until > s->now ? b->until - s->now : 0;
        long secs = (long)((left + APR_USEC_PER_SEC - 1) / APR_USEC_PER_SEC);

        if (f == AUTHN_HMAC_FMT_JSON)
            out =
                apr_psprintf(p,
                             "%s%s\n    {\"client\": \"%s\", \"user\": \"%s\", "
                             "\"all_users\": %s, \"seconds_left\": %ld, "
                             "\"redis_key\": \"%s\"}",
                             out, i ? "," : "", quoted(f, b->client, p),
                             quoted(f, b->user, p),
                             b->user[0] ? "false" : "true", secs, b->key);
        else
            out = apr_psprintf(
                p, "%sban: %s %s%s%s %ld s left (Redis key %s)\n", out,
                quoted(f, b->client, p), b->user[0] ? "user \"" : "all users",
                b->user[0] ? quoted(f, b->user, p) : "", b->user[0] ? "\"" : "",
                secs, b->key);
    }
    if (f == AUTHN_HMAC_FMT_JSON)
        out = apr_pstrcat(p, out, s->nbans ? "\n  ]" : "]", NULL);
    return out;
}

const char *authn_hmac_status_format(const authn_hmac_stats_t *s,
                                     authn_hmac_format_t f, apr_pool_t *p)
{
    uint64_t g[NGAUGES] = {
        (uint64_t)s->pepper_random,
        (uint64_t)s->redis,
        (uint64_t)s->sentinel,
        s->redis_up,
        s->redis_up_since > 0 ? (uint64_t)apr_time_sec(s->redis_up_since) : 0,
        s->redis_breaker,
        s->redis_primary_since > 0
            ? (uint64_t)apr_time_sec(s->redis_primary_since)
            : 0,
        s->sentinel_discoveries,
        s->sentinel_switches,
        s->redis_conns,
        s->redis_tls_handshakes,
        s->redis_tls_resumed,
        s->entries,
        s->slots,
        s->negative_entries,
        s->negative_slots,
        s->verifying,
        s->waiting,
        s->max_verifications,
        (uint64_t)s->nbans,
        s->bytes,
        s->started > 0 ? (uint64_t)apr_time_sec(s->started) : 0,
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
    if (s->checked)
        out = line(f, out, 0, &check_gauge, s->redis_check, p);
    out = words(f, out, s, p);
    out = bans(f, out, s, p);
    /* NB: the histograms only for Prometheus, which computes percentiles;
     * the other outputs keep one number per name. */
    if (f == AUTHN_HMAC_FMT_PROMETHEUS)
        for (c = 0; c < AUTHN_HMAC_H_COUNT; c++)
            out = histogram(out, (enum authn_hmac_histogram)c, &s->hist[c], p);
    if (f == AUTHN_HMAC_FMT_JSON)
        return apr_pstrcat(p, out, "\n}\n", NULL);
    if (f == AUTHN_HMAC_FMT_HTML)
        return apr_pstrcat(p, out, "</table>\n", NULL);
    return out;
}

/* XXH64 (Yann Collet's xxHash, 64-bit), written from its specification. */
#define FP_P1 0x9E3779B185EBCA87ULL
#define FP_P2 0xC2B2AE3D27D4EB4FULL
#define FP_P3 0x165667B19E3779F9ULL
#define FP_P4 0x85EBCA77C2B2AE63ULL
#define FP_P5 0x27D4EB2F165667C5ULL

static uint64_t fp_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t fp_read64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t fp_round(uint64_t acc, uint64_t in)
{
    return fp_rotl(acc + in * FP_P2, 31) * FP_P1;
}

static uint64_t fp_merge(uint64_t acc, uint64_t v)
{
    return (acc ^ fp_round(0, v)) * FP_P1 + FP_P4;
}

uint64_t authn_hmac_fingerprint(const void *data, size_t len)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h;

    if (len >= 32) {
        uint64_t v1 = FP_P1 + FP_P2, v2 = FP_P2, v3 = 0, v4 = 0 - FP_P1;

        do {
            v1 = fp_round(v1, fp_read64(p));
            v2 = fp_round(v2, fp_read64(p + 8));
            v3 = fp_round(v3, fp_read64(p + 16));
            v4 = fp_round(v4, fp_read64(p + 24));
            p += 32;
        } while (end - p >= 32);
        h = fp_rotl(v1, 1) + fp_rotl(v2, 7) + fp_rotl(v3, 12) + fp_rotl(v4, 18);
        h = fp_merge(fp_merge(fp_merge(fp_merge(h, v1), v2), v3), v4);
    }
    else
        h = FP_P5;
    h += (uint64_t)len;
    for (; end - p >= 8; p += 8)
        h = fp_rotl(h ^ fp_round(0, fp_read64(p)), 27) * FP_P1 + FP_P4;
    if (end - p >= 4) {
        uint32_t v;

        memcpy(&v, p, sizeof(v));
        h = fp_rotl(h ^ ((uint64_t)v * FP_P1), 23) * FP_P2 + FP_P3;
        p += 4;
    }
    for (; p < end; p++)
        h = fp_rotl(h ^ (*p * FP_P5), 11) * FP_P1;
    h ^= h >> 33;
    h *= FP_P2;
    h ^= h >> 29;
    h *= FP_P3;
    return h ^ (h >> 32);
}

/* ------------------------------------------------------------------ logs */

void authn_hmac_vlogf(authn_hmac_log_fn log, void *baton, int level,
                      const char *fmt, va_list ap)
{
    char msg[AUTHN_HMAC_LOG_MAX];

    if (!log)
        return;
    apr_vsnprintf(msg, sizeof(msg), fmt, ap);
    log(baton, level, msg);
}

void authn_hmac_logf(authn_hmac_log_fn log, void *baton, int level,
                     const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    authn_hmac_vlogf(log, baton, level, fmt, ap);
    va_end(ap);
}
