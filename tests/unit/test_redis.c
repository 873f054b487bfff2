/* Unit tests: Redis address and auth parsing, reply interpretation and the
 * shared health state (no server needed). */
#include "authn_hmac/redis.h"
#include "authn_hmac/cred.h"
#include "authn_hmac/secret.h"
#include "authn_hmac/table.h"
#include "authn_hmac/util.h"
#include "unit.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <apr_strings.h>
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

static authn_hmac_mac_t *test_mac(apr_pool_t *p, unsigned char fill)
{
    authn_hmac_secret_t *pep = NULL;
    authn_hmac_mac_t *m = NULL;

    CHECK(authn_hmac_secret_alloc(&pep, 32, p) == APR_SUCCESS);
    memset(pep->data, fill, 32);
    CHECK(authn_hmac_mac_create(&m, pep, p) == APR_SUCCESS);
    return m;
}

static authn_hmac_redis_rc interpret(const char *raw, const authn_hmac_mac_t *m,
                                     const unsigned char *uid,
                                     authn_hmac_value_state *st)
{
    redisReply *g = reply(raw);
    authn_hmac_entries_t es;
    authn_hmac_redis_rc rc = authn_hmac_redis_interpret(g, m, uid, &es, st);

    if (g)
        freeReplyObject(g);
    return rc;
}

