/*
 * mod_authn_hmac.c: httpd glue for the "hmac" authn provider.
 *
 * A credential is checked against the htpasswd file once (bcrypt, apr1,
 * SHA1 or crypt, through apr_password_validate); then a peppered HMAC of it
 * is kept in shared memory, and later requests skip the slow hash. The core
 * (src/) does the work; this file holds the module record, the directives,
 * the hooks and the provider.
 */
#include "httpd.h"
#include "http_config.h"
#include "http_core.h"
#include "http_log.h"
#include "http_protocol.h"
#include "http_request.h"
#include "ap_provider.h"
#include "mod_auth.h"
#include "util_mutex.h"
#include "ap_mpm.h"
#include "mod_status.h"
#include "mod_core.h"
#include "unixd.h"

#include "apr_md5.h"
#include "apr_shm.h"
#include "apr_lib.h"
#include "apr_strings.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <bsd/string.h>

#include "authn_hmac/cred.h"
#include "authn_hmac/engine.h"
#include "authn_hmac/htpasswd.h"
#include "authn_hmac/redis.h"
#include "authn_hmac/secret.h"
#include "authn_hmac/sentinel.h"
#include "authn_hmac/table.h"
#include "authn_hmac/util.h"

module AP_MODULE_DECLARE_DATA authn_hmac_module;

#define D_USERFILE "AuthHMACUserFile"
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

#define MUTEX_TYPE     "authn-hmac-shm"
#define NOTE           "authn-hmac"
#define STATUS_HANDLER "authn-hmac-status"

#define DEFAULT_SIZE         ((uint64_t)4 << 20)
#define MIN_SIZE             ((uint64_t)16 << 10)
#define MAX_SIZE             ((uint64_t)1 << 30)
#define DEFAULT_TTL          300
#define DEFAULT_NEGATIVE_TTL 30
#define MAX_TTL              604800  /* 7 days */
#define DEFAULT_MAX_AGE      28800   /* 8 hours */
#define MAX_MAX_AGE          2592000 /* 30 days */
#define MAX_HTACCESS_FILES   256     /* per process */
/* NB: an index takes up to ~15 times its file's size (short lines); a
 * file named only in .htaccess is a tenant's choice, so these bound what
 * a child holds for them (and what one request reads beyond the budget). */
#define HTACCESS_MAX_BYTES ((apr_off_t)1 << 20)
#define HTACCESS_BUDGET    ((uint64_t)16 << 20) /* per process */

#define DEFAULT_REDIS_TIMEOUT_MS 50
#define MAX_REDIS_TIMEOUT_MS     10000
#define DEFAULT_REDIS_PREFIX     "authn_hmac:"

#define VERIFY_NICE 19 /* verifications yield the CPU to requests */
#define BUSY_BODY                                                              \
    "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n"                   \
    "<html><head>\n<title>503 Service Unavailable</title>\n</head><body>\n"    \
    "<h1>Service Unavailable</h1>\n<p>Too many logins are being checked "      \
    "right now. Please try again shortly.</p>\n</body></html>\n"

typedef struct {
    authn_hmac_userfile_t *uf; /* shared by every section naming the file */
    const char *scope;         /* canonical path: keeps two files apart */
    size_t scope_len;
    apr_interval_time_t ttl;
    int ttl_set;
    apr_interval_time_t negative_ttl;
    int negative_ttl_set;
    apr_interval_time_t max_age;
    int max_age_set;
    int hide_unknown; /* -1: not set (on) */
} dir_conf;

/* Server-wide state: one pepper and one shared segment serve every vhost,
 * so these directives are global only. Reset on each configuration read. */
static struct {
    authn_hmac_secret_t *pepper; /* from AuthHMACPepperFile, else random */
    uint64_t size;
    apr_hash_t *userfiles; /* path -> authn_hmac_userfile_t */
    /* Files named only in .htaccess, read per request in a child: a
     * registry of this process's, under a lock and bounded. */
    apr_pool_t *pchild;
    apr_thread_mutex_t *htaccess_lock;
    apr_hash_t *htaccess_files; /* path -> authn_hmac_userfile_t */
    authn_hmac_budget_t htaccess_budget;
    authn_hmac_mac_t *mac;
    apr_global_mutex_t *mutex;
    authn_hmac_table_t *table;
    const char *redis_name; /* as configured; NULL: no Redis */
    authn_hmac_redis_conf_t redis;
    authn_hmac_secret_t *redis_secret;   /* from AuthHMACRedisAuthFile */
    int redis_tls;                       /* AuthHMACRedisTLS on */
    authn_hmac_redis_tls_conf_t tls;     /* the other TLS directives */
    authn_hmac_secret_t *tls_key;        /* wiped once in the context */
    authn_hmac_redis_pool_t *redis_pool; /* per child */
    authn_hmac_sentinel_conf_t sentinel; /* the Sentinel directives */
    authn_hmac_secret_t
        *sentinel_secret;               /* from AuthHMACRedisSentinelAuthFile */
    authn_hmac_sentinel_t *sentinel_rt; /* per child: its discovery */
    authn_hmac_engine_t engine;         /* per child */
    int max_verifications;              /* 0: the number of cores */
    int backlog;                        /* -1: 4 per verification */
    int server_status; /* the counters in mod_status's server-status */
} g;

/* ------------------------------------------------------------ directives */

static void *create_dir_conf(apr_pool_t *p, char *dir)
{
    dir_conf *c = apr_pcalloc(p, sizeof(*c));

    (void)dir;
    c->ttl = apr_time_from_sec(DEFAULT_TTL);
    c->negative_ttl = apr_time_from_sec(DEFAULT_NEGATIVE_TTL);
    c->max_age = apr_time_from_sec(DEFAULT_MAX_AGE);
    c->hide_unknown = -1;
    return c;
}

static void *merge_dir_conf(apr_pool_t *p, void *basev, void *addv)
{
    dir_conf *base = basev, *add = addv, *c = apr_pcalloc(p, sizeof(*c));

    c->uf = add->uf ? add->uf : base->uf;
    c->scope = add->uf ? add->scope : base->scope;
    c->scope_len = add->uf ? add->scope_len : base->scope_len;
    c->ttl_set = add->ttl_set || base->ttl_set;
    c->ttl = add->ttl_set ? add->ttl : base->ttl;
    c->negative_ttl_set = add->negative_ttl_set || base->negative_ttl_set;
    c->negative_ttl =
        add->negative_ttl_set ? add->negative_ttl : base->negative_ttl;
    c->max_age_set = add->max_age_set || base->max_age_set;
    c->max_age = add->max_age_set ? add->max_age : base->max_age;
    c->hide_unknown =
        add->hide_unknown >= 0 ? add->hide_unknown : base->hide_unknown;
    return c;
}

/* The index of a file named in .htaccess, whose configuration lives for
 * one request: kept for the child's life, like one named in the server
 * configuration, so it gets the same index, cache and revocation. Once the
 * child keeps MAX_HTACCESS_FILES, others get an index of their own in
 * pool (the request's), read for each request as mod_authn_file reads its
 * file: slower, but right. NULL if none can be set up. */
static authn_hmac_userfile_t *htaccess_userfile(const char *path,
                                                apr_pool_t *pool)
{
    /* NB: read-only in a child, so safe to read from any thread. */
    authn_hmac_userfile_t *uf =
        apr_hash_get(g.userfiles, path, APR_HASH_KEY_STRING);
    apr_pool_t *home = g.pchild;

    if (uf)
        return uf;
    apr_thread_mutex_lock(g.htaccess_lock);
    uf = apr_hash_get(g.htaccess_files, path, APR_HASH_KEY_STRING);
    if (!uf) {
        if (apr_hash_count(g.htaccess_files) >= MAX_HTACCESS_FILES)
            home = pool;
        uf = authn_hmac_userfile_make(path, home);
        authn_hmac_userfile_limit(uf, HTACCESS_MAX_BYTES,
                                  home == g.pchild ? &g.htaccess_budget : NULL);
        if (authn_hmac_userfile_child_init(uf, home) != APR_SUCCESS)
            uf = NULL;
        else if (home == g.pchild) {
            apr_hash_set(g.htaccess_files, apr_pstrdup(g.pchild, path),
                         APR_HASH_KEY_STRING, uf);
            (void)authn_hmac_userfile_watch(uf);
        }
    }
    apr_thread_mutex_unlock(g.htaccess_lock);
    return uf;
}

