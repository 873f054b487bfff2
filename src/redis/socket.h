/* socket.h: the bottom of src/redis/ (socket.c): a non-blocking socket
 * under one deadline, and the transport that carries a connection's bytes
 * over it, plain (here) or TLS (tls.c), as a table of functions. Private
 * to src/redis/. */
#ifndef AUTHN_HMAC_REDIS_SOCKET_H
#define AUTHN_HMAC_REDIS_SOCKET_H

#include "redis/redis.h"

#include <sys/uio.h>

typedef struct authn_hmac_redis_transport authn_hmac_redis_transport_t;

/* A connected socket and what runs over it. */
typedef struct {
    int fd;
    const authn_hmac_redis_transport_t *tr;
    void *ctx; /* the transport's own: NULL for plain, the TLS session */
} authn_hmac_redis_sock_t;

/* How bytes go over a socket. Each call finishes before the deadline
 * (monotonic), or says why not in *why ("doing: what"). */
struct authn_hmac_redis_transport {
    /* Writes every byte of iov (which it may change). */
    authn_hmac_redis_rc (*write)(authn_hmac_redis_sock_t *s, struct iovec *iov,
                                 int n, apr_time_t deadline, const char *doing,
                                 const char **why, apr_pool_t *p);
    /* Reads what comes, 1 to len bytes (*got). */
    authn_hmac_redis_rc (*read)(authn_hmac_redis_sock_t *s, void *buf,
                                size_t len, size_t *got, apr_time_t deadline,
                                const char *doing, const char **why,
                                apr_pool_t *p);
    /* Whether an idle socket may be used: nothing to read (but what the
     * transport takes for itself), not closed. */
    int (*idle_ok)(authn_hmac_redis_sock_t *s);
    /* Frees ctx, without waiting for anything (the socket stays open). */
    void (*close)(authn_hmac_redis_sock_t *s);
};

/* Plain TCP or a unix socket. */
extern const authn_hmac_redis_transport_t authn_hmac_redis_plain;

/* Waits for fd to be ready for ev (poll's) until deadline (monotonic): 1
 * when ready, 0 at the deadline (or once the calling thread's cancel
 * descriptor is readable), -1 on error. */
int authn_hmac_redis_wait_fd(int fd, short ev, apr_time_t deadline);

/* The calling thread's cancel descriptor (-1: none): once it is readable,
 * each wait of this thread ends at once, as at its deadline. The Sentinel
 * discovery's thread sets one, so that stopping it never waits for a
 * discovery's timeouts. */
void authn_hmac_redis_cancel_fd(int fd);

/* *why = "doing: what"; TIMEOUT if what is "timed out", else ERROR. */
authn_hmac_redis_rc authn_hmac_redis_io_fail(const char **why,
                                             const char *doing,
                                             const char *what, apr_pool_t *p);

/* A connected non-blocking socket to one of addrs, before the deadline;
 * -2 at the deadline, -1 if none would connect (*why says why). */
int authn_hmac_redis_socket_open(const authn_hmac_redis_addr_t *addrs,
                                 int naddr, apr_time_t deadline,
                                 const char **why, apr_pool_t *p);

/* Up to max addresses of host:port (DNS: never on a request's time).
 * 0 and *why if none. With a deadline (not 0), a name that is not an
 * address is resolved by a thread of its own, and waited for until the
 * deadline or this thread's cancel descriptor: a resolver that does not
 * answer holds no one longer (it finishes, or not, alone). */
int authn_hmac_redis_resolve(const char *host, int port,
                             authn_hmac_redis_addr_t *out, int max,
                             apr_time_t deadline, const char **why,
                             apr_pool_t *p);

#endif /* AUTHN_HMAC_REDIS_SOCKET_H */
