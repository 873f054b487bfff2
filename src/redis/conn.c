/* conn.c: a connection to Redis, over socket.c's socket and its
 * transport (plain, or TLS: tls.c).
 *
 * The client is small and strict: hiredis only as the reply parser, fed
 * at most REPLY_MAX bytes per reply, and each command with its reply
 * under one deadline. AUTH is sent straight from the secret's locked page
 * (with writev over plain sockets), so no buffer of the client ever holds
 * the Redis password longer than a write. Addresses come from the caller:
 * the pool (pool.c) or the discovery (sentinel.c). */
#include "conn.h"
#include "tls.h"
#include "core/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <apr_lib.h>
#include <apr_strings.h>
#include <hiredis/hiredis.h>

#define REPLY_MAX 512 /* bytes; the longest reply is ~270 */
/* ROLE of a primary: ~30 bytes and ~50 per replica (conn_long_replies). */
#define LONG_REPLY_MAX 8192
/* The longest command, the throttle's write: EVAL, script, 4, its 4 keys,
 * 2 counts and their windows, 2 bans and their time, the 2 counts read. */
#define MAX_ARGS 16

/* ---------------------------------------------------- bounded replies */

/* The module's commands never get an array back; hiredis would allocate an
 * array's element vector before reading it, so a hostile or broken server
 * could make a child allocate gigabytes with "*2000000000". Found by
 * fuzz_redis_reply. */
#define MAX_ARRAY_ELEMENTS      16
#define LONG_MAX_ARRAY_ELEMENTS 256 /* ROLE's replicas, in LONG_REPLY_MAX */

static redisReplyObjectFunctions limited_fns;
static void *(*default_create_array)(const redisReadTask *, int);
static pthread_once_t limited_once = PTHREAD_ONCE_INIT;

static void *limited_create_array(const redisReadTask *task, int elements)
{
    /* NB: a connection's own bound, through the reader's privdata (which
     * hiredis gives each task); MAX_ARRAY_ELEMENTS for a bare reader. */
    const int *max = task->privdata;

    if (elements > (max ? *max : MAX_ARRAY_ELEMENTS))
        return NULL; /* the reader reports an error: a failed command */
    return default_create_array(task, elements);
}

/* Copies hiredis's default reply functions, with arrays bounded. */
static void limited_init(void)
{
    redisReader *r = redisReaderCreate();

    if (r && r->fn) {
        limited_fns = *r->fn;
        default_create_array = r->fn->createArray;
        limited_fns.createArray = limited_create_array;
    }
    if (r)
        redisReaderFree(r);
}

int authn_hmac_redis_limit_reader(redisReader *r)
{
    pthread_once(&limited_once, limited_init);
    if (!r || !default_create_array)
        return 0;
    r->fn = &limited_fns;
    return 1;
}

/* Whether s (n bytes) names a command the module sends, itself or in its
 * scripts. */
static int known_command(const char *s, size_t n)
{
    static const char *const names[] = {
        "auth", "select", "get",     "set",      "del",  "eval", "mget",
        "role", "incr",   "pexpire", "sentinel", "ping", NULL};
    int i;

    for (i = 0; names[i]; i++)
        if (strlen(names[i]) == n && strncasecmp(s, names[i], n) == 0)
            return 1;
    return 0;
}

#define ERROR_TEXT_MAX 120

/* An error reply's text, e.g. "WRONGPASS invalid username-password pair",
 * at most ERROR_TEXT_MAX bytes. NB: Redis quotes a command's arguments in
 * some errors ("ERR unknown command 'AUTH', with args beginning with:
 * 'user' 'password'"; backquotes before 6.2), without escaping them: a
 * password with a quote in it ends its quote early. So the text stops at
 * the first quote (after a space or punctuation: an apostrophe within a
 * word, "can't", opens none) unless it is the first and names a command
 * the module sends ("NOPERM ... to run the 'del' command"): then it
 * stops at the second. Where it stops, '...' says so. Bytes that are not
 * printable show as '?'. */
