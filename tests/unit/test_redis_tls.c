/* Unit tests of src/redis/tls.c (no server needed): the name a certificate is
 * checked against, the context's refusals of what the directives name,
 * and a handshake bounded by its deadline whatever the peer does. */
#include "redis/redis.h"
#include "core/util.h"
#include "redis/redis_testing.h"
#include "unit.h"

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_peer(apr_pool_t *p)
{
    int ip = -1;

    (void)p;
    CHECK(!strcmp(authn_hmac_redis_tls_peer(NULL, "redis.example", &ip),
                  "redis.example") &&
          ip == 0);
    CHECK(
        !strcmp(authn_hmac_redis_tls_peer(NULL, "10.0.0.5", &ip), "10.0.0.5") &&
        ip == 1);
    CHECK(!strcmp(authn_hmac_redis_tls_peer(NULL, "::1", &ip), "::1") &&
          ip == 1);
    /* The override wins, and decides the kind. */
    CHECK(!strcmp(authn_hmac_redis_tls_peer("redis.example", "10.0.0.5", &ip),
                  "redis.example") &&
          ip == 0);
    CHECK(!strcmp(authn_hmac_redis_tls_peer("192.0.2.1", "redis.example", &ip),
                  "192.0.2.1") &&
          ip == 1);
    CHECK(!strcmp(authn_hmac_redis_tls_peer("", "redis.example", &ip),
                  "redis.example"));
    /* Not an address: a name (that the certificate must carry). */
    CHECK(authn_hmac_redis_tls_peer(NULL, "10.0.0", &ip) && ip == 0);
    CHECK(authn_hmac_redis_tls_peer(NULL, NULL, &ip) == NULL);
}

static void test_create_refusals(apr_pool_t *p)
{
    authn_hmac_redis_tls_conf_t tc;
    authn_hmac_redis_tls_t *t = NULL;
    authn_hmac_tls_part part;
    const char *err;
    char path[] = "/tmp/authn_hmac_tls_XXXXXX";
    int fd = mkstemp(path);

    CHECK(fd >= 0);
    CHECK(write(fd, "not a certificate\n", 18) == 18);
    close(fd);
    memset(&tc, 0, sizeof(tc));
    err = authn_hmac_redis_tls_create(&t, &tc, NULL, &part, p);
    CHECK(err && part == AUTHN_HMAC_TLS_NAME);
    /* The default store, a name: a context. */
    err = authn_hmac_redis_tls_create(&t, &tc, "redis.example", &part, p);
    CHECK(!err && t);
    tc.ca_file = path;
    err = authn_hmac_redis_tls_create(&t, &tc, "redis.example", &part, p);
    CHECK(err && part == AUTHN_HMAC_TLS_CA && strstr(err, path));
    tc.ca_file = NULL;
    tc.cert_file = path;
    err = authn_hmac_redis_tls_create(&t, &tc, "redis.example", &part, p);
    CHECK(err && part == AUTHN_HMAC_TLS_CERT);
    unlink(path);
}

/* A peer that never answers, and one that answers garbage: the handshake
 * ends at the deadline, or at once, never later. */
static void test_handshake_deadline(apr_pool_t *p)
{
    authn_hmac_redis_tls_conf_t tc;
    authn_hmac_redis_tls_t *t = NULL;
    authn_hmac_tls_part part;
    struct ssl_st *ssl = NULL;
    const char *why = NULL;
    int sv[2], resumed = 0;
    apr_time_t t0;
    authn_hmac_redis_rc rc;

    memset(&tc, 0, sizeof(tc));
    CHECK(!authn_hmac_redis_tls_create(&t, &tc, "127.0.0.1", &part, p));
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    t0 = authn_hmac_monotonic();
    rc = authn_hmac_redis_tls_connect(t, sv[0], t0 + 200000, &ssl, &resumed,
                                      &why, p);
    CHECK(rc == AUTHN_HMAC_REDIS_TIMEOUT && !ssl);
    CHECK(why && strstr(why, "TLS handshake: timed out"));
    CHECK(authn_hmac_monotonic() - t0 >= 190000);
    CHECK(authn_hmac_monotonic() - t0 < 700000);
    close(sv[0]);
    close(sv[1]);

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    CHECK(write(sv[1], "+OK\r\n+OK\r\n", 10) == 10); /* plain Redis */
    t0 = authn_hmac_monotonic();
    rc = authn_hmac_redis_tls_connect(t, sv[0], t0 + 2000000, &ssl, &resumed,
                                      &why, p);
    CHECK(rc == AUTHN_HMAC_REDIS_ERROR && !ssl);
    CHECK(why && !strncmp(why, "TLS handshake: ", 15));
    CHECK(authn_hmac_monotonic() - t0 < 1000000);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_peer, p);
    RUN(test_create_refusals, p);
    RUN(test_handshake_deadline, p);
    return unit_end();
}
