/* socket.c: the bottom of the Redis client: names resolved to addresses,
 * a non-blocking socket connected under a deadline, waiting for it under
 * the same deadline, and the plain transport (TLS's is tls.c). One
 * deadline covers connect and each whole command with its reply: a server
 * that trickles a byte at a time gets no more than the deadline. */
#include "socket.h"
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <apr_strings.h>

/* This thread's cancel descriptor, or -1 (see socket.h). */
static __thread int cancel_fd = -1;

void authn_hmac_redis_cancel_fd(int fd)
{
    cancel_fd = fd;
}

/* NB: past the deadline, one last look without waiting: a reply that came
 * while this thread was not running is not late. */
int authn_hmac_redis_wait_fd(int fd, short ev, apr_time_t deadline)
{
    for (;;) {
        apr_time_t left = deadline - authn_hmac_monotonic();
        struct pollfd pfd[2];
        int n;

        pfd[0].fd = fd;
        pfd[0].events = ev;
        pfd[0].revents = 0;
        pfd[1].fd = cancel_fd;
        pfd[1].events = POLLIN;
        pfd[1].revents = 0;
        n = poll(pfd, cancel_fd >= 0 ? 2 : 1,
                 left > 0 ? (int)((left + 999) / 1000) : 0);
        if (n > 0 && pfd[1].revents)
            return 0; /* cancelled: as at the deadline */
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (left <= 0)
            return 0;
    }
}

authn_hmac_redis_rc authn_hmac_redis_io_fail(const char **why,
                                             const char *doing,
                                             const char *what, apr_pool_t *p)
{
    *why = apr_psprintf(p, "%s: %s", doing, what);
    return strcmp(what, "timed out") == 0 ? AUTHN_HMAC_REDIS_TIMEOUT
                                          : AUTHN_HMAC_REDIS_ERROR;
}

/* ------------------------------------------------------------- addresses */

/* A name being resolved by a thread of its own: freed by the last of the
 * waiter and the thread to let go of it. */
typedef struct {
    int refs;
    int done[2]; /* a pipe: the thread writes when the answer is in */
    int rc;
    struct addrinfo *res;
    char port[8];
    char host[]; /* NUL-terminated */
} lookup_t;

static void lookup_put(lookup_t *l)
{
    if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (l->res)
        freeaddrinfo(l->res);
    close(l->done[0]);
    close(l->done[1]);
    free(l);
}

static void lookup_hints(struct addrinfo *hints, int flags)
{
    memset(hints, 0, sizeof(*hints));
    hints->ai_family = AF_UNSPEC;
    hints->ai_socktype = SOCK_STREAM;
    hints->ai_flags = flags;
}

/* Lookups under way in this process: at most LOOKUPS (a resolver that
 * hangs for minutes, as an NSS module may, must not pile threads up). */
#define LOOKUPS      8
#define LOOKUP_STACK ((size_t)512 * 1024)
static int lookups;

static void *lookup_run(void *data)
{
    lookup_t *l = data;
    struct addrinfo hints, *res = NULL;
    int rc;

    lookup_hints(&hints, 0);
    rc = getaddrinfo(l->host, l->port, &hints, &res);
    l->res = res;
    __atomic_store_n(&l->rc, rc, __ATOMIC_RELEASE);
    if (write(l->done[1], "x", 1) < 0) {
        /* NB: cannot be (a pipe with room); the waiter times out. */
    }
    __atomic_sub_fetch(&lookups, 1, __ATOMIC_RELAXED);
    lookup_put(l);
    return NULL;
}

/* Whether this thread's cancel descriptor says stop (a look, no wait). */
static int cancelled(void)
{
    struct pollfd pfd = {cancel_fd, POLLIN, 0};

    return cancel_fd >= 0 && poll(&pfd, 1, 0) > 0;
}

/* getaddrinfo of host:port, by a detached thread, until the deadline or
 * the cancel descriptor: its rc (EAI_AGAIN at the deadline, after a stop,
 * or with LOOKUPS under way), and *out (its res to free with it, by
 * lookup_put) if 0. */
