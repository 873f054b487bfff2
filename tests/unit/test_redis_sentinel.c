/* Unit tests: the Sentinel directives' values, the replies of SENTINEL
 * get-master-addr-by-name and ROLE, and the primary the processes share
 * (no server needed). */
#include "redis/redis.h"
#include "redis/redis_testing.h"
#include "redis/sentinel.h"
#include "shm/table.h"
#include "unit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define MS(n) apr_time_from_msec(n)

static void test_parse(apr_pool_t *p)
{
    authn_hmac_sentinel_conf_t sc;
    int i;

    memset(&sc, 0, sizeof(sc));
    CHECK(!authn_hmac_sentinel_parse("10.0.0.5:26380", &sc, p));
    CHECK(!authn_hmac_sentinel_parse("sentinel.example.org", &sc, p));
    CHECK(!authn_hmac_sentinel_parse("[::1]:26381", &sc, p));
    CHECK(!authn_hmac_sentinel_parse("[::1]", &sc, p));
    CHECK(sc.n == 4);
    CHECK(!strcmp(sc.host[0], "10.0.0.5") && sc.port[0] == 26380);
    /* A port left out is Sentinel's own. */
    CHECK(!strcmp(sc.host[1], "sentinel.example.org") && sc.port[1] == 26379);
    CHECK(!strcmp(sc.host[2], "::1") && sc.port[2] == 26381);
    CHECK(sc.port[3] == 26379);
    CHECK(authn_hmac_sentinel_parse("/run/sentinel.sock", &sc, p));
    CHECK(authn_hmac_sentinel_parse("host:0", &sc, p));
    CHECK(authn_hmac_sentinel_parse("redis://host:26379", &sc, p));
    CHECK(authn_hmac_sentinel_parse("bad host:1", &sc, p));
    CHECK(sc.n == 4);
    for (i = 4; i < AUTHN_HMAC_SENTINEL_MAX; i++)
        CHECK(!authn_hmac_sentinel_parse("10.0.0.9:26379", &sc, p));
    CHECK(authn_hmac_sentinel_parse("10.0.0.9:26379", &sc, p));
    CHECK(sc.n == AUTHN_HMAC_SENTINEL_MAX);
}

static void test_master_name(apr_pool_t *p)
{
    (void)p;
    CHECK(!authn_hmac_sentinel_check_master("mymaster"));
    CHECK(!authn_hmac_sentinel_check_master("farm-1.cache_a"));
    CHECK(authn_hmac_sentinel_check_master(""));
    CHECK(authn_hmac_sentinel_check_master("my master"));
    CHECK(authn_hmac_sentinel_check_master("m\r\nFLUSHALL"));
    CHECK(authn_hmac_sentinel_check_master(
        "a1234567890123456789012345678901234567890123456789012345678901234"));
}

/* The reply RESP text makes, read as the client reads one (bounded). */
static redisReply *reply_of(const char *resp)
{
    redisReader *r = redisReaderCreate();
    void *reply = NULL;

    if (!r || !authn_hmac_redis_limit_reader(r) ||
        redisReaderFeed(r, resp, strlen(resp)) != REDIS_OK ||
        redisReaderGetReply(r, &reply) != REDIS_OK)
        reply = NULL;
    if (r)
        redisReaderFree(r);
    return reply;
}

static int addr_of(const char *resp, char *host, int *port)
{
    redisReply *r = reply_of(resp);
    int rc = authn_hmac_sentinel_addr_reply(r, host, port);

    if (r)
        freeReplyObject(r);
    return rc;
}

static int role_of(const char *resp)
{
    redisReply *r = reply_of(resp);
    int rc = authn_hmac_sentinel_role_reply(r);

    if (r)
        freeReplyObject(r);
    return rc;
}

