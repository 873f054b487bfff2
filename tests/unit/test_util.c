/* Unit tests: directive value parsers and the status output. */
#include "core/util.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>

static void test_sizes(apr_pool_t *p)
{
    uint64_t v = 0;

    (void)p;
    CHECK(!authn_hmac_parse_size("4M", &v, p) && v == 4u << 20);
    CHECK(!authn_hmac_parse_size("512k", &v, p) && v == 512u << 10);
    CHECK(!authn_hmac_parse_size("1G", &v, p) && v == 1u << 30);
    CHECK(!authn_hmac_parse_size("65536", &v, p) && v == 65536);
    CHECK(!authn_hmac_parse_size("0", &v, p) && v == 0);
    CHECK(authn_hmac_parse_size("", &v, p));
    CHECK(authn_hmac_parse_size("-1", &v, p));
    CHECK(authn_hmac_parse_size("4MB", &v, p));
    CHECK(authn_hmac_parse_size("4 M", &v, p));
    CHECK(authn_hmac_parse_size("M", &v, p));
    CHECK(authn_hmac_parse_size("4T", &v, p));
    CHECK(authn_hmac_parse_size("99999999999999999999", &v, p));
    CHECK(authn_hmac_parse_size("18014398509481984G", &v, p));
}

static void test_seconds(apr_pool_t *p)
{
    uint64_t v = 0;

    (void)p;
    CHECK(!authn_hmac_parse_seconds("300", &v, p) && v == 300);
    CHECK(!authn_hmac_parse_seconds("300s", &v, p) && v == 300);
    CHECK(!authn_hmac_parse_seconds("5m", &v, p) && v == 300);
    CHECK(!authn_hmac_parse_seconds("2h", &v, p) && v == 7200);
    CHECK(!authn_hmac_parse_seconds("1d", &v, p) && v == 86400);
    CHECK(authn_hmac_parse_seconds("1.5", &v, p));
    CHECK(authn_hmac_parse_seconds("abc", &v, p));
    CHECK(authn_hmac_parse_seconds("10x", &v, p));
}

/* A fraction is refused with the amount as a whole number in a smaller
 * unit, where one holds it. */
static void test_fractions(apr_pool_t *p)
{
    static const struct {
        int size; /* parse_size's, else parse_seconds' */
        const char *in, *says;
    } cases[] = {
        {0, "0.25D", "write 6h"},
        {0, "2.5m", "write 150s"},
        {0, "1.0h", "write 1h"},
        {0, "300.5", "not accepted; no smaller unit makes it whole"},
        {1, "1.5M", "write 1536K"},
        {1, "0.5k", "write 512"},
        {1, "1.5", "round it"},
        {1, "99999999999999999.5G", "round it"},
    };
    uint64_t v = 7;
    const char *err;
    size_t i;

    err = authn_hmac_parse_seconds("1.5h", &v, p);
    CHECK(err && !strcmp(err, "a fraction, which is not accepted: write 90m"));
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err = cases[i].size ? authn_hmac_parse_size(cases[i].in, &v, p)
                            : authn_hmac_parse_seconds(cases[i].in, &v, p);
        if (!err || !strstr(err, cases[i].says))
            fprintf(stderr, "%s: %s\n", cases[i].in, err ? err : "accepted");
        CHECK(err && strstr(err, cases[i].says));
    }
    err = authn_hmac_parse_seconds("300.5", &v, NULL);
    CHECK(err && !strcmp(err, "a fraction, which is not accepted"));
    CHECK(authn_hmac_parse_size("1.5x", &v, p) &&
          !strcmp(authn_hmac_parse_size("1.5x", &v, p),
                  "not a number with a known unit"));
    err = authn_hmac_parse_size("1.12345678901G", &v, p);
    CHECK(err && !strstr(err, "write"));
    err = authn_hmac_parse_uint("2.5", 10, &v);
    CHECK(err && !strcmp(err, "a fraction, which is not accepted"));
    CHECK(v == 7);
}

static void test_uint(apr_pool_t *p)
{
    uint64_t v = 0;

    (void)p;
    CHECK(!authn_hmac_parse_uint("50", 100, &v) && v == 50);
    CHECK(!authn_hmac_parse_uint("0", 100, &v) && v == 0);
    CHECK(authn_hmac_parse_uint("101", 100, &v));
    CHECK(authn_hmac_parse_uint("50ms", 100, &v));
    CHECK(authn_hmac_parse_uint("1k", 2000, &v));
    CHECK(authn_hmac_parse_uint("-1", 100, &v));
    CHECK(authn_hmac_parse_uint("", 100, &v));
}

