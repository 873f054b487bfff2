/* redis/redis_testing.h: seams into src/redis/ for the unit tests
 * only. They live in libauthnhmac_test.la (src/redis/testing.c), which
 * only the tests link: none of them ships in the module. */
#ifndef AUTHN_HMAC_REDIS_TESTING_H
#define AUTHN_HMAC_REDIS_TESTING_H

#include "redis/redis.h"
#include "redis/sentinel.h"

/* A plain connection over a connected socket, which it owns (connections
 * are otherwise made by the pool and the discovery). */
authn_hmac_redis_conn_t *authn_hmac_redis_conn_wrap(int fd);

/* A TLS session over a connected non-blocking socket, its handshake done
 * before the deadline, offering this process's last session; *resumed
 * says whether the server took it. On failure *out is NULL and *why says
 * what went wrong. */
struct ssl_st;
authn_hmac_redis_rc authn_hmac_redis_tls_connect(authn_hmac_redis_tls_t *t,
                                                 int fd, apr_time_t deadline,
                                                 struct ssl_st **out,
                                                 int *resumed, const char **why,
                                                 apr_pool_t *p);

/* The shared part a discovery thread was started with. */
authn_hmac_sentinel_shared_t *
authn_hmac_sentinel_shared(authn_hmac_sentinel_t *s);

#endif /* AUTHN_HMAC_REDIS_TESTING_H */