static void test_interpret(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1), *other = test_mac(p, 2);
    unsigned char uid[32], uid2[32], key[32];
    authn_hmac_entries_t es;
    authn_hmac_value_state st;
    apr_time_t now = SEC(1700000000);
    char v[AUTHN_HMAC_VALUE_MAX], raw[AUTHN_HMAC_VALUE_MAX + 32];
    size_t len;

    authn_hmac_user_id(m, "/s", 2, "alice", 5, uid);
    authn_hmac_user_id(m, "/s", 2, "bob", 3, uid2);
    authn_hmac_mac_compute(m, "/s", 2, "alice", 5, "pw", 2, "h", 1, key);
    es.n = 0;
    authn_hmac_entries_add(&es, key, now, now);
    len = authn_hmac_value_encode(m, uid, &es, v);
    snprintf(raw, sizeof(raw), "$%u\r\n%s\r\n", (unsigned)len, v);
    CHECK(interpret(raw, m, uid, &st) == AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_VALID);
    /* Another user's value, another pepper, garbage: answers, but forged
     * ones, never valid. */
    CHECK(interpret(raw, m, uid2, &st) == AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_FORGED);
    CHECK(interpret(raw, other, uid, &st) == AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_FORGED);
    CHECK(interpret("$16\r\nx700000000000000\r\n", m, uid, &st) ==
              AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_FORGED);
    /* A value of another version (1: a bare time; 3: times (stored,
     * expires), what the servers of a farm not yet upgraded write): a
     * plain miss, not a forgery. */
    CHECK(interpret("$16\r\n1700000000000000\r\n", m, uid, &st) ==
              AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_OTHER);
    strstr(raw, "\r\n")[2] = '3';
    CHECK(interpret(raw, m, uid, &st) == AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_OTHER);
    strstr(raw, "\r\n")[2] = '4';
    CHECK(interpret("$0\r\n\r\n", m, uid, &st) == AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_FORGED);
    CHECK(interpret("$-1\r\n", m, uid, &st) == AUTHN_HMAC_REDIS_OK &&
          st == AUTHN_HMAC_VALUE_NONE);
    /* Replies of the wrong type are errors. */
    CHECK(interpret("-ERR boom\r\n", m, uid, &st) == AUTHN_HMAC_REDIS_ERROR &&
          st != AUTHN_HMAC_VALUE_VALID);
    CHECK(interpret(":5\r\n", m, uid, &st) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(interpret("+OK\r\n", m, uid, &st) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(interpret("*1\r\n$1\r\n1\r\n", m, uid, &st) ==
          AUTHN_HMAC_REDIS_ERROR);
    CHECK(authn_hmac_redis_interpret(NULL, m, uid, &es, &st) ==
              AUTHN_HMAC_REDIS_ERROR &&
          es.n == 0);
}

/* A server on the other end of a socket pair: writes `len` bytes of `data`,
 * `chunk` bytes at a time with `gap_ms` between, then waits to be killed. */
static pid_t fake_server(int fd, const char *data, size_t len, size_t chunk,
                         int gap_ms)
{
    pid_t pid = fork();

    if (pid == 0) {
        char cmd[256];
        size_t off = 0;

        (void)!read(fd, cmd, sizeof(cmd)); /* the command */
        while (off < len) {
            size_t n = len - off < chunk ? len - off : chunk;

            if (write(fd, data + off, n) != (ssize_t)n)
                break;
            off += n;
            if (gap_ms)
                usleep((useconds_t)gap_ms * 1000);
        }
        pause();
        _exit(0);
    }
    return pid;
}

static authn_hmac_redis_rc get_over(const char *data, size_t len, size_t chunk,
                                    int gap_ms, int timeout_ms,
                                    apr_time_t *took, size_t *unread,
                                    const char **why, apr_pool_t *p)
{
    int sv[2];
    pid_t pid;
    authn_hmac_redis_conn_t *c;
    redisReply *r = NULL;
    const char *argv[2] = {"GET", "k"};
    size_t lens[2] = {3, 1};
    apr_time_t t0;
    authn_hmac_redis_rc rc;
    char buf[65536];
    ssize_t n;

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    pid = fake_server(sv[1], data, len, chunk, gap_ms);
    c = authn_hmac_redis_conn_wrap(sv[0]);
    t0 = authn_hmac_monotonic();
    rc = authn_hmac_redis_command(
        c, 2, argv, lens, t0 + apr_time_from_msec(timeout_ms), &r, why, p);
    *took = authn_hmac_monotonic() - t0;
    if (r)
        freeReplyObject(r);
    usleep(50000);
    *unread = 0;
    while ((n = read(sv[0], buf, sizeof(buf))) > 0)
        *unread += (size_t)n;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    authn_hmac_redis_close(c);
    close(sv[1]);
    return rc;
}

/* A reply longer than any the module expects is refused after at most a few
 * hundred bytes, however long it claims or turns out to be. */
static void test_reply_size_cap(apr_pool_t *p)
{
    size_t big = 60000, unread = 0;
    char *data = apr_palloc(p, big);
    apr_time_t took = 0;
    const char *why = "";

    memcpy(data, "$10000000\r\n", 11);
    memset(data + 11, 'x', big - 11);
    CHECK(get_over(data, big, big, 0, 2000, &took, &unread, &why, p) ==
          AUTHN_HMAC_REDIS_ERROR);
    CHECK(strstr(why, "reply too long") != NULL);
    CHECK(unread >= big - 512); /* the rest was never read */
    CHECK(took < apr_time_from_msec(1000));
    /* A short well-formed reply is read whole; bytes after it are not
     * accepted (a server that answers twice is out of step). */
    CHECK(get_over("$2\r\nok\r\n", 8, 8, 0, 2000, &took, &unread, &why, p) ==
          AUTHN_HMAC_REDIS_OK);
    CHECK(get_over("+OK\r\n+OK\r\n", 10, 10, 0, 2000, &took, &unread, &why,
                   p) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(strstr(why, "after the reply") != NULL);
}

/* One deadline covers the whole reply: a server that trickles one byte every
 * 30 ms is cut off at the deadline, not after each byte's wait. */
static void test_trickle_deadline(apr_pool_t *p)
{
    static const char data[] = "$40\r\n0123456789012345678901234567890123456789"
                               "\r\n";
    size_t unread = 0;
    apr_time_t took = 0;
    const char *why = "";

    CHECK(get_over(data, sizeof(data) - 1, 1, 30, 200, &took, &unread, &why,
                   p) == AUTHN_HMAC_REDIS_TIMEOUT);
    CHECK(took >= apr_time_from_msec(190) && took < apr_time_from_msec(300));
    CHECK(strstr(why, "timed out") != NULL);
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
    apr_time_t now = SEC(5000), w = SEC(1);
    apr_interval_time_t outage = 0;

    (void)p;
    memset(&h, 0, sizeof(h));
    CHECK(authn_hmac_redis_allowed(&h, now, w) == 1);
    /* A failure or two (a loaded machine) are not an outage. */
    CHECK(authn_hmac_redis_failed(&h, now - 2, now - 2, 0) == 0);
    CHECK(authn_hmac_redis_failed(&h, now - 1, now - 1, 0) == 0);
    CHECK(h.down_since == 0 && h.epoch == 0);
    CHECK(authn_hmac_redis_allowed(&h, now, w) == 1);
    /* The third opens the breaker: the outage begins, logged once. */
    CHECK(authn_hmac_redis_failed(&h, now, now, 0) == 1);
    CHECK(authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_failed(&h, now + 1, now + 1, 0) == 0);
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(2) - 1, w));
    /* More failures of requests already in flight do not push it further. */
    authn_hmac_redis_failed(&h, now - 10, now, 0);
    authn_hmac_redis_failed(&h, now - 10, now, 0);
    authn_hmac_redis_failed(&h, now - 10, now, 0);
    authn_hmac_redis_failed(&h, now - 10, now, 0);
    /* Half open: when the wait ends one request probes, the others skip. */
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2), w) == 2);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2), w) == 0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(2) + w - 1, w) == 0);
    /* The probe fails: open again, for longer (backoff 4 s). */
    authn_hmac_redis_failed(&h, now + SEC(2), now + SEC(2), 1);
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(6) - 1, w));
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6), w) == 2);
    /* A probe that never reports (its process died) is replaced once its
     * window is over. */
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6) + w - 1, w) == 0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(6) + w, w) == 2);
    /* An answer to a command sent before the outage began ends nothing. */
    CHECK(authn_hmac_redis_succeeded(&h, now - 1, now + SEC(7), 0, &outage) ==
          0);
    CHECK(authn_hmac_redis_breaker_open(&h));
    /* The probe succeeds: the outage ends once, with its length, and the
     * breaker closes. */
    CHECK(authn_hmac_redis_succeeded(&h, now + SEC(7), now + SEC(7), 1,
                                     &outage) == 1 &&
          outage == SEC(7));
    CHECK(!authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_succeeded(&h, now + SEC(8), now + SEC(8), 0,
                                     &outage) == 0);
    CHECK(authn_hmac_redis_allowed(&h, now + SEC(8), w) == 1);
    CHECK(h.epoch == 1); /* connections made before it are stale */
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9), now + SEC(9), 0) == 0);
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9) + 1, now + SEC(9) + 1, 0) ==
          0);
    CHECK(authn_hmac_redis_failed(&h, now + SEC(9) + 2, now + SEC(9) + 2, 0) ==
          1); /* a new one */
    CHECK(h.epoch == 2);
    /* The forged-value warning is given once. */
    CHECK(authn_hmac_redis_forged_first(&h) == 1);
    CHECK(authn_hmac_redis_forged_first(&h) == 0);
}