static void test_json_query(apr_pool_t *p)
{
    static const struct {
        const char *query;
        authn_hmac_format_t fmt;
    } cases[] = {
        {"json", AUTHN_HMAC_FMT_JSON},
        {"json=1", AUTHN_HMAC_FMT_JSON},
        {"a=b&json", AUTHN_HMAC_FMT_JSON},
        {"a;json=yes", AUTHN_HMAC_FMT_JSON},
        {"prometheus", AUTHN_HMAC_FMT_PROMETHEUS},
        {"x&prometheus=1", AUTHN_HMAC_FMT_PROMETHEUS},
        {NULL, AUTHN_HMAC_FMT_TEXT},
        {"", AUTHN_HMAC_FMT_TEXT},
        {"jsonx", AUTHN_HMAC_FMT_TEXT},
        {"prometheusx", AUTHN_HMAC_FMT_TEXT},
        {"x=json", AUTHN_HMAC_FMT_TEXT},
        {"&&=", AUTHN_HMAC_FMT_TEXT},
        {"prometheus&json", AUTHN_HMAC_FMT_PROMETHEUS},
        {"prometheus&check", AUTHN_HMAC_FMT_PROMETHEUS},
    };
    size_t i;

    (void)p;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        authn_hmac_format_t fmt = authn_hmac_status_query(cases[i].query);

        if (fmt != cases[i].fmt)
            fprintf(stderr, "%s: format %d\n",
                    cases[i].query ? cases[i].query : "(none)", (int)fmt);
        CHECK(fmt == cases[i].fmt);
    }
    CHECK(authn_hmac_status_check("prometheus&check"));
    CHECK(authn_hmac_status_check("check=1;json"));
    CHECK(!authn_hmac_status_check("checks"));
    CHECK(!authn_hmac_status_check("x=check"));
    CHECK(!authn_hmac_status_check(NULL));
}

/* The page of s in each format (NULL: not wanted). */
static void format_pages(const authn_hmac_stats_t *s, const char **txt,
                         const char **json, const char **prom, const char **aut,
                         const char **html, apr_pool_t *p)
{
    if (txt)
        *txt = authn_hmac_status_format(s, AUTHN_HMAC_FMT_TEXT, p);
    if (json)
        *json = authn_hmac_status_format(s, AUTHN_HMAC_FMT_JSON, p);
    if (prom)
        *prom = authn_hmac_status_format(s, AUTHN_HMAC_FMT_PROMETHEUS, p);
    if (aut)
        *aut = authn_hmac_status_format(s, AUTHN_HMAC_FMT_AUTO, p);
    if (html)
        *html = authn_hmac_status_format(s, AUTHN_HMAC_FMT_HTML, p);
}

/* The counters and histograms the status pages below show. */
static void example_stats(authn_hmac_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->counter[AUTHN_HMAC_C_HITS] = 12;
    s->counter[AUTHN_HMAC_C_VERIFICATIONS] = 2;
    s->counter[AUTHN_HMAC_C_VERIFY_USEC] = 500000;
    s->counter[AUTHN_HMAC_C_VERIFYING_MAX] = 2;
    s->entries = 1;
    s->started = apr_time_from_sec(1764000000);
    /* 1 ms and 2 ms (cost-5 bcrypt), a 12 s one beyond the last bound. */
    s->hist[AUTHN_HMAC_H_VERIFY].bucket[0] = 1;
    s->hist[AUTHN_HMAC_H_VERIFY].bucket[1] = 1;
    s->hist[AUTHN_HMAC_H_VERIFY].bucket[AUTHN_HMAC_BUCKETS - 1] = 1;
    s->hist[AUTHN_HMAC_H_VERIFY].sum_usec = 12003000;
}

