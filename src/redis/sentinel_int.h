/* sentinel_int.h: a discovery thread's state (src/redis/sentinel.c), and
 * what the tests' seams (src/redis/testing.c) read of it. No one else
 * uses it. */
#ifndef AUTHN_HMAC_SENTINEL_INT_H
#define AUTHN_HMAC_SENTINEL_INT_H

#include "redis/sentinel.h"

#include <pthread.h>

struct authn_hmac_sentinel {
    const authn_hmac_sentinel_conf_t *sc;
    const authn_hmac_redis_conf_t *redis;
    authn_hmac_sentinel_shared_t *sh;
    authn_hmac_redis_health_t *health;
    authn_hmac_log_fn log;
    void *baton;
    pthread_t thread;
    pthread_mutex_t lock; /* of stop */
    pthread_cond_t wake;
    int stop, started;
    int cancel[2];  /* a pipe: written when it stops, ends its waits */
    uint64_t epoch; /* the settings' it started with (shared.h's epoch) */
};

#endif /* AUTHN_HMAC_SENTINEL_INT_H */
