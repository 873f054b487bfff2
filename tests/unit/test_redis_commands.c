/* Unit tests of src/redis/commands.c: reply interpretation, the farm's
 * markers and the commands that claim them (no server needed). */
#include "redis/redis.h"
#include "redis/redis_testing.h"
#include "core/cred.h"
#include "core/secret.h"
#include "testing/testing.h"
#include "core/util.h"
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

/* A server on the other end of a socket pair that answers each command
 * it is sent with the next of its replies (a command: what arrives until
 * the sender pauses), and tells the test what it was sent, through a
 * pipe, once it has answered them all (or no command came for 5 s). */
typedef struct {
    pid_t pid;
    int sock, told;
    authn_hmac_redis_conn_t *c;
} one_server;

static void seq_start(one_server *s, const char *const *replies, int count)
{
    int sv[2], pp[2];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(pipe(pp) == 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    s->pid = fork();
    if (s->pid == 0) {
        static char cmd[32768];
        size_t n = 0, at;
        ssize_t got;
        struct pollfd pfd = {sv[1], POLLIN, 0};
        int k;

        close(pp[0]);
        for (k = 0; k < count; k++) {
            at = n;
            while (n < sizeof(cmd) && poll(&pfd, 1, n > at ? 100 : 5000) == 1 &&
                   (got = read(sv[1], cmd + n, sizeof(cmd) - n)) > 0)
                n += (size_t)got;
            if (n == at)
                break;
            (void)!write(sv[1], replies[k], strlen(replies[k]));
        }
        (void)!write(pp[1], cmd, n);
        close(pp[1]);
        pause();
        _exit(0);
    }
    close(pp[1]);
    s->sock = sv[1];
    s->told = pp[0];
    s->c = authn_hmac_redis_conn_wrap(sv[0]);
}

static void one_start(one_server *s, const char *reply)
{
    seq_start(s, &reply, 1);
}

/* The commands the server was sent, up to max, in cmds (each its
 * arguments, "" after the last); how many, or -1 if what it was sent is
 * not whole commands. */
static int seq_end(one_server *s, apr_pool_t *p, const char ***cmds, int max)
{
    static char buf[32768];
    char *b = buf, *end;
    size_t n = 0;
    ssize_t got;
    int k;

    while (n < sizeof(buf) - 1 &&
           (got = read(s->told, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    authn_hmac_redis_close(s->c);
    close(s->sock);
    close(s->told);
    for (k = 0; k < max && b < buf + n; k++) {
        const char **argv;
        long argc, i;

        if (*b++ != '*' || (argc = strtol(b, &end, 10)) <= 0 || argc > 16)
            return -1;
        argv = apr_pcalloc(p, sizeof(*argv) * (size_t)(argc + 1));
        b = end + 2;
        for (i = 0; i < argc; i++) {
            long len;

            if (*b++ != '$' || (len = strtol(b, &end, 10)) < 0 ||
                end + 2 + len + 2 > buf + n)
                return -1;
            argv[i] = apr_pstrndup(p, end + 2, (apr_size_t)len);
            b = end + 2 + len + 2;
        }
        argv[argc] = "";
        cmds[k] = argv;
    }
    return b == buf + n ? k : -1;
}

/* The arguments of the one command the server was sent ("" after the
 * last; NULL if it was not one well-formed command). */
static const char **one_end(one_server *s, apr_pool_t *p)
{
    const char **cmds[1];

    return seq_end(s, p, cmds, 1) == 1 ? cmds[0] : NULL;
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

/* A ban's value verifies for its own key under its pepper only: not
 * under another key (a real ban copied), another pepper, or changed. */
static void test_ban_value(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 7), *other = test_mac(p, 8);
    unsigned char id[AUTHN_HMAC_KEY_LEN], id2[AUTHN_HMAC_KEY_LEN];
    char v[AUTHN_HMAC_BAN_LEN + 1];
    apr_time_t until = 0, when = apr_time_from_sec(1800000000);
    size_t n;

    memset(id, 1, sizeof(id));
    memset(id2, 2, sizeof(id2));
    n = authn_hmac_ban_encode(m, id, when, v);
    CHECK(n == AUTHN_HMAC_BAN_LEN && strlen(v) == n);
    CHECK(authn_hmac_ban_decode(m, id, v, n, &until) == 1 && until == when);
    CHECK(authn_hmac_ban_decode(m, id2, v, n, &until) == 0 && until == 0);
    CHECK(authn_hmac_ban_decode(other, id, v, n, &until) == 0);
    CHECK(authn_hmac_ban_decode(m, id, "1", 1, &until) == 0);
    CHECK(authn_hmac_ban_decode(m, id, v, n - 1, &until) == 0);
    v[5] = v[5] == '0' ? '1' : '0'; /* a later end */
    CHECK(authn_hmac_ban_decode(m, id, v, n, &until) == 0);
}

/* A count's value verifies for its own key under its pepper only: a
 * Redis cannot raise a count (so cannot bring a ban). */
static void test_count_value(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 7), *other = test_mac(p, 8);
    unsigned char id[AUTHN_HMAC_KEY_LEN], id2[AUTHN_HMAC_KEY_LEN],
        tag[AUTHN_HMAC_KEY_LEN];
    char v[128];
    apr_time_t start;
    uint32_t n;
    uint64_t fp;
    int i;

    memset(id, 1, sizeof(id));
    memset(id2, 2, sizeof(id2));
    strcpy(v, "C:0006a0a1b2c3d4e5:00000009:f0000000000000fe");
    authn_hmac_value_tag(m, id, v, strlen(v), tag);
    strcat(v, ":");
    for (i = 0; i < AUTHN_HMAC_KEY_LEN; i++)
        sprintf(v + strlen(v), "%02x", tag[i]);
    CHECK(authn_hmac_count_decode(m, id, v, strlen(v), &start, &n, &fp) == 1);
    CHECK(start == (apr_time_t)0x0006a0a1b2c3d4e5LL && n == 9 &&
          fp == 0xf0000000000000feULL);
    CHECK(authn_hmac_count_decode(m, id2, v, strlen(v), &start, &n, &fp) == 0);
    CHECK(start == 0 && n == 0 && fp == 0);
    CHECK(authn_hmac_count_decode(other, id, v, strlen(v), &start, &n, &fp) ==
          0);
    CHECK(authn_hmac_count_decode(m, id, "9", 1, &start, &n, &fp) == 0);
    v[26] = 'a'; /* 10 of them */
    CHECK(authn_hmac_count_decode(m, id, v, strlen(v), &start, &n, &fp) == 0);
    v[26] = '9';
    v[43] = 'f'; /* another guess */
    CHECK(authn_hmac_count_decode(m, id, v, strlen(v), &start, &n, &fp) == 0);
}

/* Whatever answers for Redis cannot start a ban: an answer of "3" (both
 * started, as the script once answered) is an error; counts that do not
 * verify are no counts (forged), and no ban. */
static void test_a_redis_cannot_start_a_ban(apr_pool_t *p)
{
    static const char *const answers[] = {":3\r\n",
                                          "*2\r\n$2\r\n99\r\n$2\r\n99\r\n"};
    authn_hmac_mac_t *m = test_mac(p, 1);
    authn_hmac_redis_conf_t conf;
    unsigned char pair[32], client[32];
    const char *why = "";
    one_server s;
    size_t i;

    memset(&conf, 0, sizeof(conf));
    conf.prefix = "authn_hmac:";
    memset(pair, 1, sizeof(pair));
    memset(client, 2, sizeof(client));
    for (i = 0; i < 2; i++) {
        int started = -1, forged = -1;

        one_start(&s, answers[i]);
        (void)authn_hmac_redis_throttle_fail(
            s.c, &conf, m, pair, client, 42, 10, 30, apr_time_from_sec(600),
            apr_time_from_sec(600), apr_time_from_sec(1700000000),
            authn_hmac_monotonic() + apr_time_from_msec(300), &started, &forged,
            &why, p);
        (void)one_end(&s, p);
        CHECK(started == 0);
        CHECK(forged == (int)i);
    }
}

/* A count's value, as a server of the farm writes it (fp: its last
 * guess). */
static void count_value(const authn_hmac_mac_t *m, const unsigned char *id,
                        apr_time_t start, unsigned n, uint64_t fp, char *v)
{
    unsigned char tag[AUTHN_HMAC_KEY_LEN];
    int i;

    sprintf(v, "C:%016llx:%08x:%016llx", (unsigned long long)start, n,
            (unsigned long long)fp);
    authn_hmac_value_tag(m, id, v, strlen(v), tag);
    strcat(v, ":");
    for (i = 0; i < AUTHN_HMAC_KEY_LEN; i++)
        sprintf(v + strlen(v), "%02x", tag[i]);
}

/* One wrong guess (fingerprint fp) of the pair (its id all 1s) and the
 * client (all 2s) through throttle_fail, on s's connection: limits max
 * (the pair's) and max_client, a window and a ban of 10 minutes, at now. */
static authn_hmac_redis_rc guess(one_server *s, const authn_hmac_mac_t *m,
                                 uint64_t fp, int max, int max_client,
                                 apr_time_t now, int *started, int *forged,
                                 const char **why, apr_pool_t *p)
{
    authn_hmac_redis_conf_t conf;
    unsigned char pair[32], client[32];

    memset(&conf, 0, sizeof(conf));
    conf.prefix = "authn_hmac:";
    memset(pair, 1, sizeof(pair));
    memset(client, 2, sizeof(client));
    return authn_hmac_redis_throttle_fail(
        s->c, &conf, m, pair, client, fp, max, max_client, SEC(600), SEC(600),
        now, authn_hmac_monotonic() + SEC(5), started, forged, why, p);
}

/* The counts are written compare-and-set: the write carries the values
 * read ("" for none), and one that Redis answers -1 (another server
 * counted a guess of the pair or the client since) is read again, without
 * the repeat's mark (that mark is this guess's own), raised from what is
 * there now and written again: two servers counting at once count two
 * guesses. Bounded: after 4 tries the guess is not counted in the farm,
 * with no error and no ban. */
static void test_a_count_that_changed_is_read_again(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1);
    unsigned char pair[32], client[32];
    apr_time_t now = SEC(1700000000), begun = now - SEC(60), start;
    char v[128];
    const char *replies[8], **a[9], *why = "";
    one_server s;
    uint32_t n;
    uint64_t fp;
    int started = -1, forged = -1, got, i;

    memset(pair, 1, sizeof(pair));
    memset(client, 2, sizeof(client));
    count_value(m, pair, begun, 3, 7, v); /* another server's count */
    replies[0] = "*2\r\n$0\r\n\r\n$0\r\n\r\n";
    replies[1] = ":-1\r\n";
    replies[2] = apr_psprintf(
        p, "*2\r\n$%" APR_SIZE_T_FMT "\r\n%s\r\n$0\r\n\r\n", strlen(v), v);
    replies[3] = ":0\r\n";
    seq_start(&s, replies, 4);
    CHECK(guess(&s, m, 42, 10, 30, now, &started, &forged, &why, p) ==
          AUTHN_HMAC_REDIS_OK);
    CHECK(started == 0 && forged == 0 && !*why);
    got = seq_end(&s, p, a, 9);
    CHECK(got == 4);
    if (got != 4)
        return;
    for (i = 0; i < 4; i++)
        CHECK(!strcmp(a[i][0], "EVAL") && !strcmp(a[i][2], i % 2 ? "4" : "3"));
    /* The reads: the first sets the repeat's mark, the second does not. */
    CHECK(!*a[0][7] && !strcmp(a[2][7], "1") && !strcmp(a[0][3], a[2][3]));
    /* The writes: each with what its read found. */
    CHECK(!*a[1][14] && !*a[1][15] && !*a[1][16]);
    CHECK(!strcmp(a[3][14], v) && !*a[3][15] && !*a[3][16]);
    CHECK(strstr(a[1][1], "ARGV[8]") && strstr(a[1][1], "return -1"));
    /* The first write had the pair's first guess; the second raises the
     * other server's 3 in its window, and the client's count. */
    CHECK(authn_hmac_count_decode(m, pair, a[1][7], strlen(a[1][7]), &start, &n,
                                  &fp) == 1 &&
          start == now && n == 1);
    CHECK(authn_hmac_count_decode(m, pair, a[3][7], strlen(a[3][7]), &start, &n,
                                  &fp) == 1 &&
          start == begun && n == 4);
    CHECK(authn_hmac_count_decode(m, client, a[3][9], strlen(a[3][9]), &start,
                                  &n, &fp) == 1 &&
          start == now && n == 1);
}

/* A window another server started after this one took its now (it
 * counted at the same moment): its count is raised, not restarted. And
 * the tries end: a count changed under each is not counted in the farm. */
static void test_a_count_ahead_is_raised_and_the_tries_end(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1);
    unsigned char pair[32];
    apr_time_t now = SEC(1700000000), start;
    char v[128];
    const char *replies[8], **a[9], *why = "";
    one_server s;
    uint32_t n;
    uint64_t fp;
    int started = -1, forged = -1, got, i;

    memset(pair, 1, sizeof(pair));
    count_value(m, pair, now + 2000, 3, 7, v);
    replies[0] = apr_psprintf(
        p, "*2\r\n$%" APR_SIZE_T_FMT "\r\n%s\r\n$0\r\n\r\n", strlen(v), v);
    replies[1] = ":0\r\n";
    seq_start(&s, replies, 2);
    CHECK(guess(&s, m, 43, 10, 30, now, &started, &forged, &why, p) ==
          AUTHN_HMAC_REDIS_OK);
    got = seq_end(&s, p, a, 9);
    CHECK(got == 2 && !strcmp(a[1][14], v) &&
          authn_hmac_count_decode(m, pair, a[1][7], strlen(a[1][7]), &start, &n,
                                  &fp) == 1 &&
          start == now && n == 4);

    /* Changed under every try: 4 reads and writes, then no more, no ban,
     * no error, and why says the guess is not counted. */
    for (i = 0; i < 8; i++)
        replies[i] = i % 2 ? ":-1\r\n" : "*2\r\n$0\r\n\r\n$0\r\n\r\n";
    why = "";
    seq_start(&s, replies, 8);
    CHECK(guess(&s, m, 42, 1, 1, now, &started, &forged, &why, p) ==
          AUTHN_HMAC_REDIS_OK);
    CHECK(started == 0 && strstr(why, "not counted") != NULL);
    CHECK(seq_end(&s, p, a, 9) == 8);
}

/* A Redis that keeps each write of a guess's counts and answers -1, then
 * hands the count back: the retry finds the guess its own (the count's
 * last guess) and counts it no more. One wrong password is one guess,
 * whatever Redis answers: no ban from a single typo (review: it counted
 * one guess four times, and a pair at 4 was banned). */
static void test_a_redis_cannot_count_one_guess_twice(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1);
    unsigned char pair[32], client[32];
    apr_time_t now = SEC(1700000000);
    const char *replies[8], **a[9], *why = "";
    char pv[160], cv[160];
    one_server s;
    int started = -1, forged = -1, got;

    memset(pair, 1, sizeof(pair));
    memset(client, 2, sizeof(client));
    /* What the first write of the guess carried (a fingerprint past
     * INT64_MAX, as half of them are): the pair's and the
     * client's first guess, now. */
    count_value(m, pair, now, 1, 0xfedcba9876543210ULL, pv);
    count_value(m, client, now, 1, 0xfedcba9876543210ULL, cv);
    replies[0] = "*2\r\n$0\r\n\r\n$0\r\n\r\n";
    replies[1] = ":-1\r\n";
    replies[2] = apr_psprintf(
        p, "*2\r\n$%" APR_SIZE_T_FMT "\r\n%s\r\n$%" APR_SIZE_T_FMT "\r\n%s\r\n",
        strlen(pv), pv, strlen(cv), cv);
    replies[3] = ":-1\r\n";
    seq_start(&s, replies, 4);
    CHECK(guess(&s, m, 0xfedcba9876543210ULL, 2, 2, now, &started, &forged,
                &why, p) == AUTHN_HMAC_REDIS_OK);
    got = seq_end(&s, p, a, 9);
    /* One write only (the first try's), with a count of 1: the second read
     * found it, and nothing more was sent. */
    CHECK(got == 3);
    CHECK(started == 0 && forged == 0);
    /* The same from the first read: a count whose last guess is this one
     * (its g: mark lost) is not raised. */
    replies[0] = replies[2];
    seq_start(&s, replies, 1);
    CHECK(guess(&s, m, 0xfedcba9876543210ULL, 2, 2, now, &started, &forged,
                &why, p) == AUTHN_HMAC_REDIS_OK);
    CHECK(seq_end(&s, p, a, 9) == 1 && started == 0);
}

