/* Unit tests: Redis address and auth parsing, reply interpretation and the
 * shared health state (no server needed). */
#include "authn_hmac.h"
#include "unit.h"

#include <string.h>

#include <hiredis/hiredis.h>

#define SEC(n) apr_time_from_sec(n)

static void test_parse_server(apr_pool_t *p)
{
    authn_hmac_redis_conf_t c;

    memset(&c, 0, sizeof(c));
    CHECK(!authn_hmac_redis_parse_server("127.0.0.1:6380", &c, p) &&
          !strcmp(c.host, "127.0.0.1") && c.port == 6380 && !c.socket);
    CHECK(!authn_hmac_redis_parse_server("redis.example.org", &c, p) &&
          !strcmp(c.host, "redis.example.org") && c.port == 6379);
    CHECK(!authn_hmac_redis_parse_server("[::1]:7000", &c, p) &&
          !strcmp(c.host, "::1") && c.port == 7000);
    CHECK(!authn_hmac_redis_parse_server("/run/redis/redis.sock", &c, p) &&
          !strcmp(c.socket, "/run/redis/redis.sock") && !c.host);
    CHECK(authn_hmac_redis_parse_server("", &c, p));
    CHECK(authn_hmac_redis_parse_server("host:", &c, p));
    CHECK(authn_hmac_redis_parse_server("host:0", &c, p));
    CHECK(authn_hmac_redis_parse_server("host:65536", &c, p));
    CHECK(authn_hmac_redis_parse_server("host:12x", &c, p));
    CHECK(authn_hmac_redis_parse_server(":6379", &c, p));
    CHECK(authn_hmac_redis_parse_server("::1:6379", &c, p));
    CHECK(authn_hmac_redis_parse_server("[::1", &c, p));
    CHECK(authn_hmac_redis_parse_server("[::1]x", &c, p));
    CHECK(authn_hmac_redis_parse_server("ho st:1", &c, p));
}

static authn_hmac_secret_t *secret(apr_pool_t *p, const char *text)
{
    authn_hmac_secret_t *s = NULL;

    CHECK(authn_hmac_secret_random(&s, strlen(text), p) == APR_SUCCESS);
    memset(s->data, 0, s->len);
    memcpy(s->data, text, strlen(text));
    return s;
}

static void test_parse_auth(apr_pool_t *p)
{
    authn_hmac_redis_conf_t c;

    memset(&c, 0, sizeof(c));
    CHECK(!authn_hmac_redis_parse_auth(secret(p, "s3cret\n"), &c) && !c.user &&
          !strcmp(c.password, "s3cret") && c.password_len == 6);
    CHECK(!authn_hmac_redis_parse_auth(secret(p, "app pass word\r\n"), &c) &&
          !strcmp(c.user, "app") && !strcmp(c.password, "pass word"));
    CHECK(authn_hmac_redis_parse_auth(secret(p, "\n"), &c));
    CHECK(authn_hmac_redis_parse_auth(secret(p, "a\nb\n"), &c));
    CHECK(authn_hmac_redis_parse_auth(secret(p, " pass"), &c));
    CHECK(authn_hmac_redis_parse_auth(secret(p, "user "), &c));
}

/* A reply as hiredis parses it from raw protocol bytes. */
static redisReply *reply(const char *raw)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;

    redisReaderFeed(rd, raw, strlen(raw));
    if (redisReaderGetReply(rd, &r) != REDIS_OK)
        r = NULL;
    redisReaderFree(rd);
    return r;
}

static authn_hmac_redis_rc interpret(const char *get, const char *pttl,
                                     apr_time_t now, apr_interval_time_t ttl,
                                     int *found, apr_time_t *stored,
                                     apr_time_t *expires)
{
    redisReply *g = reply(get), *t = reply(pttl);
    authn_hmac_redis_rc rc =
        authn_hmac_redis_interpret(g, t, now, ttl, found, stored, expires);

    if (g)
        freeReplyObject(g);
    if (t)
        freeReplyObject(t);
    return rc;
}

/* A bulk string reply holding a time. */
static void bulk_time(char *out, size_t size, apr_time_t t)
{
    char num[32];

    snprintf(num, sizeof(num), "%lld", (long long)t);
    snprintf(out, size, "$%u\r\n%s\r\n", (unsigned)strlen(num), num);
}

