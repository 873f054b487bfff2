/*
 * mod_authn_hmac.h: what every glue file shares: the module's log tag and
 * the server's configuration. Not an interface: the module exports nothing
 * but its record. Each glue file has its private header, included only by
 * the files that use what it declares (tools/layout checks it):
 *
 *   mod_authn_hmac.c           the module record, its hooks and its life:
 *                              the retained segment, post_config, sharing
 *                              the user files, child_init, and the
 *                              registry of files named in .htaccess
 *                              (mod_authn_hmac_child.h: a child's state)
 *   mod_authn_hmac_config.c    the records, the directives and the command
 *                              table (mod_authn_hmac_config.h: the
 *                              directives' names, a section's record)
 *   mod_authn_hmac_check.c     the checks that span directives, at
 *                              check_config (mod_authn_hmac_check.h)
 *   mod_authn_hmac_walk.c      the walk of the sections at start: those
 *                              without a user file, the files the children
 *                              cannot open, mod_ldap's caches
 *                              (mod_authn_hmac_walk.h)
 *   mod_authn_hmac_provider.c  the provider, and its busy 503 path
 *                              (mod_authn_hmac_provider.h)
 *   mod_authn_hmac_status.c    the status handler and mod_status's hook
 *                              (mod_authn_hmac_status.h)
 *
 * The module's own names begin with hmac_ (the core's, in src/, with
 * authn_hmac_).
 */
#ifndef MOD_AUTHN_HMAC_H
#define MOD_AUTHN_HMAC_H

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"

#include "apr_global_mutex.h"
#include "apr_hash.h"

#include "core/cred.h"
#include "core/secret.h"
#include "redis/redis.h"
#include "redis/sentinel.h"
#include "shm/table.h"
#include "shm/throttle.h"

/* Every file of the module logs as authn_hmac (its tag in the error log,
 * its LogLevel), as mod_ssl's files do through ssl_private.h; this also
 * declares authn_hmac_module, defined in mod_authn_hmac.c. */
APLOG_USE_MODULE(authn_hmac);

/* The server's configuration: one pepper and one shared segment serve
 * every virtual host, so these directives are global only. Set while httpd
 * reads its configuration, in the parent: by the directives, then
 * check_config (the TLS contexts, Sentinel's connections) and post_config
 * (the defaults that depend on the machine, the pepper, the keys, the
 * segment); reset on each reading. A child only reads it, but for the
 * pepper, which child_init wipes. Defined in mod_authn_hmac_config.c. */
typedef struct {
    /* AuthHMACPepperFile's, else a random one (post_config). */
    authn_hmac_secret_t *pepper;
    authn_hmac_secret_t *pepper_prev; /* its second file: only checks */
    int pepper_random;                /* no file: a random one (status) */
    uint64_t size;                    /* AuthHMACCacheSize */
    apr_hash_t *userfiles;  /* path -> authn_hmac_userfile_t (not .htaccess) */
    const char *redis_name; /* as configured; NULL: no Redis */
    authn_hmac_redis_conf_t redis;
    authn_hmac_secret_t *redis_secret;   /* from AuthHMACRedisAuthFile */
    int redis_tls;                       /* AuthHMACRedisTLS on */
    authn_hmac_redis_tls_conf_t tls;     /* the other TLS directives */
    authn_hmac_secret_t *tls_key;        /* wiped once in the context */
    authn_hmac_sentinel_conf_t sentinel; /* the Sentinel directives */
    /* From AuthHMACRedisSentinelAuthFile. */
    authn_hmac_secret_t *sentinel_secret;
    int max_verifications;               /* 0: half the cores */
    int backlog;                         /* -1: 8 per verification */
    authn_hmac_throttle_conf_t throttle; /* the throttle's four directives */
    int server_status; /* the counters in mod_status's server-status */
    /* Made in post_config. */
    authn_hmac_mac_t *mac;
    authn_hmac_mac_t *mac_prev; /* the previous pepper's, or NULL */
    apr_global_mutex_t *mutex;
    authn_hmac_table_t *table;
} hmac_conf_t;

extern hmac_conf_t hmac_conf;

#endif