static void test_addr_reply(apr_pool_t *p)
{
    char host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    int port = 0;

    (void)p;
    CHECK(addr_of("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", host, &port) ==
              1 &&
          !strcmp(host, "127.0.0.1") && port == 6380);
    CHECK(addr_of("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", host, &port) == 1 &&
          !strcmp(host, "::1") && port == 65535);
    CHECK(addr_of("*2\r\n$16\r\nredis-1.internal\r\n$4\r\n6379\r\n", host,
                  &port) == 1 &&
          !strcmp(host, "redis-1.internal"));
    /* No such master. */
    CHECK(addr_of("*-1\r\n", host, &port) == 0);
    CHECK(addr_of("$-1\r\n", host, &port) == 0);
    /* Anything else is no answer. */
    CHECK(addr_of("-IDONTKNOW I don't know\r\n", host, &port) == -1);
    CHECK(addr_of("-NOAUTH Authentication required.\r\n", host, &port) == -1);
    CHECK(addr_of(":1\r\n", host, &port) == -1);
    CHECK(addr_of("*1\r\n$9\r\n127.0.0.1\r\n", host, &port) == -1);
    CHECK(addr_of("*3\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\n1\r\n", host, &port) ==
          -1);
    CHECK(addr_of("*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n", host, &port) == -1);
    CHECK(addr_of("*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n", host, &port) == -1);
    CHECK(addr_of("*2\r\n$9\r\n127.0.0.1\r\n$5\r\n65536\r\n", host, &port) ==
          -1);
    CHECK(addr_of("*2\r\n$9\r\n127.0.0.1\r\n$6\r\n063790\r\n", host, &port) ==
          -1);
    CHECK(addr_of("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n63a9\r\n", host, &port) ==
          -1);
    CHECK(addr_of("*2\r\n$0\r\n\r\n$4\r\n6379\r\n", host, &port) == -1);
    /* A name that would go into a log line or a command as it is. */
    CHECK(addr_of("*2\r\n$9\r\n1.2.3.4\nX\r\n$4\r\n6379\r\n", host, &port) ==
          -1);
    CHECK(addr_of("*2\r\n$7\r\na b.c.d\r\n$4\r\n6379\r\n", host, &port) == -1);
    CHECK(addr_of("*2\r\n$7\r\na%b.c.d\r\n$4\r\n6379\r\n", host, &port) == -1);
    CHECK(authn_hmac_sentinel_addr_reply(NULL, host, &port) == -1);
    /* A hostile array: refused by the reader before it is allocated. */
    CHECK(reply_of("*2000000000\r\n") == NULL);
}

static void test_role_reply(apr_pool_t *p)
{
    (void)p;
    CHECK(role_of("*3\r\n$6\r\nmaster\r\n:3129659\r\n*1\r\n*3\r\n$9\r\n127."
                  "0.0.1\r\n$4\r\n9001\r\n$7\r\n3129242\r\n") == 1);
    CHECK(role_of("*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n") == 1);
    CHECK(role_of("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:9000\r\n$"
                  "9\r\nconnected\r\n:3167038\r\n") == 0);
    CHECK(role_of("*2\r\n$8\r\nsentinel\r\n*1\r\n$8\r\nmymaster\r\n") == 0);
    CHECK(role_of("-LOADING Redis is loading the dataset in memory\r\n") == -1);
    CHECK(role_of("+master\r\n") == -1);
    CHECK(role_of("*0\r\n") == -1);
    CHECK(role_of("*1\r\n$7\r\nmasterx\r\n") == -1);
    CHECK(role_of("*1\r\n:1\r\n") == -1);
    CHECK(authn_hmac_sentinel_role_reply(NULL) == -1);
}

/* One look, as the discovery thread takes it: claimed at `at`, finished
 * at `done` with ip, host and port (NULL: none found): finish's answer,
 * or -2 if the claim was refused. */
static int one_look(authn_hmac_sentinel_shared_t *sh, apr_time_t at,
                    apr_time_t done, const char *ip, const char *host, int port)
{
    int64_t c = authn_hmac_sentinel_claim(sh, at, MS(3000));

    return c ? authn_hmac_sentinel_finish(sh, c, ip, host, port, done) : -2;
}

