/* conn.c: the connection to Redis.
 *
 * The client is small and strict: its own non-blocking socket, so that one
 * deadline covers connect and each whole command with its reply (a server
 * that trickles a byte at a time gets no more than the deadline), and
 * hiredis only as the reply parser, fed at most REPLY_MAX bytes per reply.
 * Addresses are resolved when a child starts, never while a request waits
 * (with Sentinel, the primary's comes from the shared segment: sentinel.c).
 * AUTH is sent with writev straight from the secret's locked page, so no
 * buffer of the client ever holds the Redis password. TLS (tls.c) runs on
 * the same socket, under the same deadline. */
#include "redis_int.h"
#include "authn_hmac/sentinel.h"
#include "authn_hmac/table.h"
#include "authn_hmac/util.h"

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
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <bsd/string.h>
#include <hiredis/hiredis.h>

#define REPLY_MAX 512 /* bytes; the longest reply is ~270 */
/* ROLE of a primary: ~30 bytes and ~50 per replica (conn_long_replies). */
#define LONG_REPLY_MAX 8192
#define MAX_ADDRS      4
#define MAX_ARGS       7 /* EVAL script 1 key token result px */

struct authn_hmac_redis_conn {
    int fd;
    struct ssl_st *ssl; /* NULL: plain TCP or a unix socket */
    redisReader *reader;
    uint64_t epoch;   /* the shared outage count when it was made */
    uint64_t gen;     /* with Sentinel: the primary's generation */
    size_t reply_max; /* REPLY_MAX, or LONG_REPLY_MAX */
    int elements_max; /* of an array: MAX_ARRAY_ELEMENTS, or more */
};

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

/* An error reply's text, e.g. "WRONGPASS invalid username-password pair",
 * up to any quoted argument. */
const char *authn_hmac_redis_reply_error(const redisReply *r, apr_pool_t *p)
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
        authn_hmac_redis_rc rc = recv_some(c, buf + got, c->reply_max - got, &n,
                                           deadline, doing, why, p);

        if (rc != AUTHN_HMAC_REDIS_OK)
            return rc;
        if (redisReaderFeed(c->reader, buf + got, n) != REDIS_OK ||
            redisReaderGetReply(c->reader, &reply) != REDIS_OK)
            return io_fail(why, doing, "malformed reply", p);
        got += n;
        if (reply)
            break;
        if (got == c->reply_max)
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

authn_hmac_redis_conn_t *authn_hmac_redis_conn_wrap(int fd)
{
    authn_hmac_redis_conn_t *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->fd = fd;
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
        authn_hmac_redis_tls_close(c->ssl);
        if (c->fd >= 0)
            close(c->fd);
        redisReaderFree(c->reader);
        free(c);
    }
}

/* ------------------------------------------------------ connection pool */

typedef authn_hmac_redis_addr_t addr_t;