/* A memo's value (redis/memo.c) verifies for its user and pepper only:
 * altered state, digest or time, read at another user's key, or made
 * under another pepper, it is no memo. */
static void test_memo_value(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1), *other = test_mac(p, 2);
    unsigned char uid[32], uid2[32];
    char v[AUTHN_HMAC_MEMO_VALUE_MAX], w[AUTHN_HMAC_MEMO_VALUE_MAX];
    authn_hmac_memo_t memo, got;
    size_t n, i;

    (void)p;
    memset(uid, 1, sizeof(uid));
    memset(uid2, 2, sizeof(uid2));
    memset(&memo, 0, sizeof(memo));
    memo.state = AUTHN_HMAC_MEMO_HASH;
    memset(memo.digest, 0xab, sizeof(memo.digest));
    memo.confirmed = SEC(1700000000);
    n = authn_hmac_memo_encode(m, uid, &memo, v);
    CHECK(n > 0 && n < sizeof(v) && memcmp(v, "m1:1", 4) == 0);
    CHECK(authn_hmac_memo_decode(m, uid, v, n, &got) &&
          got.state == memo.state && got.confirmed == memo.confirmed &&
          memcmp(got.digest, memo.digest, sizeof(got.digest)) == 0);
    CHECK(!authn_hmac_memo_decode(m, uid2, v, n, &got) && got.state == 0);
    CHECK(!authn_hmac_memo_decode(other, uid, v, n, &got));
    CHECK(!authn_hmac_memo_decode(m, uid, v, n - 1, &got));
    /* Each byte altered (the state, the digest, the time, the tag). */
    for (i = 0; i < n; i++) {
        memcpy(w, v, n);
        w[i] = w[i] == '2' ? '3' : '2';
        CHECK(!authn_hmac_memo_decode(m, uid, w, n, &got) && got.state == 0);
    }
    /* No state, or a time before 1970: nothing written. */
    memo.state = 0;
    CHECK(authn_hmac_memo_encode(m, uid, &memo, v) == 0);
    memo.state = AUTHN_HMAC_MEMO_LOCKED;
    memo.confirmed = -1;
    CHECK(authn_hmac_memo_encode(m, uid, &memo, v) == 0);
}