const char *authn_hmac_redis_reply_error(const redisReply *r, apr_pool_t *p)
{
    char *out;
    size_t i = 0, o = 0, len;
    int quotes = 0;

    if (!r)
        return "no reply";
    if (r->type != REDIS_REPLY_ERROR)
        return apr_psprintf(p, "unexpected reply type %d", r->type);
    len = r->str ? r->len : 0;
    out = apr_palloc(p, ERROR_TEXT_MAX + 1);
    while (i < len && o < ERROR_TEXT_MAX) {
        char c = r->str[i];

        if ((c == '\'' || c == '"' || c == '`') &&
            (i == 0 || !apr_isalnum(r->str[i - 1]))) {
            const char *end = memchr(r->str + i + 1, c, len - i - 1);
            size_t n = end ? (size_t)(end - (r->str + i + 1)) : 0;

            if (quotes++ || !end || !known_command(r->str + i + 1, n) ||
                o + n + 2 > ERROR_TEXT_MAX) {
                if (o + 5 <= ERROR_TEXT_MAX) {
                    memcpy(out + o, "'...'", 5);
                    o += 5;
                }
                break;
            }
            memcpy(out + o, r->str + i, n + 2);
            o += n + 2;
            i += n + 2;
            continue;
        }
        out[o++] = apr_isprint(c) ? c : '?';
        i++;
    }
    out[o] = '\0';
    return out;
}

/* ------------------------------------------------------------- commands */

/* Reads exactly one reply, of at most c->reply_max bytes (REPLY_MAX but
 * for ROLE), before the deadline. Anything longer, or bytes after it, is a
 * protocol error. */
static authn_hmac_redis_rc recv_reply(authn_hmac_redis_conn_t *c,
                                      apr_time_t deadline, redisReply **out,
                                      const char *doing, const char **why,
                                      apr_pool_t *p)
{
    char buf[LONG_REPLY_MAX];
    size_t got = 0;
    void *reply = NULL;

    *out = NULL;
    for (;;) {
        size_t n = 0;
        authn_hmac_redis_rc rc =
            c->sock.tr->read(&c->sock, buf + got, c->reply_max - got, &n,
                             deadline, doing, why, p);

        if (rc != AUTHN_HMAC_REDIS_OK)
            return rc;
        if (redisReaderFeed(c->reader, buf + got, n) != REDIS_OK ||
            redisReaderGetReply(c->reader, &reply) != REDIS_OK)
            return authn_hmac_redis_io_fail(why, doing, "malformed reply", p);
        got += n;
        if (reply)
            break;
        if (got == c->reply_max)
            return authn_hmac_redis_io_fail(why, doing, "reply too long", p);
    }
    if (c->reader->pos < c->reader->len) {
        freeReplyObject(reply);
        return authn_hmac_redis_io_fail(why, doing,
                                        "unexpected bytes after the reply", p);
    }
    *out = reply;
    return AUTHN_HMAC_REDIS_OK;
}

authn_hmac_redis_rc authn_hmac_redis_command(
    authn_hmac_redis_conn_t *c, int argc, const char **argv, const size_t *lens,
    apr_time_t deadline, redisReply **reply, const char **why, apr_pool_t *p)
{
    struct iovec iov[1 + 3 * MAX_ARGS];
    char head[16 * (1 + MAX_ARGS)], *h = head;
    int i, n = 0;
    size_t left = sizeof(head);

    /* RESP: "*argc\r\n" then "$len\r\n" arg "\r\n" for each argument. The
     * arguments are sent from where they are: nothing is copied. */
    if (argc < 1 || argc > MAX_ARGS)
        return authn_hmac_redis_io_fail(why, argv[0], "bad command", p);
    for (i = -1; i < argc; i++) {
        int w = i < 0 ? snprintf(h, left, "*%d\r\n", argc)
                      : snprintf(h, left, "$%lu\r\n", (unsigned long)lens[i]);

        if (w <= 0 || (size_t)w >= left)
            return authn_hmac_redis_io_fail(why, argv[0], "bad command", p);
        iov[n].iov_base = h;
        iov[n++].iov_len = (size_t)w;
        h += w;
        left -= (size_t)w;
        if (i >= 0) {
            iov[n].iov_base = (void *)(uintptr_t)argv[i];
            iov[n++].iov_len = lens[i];
            iov[n].iov_base = (void *)(uintptr_t) "\r\n";
            iov[n++].iov_len = 2;
        }
    }
    {
        authn_hmac_redis_rc rc =
            c->sock.tr->write(&c->sock, iov, n, deadline, argv[0], why, p);

        if (rc != AUTHN_HMAC_REDIS_OK)
            return rc;
    }
    return recv_reply(c, deadline, reply, argv[0], why, p);
}

