/* conn.h: a connection to Redis (conn.c): a socket and its transport, a
 * reply parser, commands under a deadline. It knows no pool and no
 * Sentinel. Private to src/redis/; what others use is in
 * redis/redis.h. */
#ifndef AUTHN_HMAC_REDIS_CONN_H
#define AUTHN_HMAC_REDIS_CONN_H

#include "socket.h"

struct redisReader;
struct redisReply;

struct authn_hmac_redis_conn {
    authn_hmac_redis_sock_t sock;
    struct redisReader *reader;
    size_t reply_max; /* REPLY_MAX, or LONG_REPLY_MAX */
    int elements_max; /* of an array: MAX_ARRAY_ELEMENTS, or more */
    /* The pool's marks (pool.c), unused here: */
    uint64_t epoch; /* the shared outage count when it was made */
    uint64_t gen;   /* the generation of the address it went to */
};

/* A plain connection over a connected socket, which it owns; NULL if out
 * of memory. */
authn_hmac_redis_conn_t *authn_hmac_redis_conn_new(int fd);

/* Whether an idle connection may be used (nothing arrived, not closed). */
int authn_hmac_redis_conn_idle_ok(authn_hmac_redis_conn_t *c);

/* Connects to one of addrs and runs AUTH and SELECT under conf, with TLS
 * if conf has it, checking the certificate for peer (NULL: the context's
 * name), before the deadline. */
authn_hmac_redis_rc
authn_hmac_redis_connect(const authn_hmac_redis_conf_t *conf,
                         const authn_hmac_redis_addr_t *addrs, int naddr,
                         const char *peer, apr_time_t deadline,
                         authn_hmac_redis_conn_t **out, int *resumed,
                         const char **why, apr_pool_t *p);

/* An error reply's text, e.g. "WRONGPASS invalid username-password pair",
 * up to any quoted argument. */
const char *authn_hmac_redis_reply_error(const struct redisReply *r,
                                         apr_pool_t *p);

#endif /* AUTHN_HMAC_REDIS_CONN_H */