/* security.md: Redis holds no user name, password or stored hash, only
 * MAC outputs, times and tags. The memo's digest is SHA-256(version,
 * scope, user, stored hash), unkeyed: whoever reads Redis and holds a
 * copy of the users table (a backup, a dump) would map each m: key to its
 * user, and see whose hash changed since. So the value holds the digest
 * only hidden under the pepper (neither it nor its hex is there), and the
 * round trip still gives it back. */
static void test_memo_value_holds_no_unkeyed_digest(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 5);
    unsigned char uid[32];
    authn_hmac_memo_t memo, got;
    char v[AUTHN_HMAC_MEMO_VALUE_MAX], hex[2 * AUTHN_HMAC_DIGEST_LEN + 1];
    size_t n;
    int i;

    memset(uid, 0x55, sizeof(uid));
    memset(&memo, 0, sizeof(memo));
    memo.state = AUTHN_HMAC_MEMO_HASH;
    authn_hmac_cred_digest("dbd:SELECT hash FROM users WHERE name = %s", 42,
                           "alice", 5, "$2y$05$abcdefghijklmnopqrstuv", 29,
                           memo.digest);
    memo.confirmed = SEC(1700000000);
    n = authn_hmac_memo_encode(m, uid, &memo, v);
    CHECK(n > 0);
    v[n] = '\0';
    for (i = 0; i < AUTHN_HMAC_DIGEST_LEN; i++)
        sprintf(hex + 2 * i, "%02x", memo.digest[i]);
    CHECK(strstr(v, hex) == NULL);
    for (i = 0; i < AUTHN_HMAC_DIGEST_LEN; i++)
        sprintf(hex + 2 * i, "%02X", memo.digest[i]);
    CHECK(strstr(v, hex) == NULL);
    CHECK(authn_hmac_memo_decode(m, uid, v, n, &got) &&
          memcmp(got.digest, memo.digest, sizeof(got.digest)) == 0);
}

