/* redis.c: the Redis tier.
 *
 * The client is small and strict: its own non-blocking socket, so that one
 * deadline covers connect and each whole command with its reply (a server
 * that trickles a byte at a time gets no more than the deadline), and
 * hiredis only as the reply parser, fed at most REPLY_MAX bytes per reply.
 * Addresses are resolved when a child starts, never while a request waits.
 * AUTH is sent with writev straight from the secret's locked page, so no
 * buffer of the client ever holds the Redis password.
 *
 * Nothing Redis answers is trusted. A user's entry, under prefix +
 * hex(user id), holds at most AUTHN_HMAC_PER_USER credential MACs with their
 * times, and a tag over them made with a subkey of the pepper (see cred.c):
 * a value that does not verify is a miss, whoever wrote it.
 *
 * The shared health state keeps an outage logged once for all processes,
 * and a circuit breaker on a monotonic clock: after BREAKER_AFTER failed
 * incidents (operations that failed together count once) within
 * BREAKER_WINDOW Redis is skipped for 2, 4, 8 then 16 s (an outage,
 * logged when it begins and when it ends); when that wait ends, one
 * request probes Redis (half open) while the others keep skipping it. */
#include "authn_hmac.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <apr_lib.h>
#include <apr_strings.h>
#include <bsd/string.h>
#include <hiredis/hiredis.h>
#include <openssl/crypto.h>

#define BREAKER_AFTER     3 /* incidents within BREAKER_WINDOW */
#define BREAKER_WINDOW    apr_time_from_sec(10)
#define BREAKER_MAX_SHIFT 3       /* backoff 2, 4, 8, 16 s */
#define CLOCK_SKEW_USEC   5000000 /* between the servers of a farm */
#define REPLY_MAX         512     /* bytes; the longest reply is ~270 */
#define MAX_ADDRS         4
#define MAX_ARGS          7 /* EVAL script 1 key token result px */

struct authn_hmac_redis_conn {
    int fd;
    struct ssl_st *ssl; /* NULL: plain TCP or a unix socket */
    redisReader *reader;
    uint64_t epoch; /* the shared outage count when it was made */
};

apr_time_t authn_hmac_monotonic(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_time_t)ts.tv_sec * APR_USEC_PER_SEC +
           (apr_time_t)(ts.tv_nsec / 1000);
}

/* What to say of a URL (redis://host:6379/0, rediss://..., unix:/path),
 * the form most Redis clients take: what to write instead, from its host
 * and port or its socket path. NB: nothing of a URL with a user or a
 * password ('@') is repeated: the password goes in AuthHMACRedisAuthFile. */
static const char *url_problem(const char *arg, apr_pool_t *p)
{
    const char *rest = strstr(arg, "://"), *db;
    size_t n, dbn;

    if (strchr(arg, '@'))
        return "a URL is not accepted; its user and password go in "
               "AuthHMACRedisAuthFile";
    rest = rest ? rest + 3 : arg + 5; /* unix:/path */
    n = strcspn(rest, *rest == '/' ? "?" : "/?");
    if (n == 0 || n > 200 || (!strstr(arg, "://") && *rest != '/'))
        return "a URL is not accepted";
    db = *rest != '/' && rest[n] == '/' ? rest + n + 1 : "";
    dbn = strspn(db, "0123456789");
    return apr_psprintf(
        p, "a URL is not accepted: write %.*s%s%.*s%s", (int)n, rest,
        dbn ? ", and AuthHMACRedisDatabase " : "", (int)dbn, db,
        strncasecmp(arg, "rediss:", 7) == 0 ? ", and AuthHMACRedisTLS on" : "");
}

const char *authn_hmac_redis_parse_server(const char *arg,
                                          authn_hmac_redis_conf_t *conf,
                                          apr_pool_t *p)
{
    const char *colon, *host_end, *c;
    char *end;
    long port = AUTHN_HMAC_REDIS_PORT;

    if (!arg || !*arg)
        return "empty";
    if (strstr(arg, "://") || strncasecmp(arg, "unix:", 5) == 0)
        return url_problem(arg, p);
    if (*arg == '/') {
        if (strlen(arg) > 100)
            return "socket path too long";
        conf->socket = apr_pstrdup(p, arg);
        conf->host = NULL;
        return NULL;
    }
    if (*arg == '[') {
        host_end = strchr(arg, ']');
        if (!host_end || host_end == arg + 1)
            return "bad [address]";
        colon = host_end[1] == ':' ? host_end + 1 : NULL;
        if (!colon && host_end[1])
            return "junk after ]";
        conf->host = apr_pstrmemdup(p, arg + 1, (size_t)(host_end - arg - 1));
    }
    else {
        colon = strchr(arg, ':');
        if (colon && strchr(colon + 1, ':'))
            return "an IPv6 address needs [brackets]";
        host_end = colon ? colon : arg + strlen(arg);
        if (host_end == arg)
            return "empty host";
        conf->host = apr_pstrmemdup(p, arg, (size_t)(host_end - arg));
    }
    for (c = conf->host; *c; c++)
        if (!apr_isalnum(*c) && !strchr(".-_:", *c))
            return "bad character in host";
    if (colon) {
        if (!apr_isdigit(colon[1]))
            return "bad port";
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (errno || *end || port < 1 || port > 65535)
            return "bad port";
    }
    conf->port = (int)port;
    conf->socket = NULL;
    return NULL;
}

const char *authn_hmac_redis_parse_auth(authn_hmac_secret_t *secret,
                                        authn_hmac_redis_conf_t *conf)
{
    char *s = (char *)secret->data, *sp;
    size_t len = secret->len;

    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r'))
        s[--len] = '\0';
    if (len == 0)
        return "it is empty";
    if (memchr(s, '\n', len) || memchr(s, '\r', len) || memchr(s, '\0', len))
        return "it must hold one line";
    /* NB: the page is zeroed past len, so every piece is NUL-terminated. */
    sp = memchr(s, ' ', len);
    if (sp) {
        *sp = '\0';
        if (sp == s || sp + 1 == s + len)
            return "a user name or password is empty";
        conf->user = s;
        conf->password = sp + 1;
        conf->password_len = (size_t)(s + len - (sp + 1));
    }
    else {
        conf->user = NULL;
        conf->password = s;
        conf->password_len = len;
    }
    return NULL;
}