struct authn_hmac_redis_pool {
    const authn_hmac_redis_conf_t *conf;
    apr_thread_mutex_t *lock;
    authn_hmac_redis_conn_t **idle;
    int nidle, max;
    authn_hmac_redis_health_t *health; /* shared by all processes */
    addr_t addr[MAX_ADDRS];
    int naddr;
    const char *unresolved; /* why the name gave no address, or NULL */
    /* With Sentinel: the primary's address comes from the shared segment,
     * and gen is the generation of addr[0] (0: none yet). */
    authn_hmac_sentinel_t *sentinel;
    uint64_t gen;
    char peer[AUTHN_HMAC_SENTINEL_HOST_MAX]; /* its certificate's name */
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
static int open_socket(const addr_t *addrs, int naddr, apr_time_t deadline,
                       const char **why, apr_pool_t *p)
{
    int i;

    *why = "connect: no address";
    for (i = 0; i < naddr; i++) {
        const struct sockaddr *sa = (const struct sockaddr *)&addrs[i].sa;
        int fd = socket(sa->sa_family,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int err, one = 1;

        if (fd < 0) {
            *why = apr_psprintf(p, "connect: %s", strerror(errno));
            continue;
        }
        err = connect_fd(fd, sa, addrs[i].len, deadline);
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
authn_hmac_redis_rc
authn_hmac_redis_connect(const authn_hmac_redis_conf_t *conf,
                         const addr_t *addrs, int naddr, const char *peer,
                         apr_time_t deadline, authn_hmac_redis_conn_t **out,
                         int *resumed, const char **why, apr_pool_t *p)
{
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;
    authn_hmac_redis_conn_t *c;
    int fd;

    *resumed = 0;
    fd = open_socket(addrs, naddr, deadline, why, p);
    if (fd < 0)
        return fd == -2 ? AUTHN_HMAC_REDIS_TIMEOUT : AUTHN_HMAC_REDIS_ERROR;
    c = authn_hmac_redis_conn_wrap(fd);
    if (!c) {
        close(fd);
        *why = "connect: out of memory";
        return AUTHN_HMAC_REDIS_ERROR;
    }
    if (conf->tls) {
        rc = authn_hmac_redis_tls_connect_to(conf->tls, peer, fd, deadline,
                                             &c->ssl, resumed, why, p);
        if (rc != AUTHN_HMAC_REDIS_OK) {
            authn_hmac_redis_close(c);
            return rc;
        }
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

/* A connection to the pool's server, or to the primary the Sentinels
 * named (the address copied under the lock: another thread may take a
 * new one meanwhile). */
static authn_hmac_redis_rc pool_connect(authn_hmac_redis_pool_t *rp,
                                        authn_hmac_redis_conn_t **out,
                                        apr_time_t deadline, const char **why,
                                        apr_pool_t *p)
{
    addr_t addr[MAX_ADDRS];
    char peer[AUTHN_HMAC_SENTINEL_HOST_MAX];
    uint64_t gen;
    int naddr, resumed = 0;
    authn_hmac_redis_rc rc;

    if (rp->unresolved) {
        *why = rp->unresolved;
        return AUTHN_HMAC_REDIS_ERROR;
    }
    apr_thread_mutex_lock(rp->lock);
    naddr = rp->naddr;
    memcpy(addr, rp->addr, sizeof(addr));
    memcpy(peer, rp->peer, sizeof(peer));
    gen = rp->gen;
    apr_thread_mutex_unlock(rp->lock);
    if (rp->sentinel && !gen) {
        *why = "no primary known yet (the Sentinels have not named one)";
        return AUTHN_HMAC_REDIS_ERROR;
    }
    rc = authn_hmac_redis_connect(rp->conf, addr, naddr,
                                  rp->sentinel ? peer : NULL, deadline, out,
                                  &resumed, why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    (*out)->gen = gen;
    if (rp->conf->tls) {
        __atomic_add_fetch(&rp->health->tls_handshakes, 1, __ATOMIC_RELAXED);
        if (resumed)
            __atomic_add_fetch(&rp->health->tls_resumed, 1, __ATOMIC_RELAXED);
    }
    return AUTHN_HMAC_REDIS_OK;
}

/* With Sentinel: takes the primary the processes share, if it is new,
 * and drops the connections to the old one. Under the lock. */
static void pool_follow(authn_hmac_redis_pool_t *rp)
{
    if (authn_hmac_sentinel_addr(rp->sentinel, &rp->gen, &rp->addr[0],
                                 rp->peer) != 1)
        return;
    rp->naddr = 1;
    while (rp->nidle > 0) {
        authn_hmac_redis_conn_t *c = rp->idle[--rp->nidle];

        authn_hmac_redis_close(c);
        __atomic_sub_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
    }
}

void authn_hmac_redis_pool_use_sentinel(authn_hmac_redis_pool_t *rp,
                                        authn_hmac_sentinel_t *s)
{
    apr_thread_mutex_lock(rp->lock);
    rp->sentinel = s;
    rp->naddr = 0;
    rp->unresolved = NULL;
    pool_follow(rp);
    apr_thread_mutex_unlock(rp->lock);
}

/* With Sentinel, a failure of the primary (no connection, a timeout, a
 * refusal such as READONLY or LOADING) asks for a new look. */
static void pool_suspect(authn_hmac_redis_pool_t *rp)
{
    if (rp->sentinel)
        authn_hmac_sentinel_suspect(authn_hmac_sentinel_shared(rp->sentinel),
                                    authn_hmac_monotonic());
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
    if (rp->sentinel)
        pool_follow(rp);
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
    else
        pool_suspect(rp);
    return rc;
}

void authn_hmac_redis_pool_release(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t *c, int broken)
{
    if (broken)
        pool_suspect(rp);
    apr_thread_mutex_lock(rp->lock);
    /* NB: a connection to a primary that is not the newest is not kept. */
    if (!broken && rp->nidle < rp->max && c->gen == rp->gen) {
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