/* A Redis that answers one command in two in time opens the breaker: the
 * successes between its failures do not hide it (found by review: the
 * count was "in a row" and any success reset it). */
static void test_breaker_sees_intermittent_failures(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1), o = 0;
    int i;

    (void)p;
    memset(&h, 0, sizeof(h));
    for (i = 0; i < 3; i++) {
        authn_hmac_redis_succeeded(&h, now + i, now + i, 0, &o);
        authn_hmac_redis_failed(&h, now + i, now + i, 0);
    }
    CHECK(authn_hmac_redis_breaker_open(&h));
    CHECK(!authn_hmac_redis_allowed(&h, now + SEC(1), w));
    /* Sporadic failures, farther apart than the window, do not. */
    memset(&h, 0, sizeof(h));
    for (i = 0; i < 10; i++) {
        authn_hmac_redis_failed(&h, now + SEC(11) * i, now + SEC(11) * i, 0);
        authn_hmac_redis_succeeded(&h, now + SEC(11) * i + 1,
                                   now + SEC(11) * i + 1, 0, &o);
    }
    CHECK(!authn_hmac_redis_breaker_open(&h));
}

/* Requests that were in flight together when Redis stalled past the
 * timeout fail together: one incident, not an outage (CI: 8 requests that
 * waited through one 60 ms stall under load opened the breaker and logged
 * an outage). Failures of operations begun after it are new incidents. */