static const char *set_userfile(cmd_parms *cmd, void *dc, const char *arg)
{
    dir_conf *c = dc;
    const char *path = ap_server_root_relative(cmd->pool, arg);
    char *real;

    if (!path)
        return apr_pstrcat(cmd->pool, D_USERFILE ": invalid path '", arg,
                           "' (a path to an htpasswd file)", NULL);
    /* NB: .htaccess is read per request, in a child, by any thread. */
    if (!(cmd->override & (RSRC_CONF | ACCESS_CONF))) {
        c->uf = g.pchild ? htaccess_userfile(path, cmd->pool) : NULL;
        if (!c->uf)
            return apr_pstrcat(cmd->pool,
                               D_USERFILE ": cannot set up the "
                                          "index of '",
                               arg, "'", NULL);
    }
    else
        c->uf = apr_hash_get(g.userfiles, path, APR_HASH_KEY_STRING);
    if (!c->uf) {
        c->uf = authn_hmac_userfile_make(path, cmd->pool);
        apr_hash_set(g.userfiles, path, APR_HASH_KEY_STRING, c->uf);
    }
    /* A file that does not exist yet is scoped by its absolute path; at
     * request time it is a 500, as with mod_authn_file. */
    real = realpath(path, NULL);
    c->scope = real ? apr_pstrdup(cmd->pool, real) : path;
    c->scope_len = strlen(c->scope);
    free(real);
    return NULL;
}

/* A per-directory duration: where it goes, its bounds, and what 0 means
 * (NULL: 0 is refused). */
typedef struct {
    apr_size_t value, set; /* offsets in dir_conf */
    const char *zero;
    uint64_t max;
} ttl_spec;

static ttl_spec ttl_spec_cache = {APR_OFFSETOF(dir_conf, ttl),
                                  APR_OFFSETOF(dir_conf, ttl_set), "caching",
                                  MAX_TTL};
static ttl_spec ttl_spec_negative = {APR_OFFSETOF(dir_conf, negative_ttl),
                                     APR_OFFSETOF(dir_conf, negative_ttl_set),
                                     "the negative cache", MAX_TTL};
static ttl_spec ttl_spec_max_age = {APR_OFFSETOF(dir_conf, max_age),
                                    APR_OFFSETOF(dir_conf, max_age_set), NULL,
                                    MAX_MAX_AGE};

static const char *set_ttl(cmd_parms *cmd, void *dc, const char *arg)
{
    const ttl_spec *spec = cmd->info;
    uint64_t v;
    const char *err = authn_hmac_parse_seconds(arg, &v, cmd->pool);

    if (!err && v > spec->max)
        err = "too long";
    if (!err && v == 0 && !spec->zero)
        err = "too short";
    if (err)
        return apr_psprintf(
            cmd->pool,
            "%s: '%s' is %s (seconds from %d to %" APR_UINT64_T_FMT
            ", with an optional unit s, m, h or d%s)",
            cmd->cmd->name, arg, err, spec->zero ? 0 : 1, spec->max,
            spec->zero
                ? apr_pstrcat(cmd->pool, "; 0 turns ", spec->zero, " off", NULL)
                : "");
    *(apr_interval_time_t *)((char *)dc + spec->value) =
        apr_time_from_sec((apr_time_t)v);
    *(int *)((char *)dc + spec->set) = 1;
    return NULL;
}

static const char *set_pepper(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *path = ap_server_root_relative(cmd->pool, arg);

    (void)dc;
    if (err)
        return err;
    err = path ? authn_hmac_secret_read(&g.pepper, path, AUTHN_HMAC_PEPPER_MIN,
                                        AUTHN_HMAC_SECRET_MAX, cmd->pool)
               : apr_pstrcat(cmd->pool, "invalid path '", arg, "'", NULL);
    if (err)
        return apr_psprintf(cmd->pool,
                            D_PEPPER ": %s (a file of %d to %d random bytes, "
                                     "mode 0600 or 0400, owned by root)",
                            err, AUTHN_HMAC_PEPPER_MIN, AUTHN_HMAC_SECRET_MAX);
    return NULL;
}

static const char *set_size(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    uint64_t v;

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_parse_size(arg, &v, cmd->pool);
    if (!err && v != 0 && (v < MIN_SIZE || v > MAX_SIZE))
        err = "out of range";
    if (err)
        return apr_psprintf(cmd->pool,
                            D_SIZE ": '%s' is %s (bytes with an optional unit "
                                   "K, M or G, from 16K to 1G; 0 turns the "
                                   "shared-memory cache off)",
                            arg, err);
    g.size = v;
    return NULL;
}

