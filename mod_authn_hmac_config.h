/*
 * mod_authn_hmac_config.h: the directives' names, a section's record and
 * what mod_authn_hmac_config.c gives the module record (the command table,
 * the records' makers, the server's configuration's reset).
 */
#ifndef MOD_AUTHN_HMAC_CONFIG_H
#define MOD_AUTHN_HMAC_CONFIG_H

#include "httpd.h"
#include "http_config.h"
#include "mod_auth.h"

#include "request/dbm.h"
#include "request/source.h"
#include "sources/htpasswd.h"

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
#define D_RECHECK  "AuthHMACRecheck"
#define D_GRACE    "AuthHMACOfflineGrace"

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
    apr_interval_time_t recheck; /* unset: the source's (see below) */
    int recheck_set;
    apr_interval_time_t offline_grace;
    int offline_grace_set;
    int hide_unknown; /* -1: not set (on) */
} hmac_dir_conf;

/* A wrapped provider's max age unless its section sets one, in seconds
 * (util_ldap's cache keeps a bind 600 s). */
#define WRAPPED_MAX_AGE 600

/* How often a grant is confirmed with a source the module does not own,
 * unless the section sets it, in seconds: SQL, whose query is cheap, every
 * second (a hit between two asks no query; a page of 40 images makes one);
 * a wrapped provider, whose check is a bind, every minute (a leaver, a
 * locked or a changed password is refused within it). */
#define DEFAULT_RECHECK_SQL     1
#define DEFAULT_RECHECK_WRAPPED 60

extern const command_rec hmac_cmds[];
void *hmac_create_dir_conf(apr_pool_t *p, char *dir);
void *hmac_merge_dir_conf(apr_pool_t *p, void *basev, void *addv);
/* The server's configuration as no directive has set it yet. */
void hmac_conf_reset(apr_pool_t *pconf);

#endif