static void test_failures_in_flight_together_are_one_incident(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1);
    int i;

    (void)p;
    memset(&h, 0, sizeof(h));
    for (i = 0; i < 16; i++)
        CHECK(authn_hmac_redis_failed(&h, now - 50000 + i, now + i, 0) == 0);
    CHECK(!authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_allowed(&h, now + 100, w) == 1);
    CHECK(h.down_since == 0 && h.epoch == 0);
    /* Begun after the first incident was seen: a second, then a third. */
    CHECK(authn_hmac_redis_failed(&h, now + 100, now + 50100, 0) == 0);
    CHECK(authn_hmac_redis_failed(&h, now + 50200, now + 100200, 0) == 1);
    CHECK(authn_hmac_redis_breaker_open(&h));
}

/* A Redis that never answers, under the longest timeouts: every command
 * times out, so incidents come a timeout apart, and three of them still
 * open the breaker (found by review: from a 5 s timeout on, the 10 s
 * window never held three). */
static void test_long_timeouts_still_open_the_breaker(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), t;
    int i;

    (void)p;
    for (t = SEC(5); t <= SEC(10); t += SEC(5)) {
        memset(&h, 0, sizeof(h));
        for (i = 0; i < 2; i++)
            CHECK(authn_hmac_redis_failed(&h, now + i * (t + 1),
                                          now + i * (t + 1) + t, 0) == 0);
        CHECK(authn_hmac_redis_failed(&h, now + 2 * (t + 1),
                                      now + 2 * (t + 1) + t, 0) == 1);
        CHECK(authn_hmac_redis_breaker_open(&h));
    }
}

/* A breaker left open with no outage recorded (a failure racing with the
 * success that ended the outage) is closed by the next successful probe
 * (found by review: it stayed open until Redis failed again). */
static void test_probe_closes_a_breaker_without_outage(apr_pool_t *p)
{
    authn_hmac_redis_health_t h;
    apr_time_t now = SEC(5000), w = SEC(1), o = 0;

    (void)p;
    memset(&h, 0, sizeof(h));
    h.breaker_until = now; /* open, its wait over; down_since is 0 */
    CHECK(authn_hmac_redis_allowed(&h, now, w) == 2);
    authn_hmac_redis_succeeded(&h, now, now + 10, 1, &o);
    CHECK(!authn_hmac_redis_breaker_open(&h));
    CHECK(authn_hmac_redis_allowed(&h, now + 20, w) == 1);
}

/* A farm flight's marker value, made as a runner makes it. */
static size_t flight_value(const authn_hmac_mac_t *m, const unsigned char *key,
                           char result, apr_time_t expires, char *out)
{
    unsigned char tag[32];
    int i;

    snprintf(out, 20, "F%c:%016llx", result, (unsigned long long)expires);
    authn_hmac_value_tag(m, key, out, 19, tag);
    out[19] = ':';
    for (i = 0; i < 32; i++)
        snprintf(out + 20 + 2 * i, 3, "%02x", tag[i]);
    return 20 + 64;
}

/* A marker's result counts only under a tag of the pepper, for this very
 * credential, and only until it expires; anything else is no result. */
