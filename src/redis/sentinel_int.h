/* sentinel_int.h: what the three parts of Sentinel's support share: a
 * discovery thread's state (src/redis/sentinel.c), which the shared
 * primary's source reads (src/redis/sentinel_shared.c), and one command
 * to a Sentinel or a primary (src/redis/sentinel_proto.c); and what the
 * tests' seams (src/redis/testing.c) read of the thread. No one else uses
 * it. */
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

/* Runs one command (argc words of argv, at most 4) on a new connection to
 * one of n addrs (peer: the name a TLS certificate must carry), under a
 * deadline of conf's timeout, and closes it; *reply then holds the
 * answer (the caller frees it). A ROLE may read the longer replies a
 * primary gives. */
struct redisReply;
authn_hmac_redis_rc authn_hmac_sentinel_ask(
    const authn_hmac_redis_conf_t *conf, const authn_hmac_redis_addr_t *addrs,
    int n, const char *peer, int argc, const char **argv,
    struct redisReply **reply, const char **why, apr_pool_t *p);

#endif /* AUTHN_HMAC_SENTINEL_INT_H */