static void test_status_format(apr_pool_t *p)
{
    authn_hmac_stats_t s;
    const char *txt, *json, *prom, *aut, *html;

    example_stats(&s);
    format_pages(&s, &txt, &json, &prom, &aut, &html, p);
    CHECK(strstr(txt, "hits: 12\n"));
    CHECK(strstr(txt, "verify_seconds: 0.5\n"));
    CHECK(!strstr(txt, "avg") && !strstr(txt, "usec"));
    CHECK(!strstr(txt, "_bucket"));
    CHECK(json[0] == '{' && strstr(json, "\"hits\": 12,"));
    CHECK(strstr(json, "\"entries\": 1,"));
    CHECK(strstr(json, "\"evictions\": 0,"));
    CHECK(strstr(json, "\"verify_seconds\": 0.5,"));
    CHECK(strstr(json, "\"start_time_seconds\": 1764000000,\n"));
    CHECK(strstr(json, "\"redis_primary\": \"\",\n  "
                       "\"redis_breaker_reason\": \"\",\n  "
                       "\"bans_in_force\": []\n}\n"));
    CHECK(strstr(txt, "bans_active: 0\n") && !strstr(txt, "ban: "));
    /* Prometheus: counters end in _total, each with HELP and TYPE. */
    CHECK(strstr(prom, "# HELP authn_hmac_hits_total credentials found in "
                       "shared memory\n# TYPE authn_hmac_hits_total counter\n"
                       "authn_hmac_hits_total 12\n"));
    CHECK(strstr(prom, "# TYPE authn_hmac_verifying_max gauge\n"
                       "authn_hmac_verifying_max 2\n"));
    CHECK(strstr(prom, "# TYPE authn_hmac_entries gauge\n"
                       "authn_hmac_entries 1\n"));
    /* Base units: seconds, with the microseconds kept. */
    CHECK(strstr(prom, "# TYPE authn_hmac_verify_seconds_total counter\n"
                       "authn_hmac_verify_seconds_total 0.5\n"));
    CHECK(strstr(prom, "# TYPE authn_hmac_start_time_seconds gauge\n"
                       "authn_hmac_start_time_seconds 1764000000\n"));
    CHECK(!strstr(prom, "avg") && !strstr(prom, "usec") &&
          !strstr(prom, "uptime"));
    /* Histograms: cumulative buckets up to +Inf, which is the count. */
    CHECK(strstr(prom,
                 "# TYPE authn_hmac_verify_duration_seconds histogram\n"
                 "authn_hmac_verify_duration_seconds_bucket{le=\"0.001\"} "
                 "1\n"
                 "authn_hmac_verify_duration_seconds_bucket{le=\"0.0025\"} "
                 "2\n"));
    CHECK(strstr(prom,
                 "authn_hmac_verify_duration_seconds_bucket{le=\"10\"} 2\n"
                 "authn_hmac_verify_duration_seconds_bucket{le=\"+Inf\"} "
                 "3\n"
                 "authn_hmac_verify_duration_seconds_sum 12.003\n"
                 "authn_hmac_verify_duration_seconds_count 3\n"));
    CHECK(strstr(prom,
                 "# TYPE authn_hmac_redis_duration_seconds histogram\n"
                 "authn_hmac_redis_duration_seconds_bucket{le=\"0.0001\"} "
                 "0\n"));
    CHECK(strstr(prom,
                 "authn_hmac_redis_duration_seconds_bucket{le=\"+Inf\"} 0\n"
                 "authn_hmac_redis_duration_seconds_sum 0\n"
                 "authn_hmac_redis_duration_seconds_count 0\n"));
    CHECK(strstr(aut, "authn_hmac_hits: 12\n"));
    CHECK(strstr(aut, "authn_hmac_verify_seconds: 0.5\n"));
    CHECK(!strstr(aut, "_bucket") && !strstr(json, "_bucket") &&
          !strstr(html, "_bucket"));
    CHECK(strstr(html, "<tr><td>hits</td><td>12</td>"));
    CHECK(strstr(html, "</table>\n"));
}

/* The Redis tier's words, escaped for each: a reason is Redis's text. */
static void test_status_redis(apr_pool_t *p)
{
    authn_hmac_stats_t s;
    const char *txt, *json, *prom, *aut, *html;

    example_stats(&s);
    s.redis = 1;
    s.redis_up = 0;
    s.sentinel_switches = 3;
    strcpy(s.redis_primary, "[fd00::1]:6379");
    strcpy(s.redis_reason, "AUTH refused: \"x\\y\"\n<b>");
    format_pages(&s, &txt, &json, &prom, &aut, &html, p);
    CHECK(strstr(txt, "redis_up: 0\n"));
    CHECK(strstr(txt, "redis_primary: [fd00::1]:6379\n"));
    CHECK(strstr(txt, "redis_breaker_reason: AUTH refused: \"x\\y\"?<b>\n"));
    CHECK(strstr(json, "\"redis_breaker_reason\": \"AUTH refused: "
                       "\\\"x\\\\y\\\"\\u000a<b>\",\n"));
    CHECK(strstr(json, "\"sentinel_switches\": 3,"));
    CHECK(strstr(prom, "# TYPE authn_hmac_sentinel_switches_total counter\n"
                       "authn_hmac_sentinel_switches_total 3\n"));
    CHECK(strstr(prom,
                 "authn_hmac_redis_info{primary=\"[fd00::1]:6379\","
                 "breaker_reason=\"AUTH refused: \\\"x\\\\y\\\"\\n<b>\"} 1\n"));
    CHECK(strstr(aut, "authn_hmac_redis_primary: [fd00::1]:6379\n"));
    CHECK(strstr(html, "<td>AUTH refused: &#34;x\\y&#34;?&#60;b&#62;</td>"));
}