static void test_flight_interpret(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1), *other = test_mac(p, 2);
    unsigned char key[32], key2[32];
    apr_time_t now = SEC(1700000000);
    char v[128];
    size_t n;

    authn_hmac_mac_compute(m, "/s", 2, "alice", 5, "pw", 2, "h", 1, key);
    authn_hmac_mac_compute(m, "/s", 2, "alice", 5, "pw2", 3, "h", 1, key2);
    CHECK(authn_hmac_flight_interpret(m, key, "R", 1, now) ==
          AUTHN_HMAC_FARM_RUNNING);
    strcpy(v, "R0123456789abcdef0123456789abcdef");
    CHECK(authn_hmac_flight_interpret(m, key, v, 33, now) ==
          AUTHN_HMAC_FARM_RUNNING);
    /* A claim is "R" and 32 lowercase hex digits, or a bare "R". */
    CHECK(authn_hmac_flight_interpret(m, key, v, 32, now) ==
          AUTHN_HMAC_FARM_FORGED);
    v[5] = 'A';
    CHECK(authn_hmac_flight_interpret(m, key, v, 33, now) ==
          AUTHN_HMAC_FARM_FORGED);
    n = flight_value(m, key, '1', now + SEC(2), v);
    CHECK(authn_hmac_flight_interpret(m, key, v, n, now) ==
          AUTHN_HMAC_FARM_GRANTED);
    /* Another password, another pepper: not a grant. */
    CHECK(authn_hmac_flight_interpret(m, key2, v, n, now) ==
          AUTHN_HMAC_FARM_FORGED);
    CHECK(authn_hmac_flight_interpret(other, key, v, n, now) ==
          AUTHN_HMAC_FARM_FORGED);
    /* Expired, or too far ahead: no result. */
    CHECK(authn_hmac_flight_interpret(m, key, v, n, now + SEC(3)) ==
          AUTHN_HMAC_FARM_NONE);
    n = flight_value(m, key, '1', now + SEC(120), v);
    CHECK(authn_hmac_flight_interpret(m, key, v, n, now) ==
          AUTHN_HMAC_FARM_NONE);
    /* A refusal turned into a grant, a truncated one, garbage. */
    n = flight_value(m, key, '0', now + SEC(2), v);
    CHECK(authn_hmac_flight_interpret(m, key, v, n, now) ==
          AUTHN_HMAC_FARM_REFUSED);
    v[1] = '1';
    CHECK(authn_hmac_flight_interpret(m, key, v, n, now) ==
          AUTHN_HMAC_FARM_FORGED);
    CHECK(authn_hmac_flight_interpret(m, key, v, n - 1, now) ==
          AUTHN_HMAC_FARM_FORGED);
    CHECK(authn_hmac_flight_interpret(m, key, "F1", 2, now) ==
          AUTHN_HMAC_FARM_FORGED);
    CHECK(authn_hmac_flight_interpret(m, key, "", 0, now) ==
          AUTHN_HMAC_FARM_FORGED);
}

/* A server on the other end of a socket pair that answers one command with
 * `reply` and tells the test what it was sent, through a pipe. */
typedef struct {
    pid_t pid;
    int sock, told;
    authn_hmac_redis_conn_t *c;
} one_server;

