/* tls.h: the TLS transport (tls.c), over socket.c's socket. Private to
 * src/redis/; the context is made through redis/redis.h. */
#ifndef AUTHN_HMAC_REDIS_TLS_H
#define AUTHN_HMAC_REDIS_TLS_H

#include "socket.h"

/* Runs the TLS handshake over s (connected, plain) before the deadline,
 * the certificate checked for peer (NULL: the context's name), offering
 * this process's last session if it was made for the same name; *resumed
 * says whether the server took it. On success s carries TLS from then on;
 * on failure s is left plain, and *why says what went wrong (the reason a
 * certificate did not verify, as OpenSSL gives it). */
authn_hmac_redis_rc
authn_hmac_redis_tls_start(authn_hmac_redis_tls_t *t, const char *peer,
                           authn_hmac_redis_sock_t *s, apr_time_t deadline,
                           int *resumed, const char **why, apr_pool_t *p);

#endif /* AUTHN_HMAC_REDIS_TLS_H */