/* XXH64's published values (seed 0), and one change of one bit. */
static void test_fingerprint(apr_pool_t *p)
{
    static const char spam[] = "Nobody inspects the spammish repetition";

    (void)p;
    CHECK(authn_hmac_fingerprint("", 0) == 0xEF46DB3751D8E999ULL);
    CHECK(authn_hmac_fingerprint("a", 1) == 0xD24EC4F1A98C6E5BULL);
    CHECK(authn_hmac_fingerprint("abc", 3) == 0x44BC2CF5AD770999ULL);
    CHECK(authn_hmac_fingerprint(spam, sizeof(spam) - 1) ==
          0xFBCEA83C8A378BF1ULL);
    CHECK(authn_hmac_fingerprint("Nobody inspects the spammish repetitioo",
                                 sizeof(spam) - 1) !=
          authn_hmac_fingerprint(spam, sizeof(spam) - 1));
}

/* The bans in force: listed on the text and JSON pages with their user
 * (escaped: a name is the client's text) or all users, the seconds left
 * (rounded up) and the farm key; counted everywhere. */
static void test_status_bans(apr_pool_t *p)
{
    static authn_hmac_stats_t s;
    const char *txt, *json, *prom;

    memset(&s, 0, sizeof(s));
    s.now = apr_time_from_sec(1764000000);
    s.nbans = 2;
    strcpy(s.bans[0].client, "192.0.2.7");
    strcpy(s.bans[0].user, "zq9\"\n<x>");
    s.bans[0].until = s.now + apr_time_from_msec(599500);
    strcpy(s.bans[0].key, "b:00ff");
    strcpy(s.bans[1].client, "2001:db8::1");
    s.bans[1].until = s.now + apr_time_from_sec(12);
    strcpy(s.bans[1].key, "b:0a0b");
    format_pages(&s, &txt, &json, &prom, NULL, NULL, p);
    CHECK(strstr(txt, "bans_active: 2\n"));
    CHECK(strstr(txt, "ban: 192.0.2.7 user \"zq9\"?<x>\" 600 s left (Redis "
                      "key b:00ff)\n"));
    CHECK(strstr(txt, "ban: 2001:db8::1 all users 12 s left (Redis key "
                      "b:0a0b)\n"));
    CHECK(strstr(json,
                 "\"bans_in_force\": [\n    {\"client\": "
                 "\"192.0.2.7\", \"user\": \"zq9\\\"\\u000a<x>\", "
                 "\"all_users\": false, \"seconds_left\": 600, "
                 "\"redis_key\": \"b:00ff\"},\n    {\"client\": "
                 "\"2001:db8::1\", \"user\": \"\", \"all_users\": true, "
                 "\"seconds_left\": 12, \"redis_key\": \"b:0a0b\"}\n  ]\n}"));
    CHECK(strstr(prom, "authn_hmac_bans_active 2\n") && !strstr(prom, "zq9"));
    /* Not UTF-8 (a name cut, Latin-1 bytes, an overlong form, a
     * surrogate): '?' each; UTF-8 kept. */
    s.nbans = 1;
    strcpy(s.bans[0].user,
           "\xc3\xa9t\xe9\xc3\xc0\xaf\xed\xa0\x80\xf0\x9f\x98\x80");
    json = authn_hmac_status_format(&s, AUTHN_HMAC_FMT_JSON, p);
    txt = authn_hmac_status_format(&s, AUTHN_HMAC_FMT_TEXT, p);
    CHECK(strstr(json, "\"user\": \"\xc3\xa9t???????\xf0\x9f\x98\x80\""));
    CHECK(strstr(txt, "user \"\xc3\xa9t???????\xf0\x9f\x98\x80\""));
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_sizes, p);
    RUN(test_seconds, p);
    RUN(test_fractions, p);
    RUN(test_uint, p);
    RUN(test_json_query, p);
    RUN(test_status_format, p);
    RUN(test_status_redis, p);
    RUN(test_status_bans, p);
    RUN(test_fingerprint, p);
    return unit_end();
}