static const char *set_redis(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_redis_parse_server(arg, &g.redis, cmd->pool);
    /* NB: a value with '@' or '?' may hold a password (redis://:pw@host,
     * unix:///run/redis.sock?password=pw as redis-py takes it): not
     * repeated; the message still gives the form to write. */
    if (err)
        return apr_psprintf(
            cmd->pool,
            D_REDIS ": %s%s (host:port, [IPv6]:port or /path/to/redis.sock)",
            strpbrk(arg, "@?") ? ""
                               : apr_pstrcat(cmd->pool, "'", arg, "': ", NULL),
            err);
    g.redis_name = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

/* AuthHMACRedisAuthFile, and AuthHMACRedisSentinelAuthFile (info set). */
static const char *set_redis_auth(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *path = ap_server_root_relative(cmd->pool, arg);
    authn_hmac_secret_t **secret =
        cmd->info ? &g.sentinel_secret : &g.redis_secret;

    (void)dc;
    if (err)
        return err;
    err = path ? authn_hmac_secret_read(secret, path, 1, AUTHN_HMAC_SECRET_MAX,
                                        cmd->pool)
               : apr_pstrcat(cmd->pool, "invalid path '", arg, "'", NULL);
    if (!err)
        err = authn_hmac_redis_parse_auth(*secret, cmd->info ? &g.sentinel.conn
                                                             : &g.redis);
    if (err)
        return apr_psprintf(cmd->pool,
                            "%s: %s (one line, 'password' or 'username "
                            "password', in a file of mode 0600 or 0400 owned "
                            "by root)",
                            cmd->cmd->name, err);
    return NULL;
}

/* AuthHMACRedisSentinel host:port [host:port ...]: each is asked in turn. */
static const char *set_sentinel(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_sentinel_parse(arg, &g.sentinel, cmd->pool);
    if (err)
        return apr_psprintf(cmd->pool,
                            D_SENT ": '%s': %s (host:port or [IPv6]:port, "
                                   "one to eight Sentinels)",
                            arg, err);
    return NULL;
}

static const char *set_sentinel_master(cmd_parms *cmd, void *dc,
                                       const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_sentinel_check_master(arg);
    if (err)
        return apr_psprintf(cmd->pool,
                            D_SMASTER ": '%s' is %s (the name the Sentinels "
                                      "monitor: letters, digits and .-_, up "
                                      "to 64)",
                            arg, err);
    g.sentinel.master = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

/* What the Sentinel directives need of each other and of the rest, or
 * NULL; then Redis is the primary they name. */
static const char *check_sentinel(apr_pool_t *p)
{
    if (!g.sentinel.n && !g.sentinel.master && !g.sentinel_secret)
        return NULL;
    if (g.sentinel.n && g.redis_name)
        return D_SENT " and " D_REDIS " exclude each other: the Sentinels "
                      "name the primary (remove one of them)";
    if (!g.sentinel.n)
        return g.sentinel.master ? D_SMASTER " needs " D_SENT
                                 : D_SAUTH " needs " D_SENT;
    if (!g.sentinel.master)
        return D_SENT " needs " D_SMASTER
                      " (the name the Sentinels monitor the primary by)";
    g.sentinel.conn.timeout_ms = g.redis.timeout_ms;
    g.sentinel.conn.prefix = g.redis.prefix;
    g.redis_name = apr_psprintf(p, "'%s' (the primary the Sentinels name)",
                                g.sentinel.master);
    return NULL;
}

/* A server-wide integer directive: where it goes and what it accepts. */
typedef struct {
    int *field;
    uint64_t min, max;
    const char *accepts;
} int_spec;

static int_spec redis_timeout_spec = {&g.redis.timeout_ms, 1,
                                      MAX_REDIS_TIMEOUT_MS,
                                      "milliseconds from 1 to 10000"};
static int_spec redis_db_spec = {&g.redis.db, 0, 65535,
                                 "a database number from 0 to 65535"};
static int_spec max_verifications_spec = {
    &g.max_verifications, 1, AUTHN_HMAC_MAX_CAP,
    "verifications at once in the server, from 1 to 64"};
static int_spec backlog_spec = {
    &g.backlog, 0, AUTHN_HMAC_QUEUE_SLOTS - AUTHN_HMAC_MAX_CAP,
    "verifications that may wait for a turn, from 0 to 192"};

static const char *set_global_int(cmd_parms *cmd, void *dc, const char *arg)
{
    const int_spec *spec = cmd->info;
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    uint64_t v = 0;

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_parse_uint(arg, spec->max, &v);
    if (!err && v < spec->min)
        err = "too small";
    if (err)
        return apr_psprintf(cmd->pool, "%s: '%s' is %s (%s)", cmd->cmd->name,
                            arg, err, spec->accepts);
    *spec->field = (int)v;
    return NULL;
}

static const char *set_server_status(cmd_parms *cmd, void *dc, int on)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    g.server_status = on;
    return NULL;
}

static const char *set_redis_prefix(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *c;

    (void)dc;
    if (err)
        return err;
    for (c = arg; *c; c++)
        if (!apr_isgraph(*c))
            break;
    if (*c || strlen(arg) > 64)
        return apr_psprintf(cmd->pool,
                            D_RPREFIX ": '%s' is not valid (up to 64 "
                                      "printable characters, no spaces)",
                            arg);
    g.redis.prefix = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

static const char *set_tls(cmd_parms *cmd, void *dc, int on)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    g.redis_tls = on;
    return NULL;
}

/* AuthHMACRedisTLSCACertificateFile and AuthHMACRedisTLSCertificateFile:
 * a readable file (what it holds is checked with the TLS context). */
static const char *set_tls_file(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *path = ap_server_root_relative(cmd->pool, arg);
    apr_finfo_t fi;
    apr_status_t rv;

    (void)dc;
    if (err)
        return err;
    if (!path)
        return apr_psprintf(cmd->pool, "%s: invalid path '%s'", cmd->cmd->name,
                            arg);
    rv = apr_stat(&fi, path, APR_FINFO_TYPE, cmd->pool);
    if (rv == APR_SUCCESS && fi.filetype != APR_REG)
        rv = APR_EINVAL;
    if (rv == APR_SUCCESS && access(path, R_OK) != 0)
        rv = errno;
    if (rv != APR_SUCCESS)
        return apr_psprintf(cmd->pool,
                            "%s: cannot read '%s': %pm (a PEM file of "
                            "certificates)",
                            cmd->cmd->name, path, &rv);
    if (cmd->info)
        g.tls.cert_file = path;
    else
        g.tls.ca_file = path;
    return NULL;
}

static const char *set_tls_name(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *c;

    (void)dc;
    if (err)
        return err;
    for (c = arg; *c; c++)
        if (!apr_isalnum(*c) && !strchr(".-_:", *c))
            break;
    if (*c || !*arg || strlen(arg) > 253)
        return apr_psprintf(cmd->pool,
                            D_TLSNAME ": '%s' is not valid (the host name or "
                                      "IP address the Redis server's "
                                      "certificate names)",
                            arg);
    g.tls.server_name = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

static const char *set_tls_key(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *path = ap_server_root_relative(cmd->pool, arg);

    (void)dc;
    if (err)
        return err;
    if (!path)
        return apr_pstrcat(cmd->pool, D_TLSKEY ": invalid path '", arg, "'",
                           NULL);
    err = authn_hmac_secret_read(&g.tls_key, path, 1,
                                 authn_hmac_redis_tls_key_max(), cmd->pool);
    if (err)
        return apr_psprintf(cmd->pool,
                            D_TLSKEY ": %s (a PEM private key, not encrypted, "
                                     "mode 0600 or 0400, owned by root)",
                            err);
    g.tls.key = g.tls_key;
    return NULL;
}

/* The TLS context, made once per reading of the configuration (in the
 * parent; the children share it), or what is wrong, logged. */
static int check_tls(server_rec *s, apr_pool_t *pconf)
{
    static const char *const part_name[] = {
        [AUTHN_HMAC_TLS_OTHER] = D_TLS,  [AUTHN_HMAC_TLS_NAME] = D_TLSNAME,
        [AUTHN_HMAC_TLS_CA] = D_TLSCA,   [AUTHN_HMAC_TLS_CERT] = D_TLSCERT,
        [AUTHN_HMAC_TLS_KEY] = D_TLSKEY,
    };
    const char *set = g.tls.ca_file       ? D_TLSCA
                      : g.tls.server_name ? D_TLSNAME
                      : g.tls.cert_file   ? D_TLSCERT
                      : g.tls_key         ? D_TLSKEY
                                          : NULL;
    const char *err = NULL;
    authn_hmac_tls_part part = AUTHN_HMAC_TLS_OTHER;

    if (!g.redis_tls && set)
        err = apr_pstrcat(pconf, set, " needs " D_TLS " on", NULL);
    else if (!g.redis_tls)
        return OK;
    else if (!g.redis_name)
        err = D_TLS " on needs " D_REDIS " or " D_SENT;
    else if (g.redis.socket)
        err = D_TLS " on needs a host:port in " D_REDIS
                    ", not a unix socket (which is local: no TLS)";
    else if (!g.tls.cert_file != !g.tls_key)
        err = g.tls_key ? D_TLSKEY " needs " D_TLSCERT
                        : D_TLSCERT " needs " D_TLSKEY;
    /* NB: a Sentinel names the primary, and the primary gets AUTH with
     * the Redis password once its certificate verifies for the name the
     * Sentinel gave. With the system store any host with a public
     * certificate (for a name, or now for an address) would verify: a
     * rogue Sentinel would get the password. Your own CA, or one name
     * every primary must carry, keeps it among your servers. */
    else if (g.sentinel.n && !g.tls.ca_file && !g.tls.server_name)
        err = D_TLS " on with " D_SENT " needs " D_TLSCA " or " D_TLSNAME
                    " (with the system store, a Sentinel could name any host "
                    "with a public certificate, and it would get the Redis "
                    "password)";
    else {
        err = authn_hmac_redis_tls_create(
            &g.redis.tls, &g.tls,
            g.sentinel.n ? g.sentinel.host[0] : g.redis.host, &part, pconf);
        /* NB: with Sentinel, each connection names its peer: a Sentinel
         * by its host, the primary by AuthHMACRedisTLSServerName or the
         * host the Sentinels name. The Sentinels get a context of their
         * own, the same but for that name, so that their sessions and the
         * primary's do not replace each other. */
        if (!err && g.sentinel.n) {
            authn_hmac_redis_tls_conf_t tc = g.tls;

            tc.server_name = NULL;
            g.sentinel.primary_name = g.tls.server_name;
            err = authn_hmac_redis_tls_create(&g.sentinel.conn.tls, &tc,
                                              g.sentinel.host[0], &part, pconf);
        }
        if (err)
            err = apr_pstrcat(pconf, part_name[part], ": ", err, NULL);
        /* NB: the context holds the key now, in OpenSSL's secure heap. */
        authn_hmac_secret_wipe(g.tls_key);
        g.tls_key = NULL;
        g.tls.key = NULL;
    }
    if (!err)
        return OK;
    ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s, "AHMAC0021: %s",
                 err);
    return HTTP_INTERNAL_SERVER_ERROR;
}

static const command_rec cmds[] = {
    AP_INIT_TAKE1(D_USERFILE, set_userfile, NULL,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "the htpasswd file to check credentials against"),
    AP_INIT_TAKE1(D_TTL, set_ttl, &ttl_spec_cache,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "idle timeout of a verified credential: how long it stays "
                  "cached after its last use, in seconds (default 300)"),
    AP_INIT_TAKE1(D_MAXAGE, set_ttl, &ttl_spec_max_age, RSRC_CONF | ACCESS_CONF,
                  "how long a verified credential may stay cached however "
                  "often it is used, from its verification, in seconds "
                  "(default 8h, at most 30d)"),
    AP_INIT_TAKE1(D_NEGTTL, set_ttl, &ttl_spec_negative,
                  RSRC_CONF | ACCESS_CONF,
                  "how long a refused credential is refused again without "
                  "bcrypt, in seconds (default 30)"),
    AP_INIT_FLAG(D_HIDE, ap_set_flag_slot,
                 (void *)APR_OFFSETOF(dir_conf, hide_unknown),
                 RSRC_CONF | ACCESS_CONF,
                 "On (default): an unknown or locked user costs what a "
                 "known user's wrong password does, so that timing does not "
                 "tell names"),
    AP_INIT_TAKE1(
        D_PEPPER, set_pepper, NULL, RSRC_CONF,
        "file holding the secret pepper (default: random, kept until httpd "
        "stops)"),
    AP_INIT_TAKE1(D_SIZE, set_size, NULL, RSRC_CONF,
                  "shared-memory cache size (default 4M)"),
    AP_INIT_TAKE1(D_REDIS, set_redis, NULL, RSRC_CONF,
                  "Redis server shared by a farm: host:port or a socket path"),
    AP_INIT_TAKE1(D_RAUTH, set_redis_auth, NULL, RSRC_CONF,
                  "file holding the Redis password, or user and password"),
    AP_INIT_TAKE1(D_RTIMEOUT, set_global_int, &redis_timeout_spec, RSRC_CONF,
                  "Redis connect and command timeout in ms (default 50)"),
    AP_INIT_TAKE1(D_RPREFIX, set_redis_prefix, NULL, RSRC_CONF,
                  "prefix of the Redis keys (default authn_hmac:)"),
    AP_INIT_TAKE1(D_MAXVER, set_global_int, &max_verifications_spec, RSRC_CONF,
                  "most password verifications (bcrypt) at once in the "
                  "server (default: the number of cores)"),
    AP_INIT_TAKE1(D_BACKLOG, set_global_int, &backlog_spec, RSRC_CONF,
                  "verifications that may wait for a turn; beyond, 503 "
                  "(default: 4 per " D_MAXVER ")"),
    AP_INIT_TAKE1(D_RDB, set_global_int, &redis_db_spec, RSRC_CONF,
                  "Redis database number (default 0)"),
    AP_INIT_FLAG(D_TLS, set_tls, NULL, RSRC_CONF,
                 "On: connect to Redis over TLS, verifying its certificate "
                 "(default Off)"),
    AP_INIT_TAKE1(D_TLSCA, set_tls_file, NULL, RSRC_CONF,
                  "the CA certificates Redis's certificate is verified "
                  "against (default: OpenSSL's system store)"),
    AP_INIT_TAKE1(D_TLSNAME, set_tls_name, NULL, RSRC_CONF,
                  "the name Redis's certificate must carry (default: the "
                  "host of " D_REDIS ")"),
    AP_INIT_TAKE1(D_TLSCERT, set_tls_file, (void *)1, RSRC_CONF,
                  "a client certificate for a Redis that requires one"),
    AP_INIT_TAKE1(D_TLSKEY, set_tls_key, NULL, RSRC_CONF,
                  "the client certificate's key (mode 0600 or 0400, owned by "
                  "root)"),
    AP_INIT_ITERATE(D_SENT, set_sentinel, NULL, RSRC_CONF,
                    "the Sentinels to ask for the Redis primary, in order: "
                    "host:port ..."),
    AP_INIT_TAKE1(D_SMASTER, set_sentinel_master, NULL, RSRC_CONF,
                  "the name the Sentinels monitor the Redis primary by"),
    AP_INIT_TAKE1(D_SAUTH, set_redis_auth, (void *)1, RSRC_CONF,
                  "file holding the Sentinels' password, or user and "
                  "password"),
    AP_INIT_FLAG(D_SSTATUS, set_server_status, NULL, RSRC_CONF,
                 "On: mod_status's server-status shows the counters too "
                 "(default Off: they tell unknown names from wrong passwords "
                 "to whoever may read it)"),
    {NULL, {NULL}, NULL, 0, RAW_ARGS, NULL}};

/* ----------------------------------------------------------------- hooks */

static int pre_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    (void)plog;
    (void)ptemp;
    memset(&g, 0, sizeof(g));
    g.size = DEFAULT_SIZE;
    g.userfiles = apr_hash_make(pconf);
    g.redis.timeout_ms = DEFAULT_REDIS_TIMEOUT_MS;
    g.redis.prefix = DEFAULT_REDIS_PREFIX;
    g.backlog = -1;
    return ap_mutex_register(pconf, MUTEX_TYPE, NULL, APR_LOCK_DEFAULT, 0);
}

