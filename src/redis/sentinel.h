/* redis/sentinel.h: finding the Redis primary through Redis
 * Sentinel (src/redis/sentinel.c, the discovery; sentinel_shared.c, the
 * primary the processes share; sentinel_proto.c, the directives, commands
 * and replies), above the connection (it talks to the
 * Sentinels over conn.c's connections) and below the pool (to which it is
 * an address source). */
#ifndef AUTHN_HMAC_SENTINEL_H
#define AUTHN_HMAC_SENTINEL_H

#include "redis/redis.h"
#include "core/util.h"

#define AUTHN_HMAC_SENTINEL_MAX      8 /* Sentinels in the directive */
#define AUTHN_HMAC_SENTINEL_HOST_MAX AUTHN_HMAC_REDIS_HOST_MAX
#define AUTHN_HMAC_SENTINEL_IP_MAX   48 /* an address's text, with NUL */

/* What the Sentinel directives say. */
typedef struct {
    int n;
    const char *host[AUTHN_HMAC_SENTINEL_MAX];
    int port[AUTHN_HMAC_SENTINEL_MAX];
    const char *master; /* AuthHMACRedisSentinelMaster */
    /* The name a primary's certificate must carry when
     * AuthHMACRedisTLSServerName sets one; else the host it is named by. */
    const char *primary_name;
    /* How a Sentinel is spoken to: user and password from
     * AuthHMACRedisSentinelAuthFile, the Redis timeout, and a TLS context
     * of its own (sessions of the Sentinels and of Redis kept apart). */
    authn_hmac_redis_conf_t conn;
} authn_hmac_sentinel_conf_t;

/* "host:port" or "[v6]:port" of one Sentinel (port default 26379).
 * Returns NULL or what is wrong. */
const char *authn_hmac_sentinel_parse(const char *arg,
                                      authn_hmac_sentinel_conf_t *sc,
                                      apr_pool_t *p);

/* A master name as Sentinel takes it: letters, digits, ".-_", 1 to 64.
 * Returns NULL or what is wrong. */
const char *authn_hmac_sentinel_check_master(const char *name);

/* -------------------------------------------------------- the replies */

/* The answer to SENTINEL get-master-addr-by-name: 1 with host and port
 * (host: an address or a host name of the usual characters), 0 for nil
 * (the Sentinel knows no such master), -1 for anything else. */
struct redisReply;
int authn_hmac_sentinel_addr_reply(const struct redisReply *r,
                                   char host[AUTHN_HMAC_SENTINEL_HOST_MAX],
                                   int *port);

/* The answer to ROLE: 1 for a master, 0 for a replica or a Sentinel, -1
 * for anything else. */
int authn_hmac_sentinel_role_reply(const struct redisReply *r);

/* ----------------------------------------------------- the shared part */

/* The Redis primary as the server's processes share it. One process asks
 * the Sentinels at a time (the claim); the others read the address without
 * a lock (seq: odd while it is being written). Lives in the shared segment's
 * annex (request/annex.h: authn_hmac_annex_sentinel). */
typedef struct authn_hmac_sentinel_shared {
    uint64_t seq;
    uint64_t gen;                            /* addresses published */
    char host[AUTHN_HMAC_SENTINEL_HOST_MAX]; /* as the Sentinel said */
    char ip[AUTHN_HMAC_SENTINEL_IP_MAX];     /* what it resolved to */
    int64_t port;
    int64_t claim;        /* monotonic: a discovery runs until then; 0: none */
    int64_t checked;      /* monotonic: when the last discovery ended */
    int64_t suspect;      /* monotonic: a failure asked for a look; 0: none */
    uint64_t failing;     /* the last discovery found no confirmed primary */
    uint64_t epoch;       /* the settings' (a restart that changed them: +1) */
    uint64_t pub_epoch;   /* the epoch the address was published in */
    uint64_t discoveries; /* discoveries that ended, found or not */
    uint64_t switches;    /* primaries published in place of another */
    int64_t since;        /* wall clock: when this primary was first named */
} authn_hmac_sentinel_shared_t;