/* Runs one command and checks for a status reply of OK. */
static authn_hmac_redis_rc run_ok(authn_hmac_redis_conn_t *c, int argc,
                                  const char **argv, const size_t *lens,
                                  apr_time_t deadline, const char **why,
                                  apr_pool_t *p)
{
    redisReply *r = NULL;
    authn_hmac_redis_rc rc =
        authn_hmac_redis_command(c, argc, argv, lens, deadline, &r, why, p);

    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    /* NB: r is set whenever rc is OK; the analyzer, which no longer sees
     * the whole client in one file, cannot tell. */
    if (!r || r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        *why = apr_psprintf(p, "%s refused: %s", argv[0],
                            authn_hmac_redis_reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_conn_t *authn_hmac_redis_conn_new(int fd)
{
    authn_hmac_redis_conn_t *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->sock.fd = fd;
    c->sock.tr = &authn_hmac_redis_plain;
    c->reply_max = REPLY_MAX;
    c->elements_max = MAX_ARRAY_ELEMENTS;
    c->reader = redisReaderCreate();
    if (!c->reader || !authn_hmac_redis_limit_reader(c->reader)) {
        if (c->reader)
            redisReaderFree(c->reader);
        free(c);
        return NULL;
    }
    c->reader->privdata = &c->elements_max;
    return c;
}

void authn_hmac_redis_conn_long_replies(authn_hmac_redis_conn_t *c)
{
    c->reply_max = LONG_REPLY_MAX;
    c->elements_max = LONG_MAX_ARRAY_ELEMENTS;
}

void authn_hmac_redis_close(authn_hmac_redis_conn_t *c)
{
    if (c) {
        c->sock.tr->close(&c->sock);
        if (c->sock.fd >= 0)
            close(c->sock.fd);
        redisReaderFree(c->reader);
        free(c);
    }
}

int authn_hmac_redis_conn_idle_ok(authn_hmac_redis_conn_t *c)
{
    return c->sock.tr->idle_ok(&c->sock);
}

/* Connects, then runs AUTH and SELECT, all before the deadline. */
authn_hmac_redis_rc
authn_hmac_redis_connect(const authn_hmac_redis_conf_t *conf,
                         const authn_hmac_redis_addr_t *addrs, int naddr,
                         const char *peer, apr_time_t deadline,
                         authn_hmac_redis_conn_t **out, int *resumed,
                         const char **why, apr_pool_t *p)
{
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;
    authn_hmac_redis_conn_t *c;
    int fd;

    *resumed = 0;
    fd = authn_hmac_redis_socket_open(addrs, naddr, deadline, why, p);
    if (fd < 0)
        return fd == -2 ? AUTHN_HMAC_REDIS_TIMEOUT : AUTHN_HMAC_REDIS_ERROR;
    c = authn_hmac_redis_conn_new(fd);
    if (!c) {
        close(fd);
        *why = "connect: out of memory";
        return AUTHN_HMAC_REDIS_ERROR;
    }
    if (conf->tls)
        rc = authn_hmac_redis_tls_start(conf->tls, peer, &c->sock, deadline,
                                        resumed, why, p);
    if (rc == AUTHN_HMAC_REDIS_OK && conf->password) {
        /* NB: the password goes from its locked page to the transport. */
        const char *argv[3] = {"AUTH", conf->user, conf->password};
        size_t lens[3] = {4, conf->user ? strlen(conf->user) : 0,
                          conf->password_len};

        if (!conf->user) {
            argv[1] = conf->password;
            lens[1] = conf->password_len;
        }
        rc = run_ok(c, conf->user ? 3 : 2, argv, lens, deadline, why, p);
        if (rc == AUTHN_HMAC_REDIS_ERROR && conf->auth_from &&
            strncmp(*why, "AUTH refused", 12) == 0)
            *why = apr_psprintf(p, "%s (the password in %s's file)", *why,
                                conf->auth_from);
    }
    if (rc == AUTHN_HMAC_REDIS_OK && conf->db) {
        const char *db = apr_itoa(p, conf->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};

        rc = run_ok(c, 2, argv, lens, deadline, why, p);
    }
    if (rc != AUTHN_HMAC_REDIS_OK) {
        authn_hmac_redis_close(c);
        return rc;
    }
    *out = c;
    return AUTHN_HMAC_REDIS_OK;
}