/* ------------------------------------------- sections without a user file */

/* AuthBasicProvider hmac in a section with no AuthHMACUserFile is a 500
 * for each request (see check_password), most often because the section
 * kept mod_authn_file's AuthUserFile. The parsed configuration tells, at start,
 * where the file is missing. NB: the file may come from elsewhere than the
 * section and its enclosing ones: httpd merges, for a request, every
 * <Directory>, <Files>, <Location> and <If> that applies to it, of its
 * virtual host and of the main server, and .htaccess files. So httpd is
 * refused a start only when no AuthHMACUserFile could apply: none in the
 * section, in the sections enclosing it, in any section of its virtual
 * host or of the main server (any at all, for a section of the main
 * server, whose sections apply to every virtual host), and no
 * AllowOverride lets .htaccess set one; and only when the section surely
 * authenticates with it: AuthType Basic there or in an enclosing section,
 * and no "file" before it in the provider list (with "file hmac", the
 * users in AuthUserFile still get in). Such a section is a 500 for every
 * request it authenticates. Otherwise (no AuthType Basic seen, "file
 * hmac", or a file that could come from elsewhere while the section sets
 * AuthUserFile) a warning: a configuration that starts today keeps
 * starting after an upgrade. */

/* One level of the tree: a section's directives, or the top level's. */
typedef struct {
    const ap_directive_t *section; /* NULL: the top level */
    const ap_directive_t *vhost;   /* the enclosing <VirtualHost>, or NULL */
    int userfile;                  /* AuthHMACUserFile here or above */
    int basic;                     /* AuthType Basic here or above */
    const ap_directive_t *authuserfile; /* AuthUserFile here or above */
} check_scope;

typedef struct {
    apr_pool_t *p;
    int htaccess; /* an AllowOverride lets .htaccess set AuthHMACUserFile */
    apr_array_header_t *userfiles; /* each AuthHMACUserFile's vhost */
    int refused;                   /* a section can never have a file */
    int warn;                      /* log the sections that may not */
    server_rec *s;
} check_state;