/* The published primary (ip, port, host) and its generation, read without
 * a lock; 0 while none is known. */
uint64_t authn_hmac_sentinel_read(const authn_hmac_sentinel_shared_t *sh,
                                  char ip[AUTHN_HMAC_SENTINEL_IP_MAX],
                                  char host[AUTHN_HMAC_SENTINEL_HOST_MAX],
                                  int *port);

/* Whether a discovery is due at now: none known yet, a failure asked for
 * one, or the periodic check; never more often than min_gap apart. */
int authn_hmac_sentinel_due(const authn_hmac_sentinel_shared_t *sh,
                            apr_time_t now, apr_interval_time_t min_gap,
                            apr_interval_time_t period);

/* Takes the right to discover until now + hold (no claim, or one that a
 * process which died left past its end): the claim, or 0 if another
 * process has it. */
int64_t authn_hmac_sentinel_claim(authn_hmac_sentinel_shared_t *sh,
                                  apr_time_t now, apr_interval_time_t hold);

/* Ends a claim. With ip (confirmed as the primary) it is published: 1 if
 * it is a new address (a new generation), else 0. Without it the last one
 * stays (it may be back), and failing is set. -1, and nothing written, if
 * the claim is no longer this one (it ran out, and another took over). */
int authn_hmac_sentinel_finish(authn_hmac_sentinel_shared_t *sh, int64_t claim,
                               const char *ip, const char *host, int port,
                               apr_time_t now);

/* A command to the primary failed (a timeout, a refusal, READONLY,
 * LOADING...): asks for a discovery. */
void authn_hmac_sentinel_suspect(authn_hmac_sentinel_shared_t *sh,
                                 apr_time_t now);

/* A restart changed the settings: a new epoch, in which the primary known
 * is none (readers take an address of another epoch for none), a
 * discovery is due at once, by the new children (a claim of the old ones
 * is let go, and their threads claim no more), and the next failure is
 * logged. */
void authn_hmac_sentinel_restart(authn_hmac_sentinel_shared_t *sh,
                                 apr_time_t now);

/* ------------------------------------------------------- the discovery */

typedef struct authn_hmac_sentinel authn_hmac_sentinel_t;

/* Asks the Sentinels, in order, for the primary, each under its own
 * deadline of the timeout, and confirms the address it names with ROLE
 * under redis (its AUTH and TLS). Fills ip, host and port; *why says what
 * went wrong with each when none is confirmed. */
authn_hmac_redis_rc
authn_hmac_sentinel_discover(const authn_hmac_sentinel_conf_t *sc,
                             const authn_hmac_redis_conf_t *redis,
                             char ip[AUTHN_HMAC_SENTINEL_IP_MAX],
                             char host[AUTHN_HMAC_SENTINEL_HOST_MAX], int *port,
                             const char **why, apr_pool_t *p);

/* Starts this process's discovery thread (it asks only when due, and when
 * it holds the claim), stopped with p. log gets what operators are told. */
apr_status_t authn_hmac_sentinel_start(authn_hmac_sentinel_t **out,
                                       const authn_hmac_sentinel_conf_t *sc,
                                       const authn_hmac_redis_conf_t *redis,
                                       authn_hmac_sentinel_shared_t *sh,
                                       authn_hmac_redis_health_t *health,
                                       authn_hmac_log_fn log, void *baton,
                                       apr_pool_t *p);

/* The published address, if its generation is not *gen (then *gen is
 * updated, and 1 returned; -1 when none is known yet). peer gets the name
 * a TLS certificate must carry. */
int authn_hmac_sentinel_addr(authn_hmac_sentinel_t *s, uint64_t *gen,
                             authn_hmac_redis_addr_t *addr,
                             char peer[AUTHN_HMAC_SENTINEL_HOST_MAX]);

/* s as a pool's address source (authn_hmac_redis_pool_use): the address
 * above, and a failure of the primary asks for a discovery. */
authn_hmac_redis_source_t authn_hmac_sentinel_source(authn_hmac_sentinel_t *s);

#endif