/* A memo read from Redis: one that verifies is found (1); none is 0; one
 * that does not verify is -1, which the request's session counts as
 * redis_forged (session.c); what SET writes verifies. */
static void test_memo_get_and_set(apr_pool_t *p)
{
    authn_hmac_mac_t *m = test_mac(p, 1), *other = test_mac(p, 2);
    authn_hmac_redis_conf_t conf;
    unsigned char uid[32];
    char v[AUTHN_HMAC_MEMO_VALUE_MAX];
    authn_hmac_memo_t memo, got;
    const char *why = "", **a;
    one_server s;
    int found, k;
    size_t n;

    memset(&conf, 0, sizeof(conf));
    conf.prefix = "authn_hmac:";
    memset(uid, 1, sizeof(uid));
    memset(&memo, 0, sizeof(memo));
    memo.state = AUTHN_HMAC_MEMO_NONE;
    memo.confirmed = SEC(1700000000);
    one_start(&s, "+OK\r\n");
    CHECK(authn_hmac_redis_memo_set(s.c, &conf, m, uid, &memo, SEC(3600),
                                    authn_hmac_monotonic() + SEC(5), &why,
                                    p) == AUTHN_HMAC_REDIS_OK);
    a = one_end(&s, p);
    CHECK(a && strcmp(a[0], "SET") == 0 &&
          strncmp(a[1], "authn_hmac:m:0101", 17) == 0 &&
          strcmp(a[3], "PX") == 0 && strcmp(a[4], "3600000") == 0);
    CHECK(a && authn_hmac_memo_decode(m, uid, a[2], strlen(a[2]), &got) &&
          got.state == AUTHN_HMAC_MEMO_NONE);
    for (k = 0; k < 3; k++) {
        const authn_hmac_mac_t *maker = k == 2 ? other : m;
        char *raw;

        n = authn_hmac_memo_encode(maker, uid, &memo, v);
        if (k == 1)
            v[5] = v[5] == '0' ? '1' : '0'; /* the digest altered */
        raw = apr_psprintf(p, "$%" APR_SIZE_T_FMT "\r\n%.*s\r\n", n, (int)n, v);
        one_start(&s, raw);
        CHECK(authn_hmac_redis_memo_get(
                  s.c, &conf, m, uid, authn_hmac_monotonic() + SEC(5), &got,
                  &found, &why, p) == AUTHN_HMAC_REDIS_OK);
        (void)one_end(&s, p);
        CHECK(found == (k == 0 ? 1 : -1));
        CHECK(k == 0 ? got.state == AUTHN_HMAC_MEMO_NONE : got.state == 0);
    }
    one_start(&s, "$-1\r\n");
    CHECK(authn_hmac_redis_memo_get(s.c, &conf, m, uid,
                                    authn_hmac_monotonic() + SEC(5), &got,
                                    &found, &why, p) == AUTHN_HMAC_REDIS_OK);
    (void)one_end(&s, p);
    CHECK(found == 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_interpret, p);
    RUN(test_flight_interpret, p);
    RUN(test_flight_marker_has_an_owner, p);
    RUN(test_ban_value, p);
    RUN(test_count_value, p);
    RUN(test_a_redis_cannot_start_a_ban, p);
    RUN(test_a_redis_cannot_count_one_guess_twice, p);
    RUN(test_a_count_that_changed_is_read_again, p);
    RUN(test_a_count_ahead_is_raised_and_the_tries_end, p);
    RUN(test_memo_value, p);
    RUN(test_memo_value_holds_no_unkeyed_digest, p);
    RUN(test_memo_get_and_set, p);
    return unit_end();
}