/* Whether the arguments args hold word (any case). */
static int has_word(const char *args, const char *word, apr_pool_t *p)
{
    const char *w;

    while (args && *(w = ap_getword_conf(p, &args)))
        if (!strcasecmp(w, word))
            return 1;
    return 0;
}

/* Whether the provider list args names "file" before "hmac": then the
 * users in AuthUserFile are answered by mod_authn_file, and only the
 * others reach hmac. */
static int file_first(const char *args, apr_pool_t *p)
{
    const char *w;

    while (args && *(w = ap_getword_conf(p, &args)))
        if (!strcasecmp(w, "file") || !strcasecmp(w, "hmac"))
            return !strcasecmp(w, "file");
    return 0;
}

static int is(const ap_directive_t *d, const char *name)
{
    return d->directive && !strcasecmp(d->directive, name);
}

/* Notes every AuthHMACUserFile (with its virtual host) and whether
 * .htaccess may set one. */
static void survey(check_state *st, const ap_directive_t *d,
                   const ap_directive_t *vhost)
{
    for (; d; d = d->next) {
        if (is(d, D_USERFILE))
            APR_ARRAY_PUSH(st->userfiles, const ap_directive_t *) = vhost;
        else if ((is(d, "AllowOverride") &&
                  (has_word(d->args, "All", st->p) ||
                   has_word(d->args, "AuthConfig", st->p))) ||
                 (is(d, "AllowOverrideList") &&
                  has_word(d->args, D_USERFILE, st->p)))
            st->htaccess = 1;
        if (d->first_child)
            survey(st, d->first_child, is(d, "<VirtualHost") ? d : vhost);
    }
}

/* Whether an AuthHMACUserFile outside sc and the sections enclosing it
 * could apply to its requests. */
static int could_have_userfile(const check_state *st, const check_scope *sc)
{
    int i;

    if (st->htaccess)
        return 1;
    for (i = 0; i < st->userfiles->nelts; i++) {
        const ap_directive_t *v =
            APR_ARRAY_IDX(st->userfiles, i, const ap_directive_t *);

        if (!v || !sc->vhost || v == sc->vhost)
            return 1;
    }
    return 0;
}

static const char *section_name(const ap_directive_t *section, apr_pool_t *p)
{
    return section
               ? apr_pstrcat(p, section->directive, " ", section->args, NULL)
               : "the server configuration";
}

/* Checks the sections of one level (first: its first directive), then
 * the levels below. */
static void check_level(check_state *st, const ap_directive_t *first,
                        check_scope *sc)
{
    const ap_directive_t *d, *provider = NULL;
    const char *hint;

    for (d = first; d; d = d->next) {
        if (is(d, D_USERFILE))
            sc->userfile = 1;
        else if (is(d, "AuthUserFile"))
            sc->authuserfile = d;
        else if (is(d, "AuthType"))
            sc->basic = has_word(d->args, "Basic", st->p);
        else if (is(d, "AuthBasicProvider") && has_word(d->args, "hmac", st->p))
            provider = d;
    }
    if (provider && !sc->userfile) {
        int file = file_first(provider->args, st->p);
        int none = !could_have_userfile(st, sc);

        hint = sc->authuserfile && !file
                   ? apr_psprintf(
                         st->p,
                         "; AuthUserFile is set; did you mean " D_USERFILE
                         "? (AuthUserFile at %s:%d)",
                         sc->authuserfile->filename, sc->authuserfile->line_num)
                   : "";
        if (none && sc->basic && !file) {
            st->refused = 1;
            ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, st->s,
                         "AHMAC0019: AuthBasicProvider hmac in %s (%s:%d) "
                         "has no " D_USERFILE ", and none could apply to "
                         "it: none is set there nor in any section that "
                         "could apply with it, and no AllowOverride lets "
                         ".htaccess set one%s",
                         section_name(sc->section, st->p), provider->filename,
                         provider->line_num, hint);
        }
        else if (st->warn && (none || *hint))
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, st->s,
                         "AHMAC0020: AuthBasicProvider hmac in %s (%s:%d) "
                         "has no " D_USERFILE " there nor in an enclosing "
                         "section%s (%s)",
                         section_name(sc->section, st->p), provider->filename,
                         provider->line_num, hint,
                         none ? "and none could apply to it: each request "
                                "it authenticates through hmac will be a 500"
                              : "fine if one from another section or from "
                                ".htaccess applies to all of its requests");
    }
    for (d = first; d; d = d->next) {
        check_scope below = *sc;

        if (!d->first_child)
            continue;
        below.section = d;
        if (is(d, "<VirtualHost"))
            below.vhost = d;
        check_level(st, d->first_child, &below);
    }
}

/* Returns whether some section can never have an AuthHMACUserFile (each
 * is logged); with warn, also logs those that may not have one. */
static int check_userfiles(apr_pool_t *ptemp, server_rec *s, int warn)
{
    check_state st;
    check_scope top;

    memset(&st, 0, sizeof(st));
    memset(&top, 0, sizeof(top));
    st.p = ptemp;
    st.s = s;
    st.warn = warn;
    st.userfiles = apr_array_make(ptemp, 8, sizeof(const ap_directive_t *));
    survey(&st, ap_conftree, NULL);
    check_level(&st, ap_conftree, &top);
    return st.refused;
}

/* Checks that span directives, so that `apachectl -t` sees them. */
static int check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                        server_rec *s)
{
    const char *err = check_sentinel(pconf);

    (void)plog;
    if (err) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s,
                     "AHMAC0022: %s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    if (g.redis_name && !g.pepper) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s,
                     "AHMAC0008: %s needs " D_PEPPER ": the servers sharing a "
                     "Redis must share one pepper",
                     g.sentinel.n ? D_SENT : D_REDIS);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    /* NB: the warnings go to the error log once per start (post_config);
     * `apachectl -t` prints them here. */
    if (check_userfiles(ptemp, s,
                        ap_state_query(AP_SQ_RUN_MODE) == AP_SQ_RM_CONFIG_TEST))
        return HTTP_INTERNAL_SERVER_ERROR;
    return check_tls(s, pconf);
}

/* What outlives a restart, graceful or not, in the process pool: the
 * shared segment, its writers' mutex and a random pepper, so that the cache
 * stays warm (Debian's logrotate restarts httpd gracefully every night). A
 * changed pepper or AuthHMACCacheSize starts a fresh segment; a full stop
 * ends it all with the process. */
/* NB: a new layout of retained_t needs a new key: the old generation's
 * data is read by the new module after an upgrade and a restart. */
#define RETAINED "authn_hmac_retained/1"

typedef struct {
    apr_shm_t *shm;
    apr_size_t size;
    apr_global_mutex_t *mutex;
    authn_hmac_secret_t *random_pepper; /* when there is no pepper file */
    unsigned char fingerprint[AUTHN_HMAC_KEY_LEN]; /* the segment's pepper */
} retained_t;

/* Anonymous shared memory, or a named segment in the runtime dir where the
 * platform has no anonymous kind. */
static apr_status_t make_shm(apr_shm_t **shm, apr_pool_t *p, apr_size_t size)
{
    const char *fname;
    apr_status_t rv = apr_shm_create(shm, size, NULL, p);

    if (rv != APR_ENOTIMPL)
        return rv;
    fname = ap_runtime_dir_relative(p, "authn_hmac.shm");
    if (!fname)
        return APR_EINVAL;
    apr_shm_remove(fname, p);
    return apr_shm_create(shm, size, fname, p);
}

/* The segment this generation uses: the one kept from the last, if it was
 * made for the same pepper and size, else a fresh one. */