/* ---------------------------------------------------- bounded replies */

/* The module's commands never get an array back; hiredis would allocate an
 * array's element vector before reading it, so a hostile or broken server
 * could make a child allocate gigabytes with "*2000000000". Found by
 * fuzz_redis_reply. */
#define MAX_ARRAY_ELEMENTS 16

static redisReplyObjectFunctions limited_fns;
static void *(*default_create_array)(const redisReadTask *, int);
static pthread_once_t limited_once = PTHREAD_ONCE_INIT;

static void *limited_create_array(const redisReadTask *task, int elements)
{
    if (elements > MAX_ARRAY_ELEMENTS)
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

/* An error reply's text, e.g. "WRONGPASS invalid username-password pair",
 * up to any quoted argument. */
static const char *reply_error(const redisReply *r, apr_pool_t *p)
{
    size_t n;

    if (!r)
        return "no reply";
    if (r->type != REDIS_REPLY_ERROR)
        return apr_psprintf(p, "unexpected reply type %d", r->type);
    /* NB: Redis quotes a command's arguments in some errors ("ERR unknown
     * command 'AUTH', with args beginning with: 'user' 'password'"): the
     * text is cut at the first quote, and at 120 bytes. */
    n = strcspn(r->str, "'\"");
    if (n > r->len)
        n = r->len;
    return apr_pstrndup(p, r->str, n > 120 ? 120 : n);
}

/* ------------------------------------------------------------- socket I/O */

/* Waits for fd to be ready for ev until deadline (monotonic). 1 when ready,
 * 0 at the deadline, -1 on error. NB: past the deadline, one last look
 * without waiting: a reply that came while this thread was not running is
 * not late. */
int authn_hmac_redis_wait_fd(int fd, short ev, apr_time_t deadline)
{
    for (;;) {
        apr_time_t left = deadline - authn_hmac_monotonic();
        struct pollfd pfd;
        int n;

        pfd.fd = fd;
        pfd.events = ev;
        pfd.revents = 0;
        n = poll(&pfd, 1, left > 0 ? (int)((left + 999) / 1000) : 0);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (left <= 0)
            return 0;
    }
}

static authn_hmac_redis_rc io_fail(const char **why, const char *doing,
                                   const char *what, apr_pool_t *p)
{
    *why = apr_psprintf(p, "%s: %s", doing, what);
    return strcmp(what, "timed out") == 0 ? AUTHN_HMAC_REDIS_TIMEOUT
                                          : AUTHN_HMAC_REDIS_ERROR;
}

/* Writes every byte of iov before the deadline. */
static authn_hmac_redis_rc send_all(int fd, struct iovec *iov, int n,
                                    apr_time_t deadline, const char *doing,
                                    const char **why, apr_pool_t *p)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);

        if (w < 0) {
            int ready;

            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return io_fail(why, doing, strerror(errno), p);
            ready = authn_hmac_redis_wait_fd(fd, POLLOUT, deadline);
            if (ready <= 0)
                return io_fail(why, doing,
                               ready ? strerror(errno) : "timed out", p);
            continue;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return AUTHN_HMAC_REDIS_OK;
}

/* The same over TLS: the pieces go in one record (a record each would
 * cost a seal each). The longest command is a few hundred bytes, AUTH
 * with a password of up to AUTHN_HMAC_SECRET_MAX. NB: the buffer holds
 * AUTH's password for as long as the write takes, and is wiped then. */
