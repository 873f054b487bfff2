/*
 * mod_authn_hmac_private.h: what the module's glue files share. Not an
 * interface: the module exports nothing but its record.
 *
 *   mod_authn_hmac.c           the module record, its hooks and its life:
 *                              the retained segment, post_config, sharing
 *                              the user files, child_init
 *   mod_authn_hmac_config.c    the records, the directives, the checks that
 *                              span them, the walk of the sections, the
 *                              registry of files named in .htaccess
 *   mod_authn_hmac_provider.c  the provider, and its busy 503 path
 *   mod_authn_hmac_status.c    the status handler and mod_status's hook
 *
 * The module's own names begin with hmac_ (the core's, in src/, with
 * authn_hmac_).
 */
#ifndef MOD_AUTHN_HMAC_PRIVATE_H
#define MOD_AUTHN_HMAC_PRIVATE_H

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "mod_auth.h"
#include "apr_dbd.h"
#include "mod_dbd.h"

#include "apr_global_mutex.h"
#include "apr_hash.h"
#include "apr_thread_mutex.h"

#include "request/dbm.h"
#include "request/engine.h"
#include "sources/htpasswd.h"
#include "redis/sentinel.h"
#include "request/source.h"

/* Every file of the module logs as authn_hmac (its tag in the error log,
 * its LogLevel), as mod_ssl's files do through ssl_private.h; this also
 * declares authn_hmac_module, defined in mod_authn_hmac.c. */
APLOG_USE_MODULE(authn_hmac);

#define D_USERFILE "AuthHMACUserFile"
#define D_DBMFILE  "AuthHMACUserDBMFile"
#define D_DBMTYPE  "AuthHMACUserDBMType"
#define D_DBDQUERY "AuthHMACDBDUserPWQuery"
#define D_PROVIDER "AuthHMACProvider"
/* The sources of users, one per section. */
#define D_SOURCES  D_USERFILE ", " D_DBMFILE ", " D_DBDQUERY " or " D_PROVIDER
#define D_TTL      "AuthHMACCacheTTL"
#define D_MAXAGE   "AuthHMACCacheMaxAge"
#define D_NEGTTL   "AuthHMACNegativeTTL"
#define D_HIDE     "AuthHMACHideUnknownUsers"
#define D_PEPPER   "AuthHMACPepperFile"
#define D_SIZE     "AuthHMACCacheSize"
#define D_REDIS    "AuthHMACRedisServer"
#define D_RAUTH    "AuthHMACRedisAuthFile"
#define D_RTIMEOUT "AuthHMACRedisTimeout"
#define D_RPREFIX  "AuthHMACRedisPrefix"
#define D_RDB      "AuthHMACRedisDatabase"
#define D_MAXVER   "AuthHMACMaxVerifications"
#define D_BACKLOG  "AuthHMACVerifyBacklog"
#define D_SSTATUS  "AuthHMACServerStatus"
#define D_TLS      "AuthHMACRedisTLS"
#define D_TLSCA    "AuthHMACRedisTLSCACertificateFile"
#define D_TLSNAME  "AuthHMACRedisTLSServerName"
#define D_TLSCERT  "AuthHMACRedisTLSCertificateFile"
#define D_TLSKEY   "AuthHMACRedisTLSKeyFile"
#define D_SENT     "AuthHMACRedisSentinel"
#define D_SMASTER  "AuthHMACRedisSentinelMaster"
#define D_SAUTH    "AuthHMACRedisSentinelAuthFile"
#define D_MAXFAIL  "AuthHMACMaxFailures"
#define D_MAXCFAIL "AuthHMACMaxClientFailures"
#define D_FWINDOW  "AuthHMACFailureWindow"
#define D_BANTIME  "AuthHMACBanTime"

/* Where a section's users are. */
typedef enum {
    HMAC_SOURCE_NONE,
    HMAC_SOURCE_FILE,    /* AuthHMACUserFile */
    HMAC_SOURCE_DBM,     /* AuthHMACUserDBMFile */
    HMAC_SOURCE_DBD,     /* AuthHMACDBDUserPWQuery */
    HMAC_SOURCE_PROVIDER /* AuthHMACProvider */
} hmac_source;