static int attach_segment(retained_t *rd, apr_size_t size, server_rec *s,
                          apr_pool_t *pconf)
{
    apr_pool_t *pglobal = s->process->pool;
    unsigned char fp[AUTHN_HMAC_KEY_LEN];
    apr_status_t rv;

    if (!rd->mutex) {
        rv = ap_global_mutex_create(&rd->mutex, NULL, MUTEX_TYPE, NULL, s,
                                    pglobal, 0);
        if (rv != APR_SUCCESS)
            return HTTP_INTERNAL_SERVER_ERROR; /* httpd has logged why */
    }
    g.mutex = rd->mutex;
    g.table = NULL;
    authn_hmac_subkey(g.pepper, "authn_hmac v2 fingerprint", fp);
    /* NB: a kept segment of another layout (the module was upgraded) does
     * not attach: it is replaced like one of another pepper or size. */
    if (rd->shm && rd->size == size &&
        memcmp(rd->fingerprint, fp, sizeof(fp)) == 0)
        g.table = authn_hmac_table_attach(apr_shm_baseaddr_get(rd->shm),
                                          g.mutex, pconf);
    if (g.table) {
        explicit_bzero(fp, sizeof(fp));
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s,
                     "AHMAC0010: shared-memory cache kept across the restart");
        return OK;
    }
    if (rd->shm) {
        /* NB: the last generation's children keep their own mapping. */
        apr_shm_destroy(rd->shm);
        rd->shm = NULL;
    }
    rv = make_shm(&rd->shm, pglobal, size);
    if (rv == APR_SUCCESS)
        rv = authn_hmac_table_format(apr_shm_baseaddr_get(rd->shm), size,
                                     apr_time_now());
    if (rv == APR_SUCCESS) {
        rd->size = size;
        memcpy(rd->fingerprint, fp, sizeof(fp));
        g.table = authn_hmac_table_attach(apr_shm_baseaddr_get(rd->shm),
                                          g.mutex, pconf);
    }
    explicit_bzero(fp, sizeof(fp));
    if (!g.table) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "AHMAC0011: cannot create %" APR_SIZE_T_FMT
                     " bytes of shared memory (" D_SIZE ")",
                     size);
        if (rd->shm)
            apr_shm_destroy(rd->shm);
        rd->shm = NULL;
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s,
                 "AHMAC0012: new shared-memory cache of %" APR_SIZE_T_FMT
                 " bytes",
                 size);
    return OK;
}

static void share_userfiles(server_rec *s, apr_pool_t *pconf);

static int post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                       server_rec *s)
{
    apr_size_t size = authn_hmac_table_size((size_t)g.size);
    retained_t *rd;
    apr_status_t rv;

    (void)plog;
    if (g.max_verifications == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        g.max_verifications = n < 1                    ? 1
                              : n > AUTHN_HMAC_MAX_CAP ? AUTHN_HMAC_MAX_CAP
                                                       : (int)n;
    }
    if (g.backlog < 0)
        g.backlog = 4 * g.max_verifications;
    /* NB: the first pass at startup only tests the configuration. */
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG)
        return OK;
    (void)check_userfiles(ptemp, s, 1);
    rd = ap_retained_data_get(RETAINED);
    if (!rd)
        rd = ap_retained_data_create(RETAINED, sizeof(*rd));
    if (!g.pepper) {
        /* NB: under httpd -X, child_init ran in this process and wiped it. */
        if (!rd->random_pepper || !rd->random_pepper->data) {
            /* NB: nothing of this module may be left for the process
             * pool's cleanups: the module is unloaded before them. */
            rv = authn_hmac_secret_random_retained(
                &rd->random_pepper, AUTHN_HMAC_PEPPER_MIN, s->process->pool);
            if (rv != APR_SUCCESS) {
                ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                             "AHMAC0013: cannot generate a random pepper");
                return HTTP_INTERNAL_SERVER_ERROR;
            }
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, s,
                         "AHMAC0014: no " D_PEPPER " set; using a random "
                         "pepper until httpd stops (the cache starts empty)");
        }
        g.pepper = rd->random_pepper;
    }
    else if (rd->random_pepper) {
        /* A pepper file now: the random one of earlier starts goes. */
        authn_hmac_secret_wipe(rd->random_pepper);
    }
    rv = authn_hmac_mac_create(&g.mac, g.pepper, pconf);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "AHMAC0015: cannot derive the keys");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    share_userfiles(s, pconf);
    return attach_segment(rd, size, s, pconf);
}

/* What goes wrong with sharing a file's index, in a child. */
static void share_warn(void *baton, const char *msg)
{
    ap_log_error(APLOG_MARK, APLOG_WARNING, 0, (server_rec *)baton,
                 "AHMAC0026: %s", msg);
}

/* One index per server for each file of the main configuration: the
 * versions in a directory of the runtime directory, given to the
 * children's user. Without it each child keeps its own. */
static void share_userfiles(server_rec *s, apr_pool_t *pconf)
{
    unsigned n = apr_hash_count(g.userfiles), i = 0;
    const char *dir = ap_runtime_dir_relative(pconf, "authn_hmac-index");
    const char *why = NULL;
    authn_hmac_share_t *sh;
    apr_hash_index_t *hi;
    apr_off_t total = 0;
    struct statvfs fs;
    apr_status_t rv;

    if (!n || !dir)
        return;
    rv = authn_hmac_share_create(
        &sh, dir, n, geteuid() == 0 ? ap_unixd_config.user_id : (uid_t)-1,
        ap_unixd_config.group_id, &why, pconf);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s,
                     "AHMAC0025: %s %s: each child keeps its own index of "
                     "the htpasswd files (memory grows with the children); "
                     "check DefaultRuntimeDir",
                     dir, why);
        return;
    }
    for (hi = apr_hash_first(pconf, g.userfiles); hi; hi = apr_hash_next(hi)) {
        apr_finfo_t f;

        authn_hmac_userfile_share(apr_hash_this_val(hi), sh, i++, g.mac,
                                  share_warn, s);
        if (apr_stat(&f, apr_hash_this_key(hi), APR_FINFO_SIZE, pconf) ==
            APR_SUCCESS)
            total += f.size;
    }
    /* NB: a version takes about 1.5 times its file; two may live at once
     * while one replaces the other. */
    if (statvfs(dir, &fs) == 0 &&
        (uint64_t)fs.f_bavail * fs.f_frsize < (uint64_t)total * 3)
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s,
                     "AHMAC0027: %s has %" APR_UINT64_T_FMT " bytes free, "
                     "less than the %" APR_UINT64_T_FMT " that the index of "
                     "the htpasswd files may need; a child that cannot "
                     "write it keeps its own",
                     dir, (apr_uint64_t)fs.f_bavail * fs.f_frsize,
                     (apr_uint64_t)total * 3);
}

static void engine_log(void *baton, int level, const char *msg);

/* The Sentinel thread's messages, of the server, not of a request. */
static void sentinel_log(void *baton, int level, const char *msg)
{
    ap_log_error(APLOG_MARK, level, 0, (server_rec *)baton, "%s", msg);
}