static void one_start(one_server *s, const char *reply)
{
    int sv[2], pp[2];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(pipe(pp) == 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    s->pid = fork();
    if (s->pid == 0) {
        char cmd[8192];
        size_t n = 0;
        ssize_t got;
        struct pollfd pfd = {sv[1], POLLIN, 0};

        close(pp[0]);
        /* The command: what arrives until the sender pauses. */
        while (n < sizeof(cmd) && poll(&pfd, 1, n ? 100 : 5000) == 1 &&
               (got = read(sv[1], cmd + n, sizeof(cmd) - n)) > 0)
            n += (size_t)got;
        (void)!write(pp[1], cmd, n);
        close(pp[1]);
        (void)!write(sv[1], reply, strlen(reply));
        pause();
        _exit(0);
    }
    close(pp[1]);
    s->sock = sv[1];
    s->told = pp[0];
    s->c = authn_hmac_redis_conn_wrap(sv[0]);
}

/* The arguments of the one command the server was sent ("" after the
 * last; NULL if it was not one well-formed command). */
static const char **one_end(one_server *s, apr_pool_t *p)
{
    char buf[8192], *b = buf, *end;
    size_t n = 0;
    ssize_t got;
    const char **argv = NULL;
    long argc, i;

    while (n < sizeof(buf) - 1 &&
           (got = read(s->told, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    authn_hmac_redis_close(s->c);
    close(s->sock);
    close(s->told);
    if (*b++ != '*' || (argc = strtol(b, &end, 10)) <= 0 || argc > 16)
        return NULL;
    argv = apr_pcalloc(p, sizeof(*argv) * (size_t)(argc + 1));
    b = end + 2;
    for (i = 0; i < argc; i++) {
        long len;

        if (*b++ != '$' || (len = strtol(b, &end, 10)) < 0 ||
            end + 2 + len + 2 > buf + n)
            return NULL;
        argv[i] = apr_pstrndup(p, end + 2, (apr_size_t)len);
        b = end + 2 + len + 2;
    }
    argv[argc] = "";
    return b == buf + n ? argv : NULL;
}

static int is_token(const char *t)
{
    size_t i;

    if (strlen(t) != AUTHN_HMAC_FLIGHT_TOKEN_LEN || t[0] != 'R')
        return 0;
    for (i = 1; t[i]; i++)
        if (!strchr("0123456789abcdef", t[i]))
            return 0;
    return 1;
}

/* A claim is one SET NX of "R" and a new random token, which the runner
 * keeps; its result, whatever it is, one EVAL of the compare-and-set
 * script with that token, so that a late runner neither deletes nor
 * overwrites a marker another server claimed since (the script itself runs
 * in test_redis.py). A marker that is no longer ours is no error. */
static void test_flight_marker_has_an_owner(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1);
    authn_hmac_redis_conf_t conf;
    unsigned char key[32];
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1], first[sizeof(token)];
    apr_time_t now = SEC(1700000000), dl;
    const char **a, *why = "";
    one_server s;
    int won = 0, result;

    memset(&conf, 0, sizeof(conf));
    conf.prefix = "authn_hmac:";
    authn_hmac_mac_compute(m, "/s", 2, "alice", 5, "pw", 2, "h", 1, key);
    dl = authn_hmac_monotonic() + SEC(5);
    one_start(&s, "+OK\r\n");
    CHECK(authn_hmac_redis_flight_claim(s.c, &conf, m, key, SEC(2), dl, token,
                                        &won, &why, p) == AUTHN_HMAC_REDIS_OK &&
          won);
    a = one_end(&s, p);
    CHECK(a && !strcmp(a[0], "SET") && !strncmp(a[1], "authn_hmac:f:", 13) &&
          is_token(a[2]) && !strcmp(a[2], token) && !strcmp(a[3], "NX") &&
          !strcmp(a[4], "PX") && !strcmp(a[5], "2001") && !*a[6]);
    CHECK(authn_hmac_flight_interpret(m, key, token, strlen(token), now) ==
          AUTHN_HMAC_FARM_RUNNING);
    strcpy(first, token);
    one_start(&s, "$-1\r\n"); /* another server holds it */
    CHECK(authn_hmac_redis_flight_claim(s.c, &conf, m, key, SEC(2), dl, token,
                                        &won, &why, p) == AUTHN_HMAC_REDIS_OK &&
          !won);
    a = one_end(&s, p);
    CHECK(a && is_token(a[2]) && strcmp(a[2], first) != 0);

    for (result = -1; result <= 1; result++) {
        one_start(&s, result ? ":1\r\n" : ":0\r\n"); /* :0: not ours */
        CHECK(authn_hmac_redis_flight_result(s.c, &conf, m, key, first, result,
                                             now, SEC(2), dl, &why,
                                             p) == AUTHN_HMAC_REDIS_OK);
        a = one_end(&s, p);
        CHECK(a && !strcmp(a[0], "EVAL") && strstr(a[1], "ARGV[1]") &&
              !strcmp(a[2], "1") && !strncmp(a[3], "authn_hmac:f:", 13) &&
              !strcmp(a[4], first) && !strcmp(a[6], "2001") && !*a[7]);
        if (!a)
            continue;
        if (result < 0)
            CHECK(!*a[5]); /* no result: delete */
        else
            CHECK(
                authn_hmac_flight_interpret(m, key, a[5], strlen(a[5]), now) ==
                (result ? AUTHN_HMAC_FARM_GRANTED : AUTHN_HMAC_FARM_REFUSED));
    }
    /* A Redis that refuses scripts (an ACL without EVAL): an error. */
    one_start(&s, "-NOPERM no permissions to run the 'eval' command\r\n");
    CHECK(authn_hmac_redis_flight_result(s.c, &conf, m, key, first, 1, now,
                                         SEC(2), dl, &why,
                                         p) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(strstr(why, "NOPERM") != NULL);
    (void)one_end(&s, p);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_parse_server, p);
    RUN(test_parse_auth, p);
    RUN(test_interpret, p);
    RUN(test_flight_interpret, p);
    RUN(test_flight_marker_has_an_owner, p);
    RUN(test_huge_array_refused, p);
    RUN(test_reply_size_cap, p);
    RUN(test_trickle_deadline, p);
    RUN(test_health, p);
    RUN(test_breaker_sees_intermittent_failures, p);
    RUN(test_failures_in_flight_together_are_one_incident, p);
    RUN(test_long_timeouts_still_open_the_breaker, p);
    RUN(test_probe_closes_a_breaker_without_outage, p);
    return unit_end();
}