static int lookup_until(const char *host, const char *port, apr_time_t deadline,
                        lookup_t **out)
{
    size_t hl = strlen(host);
    lookup_t *l;
    pthread_attr_t attr;
    pthread_t t;
    int started = 0;

    *out = NULL;
    /* NB: a stop under way: no thread to leave behind. */
    if (cancelled())
        return EAI_AGAIN;
    if (__atomic_add_fetch(&lookups, 1, __ATOMIC_RELAXED) > LOOKUPS) {
        __atomic_sub_fetch(&lookups, 1, __ATOMIC_RELAXED);
        return EAI_AGAIN;
    }
    l = calloc(1, sizeof(*l) + hl + 1);
    if (!l || pipe2(l->done, O_CLOEXEC) != 0) {
        free(l);
        __atomic_sub_fetch(&lookups, 1, __ATOMIC_RELAXED);
        return l ? EAI_SYSTEM : EAI_MEMORY;
    }
    memcpy(l->host, host, hl + 1);
    snprintf(l->port, sizeof(l->port), "%s", port);
    l->refs = 2;
    /* NB: a stack of its own size (a resolver's NSS modules need some;
     * not the default's 8 MiB). */
    if (pthread_attr_init(&attr) == 0) {
        started =
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
            pthread_attr_setstacksize(&attr, LOOKUP_STACK) == 0 &&
            pthread_create(&t, &attr, lookup_run, l) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        l->refs = 1;
        lookup_put(l);
        __atomic_sub_fetch(&lookups, 1, __ATOMIC_RELAXED);
        return EAI_SYSTEM;
    }
    if (authn_hmac_redis_wait_fd(l->done[0], POLLIN, deadline) != 1) {
        lookup_put(l); /* NB: the thread frees it when it ends */
        return EAI_AGAIN;
    }
    *out = l;
    return __atomic_load_n(&l->rc, __ATOMIC_ACQUIRE);
}

int authn_hmac_redis_resolve(const char *host, int port,
                             authn_hmac_redis_addr_t *out, int max,
                             apr_time_t deadline, const char **why,
                             apr_pool_t *p)
{
    struct addrinfo hints, *res = NULL, *ai;
    lookup_t *l = NULL;
    char ps[8];
    int rc, n = 0;

    snprintf(ps, sizeof(ps), "%d", port);
    /* NB: an address needs no resolver: no thread, no wait. */
    lookup_hints(&hints, AI_NUMERICHOST);
    rc = getaddrinfo(host, ps, &hints, &res);
    if (rc == EAI_NONAME) {
        if (deadline) {
            rc = lookup_until(host, ps, deadline, &l);
            res = l ? l->res : NULL;
        }
        else {
            lookup_hints(&hints, 0);
            rc = getaddrinfo(host, ps, &hints, &res);
        }
    }
    if (rc != 0) {
        *why = apr_psprintf(p, "cannot resolve %s: %s", host,
                            l || !deadline || rc != EAI_AGAIN
                                ? gai_strerror(rc)
                                : "no answer in time");
        if (l)
            lookup_put(l);
        return 0;
    }
    for (ai = res; ai && n < max; ai = ai->ai_next)
        if (ai->ai_addrlen <= sizeof(out[n].sa)) {
            memcpy(&out[n].sa, ai->ai_addr, ai->ai_addrlen);
            out[n++].len = ai->ai_addrlen;
        }
    if (l)
        lookup_put(l);
    else
        freeaddrinfo(res);
    if (!n)
        *why = apr_psprintf(p, "no address for %s", host);
    return n;
}

/* ---------------------------------------------------------------- connect */

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

int authn_hmac_redis_socket_open(const authn_hmac_redis_addr_t *addrs,
                                 int naddr, apr_time_t deadline,
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

/* ------------------------------------------------------ plain transport */

/* Writes every byte of iov before the deadline: the pieces go from where
 * they are (AUTH's password from its locked page), nothing is copied. */
static authn_hmac_redis_rc plain_write(authn_hmac_redis_sock_t *s,
                                       struct iovec *iov, int n,
                                       apr_time_t deadline, const char *doing,
                                       const char **why, apr_pool_t *p)
{
    while (n > 0) {
        ssize_t w = writev(s->fd, iov, n);

        if (w < 0) {
            int ready;

            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return authn_hmac_redis_io_fail(why, doing, strerror(errno), p);
            ready = authn_hmac_redis_wait_fd(s->fd, POLLOUT, deadline);
            if (ready <= 0)
                return authn_hmac_redis_io_fail(
                    why, doing, ready ? strerror(errno) : "timed out", p);
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

static authn_hmac_redis_rc plain_read(authn_hmac_redis_sock_t *s, void *buf,
                                      size_t len, size_t *got,
                                      apr_time_t deadline, const char *doing,
                                      const char **why, apr_pool_t *p)
{
    for (;;) {
        ssize_t n;
        int ready = authn_hmac_redis_wait_fd(s->fd, POLLIN, deadline);

        if (ready <= 0)
            return authn_hmac_redis_io_fail(
                why, doing, ready ? strerror(errno) : "timed out", p);
        n = read(s->fd, buf, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return authn_hmac_redis_io_fail(
                why, doing, n ? strerror(errno) : "connection closed", p);
        *got = (size_t)n;
        return AUTHN_HMAC_REDIS_OK;
    }
}

static int plain_idle_ok(authn_hmac_redis_sock_t *s)
{
    char b;

    return recv(s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0;
}

static void plain_close(authn_hmac_redis_sock_t *s)
{
    (void)s;
}

const authn_hmac_redis_transport_t authn_hmac_redis_plain = {
    plain_write, plain_read, plain_idle_ok, plain_close};