static void child_init(apr_pool_t *pchild, server_rec *s)
{
    apr_hash_index_t *hi;
    apr_status_t rv;

    /* NB: the registry's own pool: a pool is not safe to allocate from
     * in two threads, and others may use pchild. */
    if (apr_pool_create(&g.pchild, pchild) != APR_SUCCESS ||
        apr_thread_mutex_create(&g.htaccess_lock, APR_THREAD_MUTEX_DEFAULT,
                                g.pchild) != APR_SUCCESS)
        g.pchild = NULL;
    else {
        g.htaccess_files = apr_hash_make(g.pchild);
        g.htaccess_budget.used = 0;
        g.htaccess_budget.max = HTACCESS_BUDGET;
    }
    if (!g.mutex)
        return;
    /* NB: a child does not inherit its parent's memory locks; the pages
     * stay excluded from core dumps. The pepper itself is not needed once
     * the subkeys are derived: this child's copy goes. */
    authn_hmac_mac_relock(g.mac);
    authn_hmac_secret_relock(g.redis_secret);
    authn_hmac_secret_relock(g.sentinel_secret);
    authn_hmac_secret_wipe(g.pepper);
    g.pepper = NULL;
    rv = apr_global_mutex_child_init(
        &g.mutex, apr_global_mutex_lockfile(g.mutex), pchild);
    if (rv != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "AHMAC0016: cannot attach the cache mutex in this child");
    if (g.redis_name) {
        int threads = 1;

        ap_mpm_query(AP_MPMQ_MAX_THREADS, &threads);
        rv = authn_hmac_redis_pool_create(
            &g.redis_pool, &g.redis, threads > 0 ? threads : 1,
            authn_hmac_table_redis_health(g.table), pchild);
        /* NB: without its thread, the pool has no primary: no Redis. */
        if (rv == APR_SUCCESS && g.sentinel.n) {
            rv = authn_hmac_sentinel_start(
                &g.sentinel_rt, &g.sentinel, &g.redis,
                authn_hmac_table_sentinel(g.table),
                authn_hmac_table_redis_health(g.table), sentinel_log, s,
                pchild);
            authn_hmac_redis_pool_use(
                g.redis_pool, authn_hmac_sentinel_source(g.sentinel_rt));
        }
        else if (rv == APR_SUCCESS)
            authn_hmac_redis_pool_use(
                g.redis_pool, authn_hmac_redis_server(&g.redis, pchild));
        if (rv != APR_SUCCESS)
            ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                         "AHMAC0017: cannot set up the Redis pool");
    }
    g.engine.mac = g.mac;
    g.engine.table = g.table;
    g.engine.redis = g.redis_pool;
    g.engine.redis_conf = &g.redis;
    g.engine.redis_name = g.redis_name;
    g.engine.verify = apr_password_validate;
    g.engine.log = engine_log;
    g.engine.max_verifications = g.max_verifications;
    g.engine.backlog = g.backlog;
    g.engine.nice = VERIFY_NICE;
    for (hi = apr_hash_first(pchild, g.userfiles); hi; hi = apr_hash_next(hi)) {
        rv = authn_hmac_userfile_child_init(apr_hash_this_val(hi), pchild);
        if (rv != APR_SUCCESS)
            ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                         "AHMAC0018: cannot set up the htpasswd index");
        else {
            (void)authn_hmac_userfile_watch(apr_hash_this_val(hi));
            /* NB: under httpd -X the one process is the server: no other
             * holds a version, and a thread would outlive its restart. */
            rv =
                ap_exists_config_define("ONE_PROCESS")
                    ? APR_SUCCESS
                    : authn_hmac_userfile_reaper(apr_hash_this_val(hi), pchild);
            if (rv != APR_SUCCESS)
                ap_log_error(APLOG_MARK, APLOG_ERR, rv, s,
                             "AHMAC0028: cannot start the thread that lets "
                             "go of replaced versions of the htpasswd index; "
                             "an idle child holds its last one until its "
                             "next request");
        }
    }
}

/* -------------------------------------------------------------- provider */

static void log_bad_line(void *baton, unsigned lineno, const char *why)
{
    request_rec *r = baton;
    dir_conf *c = ap_get_module_config(r->per_dir_config, &authn_hmac_module);

    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "AHMAC0001: %s line %u %s",
                  c->scope, lineno, why);
}

static authn_status done(request_rec *r, const char *note, authn_status st)
{
    apr_table_setn(r->notes, NOTE, note);
    return st;
}

/* The engine's messages, as this request's. */
static void engine_log(void *baton, int level, const char *msg)
{
    request_rec *r = baton;

    ap_log_rerror(APLOG_MARK, level, 0, r, "%s", msg);
}

/* A 503 for want of a turn to verify, told to the admin at most once a
 * minute per process (the counter busy has them all). */