static void test_shared(apr_pool_t *p)
{
    static authn_hmac_sentinel_shared_t sh;
    char ip[AUTHN_HMAC_SENTINEL_IP_MAX], host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    int port = 0;
    apr_time_t t = apr_time_from_sec(1000);
    int64_t c, late;

    (void)p;
    memset(&sh, 0, sizeof(sh));
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 0);
    /* None known: due at once. */
    CHECK(authn_hmac_sentinel_due(&sh, t, MS(500), MS(5000)));
    /* One process at a time. */
    CHECK((late = authn_hmac_sentinel_claim(&sh, t, MS(3000))) != 0);
    CHECK(!authn_hmac_sentinel_claim(&sh, t + MS(100), MS(3000)));
    CHECK(!authn_hmac_sentinel_claim(&sh, t + MS(2999), MS(3000)));
    /* ...unless it died asking, or hung: its claim ends, and then what it
     * found is not written over the new claimant's. */
    CHECK((c = authn_hmac_sentinel_claim(&sh, t + MS(3001), MS(3000))) != 0);
    CHECK(authn_hmac_sentinel_finish(&sh, late, "10.6.6.6", "10.6.6.6", 6379,
                                     t + MS(3050)) == -1);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 0);
    CHECK(sh.claim == c);
    t += MS(3100);
    CHECK(authn_hmac_sentinel_finish(&sh, c, "127.0.0.1", "127.0.0.1", 6380,
                                     t) == 1);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 1 &&
          !strcmp(ip, "127.0.0.1") && port == 6380);
    CHECK(sh.claim == 0 && !sh.failing);
    /* Healthy: not before the period, nor while within the gap. */
    CHECK(!authn_hmac_sentinel_due(&sh, t + MS(100), MS(500), MS(5000)));
    CHECK(!authn_hmac_sentinel_due(&sh, t + MS(4900), MS(500), MS(5000)));
    CHECK(authn_hmac_sentinel_due(&sh, t + MS(5000), MS(500), MS(5000)));
    /* A failure asks for a look, after the gap. */
    authn_hmac_sentinel_suspect(&sh, t + MS(200));
    CHECK(!authn_hmac_sentinel_due(&sh, t + MS(300), MS(500), MS(5000)));
    CHECK(authn_hmac_sentinel_due(&sh, t + MS(500), MS(500), MS(5000)));
    /* The same answer is no new generation. */
    CHECK(one_look(&sh, t + MS(500), t + MS(600), "127.0.0.1", "127.0.0.1",
                   6380) == 0);
    t += MS(600);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 1);
    CHECK(!authn_hmac_sentinel_due(&sh, t + MS(600), MS(500), MS(5000)));
    /* No answer: the last address stays, and it is asked again soon. */
    CHECK(one_look(&sh, t + MS(5000), t + MS(5100), NULL, NULL, 0) == 0);
    t += MS(5100);
    CHECK(sh.failing && sh.claim == 0);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 1 && port == 6380);
    CHECK(authn_hmac_sentinel_due(&sh, t + MS(500), MS(500), MS(5000)));
    /* A new primary: a new generation. */
    CHECK(one_look(&sh, t + MS(500), t + MS(600), "127.0.0.1", "127.0.0.1",
                   6381) == 1);
    t += MS(600);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 2 && port == 6381);
    CHECK(!sh.failing);
    CHECK(one_look(&sh, t + MS(600), t + MS(700), "::1", "redis-2.internal",
                   6379) == 1);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 3 &&
          !strcmp(ip, "::1") && !strcmp(host, "redis-2.internal"));
    /* A writer killed within its write, after the fields but before the
     * closing count, left the count odd: nobody can read the primary.
     * The next look repairs it, even with the same answer. */
    __atomic_add_fetch(&sh.seq, 1, __ATOMIC_RELAXED);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 0);
    CHECK(one_look(&sh, t + MS(1300), t + MS(1400), "::1", "redis-2.internal",
                   6379) == 1);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 4 &&
          !strcmp(ip, "::1") && port == 6379);
    /* A restart that changed the settings: the primary learnt under the
     * old ones is none, a look is due at once, and the same answer under
     * the new ones is published again. */
    authn_hmac_sentinel_restart(&sh, t + MS(1500));
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 0);
    CHECK(authn_hmac_sentinel_due(&sh, t + MS(1500), MS(500), MS(5000)));
    CHECK(one_look(&sh, t + MS(1500), t + MS(1600), "::1", "redis-2.internal",
                   6379) == 1);
    CHECK(authn_hmac_sentinel_read(&sh, ip, host, &port) == 6 &&
          !strcmp(ip, "::1") && port == 6379);
}

/* The pool's view: an address to connect to, taken only when new, with
 * the name its certificate must carry. */