static authn_hmac_redis_rc send_tls(authn_hmac_redis_conn_t *c,
                                    const struct iovec *iov, int n,
                                    apr_time_t deadline, const char *doing,
                                    const char **why, apr_pool_t *p)
{
    char buf[4096];
    size_t len = 0;
    authn_hmac_redis_rc rc;
    int i;

    for (i = 0; i < n; i++) {
        if (iov[i].iov_len > sizeof(buf) - len) {
            explicit_bzero(buf, len);
            return io_fail(why, doing, "command too long", p);
        }
        memcpy(buf + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    rc = authn_hmac_redis_tls_write(c->ssl, c->fd, buf, len, deadline, doing,
                                    why, p);
    explicit_bzero(buf, len);
    return rc;
}

/* Reads what comes, up to len bytes, before the deadline: *got > 0. */
static authn_hmac_redis_rc recv_some(authn_hmac_redis_conn_t *c, char *buf,
                                     size_t len, size_t *got,
                                     apr_time_t deadline, const char *doing,
                                     const char **why, apr_pool_t *p)
{
    if (c->ssl)
        return authn_hmac_redis_tls_read(c->ssl, c->fd, buf, len, got, deadline,
                                         doing, why, p);
    for (;;) {
        ssize_t n;
        int ready = authn_hmac_redis_wait_fd(c->fd, POLLIN, deadline);

        if (ready <= 0)
            return io_fail(why, doing, ready ? strerror(errno) : "timed out",
                           p);
        n = read(c->fd, buf, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return io_fail(why, doing,
                           n ? strerror(errno) : "connection closed", p);
        *got = (size_t)n;
        return AUTHN_HMAC_REDIS_OK;
    }
}

/* Reads exactly one reply, of at most REPLY_MAX bytes, before the deadline.
 * Anything longer, or bytes after it, is a protocol error. */
static authn_hmac_redis_rc recv_reply(authn_hmac_redis_conn_t *c,
                                      apr_time_t deadline, redisReply **out,
                                      const char *doing, const char **why,
                                      apr_pool_t *p)
{
    char buf[REPLY_MAX];
    size_t got = 0;
    void *reply = NULL;

    *out = NULL;
    for (;;) {
        size_t n = 0;
        authn_hmac_redis_rc rc = recv_some(c, buf + got, sizeof(buf) - got, &n,
                                           deadline, doing, why, p);

        if (rc != AUTHN_HMAC_REDIS_OK)
            return rc;
        if (redisReaderFeed(c->reader, buf + got, n) != REDIS_OK ||
            redisReaderGetReply(c->reader, &reply) != REDIS_OK)
            return io_fail(why, doing, "malformed reply", p);
        got += n;
        if (reply)
            break;
        if (got == sizeof(buf))
            return io_fail(why, doing, "reply too long", p);
    }
    if (c->reader->pos < c->reader->len) {
        freeReplyObject(reply);
        return io_fail(why, doing, "unexpected bytes after the reply", p);
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
        return io_fail(why, argv[0], "bad command", p);
    for (i = -1; i < argc; i++) {
        int w = i < 0 ? snprintf(h, left, "*%d\r\n", argc)
                      : snprintf(h, left, "$%lu\r\n", (unsigned long)lens[i]);

        if (w <= 0 || (size_t)w >= left)
            return io_fail(why, argv[0], "bad command", p);
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
            c->ssl ? send_tls(c, iov, n, deadline, argv[0], why, p)
                   : send_all(c->fd, iov, n, deadline, argv[0], why, p);

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
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        *why = apr_psprintf(p, "%s refused: %s", argv[0], reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_conn_t *authn_hmac_redis_conn_wrap(int fd)
{
    authn_hmac_redis_conn_t *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->fd = fd;
    c->reader = redisReaderCreate();
    if (!c->reader || !authn_hmac_redis_limit_reader(c->reader)) {
        if (c->reader)
            redisReaderFree(c->reader);
        free(c);
        return NULL;
    }
    return c;
}

void authn_hmac_redis_close(authn_hmac_redis_conn_t *c)
{
    if (c) {
        authn_hmac_redis_tls_close(c->ssl);
        if (c->fd >= 0)
            close(c->fd);
        redisReaderFree(c->reader);
        free(c);
    }
}

/* ------------------------------------------------------ connection pool */

typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
} addr_t;

struct authn_hmac_redis_pool {
    const authn_hmac_redis_conf_t *conf;
    apr_thread_mutex_t *lock;
    authn_hmac_redis_conn_t **idle;
    int nidle, max;
    authn_hmac_redis_health_t *health; /* shared by all processes */
    addr_t addr[MAX_ADDRS];
    int naddr;
    const char *unresolved; /* why the name gave no address, or NULL */
};

/* Resolves the configured address once, when the child starts. */
static void pool_resolve(authn_hmac_redis_pool_t *rp, apr_pool_t *p)
{
    const authn_hmac_redis_conf_t *conf = rp->conf;
    struct addrinfo hints, *res = NULL, *ai;
    char port[8];
    int rc;

    if (conf->socket) {
        struct sockaddr_un *un = (struct sockaddr_un *)&rp->addr[0].sa;

        un->sun_family = AF_UNIX;
        strlcpy(un->sun_path, conf->socket, sizeof(un->sun_path));
        rp->addr[0].len = (socklen_t)sizeof(*un);
        rp->naddr = 1;
        return;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%d", conf->port);
    rc = getaddrinfo(conf->host, port, &hints, &res);
    if (rc != 0) {
        rp->unresolved = apr_psprintf(p, "cannot resolve %s: %s", conf->host,
                                      gai_strerror(rc));
        return;
    }
    for (ai = res; ai && rp->naddr < MAX_ADDRS; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(rp->addr[0].sa))
            continue;
        memcpy(&rp->addr[rp->naddr].sa, ai->ai_addr, ai->ai_addrlen);
        rp->addr[rp->naddr++].len = ai->ai_addrlen;
    }
    freeaddrinfo(res);
    if (!rp->naddr)
        rp->unresolved = apr_psprintf(p, "no address for %s", conf->host);
}

/* Connects a non-blocking socket before the deadline: 0, ETIMEDOUT at the
 * deadline, or why it failed. */
static int connect_fd(int fd, const struct sockaddr *sa, socklen_t len,
                      apr_time_t deadline)
{
    int err = 0, ready;
    socklen_t elen = sizeof(err);

    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return errno; /* EAGAIN: a unix socket's backlog is full */
    ready = authn_hmac_redis_wait_fd(fd, POLLOUT, deadline);
    if (ready == 0)
        return ETIMEDOUT;
    if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        return errno;
    return err;
}

/* A connected socket to one of the addresses, before the deadline; -2 at
 * the deadline, -1 if none would connect. */
static int open_socket(const authn_hmac_redis_pool_t *rp, apr_time_t deadline,
                       const char **why, apr_pool_t *p)
{
    int i;

    *why = "connect: no address";
    for (i = 0; i < rp->naddr; i++) {
        const struct sockaddr *sa = (const struct sockaddr *)&rp->addr[i].sa;
        int fd = socket(sa->sa_family,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int err, one = 1;

        if (fd < 0) {
            *why = apr_psprintf(p, "connect: %s", strerror(errno));
            continue;
        }
        err = connect_fd(fd, sa, rp->addr[i].len, deadline);
        if (!err) {
            if (sa->sa_family != AF_UNIX)
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
                                 sizeof(one));
            return fd;
        }
        close(fd);
        if (err == ETIMEDOUT) {
            *why = "connect: timed out";
            return -2;
        }
        *why = apr_psprintf(p, "connect: %s", strerror(err));
    }
    return -1;
}

/* Connects, then runs AUTH and SELECT, all before the deadline. */
static authn_hmac_redis_rc pool_connect(authn_hmac_redis_pool_t *rp,
                                        authn_hmac_redis_conn_t **out,
                                        apr_time_t deadline, const char **why,
                                        apr_pool_t *p)
{
    const authn_hmac_redis_conf_t *conf = rp->conf;
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;
    authn_hmac_redis_conn_t *c;
    int fd;

    if (rp->unresolved) {
        *why = rp->unresolved;
        return AUTHN_HMAC_REDIS_ERROR;
    }
    fd = open_socket(rp, deadline, why, p);
    if (fd < 0)
        return fd == -2 ? AUTHN_HMAC_REDIS_TIMEOUT : AUTHN_HMAC_REDIS_ERROR;
    c = authn_hmac_redis_conn_wrap(fd);
    if (!c) {
        close(fd);
        *why = "connect: out of memory";
        return AUTHN_HMAC_REDIS_ERROR;
    }
    if (conf->tls) {
        int resumed = 0;

        rc = authn_hmac_redis_tls_connect(conf->tls, fd, deadline, &c->ssl,
                                          &resumed, why, p);
        if (rc != AUTHN_HMAC_REDIS_OK) {
            authn_hmac_redis_close(c);
            return rc;
        }
        __atomic_add_fetch(&rp->health->tls_handshakes, 1, __ATOMIC_RELAXED);
        if (resumed)
            __atomic_add_fetch(&rp->health->tls_resumed, 1, __ATOMIC_RELAXED);
    }
    if (conf->password) {
        /* NB: the password goes from its locked page to the socket. */
        const char *argv[3] = {"AUTH", conf->user, conf->password};
        size_t lens[3] = {4, conf->user ? strlen(conf->user) : 0,
                          conf->password_len};

        if (!conf->user) {
            argv[1] = conf->password;
            lens[1] = conf->password_len;
        }
        rc = run_ok(c, conf->user ? 3 : 2, argv, lens, deadline, why, p);
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

/* Closes a connection and counts it gone. */
static void pool_close(authn_hmac_redis_pool_t *rp, authn_hmac_redis_conn_t *c)
{
    authn_hmac_redis_close(c);
    __atomic_sub_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
}

static apr_status_t pool_cleanup(void *data)
{
    authn_hmac_redis_pool_t *rp = data;

    while (rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
    return APR_SUCCESS;
}

apr_status_t authn_hmac_redis_pool_create(authn_hmac_redis_pool_t **out,
                                          const authn_hmac_redis_conf_t *conf,
                                          int max_idle,
                                          authn_hmac_redis_health_t *health,
                                          apr_pool_t *p)
{
    authn_hmac_redis_pool_t *rp = apr_pcalloc(p, sizeof(*rp));
    apr_status_t rv;

    rp->conf = conf;
    rp->max = max_idle > 0 ? max_idle : 1;
    rp->idle =
        apr_pcalloc(p, sizeof(authn_hmac_redis_conn_t *) * (size_t)rp->max);
    rp->health = health;
    rv = apr_thread_mutex_create(&rp->lock, APR_THREAD_MUTEX_DEFAULT, p);
    if (rv != APR_SUCCESS)
        return rv;
    pool_resolve(rp, p);
    apr_pool_cleanup_register(p, rp, pool_cleanup, apr_pool_cleanup_null);
    *out = rp;
    return APR_SUCCESS;
}

authn_hmac_redis_rc authn_hmac_redis_pool_acquire(authn_hmac_redis_pool_t *rp,
                                                  authn_hmac_redis_conn_t **c,
                                                  apr_time_t deadline,
                                                  const char **why,
                                                  apr_pool_t *p)
{
    uint64_t epoch = __atomic_load_n(&rp->health->epoch, __ATOMIC_RELAXED);
    authn_hmac_redis_rc rc;

    *c = NULL;
    apr_thread_mutex_lock(rp->lock);
    /* NB: a connection made before the last outage began (seen by any
     * process) is presumed dead: this process may have skipped Redis the
     * whole time, with the breaker open, and never noticed. */
    while (!*c && rp->nidle > 0) {
        char b;

        *c = rp->idle[--rp->nidle];
        /* NB: an idle connection with bytes to read (a late answer, or a
         * server closing it) would answer the next command out of step. */
        if ((*c)->epoch != epoch ||
            ((*c)->ssl ? !authn_hmac_redis_tls_idle_ok((*c)->ssl)
                       : recv((*c)->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)) {
            pool_close(rp, *c);
            *c = NULL;
        }
    }
    apr_thread_mutex_unlock(rp->lock);
    if (*c)
        return AUTHN_HMAC_REDIS_OK;
    rc = pool_connect(rp, c, deadline, why, p);
    if (rc == AUTHN_HMAC_REDIS_OK && *c) {
        (*c)->epoch = epoch;
        __atomic_add_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
    }
    return rc;
}

void authn_hmac_redis_pool_release(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t *c, int broken)
{
    apr_thread_mutex_lock(rp->lock);
    if (!broken && rp->nidle < rp->max) {
        rp->idle[rp->nidle++] = c;
        c = NULL;
    }
    /* NB: one broken connection means the server went away or restarted:
     * the idle ones are most likely dead too. Drop them, so that recovery
     * is not delayed by one failure per stale connection. */
    while (broken && rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
    apr_thread_mutex_unlock(rp->lock);
    if (c)
        pool_close(rp, c);
}

/* ------------------------------------------------- entries and values */

static const char hexdigits[] = "0123456789abcdef";

static char *put_hex(char *o, const unsigned char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        *o++ = hexdigits[b[i] >> 4];
        *o++ = hexdigits[b[i] & 15];
    }
    return o;
}

static char *put_hex64(char *o, uint64_t v)
{
    unsigned char b[8];
    int i;

    for (i = 7; i >= 0; i--, v >>= 8)
        b[i] = (unsigned char)v;
    return put_hex(o, b, sizeof(b));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Strict lowercase hex; 0 for anything else. */
static int get_hex(const char *s, unsigned char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hi < 0 ? -1 : hexval(s[2 * i + 1]);

        if (lo < 0)
            return 0;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return 1;
}

static int get_hex64(const char *s, int64_t *v)
{
    unsigned char b[8];
    uint64_t u = 0;
    int i;

    if (!get_hex(s, b, sizeof(b)))
        return 0;
    for (i = 0; i < 8; i++)
        u = (u << 8) | b[i];
    if (u > (uint64_t)INT64_MAX)
        return 0;
    *v = (int64_t)u;
    return 1;
}

#define KEY_HEX   ((size_t)2 * AUTHN_HMAC_KEY_LEN)
#define ENTRY_HEX (KEY_HEX + 32) /* mac, verified, used */

size_t authn_hmac_value_encode(const authn_hmac_mac_t *mac,
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               const authn_hmac_entries_t *es,
                               char out[AUTHN_HMAC_VALUE_MAX])
{
    unsigned char tag[AUTHN_HMAC_KEY_LEN];
    char *o = out;
    int i;

    if (es->n < 1 || es->n > AUTHN_HMAC_PER_USER)
        return 0;
    *o++ = '0' + AUTHN_HMAC_VALUE_VERSION;
    for (i = 0; i < es->n; i++) {
        *o++ = ':';
        o = put_hex(o, es->e[i].mac, AUTHN_HMAC_KEY_LEN);
        o = put_hex64(o, (uint64_t)es->e[i].verified);
        o = put_hex64(o, (uint64_t)es->e[i].used);
    }
    authn_hmac_value_tag(mac, uid, out, (size_t)(o - out), tag);
    *o++ = ':';
    o = put_hex(o, tag, sizeof(tag));
    *o = '\0';
    return (size_t)(o - out);
}

int authn_hmac_value_decode(const authn_hmac_mac_t *mac,
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, authn_hmac_entries_t *es)
{
    unsigned char want[AUTHN_HMAC_KEY_LEN], got[AUTHN_HMAC_KEY_LEN];
    char buf[AUTHN_HMAC_VALUE_MAX];
    size_t body;
    int n, i, ok;

    es->n = 0;
    /* NB: a value of another version (an older server of the farm wrote
     * it, or a newer one) is no one's forgery: a plain miss, neither
     * counted nor logged as forged, and replaced once verified. Its tag is
     * not checked: it could say nothing this version reads. */
    if (len >= 1 && v[0] >= '0' && v[0] <= '9' &&
        v[0] != '0' + AUTHN_HMAC_VALUE_VERSION)
        return -1;
    /* "V" (":" entry){1,PER_USER} ":" tag, every field of fixed width. */
    if (len < 2 + 1 + KEY_HEX || len >= sizeof(buf))
        return 0;
    body = len - 1 - KEY_HEX;
    if ((body - 1) % (1 + ENTRY_HEX) != 0)
        return 0;
    n = (int)((body - 1) / (1 + ENTRY_HEX));
    memcpy(buf, v, len);
    buf[len] = '\0';
    if (n < 1 || n > AUTHN_HMAC_PER_USER ||
        buf[0] != '0' + AUTHN_HMAC_VALUE_VERSION || buf[body] != ':' ||
        !get_hex(buf + body + 1, got, sizeof(got)))
        return 0;
    authn_hmac_value_tag(mac, uid, buf, body, want);
    ok = CRYPTO_memcmp(want, got, sizeof(want)) == 0;
    for (i = 0; ok && i < n; i++) {
        const char *e = buf + 1 + (size_t)i * (1 + ENTRY_HEX);

        ok = e[0] == ':' && get_hex(e + 1, es->e[i].mac, AUTHN_HMAC_KEY_LEN) &&
             get_hex64(e + 1 + KEY_HEX, &es->e[i].verified) &&
             get_hex64(e + 1 + KEY_HEX + 16, &es->e[i].used);
    }
    es->n = ok ? n : 0;
    explicit_bzero(want, sizeof(want));
    return ok;
}

int authn_hmac_entries_find(const authn_hmac_entries_t *es,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl,
                            apr_interval_time_t max_age, apr_time_t *verified,
                            apr_time_t *used)
{
    int i, found = 0;

    for (i = 0; i < es->n; i++) {
        apr_time_t when = es->e[i].verified, last = es->e[i].used;

        if (CRYPTO_memcmp(es->e[i].mac, key, AUTHN_HMAC_KEY_LEN) != 0)
            continue;
        /* NB: the times are another server's clock, which may run a little
         * ahead of this one's: up to CLOCK_SKEW_USEC they are taken as now
         * (shared memory then holds no time "in the future"); further is
         * odd, and not trusted. */
        if (when > now + CLOCK_SKEW_USEC || last > now + CLOCK_SKEW_USEC)
            continue;
        if (when > now)
            when = now;
        if (last > now)
            last = now;
        if (now - when >= max_age || now - last >= ttl)
            continue; /* too old, or idle too long, for this section */
        *verified = when;
        *used = last;
        found = 1;
    }
    return found;
}

void authn_hmac_entries_add(authn_hmac_entries_t *es,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t verified, apr_time_t used)
{
    authn_hmac_entries_t old = *es;
    int i, j;

    /* The new entry, with the later times of its own old one (another
     * server may have refreshed it since this one read it); then the most
     * recently used others. NB: none is dropped for being idle: idle for
     * one section may be live for another, and the value's PX bounds them
     * all (authn_hmac_redis_set). */
    es->n = 1;
    memcpy(es->e[0].mac, key, AUTHN_HMAC_KEY_LEN);
    es->e[0].verified = verified;
    es->e[0].used = used;
    /* NB: used is now, for the callers: times more than the skew allowed
     * ahead of it come from a clock that is wrong. Kept, they would make
     * the entry unreadable (entries_find does not trust them) until that
     * time came, whoever verified it again; so they are dropped. */
    for (i = 0, j = 0; i < old.n; i++)
        if (old.e[i].verified <= used + CLOCK_SKEW_USEC &&
            old.e[i].used <= used + CLOCK_SKEW_USEC)
            old.e[j++] = old.e[i];
    old.n = j;
    for (i = 0; i < old.n; i++)
        if (CRYPTO_memcmp(old.e[i].mac, key, AUTHN_HMAC_KEY_LEN) == 0) {
            if (old.e[i].verified > es->e[0].verified)
                es->e[0].verified = old.e[i].verified;
            if (old.e[i].used > es->e[0].used)
                es->e[0].used = old.e[i].used;
        }
    while (es->n < AUTHN_HMAC_PER_USER) {
        int best = -1;

        for (i = 0; i < old.n; i++) {
            int dup = CRYPTO_memcmp(old.e[i].mac, key, AUTHN_HMAC_KEY_LEN) == 0;

            for (j = 1; j < es->n && !dup; j++)
                dup =
                    memcmp(old.e[i].mac, es->e[j].mac, AUTHN_HMAC_KEY_LEN) == 0;
            if (!dup && (best < 0 || old.e[i].used > old.e[best].used))
                best = i;
        }
        if (best < 0)
            break;
        es->e[es->n++] = old.e[best];
    }
}

/* prefix + lowercase hex of the user id. */
static const char *redis_key(const authn_hmac_redis_conf_t *conf,
                             const unsigned char *uid, apr_pool_t *p)
{
    size_t pl = strlen(conf->prefix);
    char *k = apr_palloc(p, pl + KEY_HEX + 1);

    memcpy(k, conf->prefix, pl);
    *put_hex(k + pl, uid, AUTHN_HMAC_KEY_LEN) = '\0';
    return k;
}

authn_hmac_redis_rc
authn_hmac_redis_interpret(const redisReply *get, const authn_hmac_mac_t *mac,
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           authn_hmac_entries_t *es, authn_hmac_value_state *st)
{
    es->n = 0;
    *st = AUTHN_HMAC_VALUE_NONE;
    if (!get)
        return AUTHN_HMAC_REDIS_ERROR;
    if (get->type == REDIS_REPLY_NIL)
        return AUTHN_HMAC_REDIS_OK;
    if (get->type != REDIS_REPLY_STRING)
        return AUTHN_HMAC_REDIS_ERROR;
    switch (authn_hmac_value_decode(mac, uid, get->str, get->len, es)) {
    case 1:
        *st = AUTHN_HMAC_VALUE_VALID;
        break;
    case -1:
        *st = AUTHN_HMAC_VALUE_OTHER;
        break;
    default:
        *st = AUTHN_HMAC_VALUE_FORGED;
    }
    return AUTHN_HMAC_REDIS_OK;
}

authn_hmac_redis_rc authn_hmac_redis_get(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    apr_time_t deadline, authn_hmac_entries_t *es, authn_hmac_value_state *st,
    const char **why, apr_pool_t *p)
{
    const char *k = redis_key(conf, uid, p);
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, strlen(k)};
    redisReply *get = NULL;
    authn_hmac_redis_rc rc;

    es->n = 0;
    *st = AUTHN_HMAC_VALUE_NONE;
    rc = authn_hmac_redis_command(c, 2, argv, lens, deadline, &get, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    rc = authn_hmac_redis_interpret(get, mac, uid, es, st);
    if (rc != AUTHN_HMAC_REDIS_OK)
        *why =
            apr_psprintf(p, "GET: unexpected answer (%s)", reply_error(get, p));
    freeReplyObject(get);
    return rc;
}

/* NB: the key lives until its newest entry's verification is max_age old
 * (max_age: the storing section's), whatever the TTLs: each reader applies
 * its own idle timeout to the entry's last use, and a key that expired with
 * one section's idle timeout would be gone for a section of a longer one
 * (which would then verify again: the fight this format ends). The cost is
 * an idle user's key kept up to max_age (a few hundred bytes; Redis's
 * maxmemory policy may evict it sooner, which only costs a verification).
 * Bounded: never more than max_age from now, whatever the times say. A
 * refresh does not move it (the verification times stay), so that a key
 * does not outlive its entries. A section with a longer max age than the
 * storing one loses the key sooner than it would allow, and verifies once
 * more then. */
authn_hmac_redis_rc authn_hmac_redis_set(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    const authn_hmac_entries_t *es, apr_time_t now, apr_interval_time_t max_age,
    apr_time_t deadline, const char **why, apr_pool_t *p)
{
    char value[AUTHN_HMAC_VALUE_MAX];
    const char *k = redis_key(conf, uid, p), *px;
    const char *argv[5] = {"SET", k, value, "PX", NULL};
    size_t lens[5];
    apr_time_t last = 0;
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;
    int i;

    for (i = 0; i < es->n; i++)
        if (es->e[i].verified > last)
            last = es->e[i].verified;
    last = last > now ? now + max_age : last + max_age;
    if (last <= now + 1000)
        return AUTHN_HMAC_REDIS_OK;
    px = apr_psprintf(p, "%" APR_INT64_T_FMT, (last - now) / 1000);
    argv[4] = px;
    lens[0] = 3;
    lens[1] = strlen(k);
    lens[2] = authn_hmac_value_encode(mac, uid, es, value);
    lens[3] = 2;
    lens[4] = strlen(px);
    if (!lens[2])
        return AUTHN_HMAC_REDIS_OK;
    rc = authn_hmac_redis_command(c, 5, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        *why = apr_psprintf(p, "SET refused: %s", reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------- single flight in a farm */

/* "F" result ":" hex(expires) ":" hex(tag) */
#define FLIGHT_BODY  (2 + 1 + 16)
#define FLIGHT_VALUE (FLIGHT_BODY + 1 + KEY_HEX)

/* The runner's result, written (or, for none, the marker deleted) only if
 * the marker is still the runner's own "R" + token: a runner that took
 * longer than its hold finds its marker expired, and maybe claimed by
 * another server, whose marker it must leave alone (else that server's
 * waiters would run bcrypt too). One command, whatever the result, so
 * that the Redis traffic of a first try is the same for every user. */
static const char flight_cas[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "if ARGV[2] == '' then return redis.call('DEL', KEYS[1]) end "
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1";

static const char *flight_key(const authn_hmac_redis_conf_t *conf,
                              const authn_hmac_mac_t *mac,
                              const unsigned char *key, apr_pool_t *p)
{
    unsigned char fid[AUTHN_HMAC_KEY_LEN];
    size_t pl = strlen(conf->prefix);
    char *k = apr_palloc(p, pl + 2 + KEY_HEX + 1);

    /* NB: "F" as the body: a user entry's body starts with its version. */
    authn_hmac_value_tag(mac, key, "F", 1, fid);
    memcpy(k, conf->prefix, pl);
    memcpy(k + pl, "f:", 2);
    *put_hex(k + pl + 2, fid, sizeof(fid)) = '\0';
    return k;
}

static void flight_tag(const authn_hmac_mac_t *mac, const unsigned char *key,
                       const char *body, char *out)
{
    unsigned char tag[AUTHN_HMAC_KEY_LEN];

    authn_hmac_value_tag(mac, key, body, FLIGHT_BODY, tag);
    put_hex(out, tag, sizeof(tag));
}

authn_hmac_farm_state
authn_hmac_flight_interpret(const authn_hmac_mac_t *mac,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, apr_time_t now)
{
    char want[KEY_HEX];
    unsigned char token[(AUTHN_HMAC_FLIGHT_TOKEN_LEN - 1) / 2];
    int64_t expires = 0;
    int ok;

    /* NB: a bare "R" is a claim of a server from before owner tokens. */
    if (len > 0 && v[0] == 'R' &&
        (len == 1 || (len == AUTHN_HMAC_FLIGHT_TOKEN_LEN &&
                      get_hex(v + 1, token, sizeof(token)))))
        return AUTHN_HMAC_FARM_RUNNING;
    if (len != FLIGHT_VALUE || v[0] != 'F' || (v[1] != '0' && v[1] != '1') ||
        v[2] != ':' || v[FLIGHT_BODY] != ':' || !get_hex64(v + 3, &expires))
        return AUTHN_HMAC_FARM_FORGED;
    flight_tag(mac, key, v, want);
    ok = CRYPTO_memcmp(want, v + FLIGHT_BODY + 1, KEY_HEX) == 0;
    explicit_bzero(want, sizeof(want));
    if (!ok)
        return AUTHN_HMAC_FARM_FORGED;
    if (expires <= now || expires > now + apr_time_from_sec(60))
        return AUTHN_HMAC_FARM_NONE; /* over, or a clock far off */
    return v[1] == '1' ? AUTHN_HMAC_FARM_GRANTED : AUTHN_HMAC_FARM_REFUSED;
}

/* Runs a command whose answer is +OK, or nil for SET NX that did not set. */
static authn_hmac_redis_rc run_set(authn_hmac_redis_conn_t *c, int argc,
                                   const char **argv, const size_t *lens,
                                   apr_time_t deadline, int *set,
                                   const char **why, apr_pool_t *p)
{
    redisReply *r = NULL;
    authn_hmac_redis_rc rc =
        authn_hmac_redis_command(c, argc, argv, lens, deadline, &r, why, p);

    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    *set = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!*set && r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_INTEGER) {
        *why = apr_psprintf(p, "%s refused: %s", argv[0], reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_rc authn_hmac_redis_flight_claim(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_interval_time_t hold, apr_time_t deadline,
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1], int *won, const char **why,
    apr_pool_t *p)
{
    const char *k = flight_key(conf, mac, key, p);
    const char *px = apr_psprintf(p, "%" APR_INT64_T_FMT, hold / 1000 + 1);
    const char *argv[6] = {"SET", k, token, "NX", "PX", px};
    size_t lens[6];
    unsigned char r[(AUTHN_HMAC_FLIGHT_TOKEN_LEN - 1) / 2];
    apr_status_t rv;
    int i;

    *won = 0;
    /* NB: unique, not secret: whoever can write Redis can delete any
     * marker anyway (more bcrypt, never a grant). */
    if ((rv = apr_generate_random_bytes(r, sizeof(r))) != APR_SUCCESS) {
        token[0] = '\0';
        *why = apr_psprintf(p, "no random token for the farm marker (%d)", rv);
        return AUTHN_HMAC_REDIS_ERROR;
    }
    token[0] = 'R';
    *put_hex(token + 1, r, sizeof(r)) = '\0';
    for (i = 0; i < 6; i++)
        lens[i] = strlen(argv[i]);
    return run_set(c, 6, argv, lens, deadline, won, why, p);
}

authn_hmac_redis_rc authn_hmac_redis_flight_result(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    const char *token, int result, apr_time_t now, apr_interval_time_t hold,
    apr_time_t deadline, const char **why, apr_pool_t *p)
{
    const char *k = flight_key(conf, mac, key, p);
    const char *px = apr_psprintf(p, "%" APR_INT64_T_FMT, hold / 1000 + 1);
    char v[FLIGHT_VALUE + 1], *o = v;
    const char *argv[7] = {"EVAL", flight_cas, "1", k, token, v, px};
    size_t lens[7];
    int i, set = 0;

    if (result >= 0) {
        *o++ = 'F';
        *o++ = result ? '1' : '0';
        *o++ = ':';
        o = put_hex64(o, (uint64_t)(now + hold));
        *o++ = ':';
        flight_tag(mac, key, v, o);
        o += KEY_HEX;
    }
    *o = '\0'; /* empty: no result, delete */
    for (i = 0; i < 7; i++)
        lens[i] = strlen(argv[i]);
    return run_set(c, 7, argv, lens, deadline, &set, why, p);
}

authn_hmac_redis_rc authn_hmac_redis_flight_poll(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_time_t deadline, authn_hmac_farm_state *st,
    const char **why, apr_pool_t *p)
{
    const char *k = flight_key(conf, mac, key, p);
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, strlen(k)};
    redisReply *r = NULL;
    authn_hmac_redis_rc rc;

    *st = AUTHN_HMAC_FARM_NONE;
    rc = authn_hmac_redis_command(c, 2, argv, lens, deadline, &r, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    if (r->type == REDIS_REPLY_STRING)
        *st = authn_hmac_flight_interpret(mac, key, r->str, r->len, now);
    else if (r->type != REDIS_REPLY_NIL) {
        *why =
            apr_psprintf(p, "GET: unexpected answer (%s)", reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------- shared health */

static int64_t backoff(uint64_t opens)
{
    unsigned shift =
        opens < BREAKER_MAX_SHIFT ? (unsigned)opens : BREAKER_MAX_SHIFT;

    return apr_time_from_sec((apr_time_t)2 << shift);
}

int authn_hmac_redis_allowed(authn_hmac_redis_health_t *h, apr_time_t now,
                             apr_interval_time_t probe_window)
{
    int64_t until = __atomic_load_n(&h->breaker_until, __ATOMIC_ACQUIRE);

    if (until == 0)
        return 1;
    if (now < until)
        return 0;
    /* NB: half open. The wait is over: the one request that moves the end
     * of the wait on by a probe's length probes Redis; the others keep
     * skipping it until the probe succeeds (closing the breaker) or fails
     * (opening it for the next backoff). A probe that never reports, from
     * a process that died, is replaced once its window is over. */
    if (__atomic_compare_exchange_n(&h->breaker_until, &until,
                                    now + probe_window, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
        return 2;
    return 0;
}

int authn_hmac_redis_breaker_open(authn_hmac_redis_health_t *h)
{
    return __atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED) != 0;
}

/* Whether a failure of an operation begun at `started` is a new incident:
 * one begun after the last failure was seen. Operations that were in
 * flight together when Redis (or this machine) stalled fail together, and
 * are one incident however many there were. */
static int new_incident(authn_hmac_redis_health_t *h, apr_time_t started,
                        apr_time_t now)
{
    int64_t last = __atomic_load_n(&h->last_failure, __ATOMIC_RELAXED);

    while (started > last)
        if (__atomic_compare_exchange_n(&h->last_failure, &last, now, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return 1;
    return 0;
}

int authn_hmac_redis_failed(authn_hmac_redis_health_t *h, apr_time_t started,
                            apr_time_t now, int probe)
{
    int64_t zero = 0;
    int64_t window = __atomic_load_n(&h->window, __ATOMIC_RELAXED);
    apr_interval_time_t span = BREAKER_WINDOW;
    uint64_t n;

    /* Failures are counted over a window, not "in a row": successes in
     * between do not hide a Redis that fails one command in two. NB: the
     * window holds BREAKER_AFTER operations as long as this one, or a
     * Redis that times out every command under a long timeout (incidents
     * at least a timeout apart) would never open it (found by review: from
     * a 5 s timeout on, it never did). Only a failure that counts moves
     * the window on. */
    if (now - started > 0 &&
        (now - started) * BREAKER_AFTER + apr_time_from_sec(1) > span)
        span = (now - started) * BREAKER_AFTER + apr_time_from_sec(1);
    if (new_incident(h, started, now) || probe) {
        if (now - window > span &&
            __atomic_compare_exchange_n(&h->window, &window, now, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
        n = __atomic_add_fetch(&h->failures, 1, __ATOMIC_RELAXED);
    }
    else
        n = __atomic_load_n(&h->failures, __ATOMIC_RELAXED);
    if (probe) {
        uint64_t opens = __atomic_fetch_add(&h->opens, 1, __ATOMIC_RELAXED);

        __atomic_store_n(&h->breaker_until, now + backoff(opens),
                         __ATOMIC_RELEASE);
    }
    else if (n >= BREAKER_AFTER) {
        /* NB: a burst of failures from requests that were all in flight
         * opens the breaker once: only the one that swaps the closed state
         * for an open one moves the backoff on. */
        uint64_t opens = __atomic_load_n(&h->opens, __ATOMIC_RELAXED);

        if (__atomic_compare_exchange_n(&h->breaker_until, &zero,
                                        now + backoff(opens), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            __atomic_add_fetch(&h->opens, 1, __ATOMIC_RELAXED);
        zero = 0;
    }
    /* NB: the outage begins when the breaker opens, not at the first
     * failure: one command that missed its timeout on a loaded machine is
     * counted (and logged at debug) but is not an outage to warn about. */
    if (!authn_hmac_redis_breaker_open(h))
        return 0;
    if (!__atomic_compare_exchange_n(&h->down_since, &zero, now, 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    __atomic_add_fetch(&h->epoch, 1, __ATOMIC_RELAXED);
    return 1;
}

int authn_hmac_redis_succeeded(authn_hmac_redis_health_t *h, apr_time_t started,
                               apr_time_t now, int probe,
                               apr_interval_time_t *outage)
{
    int64_t since = __atomic_load_n(&h->down_since, __ATOMIC_RELAXED);
    int ended = 0;

    /* NB: an answer to a command sent before the outage began proves
     * nothing about now. The outage ends first, then the breaker closes: a
     * failure racing with this one opens a new outage, which the next
     * success ends; a probe's success closes the breaker in any case. */
    if (since != 0 && started > since &&
        __atomic_compare_exchange_n(&h->down_since, &since, 0, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        *outage = now - since;
        ended = 1;
    }
    if (ended || probe) {
        __atomic_store_n(&h->opens, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&h->breaker_until, 0, __ATOMIC_RELEASE);
    }
    /* NB: other successes leave the window's failures counted. */
    if (probe)
        __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
    return ended;
}

int authn_hmac_redis_forged_first(authn_hmac_redis_health_t *h)
{
    uint64_t zero = 0;

    return __atomic_compare_exchange_n(&h->forged_warned, &zero, 1, 0,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