static void test_interpret(apr_pool_t *p)
{
    apr_time_t now = SEC(1000000), st = 0, ex = 0;
    char get[64];
    int found = 0;

    (void)p;
    bulk_time(get, sizeof(get), now - SEC(10));
    /* A good entry: 10 s old, 290 s left, the section's TTL 300 s. */
    CHECK(interpret(get, ":290000\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_OK &&
          found && st == now - SEC(10) && ex == now + SEC(290));
    /* A section with a 60 s TTL trusts it 50 s more, not 290. */
    CHECK(interpret(get, ":290000\r\n", now, SEC(60), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_OK &&
          found && ex == now + SEC(50));
    /* Older than this section's TTL: a miss. */
    CHECK(interpret(get, ":290000\r\n", now, SEC(5), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_OK &&
          !found);
    CHECK(interpret("$-1\r\n", ":-2\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_OK &&
          !found);
    CHECK(interpret(get, ":-2\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_OK &&
          !found);
    /* Garbage of every kind is an error and never a grant. */
    CHECK(interpret(get, ":-1\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(interpret("$3\r\nabc\r\n", ":1000\r\n", now, SEC(300), &found, &st,
                    &ex) == AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(interpret("$0\r\n\r\n", ":1000\r\n", now, SEC(300), &found, &st,
                    &ex) == AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(interpret("-ERR boom\r\n", ":1000\r\n", now, SEC(300), &found, &st,
                    &ex) == AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(interpret(":5\r\n", ":1000\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(interpret(get, "+OK\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(interpret("*1\r\n$1\r\n1\r\n", ":1000\r\n", now, SEC(300), &found,
                    &st, &ex) == AUTHN_HMAC_REDIS_ERROR &&
          !found);
    CHECK(authn_hmac_redis_interpret(NULL, NULL, now, SEC(300), &found, &st,
                                     &ex) == AUTHN_HMAC_REDIS_ERROR &&
          !found);
    /* Stored far in the future (a clock far off): not trusted. */
    bulk_time(get, sizeof(get), now + SEC(60));
    CHECK(interpret(get, ":290000\r\n", now, SEC(300), &found, &st, &ex) ==
              AUTHN_HMAC_REDIS_OK &&
          !found);
}

/* A reply announcing a huge array is refused before anything is allocated
 * for it (fuzz_redis_reply ran out of memory on "*290055555"). */
static void test_huge_array_refused(apr_pool_t *p)
{
    static const char huge[] = "*290055555\r\n";
    static const char small[] = "*2\r\n:1\r\n:2\r\n";
    redisReader *rd = redisReaderCreate();
    void *r = NULL;

    (void)p;
    CHECK(authn_hmac_redis_limit_reader(rd));
    redisReaderFeed(rd, huge, sizeof(huge) - 1);
    CHECK(redisReaderGetReply(rd, &r) == REDIS_ERR && r == NULL);
    redisReaderFree(rd);
    rd = redisReaderCreate();
    CHECK(authn_hmac_redis_limit_reader(rd));
    redisReaderFeed(rd, small, sizeof(small) - 1);
    CHECK(redisReaderGetReply(rd, &r) == REDIS_OK && r &&
          ((redisReply *)r)->elements == 2);
    if (r)
        freeReplyObject(r);
    redisReaderFree(rd);
}

static void test_health(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000);
    apr_interval_time_t outage = 0;

    (void)p;
    memset(&h, 0, sizeof(h));
    CHECK(authn_hmac_redis_allowed(&h, now));
    CHECK(authn_hmac_redis_failed(&h, now) == 1); /* the outage begins */
    CHECK(authn_hmac_redis_failed(&h, now) == 0); /* logged once */
    CHECK(authn_hmac_redis_allowed(&h, now));
    CHECK(authn_hmac_redis_failed(&h, now) == 0); /* third: breaker opens */
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(2) - 1));
    /* More failures of requests already in flight do not push it further. */
    authn_hmac_redis_failed(&h, now);
    authn_hmac_redis_failed(&h, now);
    authn_hmac_redis_failed(&h, now);
    authn_hmac_redis_failed(&h, now);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2)));
    /* Half-open: the next failures open it for longer (backoff). */
    authn_hmac_redis_failed(&h, now + SEC(2));
    authn_hmac_redis_failed(&h, now + SEC(2));
    authn_hmac_redis_failed(&h, now + SEC(2));
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(6) - 1));
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6)));
    /* An answer to a command sent before the outage began ends nothing. */
    CHECK(authn_hmac_redis_succeeded(&h, now - 1, now + SEC(7), &outage) == 0);
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(6) - 1));
    /* Recovery ends the outage once, with its length. */
    CHECK(authn_hmac_redis_succeeded(&h, now + SEC(6), now + SEC(7), &outage) ==
              1 &&
          outage == SEC(7));
    CHECK(authn_hmac_redis_succeeded(&h, now + SEC(8), now + SEC(8), &outage) ==
          0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(8)));
    CHECK(h.epoch == 1); /* connections made before it are stale */
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9)) == 1); /* a new outage */
    CHECK(h.epoch == 2);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_parse_server, p);
    RUN(test_parse_auth, p);
    RUN(test_interpret, p);
    RUN(test_huge_array_refused, p);
    RUN(test_health, p);
    return unit_end();
}
