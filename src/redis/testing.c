/* testing.c: the seams of redis/redis_testing.h, for the unit tests
 * only (built into libauthnhmac_test.la, not into the module). */
#include "conn.h"
#include "sentinel_int.h"
#include "tls.h"
#include "redis/redis_testing.h"

authn_hmac_redis_conn_t *authn_hmac_redis_conn_wrap(int fd)
{
    return authn_hmac_redis_conn_new(fd);
}

authn_hmac_redis_rc authn_hmac_redis_tls_connect(authn_hmac_redis_tls_t *t,
                                                 int fd, apr_time_t deadline,
                                                 struct ssl_st **out,
                                                 int *resumed, const char **why,
                                                 apr_pool_t *p)
{
    authn_hmac_redis_sock_t s = {fd, &authn_hmac_redis_plain, NULL};
    authn_hmac_redis_rc rc =
        authn_hmac_redis_tls_start(t, NULL, &s, deadline, resumed, why, p);

    *out = rc == AUTHN_HMAC_REDIS_OK ? s.ctx : NULL;
    return rc;
}

authn_hmac_sentinel_shared_t *
authn_hmac_sentinel_shared(authn_hmac_sentinel_t *s)
{
    return s->sh;
}