/* A section's configuration (per directory). */
typedef struct {
    hmac_source source;        /* the source's fields below go together */
    authn_hmac_userfile_t *uf; /* shared by every section naming the file */
    const char *scope;         /* keeps two sources apart: the canonical
                                  path of a file, "dbm:" and a DBM file's,
                                  "dbd:" and the query */
    size_t scope_len;
    authn_hmac_dbm_t *dbm;         /* AuthHMACUserDBMFile's */
    const char *dbd_label;         /* the query, as mod_dbd prepared it */
    authn_hmac_source_t *hashes;   /* an SQL source's state */
    const char *dbm_type;          /* AuthHMACUserDBMType; NULL: default */
    const authn_provider *wrapped; /* AuthHMACProvider's */
    const char *wrapped_name;
    apr_interval_time_t ttl;
    int ttl_set;
    apr_interval_time_t negative_ttl;
    int negative_ttl_set;
    apr_interval_time_t max_age;
    int max_age_set;
    int hide_unknown; /* -1: not set (on) */
} hmac_dir_conf;

/* A wrapped provider's max age unless its section sets one, in seconds
 * (util_ldap's cache keeps a bind 600 s). */
#define WRAPPED_MAX_AGE 600

/* The server's configuration: one pepper and one shared segment serve
 * every virtual host, so these directives are global only. Set while httpd
 * reads its configuration, in the parent: by the directives, then
 * check_config (the TLS contexts, Sentinel's connections) and post_config
 * (the defaults that depend on the machine, the pepper, the keys, the
 * segment); reset on each reading. A child only reads it, but for the
 * pepper, which child_init wipes. */
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

/* Files named only in .htaccess, read per request in a child: a registry
 * of the child's, under a lock and bounded (mod_authn_hmac_config.c). */
typedef struct {
    apr_pool_t *pool; /* its own; NULL: no registry */
    apr_thread_mutex_t *lock;
    apr_hash_t *files; /* path -> authn_hmac_userfile_t */
    authn_hmac_budget_t budget;
} hmac_htaccess_t;

/* A child's own state, set in child_init (nothing in the parent). */
typedef struct {
    hmac_htaccess_t htaccess;
    authn_hmac_redis_pool_t *redis_pool;
    authn_hmac_sentinel_t *sentinel; /* its discovery of the primary */
    authn_hmac_engine_t engine;
} hmac_child_t;

extern hmac_child_t hmac_child;

/* mod_authn_hmac_config.c */
extern const command_rec hmac_cmds[];
void *hmac_create_dir_conf(apr_pool_t *p, char *dir);
void *hmac_merge_dir_conf(apr_pool_t *p, void *basev, void *addv);
/* The server's configuration as no directive has set it yet. */
void hmac_conf_reset(apr_pool_t *pconf);
/* The check_config hook. */
int hmac_check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                      server_rec *s);
/* Returns whether some section can never have an AuthHMACUserFile (each
 * is logged); with warn, also logs those that may not have one. */
int hmac_check_userfiles(apr_pool_t *ptemp, server_rec *s, int warn);
/* Sets up this child's registry of files named in .htaccess. */
void hmac_htaccess_child_init(apr_pool_t *pchild);

/* mod_authn_hmac_provider.c */
extern const authn_provider hmac_provider;
/* mod_dbd's functions, once hmac_dbd_find has found them (it returns
 * whether it did: mod_dbd is loaded). */
extern APR_OPTIONAL_FN_TYPE(ap_dbd_prepare) * hmac_dbd_prepare;
int hmac_dbd_find(void);
void hmac_busy_error(request_rec *r);
int hmac_busy_redirect(request_rec *r);
int hmac_busy_log(request_rec *r);
/* Names, at start, the sections whose configuration a wrapped provider
 * reads (see wrapped_scope). */
void hmac_wrapped_sections(apr_pool_t *pconf, server_rec *s);

/* mod_authn_hmac_status.c */
int hmac_status_handler(request_rec *r);
int hmac_status_hook(request_rec *r, int flags);

#endif