static void log_busy(request_rec *r)
{
    static apr_time_t last;
    apr_time_t now = authn_hmac_monotonic();
    apr_time_t seen = __atomic_load_n(&last, __ATOMIC_RELAXED);

    if ((seen == 0 || now - seen >= apr_time_from_sec(60)) &&
        __atomic_compare_exchange_n(&last, &seen, now, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        ap_log_rerror(
            APLOG_MARK, APLOG_WARNING, 0, r,
            "AHMAC0007: too many passwords to verify at once (" D_MAXVER
            " %d, " D_BACKLOG " %d): answering 503 with Retry-After "
            "(the counter busy counts them; logged at most once a "
            "minute per process)",
            g.max_verifications, g.backlog);
}

static authn_status status_of(authn_hmac_outcome o)
{
    switch (o) {
    case AUTHN_HMAC_HIT:
    case AUTHN_HMAC_REDIS_HIT:
    case AUTHN_HMAC_VERIFIED:
    case AUTHN_HMAC_COALESCED:
        return AUTH_GRANTED;
    case AUTHN_HMAC_DENIED:
    case AUTHN_HMAC_NEGATIVE_HIT:
        return AUTH_DENIED;
    case AUTHN_HMAC_UNKNOWN_USER:
        return AUTH_USER_NOT_FOUND;
    case AUTHN_HMAC_BUSY: /* a 503: see busy_error */
    default:
        return AUTH_GENERAL_ERROR;
    }
}

/* mod_auth_basic answers a provider's error with a 500, which busy_error
 * and busy_redirect turn into a 503. Its body is what the admin set with
 * ErrorDocument 503 (a text, a local document or a URL, as for any 503),
 * else ours: set here as the 500's, since that is the one httpd looks up.
 * NB: the admin's goes in as httpd keeps it (a text with its leading '"'):
 * ap_custom_response would take a text such as "Sorry: busy" or "/ is
 * down" for a URL or a document. */
static void busy_document(request_rec *r)
{
    const char *doc = ap_response_code_string(
        r, ap_index_of_response(HTTP_SERVICE_UNAVAILABLE));
    core_request_config *rc;

    ap_custom_response(r, HTTP_INTERNAL_SERVER_ERROR, BUSY_BODY);
    if (!doc)
        return;
    rc = ap_get_core_module_config(r->request_config);
    rc->response_code_strings[ap_index_of_response(
        HTTP_INTERNAL_SERVER_ERROR)] = apr_pstrdup(r->pool, doc);
}

/* Takes the name mod_auth_basic set before asking us off a request
 * refused for want of a turn to verify: nobody checked it. NB: not only
 * for this request's own error page. httpd gives a redirect to an
 * ErrorDocument under the same configuration this request's user without
 * checking it again, and exports the user of the request it stands in for
 * as REDIRECT_REMOTE_USER (to SSI, CGI, RewriteCond, ...): a document
 * there would act for, or show, a user whose password nobody checked.
 * The access log gets the name back (busy_log), as for a refused password. */
static void busy_unname(request_rec *r)
{
    ap_set_module_config(r->request_config, &authn_hmac_module, r->user);
    r->user = NULL;
}

/* Whether mod_authn_file has an AuthUserFile for r (set in place of
 * AuthHMACUserFile, as in .htaccess, where no start-up check sees it).
 * NB: its per-directory record is private; its first (and only) member
 * has been the file's path since httpd 2.1. */
static int authuserfile_set(request_rec *r)
{
    module *m = ap_find_linked_module("mod_authn_file.c");
    char **pwfile = m ? ap_get_module_config(r->per_dir_config, m) : NULL;

    return pwfile && *pwfile;
}

/* The provider: finds the user's stored hash, and lets the engine (src/
 * engine.c) do the rest. */
static authn_status check_password(request_rec *r, const char *user,
                                   const char *password)
{
    dir_conf *c = ap_get_module_config(r->per_dir_config, &authn_hmac_module);
    authn_hmac_cred_t cred;
    authn_hmac_policy_t pol;
    authn_hmac_outcome o;
    const char *hash = NULL;
    size_t hash_len = 0;
    unsigned char uid[AUTHN_HMAC_KEY_LEN], digest[AUTHN_HMAC_DIGEST_LEN];
    apr_status_t rv;

    if (!c->uf || !g.table) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "AHMAC0003: AuthBasicProvider hmac needs " D_USERFILE
                      "%s",
                      authuserfile_set(r) ? " (AuthUserFile is set; did you "
                                            "mean " D_USERFILE "?)"
                                          : "");
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    rv = authn_hmac_userfile_lookup_id(c->uf, user, g.mac, c->scope,
                                       c->scope_len, &hash, &hash_len, uid,
                                       digest, log_bad_line, r, r->pool);
    if (rv == APR_ENOSPC) {
        authn_hmac_table_count(g.table, AUTHN_HMAC_C_ERRORS, 1);
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "AHMAC0009: password file too large: %s (at most "
                      "1 GiB; 1 MiB for a file named only in .htaccess, "
                      "and 16 MiB for all of those in one process: name a "
                      "larger one in the server configuration)",
                      c->scope);
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    if (rv != APR_SUCCESS && rv != APR_NOTFOUND && rv != AUTHN_HMAC_LOCKED) {
        authn_hmac_table_count(g.table, AUTHN_HMAC_C_ERRORS, 1);
        ap_log_rerror(APLOG_MARK, APLOG_ERR, rv, r,
                      "AHMAC0002: could not open password file: %s", c->scope);
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    cred.scope = c->scope;
    cred.scope_len = c->scope_len;
    cred.user = user;
    cred.user_len = strlen(user);
    cred.password = password;
    cred.password_len = strlen(password);
    cred.hash = rv == APR_SUCCESS ? hash : NULL;
    cred.hash_len = rv == APR_SUCCESS ? hash_len : 0;
    cred.dummy_hash = rv == APR_SUCCESS ? NULL : hash;
    cred.dummy_hash_len = rv == APR_SUCCESS ? 0 : hash_len;
    cred.locked = rv == AUTHN_HMAC_LOCKED;
    cred.client = r->useragent_ip;
    cred.uid = rv == APR_SUCCESS ? uid : NULL;
    cred.digest = rv == APR_SUCCESS ? digest : NULL;
    /* NB: no entry outlives its max age, whatever the idle timeout. */
    pol.ttl = c->ttl < c->max_age ? c->ttl : c->max_age;
    pol.max_age = c->max_age;
    pol.negative_ttl = c->negative_ttl;
    pol.hide_unknown = c->hide_unknown != 0;
    o = authn_hmac_check(&g.engine, &pol, &cred, r, r->pool);
    if (o == AUTHN_HMAC_BUSY) {
        log_busy(r);
        busy_document(r);
        busy_unname(r);
    }
    return done(r, authn_hmac_outcome_name(o), status_of(o));
}

/* Makes the 500 of a request refused for want of a turn to verify (the
 * note of req says so) a 503 with Retry-After. Returns whether it did. */
static int make_busy(request_rec *r, const request_rec *req)
{
    const char *note = apr_table_get(req->notes, NOTE);

    if (r->status != HTTP_INTERNAL_SERVER_ERROR || !note ||
        strcmp(note, "busy") != 0)
        return 0;
    r->status = HTTP_SERVICE_UNAVAILABLE;
    r->status_line = NULL;
    apr_table_setn(r->err_headers_out, "Retry-After",
                   apr_itoa(r->pool, authn_hmac_retry_after(&g.engine)));
    return 1;
}

/* httpd's own error page, or an ErrorDocument text: the response is made
 * from r->status, which is set before this runs. */
static void busy_error(request_rec *r)
{
    (void)make_busy(r, r);
}

/* An ErrorDocument 503 that is a local document: httpd redirects to it
 * with the 500, as it would for ErrorDocument 500, and this runs first
 * among the hooks that follow the check of the user (which the redirect
 * skips under the same configuration). The note goes along, for the
 * access log's final request. NB: the user's name does not (see
 * busy_unname). */
static int busy_redirect(request_rec *r)
{
    if (!r->prev || !make_busy(r, r->prev))
        return DECLINED;
    apr_table_setn(r->notes, NOTE, "busy");
    apr_table_setn(r->subprocess_env, "REDIRECT_STATUS", "503");
    return DECLINED;
}

/* The name busy_unname took, back on a busy request for the access log's
 * %u, once the answer is gone (as httpd logs the name of a refused
 * password). A local document's request keeps none. */
static int busy_log(request_rec *r)
{
    char *user = ap_get_module_config(r->request_config, &authn_hmac_module);

    if (user && !r->user)
        r->user = user;
    return DECLINED;
}

static const authn_provider provider = {check_password, NULL};

/* ---------------------------------------------------------------- status */

/* The counters of every process, rendered in format f. */
static const char *status_text(authn_hmac_format_t f, apr_pool_t *p)
{
    authn_hmac_stats_t st;
    apr_time_t now = apr_time_now();

    authn_hmac_table_stats(g.table, now, &st);
    st.redis = g.redis_name != NULL;
    st.max_verifications = (uint64_t)g.max_verifications;
    return authn_hmac_status_format(&st, f, p);
}

static int status_handler(request_rec *r)
{
    static const char *const type[AUTHN_HMAC_FMT_HTML + 1] = {
        [AUTHN_HMAC_FMT_TEXT] = "text/plain; charset=utf-8",
        [AUTHN_HMAC_FMT_JSON] = "application/json",
        [AUTHN_HMAC_FMT_PROMETHEUS] =
            "text/plain; version=0.0.4; charset=utf-8",
    };
    authn_hmac_format_t f;

    if (!r->handler || strcmp(r->handler, STATUS_HANDLER) != 0)
        return DECLINED;
    r->allowed = AP_METHOD_BIT << M_GET;
    if (r->method_number != M_GET)
        return HTTP_METHOD_NOT_ALLOWED;
    if (!g.table)
        return HTTP_SERVICE_UNAVAILABLE;
    f = authn_hmac_status_query(r->args);
    ap_set_content_type(r, type[f] ? type[f] : type[AUTHN_HMAC_FMT_TEXT]);
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (r->header_only)
        return OK;
    ap_rputs(status_text(f, r->pool), r);
    return OK;
}

/* mod_status's server-status: a table on its page (lines with
 * ?notable), lines in ?auto. */
static int status_hook(request_rec *r, int flags)
{
    /* NB: only when asked for. Debian enables mod_status for every local
     * client, and behind a reverse proxy on the same host every client is
     * local: unknown_user moving would tell names apart. */
    if (!g.table || !g.server_status)
        return OK;
    if (flags & AP_STATUS_SHORT)
        ap_rputs(status_text(AUTHN_HMAC_FMT_AUTO, r->pool), r);
    else if (flags & AP_STATUS_NOTABLE)
        ap_rvputs(r, "<h2>mod_authn_hmac</h2>\n<pre>\n",
                  status_text(AUTHN_HMAC_FMT_TEXT, r->pool), "</pre>\n", NULL);
    else
        ap_rputs(status_text(AUTHN_HMAC_FMT_HTML, r->pool), r);
    return OK;
}

static void register_hooks(apr_pool_t *p)
{
    ap_register_auth_provider(p, AUTHN_PROVIDER_GROUP, "hmac",
                              AUTHN_PROVIDER_VERSION, &provider,
                              AP_AUTH_INTERNAL_PER_CONF);
    ap_hook_pre_config(pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_check_config(check_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_handler(status_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_insert_error_filter(busy_error, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_type_checker(busy_redirect, NULL, NULL, APR_HOOK_REALLY_FIRST);
    ap_hook_log_transaction(busy_log, NULL, NULL, APR_HOOK_REALLY_FIRST);
    APR_OPTIONAL_HOOK(ap, status_hook, status_hook, NULL, NULL,
                      APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(authn_hmac) = {STANDARD20_MODULE_STUFF,
                                 create_dir_conf,
                                 merge_dir_conf,
                                 NULL,
                                 NULL,
                                 cmds,
                                 register_hooks,
                                 AP_MODULE_FLAG_NONE};