static void test_pool_addr(apr_pool_t *p)
{
    static authn_hmac_sentinel_shared_t sh;
    authn_hmac_sentinel_conf_t sc;
    authn_hmac_redis_conf_t redis;
    authn_hmac_sentinel_t *s = NULL;
    authn_hmac_redis_addr_t a;
    char peer[AUTHN_HMAC_SENTINEL_HOST_MAX];
    uint64_t gen = 0;
    struct sockaddr_in *in = (struct sockaddr_in *)&a.sa;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a.sa;

    memset(&sh, 0, sizeof(sh));
    memset(&sc, 0, sizeof(sc));
    memset(&redis, 0, sizeof(redis));
    /* NB: without health no thread starts; the handle still reads. */
    CHECK(authn_hmac_sentinel_start(&s, &sc, &redis, &sh, NULL, NULL, NULL,
                                    p) == APR_EINVAL);
    CHECK(authn_hmac_sentinel_shared(s) == &sh);
    CHECK(authn_hmac_sentinel_addr(s, &gen, &a, peer) == -1 && gen == 0);
    authn_hmac_sentinel_finish(&sh,
                               authn_hmac_sentinel_claim(&sh, MS(1), MS(1000)),
                               "127.0.0.1", "127.0.0.1", 6380, MS(2));
    CHECK(authn_hmac_sentinel_addr(s, &gen, &a, peer) == 1 && gen == 1);
    CHECK(in->sin_family == AF_INET && ntohs(in->sin_port) == 6380 &&
          in->sin_addr.s_addr == htonl(0x7f000001) && a.len == sizeof(*in));
    CHECK(!strcmp(peer, "127.0.0.1"));
    CHECK(authn_hmac_sentinel_addr(s, &gen, &a, peer) == 0 && gen == 1);
    authn_hmac_sentinel_finish(&sh,
                               authn_hmac_sentinel_claim(&sh, MS(3), MS(1000)),
                               "::1", "redis-2.internal", 6390, MS(4));
    CHECK(authn_hmac_sentinel_addr(s, &gen, &a, peer) == 1 && gen == 2);
    CHECK(in6->sin6_family == AF_INET6 && ntohs(in6->sin6_port) == 6390);
    CHECK(!strcmp(peer, "redis-2.internal"));
    /* With TLS and a name set, that name. */
    redis.tls = (authn_hmac_redis_tls_t *)(uintptr_t)1; /* never used */
    sc.primary_name = "redis.farm.internal";
    authn_hmac_sentinel_finish(&sh,
                               authn_hmac_sentinel_claim(&sh, MS(5), MS(1000)),
                               "127.0.0.1", "127.0.0.1", 6381, MS(6));
    CHECK(authn_hmac_sentinel_addr(s, &gen, &a, peer) == 1 && gen == 3);
    CHECK(!strcmp(peer, "redis.farm.internal"));
}

/* A reader never sees half of one address and half of another. */
static authn_hmac_sentinel_shared_t torn;
static int torn_stop;

static void *writer(void *arg)
{
    apr_time_t t = MS(1);
    int i = 0;

    (void)arg;
    while (!__atomic_load_n(&torn_stop, __ATOMIC_RELAXED)) {
        i++;
        authn_hmac_sentinel_finish(
            &torn, authn_hmac_sentinel_claim(&torn, t, MS(10)),
            i % 2 ? "10.0.0.1" : "fd00::2222:3333:4444",
            i % 2 ? "a.internal" : "bbbbbbbbbbbbbbbbbbbbbbbbb.internal",
            i % 2 ? 1111 : 2222, t);
        t += MS(1);
    }
    return NULL;
}

static void test_no_torn_reads(apr_pool_t *p)
{
    char ip[AUTHN_HMAC_SENTINEL_IP_MAX], host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    pthread_t th;
    int i, port, bad = 0, seen = 0;

    (void)p;
    memset(&torn, 0, sizeof(torn));
    pthread_create(&th, NULL, writer, NULL);
    while (!__atomic_load_n(&torn.gen, __ATOMIC_RELAXED))
        ;
    for (i = 0; i < 200000; i++) {
        if (!authn_hmac_sentinel_read(&torn, ip, host, &port))
            continue;
        seen++;
        if (port == 1111)
            bad += strcmp(ip, "10.0.0.1") || strcmp(host, "a.internal");
        else
            bad += port != 2222 || strcmp(ip, "fd00::2222:3333:4444") ||
                   strcmp(host, "bbbbbbbbbbbbbbbbbbbbbbbbb.internal");
    }
    __atomic_store_n(&torn_stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    CHECK(seen > 0);
    CHECK(bad == 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_parse, p);
    RUN(test_master_name, p);
    RUN(test_addr_reply, p);
    RUN(test_role_reply, p);
    RUN(test_shared, p);
    RUN(test_pool_addr, p);
    RUN(test_no_torn_reads, p);
    return unit_end();
}
