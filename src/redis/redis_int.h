/* redis_int.h: what the files of src/redis/ share, and no one else uses. */
#ifndef AUTHN_HMAC_REDIS_INT_H
#define AUTHN_HMAC_REDIS_INT_H

#include "authn_hmac/redis.h"
#include "authn_hmac/sentinel.h"

/* An error reply's text, e.g. "WRONGPASS invalid username-password pair",
 * up to any quoted argument (conn.c). */
struct redisReply;
const char *authn_hmac_redis_reply_error(const struct redisReply *r,
                                         apr_pool_t *p);

/* Waits for fd to be ready for ev (poll's) until deadline (monotonic): 1
 * when ready, 0 at the deadline, -1 on error. */
int authn_hmac_redis_wait_fd(int fd, short ev, apr_time_t deadline);

/* A TLS session over a connected non-blocking socket, its handshake done
 * before the deadline, offering this process's last session; *resumed says
 * whether the server took it. On failure *why says what went wrong (the
 * reason a certificate did not verify, as OpenSSL gives it). */
struct ssl_st;
authn_hmac_redis_rc authn_hmac_redis_tls_connect(authn_hmac_redis_tls_t *t,
                                                 int fd, apr_time_t deadline,
                                                 struct ssl_st **out,
                                                 int *resumed, const char **why,
                                                 apr_pool_t *p);

/* Writes len bytes, all of them before the deadline. */
authn_hmac_redis_rc authn_hmac_redis_tls_write(struct ssl_st *ssl, int fd,
                                               const void *buf, size_t len,
                                               apr_time_t deadline,
                                               const char *doing,
                                               const char **why, apr_pool_t *p);

/* Reads what comes (1 to len bytes, *got) before the deadline. */
authn_hmac_redis_rc authn_hmac_redis_tls_read(struct ssl_st *ssl, int fd,
                                              void *buf, size_t len,
                                              size_t *got, apr_time_t deadline,
                                              const char *doing,
                                              const char **why, apr_pool_t *p);

/* Whether an idle connection may be used: nothing to read but TLS's own
 * messages (which it takes), not closed. */
int authn_hmac_redis_tls_idle_ok(struct ssl_st *ssl);

/* Frees the session, without waiting for anything. */
void authn_hmac_redis_tls_close(struct ssl_st *ssl);

/* Connects to one of addrs and runs AUTH and SELECT under conf, with TLS
 * if conf has it, checking the certificate for peer (NULL: the context's
 * name), before the deadline (conn.c). */
authn_hmac_redis_rc
authn_hmac_redis_connect(const authn_hmac_redis_conf_t *conf,
                         const authn_hmac_redis_addr_t *addrs, int naddr,
                         const char *peer, apr_time_t deadline,
                         authn_hmac_redis_conn_t **out, int *resumed,
                         const char **why, apr_pool_t *p);

/* authn_hmac_redis_tls_connect, with the certificate checked for peer
 * (NULL: the context's name). The last session is offered only to the
 * same peer (tls.c). */
struct ssl_st;
authn_hmac_redis_rc authn_hmac_redis_tls_connect_to(
    authn_hmac_redis_tls_t *t, const char *peer, int fd, apr_time_t deadline,
    struct ssl_st **out, int *resumed, const char **why, apr_pool_t *p);

#endif /* AUTHN_HMAC_REDIS_INT_H */
