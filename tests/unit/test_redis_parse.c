/* Unit tests of src/redis/parse.c: the server's address and the auth
 * file. */
#include "redis/redis.h"
#include "core/secret.h"
#include "unit.h"

#include <string.h>

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
    /* A URL: refused, saying what to write instead, and never repeating
     * a user or password. */
    CHECK(!strcmp(authn_hmac_redis_parse_server("redis://host:6379", &c, p),
                  "a URL is not accepted: write host:6379"));
    CHECK(strstr(authn_hmac_redis_parse_server("REDIS://[::1]:7000/2", &c, p),
                 "write [::1]:7000, and AuthHMACRedisDatabase 2"));
    CHECK(!strcmp(authn_hmac_redis_parse_server("unix:/run/r.sock", &c, p),
                  "a URL is not accepted: write /run/r.sock"));
    CHECK(
        !strcmp(authn_hmac_redis_parse_server("unix:///run/r.sock?db=1", &c, p),
                "a URL is not accepted: write /run/r.sock"));
    CHECK(!strcmp(authn_hmac_redis_parse_server("rediss://host:6380/1", &c, p),
                  "a URL is not accepted: write host:6380, and "
                  "AuthHMACRedisDatabase 1, and AuthHMACRedisTLS on"));
    CHECK(!strstr(authn_hmac_redis_parse_server("redis://u:SECRET@h:1", &c, p),
                  "SECRET"));
    CHECK(!strcmp(authn_hmac_redis_parse_server("unix:sock", &c, p),
                  "a URL is not accepted"));
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

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_parse_server, p);
    RUN(test_parse_auth, p);
    return unit_end();
}
