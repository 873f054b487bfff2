/*
 * mod_authn_hmac_config.c: the module's configuration: the records and
 * their merge, each directive's handler, the command table, the checks
 * that span directives (check_config), the walk of the configuration's
 * sections for a provider without a user file, and the registry of files
 * named in .htaccess (read per request, in a child).
 */
#include "httpd.h"
#include "http_config.h"
#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "ap_provider.h"
#include "unixd.h"
#include "util_ldap.h"

#include "apr_lib.h"
#include "apr_strings.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "request/dbm.h"
#include "redis/redis.h"
#include "core/secret.h"
#include "redis/sentinel.h"
#include "core/util.h"

#include "mod_authn_hmac_private.h"

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

/* The throttle's defaults: a user who forgot a password tries a few, an
 * office behind one address a few each; a guesser gets 10 tries per user
 * and 30 in all every 10 minutes instead of about 5,000 (docs). */
#define DEFAULT_MAX_FAILURES        10
#define DEFAULT_MAX_CLIENT_FAILURES 30
#define DEFAULT_FAILURE_WINDOW      600
#define DEFAULT_BAN_TIME            600
#define MAX_FAILURES                100000
#define MAX_THROTTLE_SECONDS        86400

hmac_conf_t hmac_conf;

/* ---------------------------------------------------------------- records */

void hmac_conf_reset(apr_pool_t *pconf)
{
    memset(&hmac_conf, 0, sizeof(hmac_conf));
    hmac_conf.size = DEFAULT_SIZE;
    hmac_conf.userfiles = apr_hash_make(pconf);
    hmac_conf.redis.timeout_ms = DEFAULT_REDIS_TIMEOUT_MS;
    hmac_conf.redis.prefix = DEFAULT_REDIS_PREFIX;
    hmac_conf.backlog = -1;
    hmac_conf.throttle.max_failures = DEFAULT_MAX_FAILURES;
    hmac_conf.throttle.max_client_failures = DEFAULT_MAX_CLIENT_FAILURES;
    hmac_conf.throttle.window = apr_time_from_sec(DEFAULT_FAILURE_WINDOW);
    hmac_conf.throttle.ban = apr_time_from_sec(DEFAULT_BAN_TIME);
}

void *hmac_create_dir_conf(apr_pool_t *p, char *dir)
{
    hmac_dir_conf *c = apr_pcalloc(p, sizeof(*c));

    (void)dir;
    c->ttl = apr_time_from_sec(DEFAULT_TTL);
    c->negative_ttl = apr_time_from_sec(DEFAULT_NEGATIVE_TTL);
    c->max_age = apr_time_from_sec(DEFAULT_MAX_AGE);
    c->hide_unknown = -1;
    return c;
}

void *hmac_merge_dir_conf(apr_pool_t *p, void *basev, void *addv)
{
    hmac_dir_conf *base = basev, *add = addv, *c = apr_pcalloc(p, sizeof(*c));

    const hmac_dir_conf *src = add->source ? add : base;

    c->source = src->source;
    c->uf = src->uf;
    c->scope = src->scope;
    c->scope_len = src->scope_len;
    c->dbm = src->dbm;
    c->dbd_label = src->dbd_label;
    c->hashes = src->hashes;
    c->wrapped = src->wrapped;
    c->wrapped_name = src->wrapped_name;
    c->dbm_type = add->dbm_type ? add->dbm_type : base->dbm_type;
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

/* ----------------------------------------------- files named in .htaccess */

void hmac_htaccess_child_init(apr_pool_t *pchild)
{
    hmac_htaccess_t *reg = &hmac_child.htaccess;

    /* NB: the registry's own pool: a pool is not safe to allocate from
     * in two threads, and others may use pchild. */
    if (apr_pool_create(&reg->pool, pchild) != APR_SUCCESS ||
        apr_thread_mutex_create(&reg->lock, APR_THREAD_MUTEX_DEFAULT,
                                reg->pool) != APR_SUCCESS)
        reg->pool = NULL;
    else {
        reg->files = apr_hash_make(reg->pool);
        reg->budget.used = 0;
        reg->budget.max = HTACCESS_BUDGET;
    }
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
    hmac_htaccess_t *reg = &hmac_child.htaccess;
    /* NB: read-only in a child, so safe to read from any thread. */
    authn_hmac_userfile_t *uf =
        apr_hash_get(hmac_conf.userfiles, path, APR_HASH_KEY_STRING);
    apr_pool_t *home = reg->pool;

    if (uf)
        return uf;
    apr_thread_mutex_lock(reg->lock);
    uf = apr_hash_get(reg->files, path, APR_HASH_KEY_STRING);
    if (!uf) {
        if (apr_hash_count(reg->files) >= MAX_HTACCESS_FILES)
            home = pool;
        uf = authn_hmac_userfile_make(path, home);
        authn_hmac_userfile_limit(uf, HTACCESS_MAX_BYTES,
                                  home == reg->pool ? &reg->budget : NULL);
        if (authn_hmac_userfile_child_init(uf, home) != APR_SUCCESS)
            uf = NULL;
        else if (home == reg->pool) {
            apr_hash_set(reg->files, apr_pstrdup(reg->pool, path),
                         APR_HASH_KEY_STRING, uf);
            (void)authn_hmac_userfile_watch(uf);
        }
    }
    apr_thread_mutex_unlock(reg->lock);
    return uf;
}

/* ------------------------------------------------------------- directives */

static const char *const source_names[] = {"", D_USERFILE, D_DBMFILE,
                                           D_DBDQUERY, D_PROVIDER};

/* Sets the section's source of users to s, unless another is set there:
 * NULL, or what is wrong. */
static const char *set_source(cmd_parms *cmd, hmac_dir_conf *c, hmac_source s)
{
    if (c->source && c->source != s)
        return apr_psprintf(cmd->pool,
                            "%s: this section has %s already: one source "
                            "of users per section (" D_SOURCES ")",
                            source_names[s], source_names[c->source]);
    c->source = s;
    return NULL;
}

static const char *set_userfile(cmd_parms *cmd, void *dc, const char *arg)
{
    hmac_dir_conf *c = dc;
    const char *path = ap_server_root_relative(cmd->pool, arg);
    const char *err = set_source(cmd, c, HMAC_SOURCE_FILE);
    char *real;

    if (err)
        return err;
    if (!path)
        return apr_pstrcat(cmd->pool, D_USERFILE ": invalid path '", arg,
                           "' (a path to an htpasswd file)", NULL);
    /* NB: .htaccess is read per request, in a child, by any thread. */
    if (!(cmd->override & (RSRC_CONF | ACCESS_CONF))) {
        c->uf = hmac_child.htaccess.pool ? htaccess_userfile(path, cmd->pool)
                                         : NULL;
        if (!c->uf)
            return apr_pstrcat(cmd->pool,
                               D_USERFILE ": cannot set up the "
                                          "index of '",
                               arg, "'", NULL);
    }
    else
        c->uf = apr_hash_get(hmac_conf.userfiles, path, APR_HASH_KEY_STRING);
    if (!c->uf) {
        c->uf = authn_hmac_userfile_make(path, cmd->pool);
        apr_hash_set(hmac_conf.userfiles, path, APR_HASH_KEY_STRING, c->uf);
    }
    /* A file that does not exist yet is scoped by its absolute path; at
     * request time it is a 500, as with mod_authn_file. */
    real = realpath(path, NULL);
    c->scope = real ? apr_pstrdup(cmd->pool, real) : path;
    c->scope_len = strlen(c->scope);
    free(real);
    return NULL;
}

static const char *set_dbmfile(cmd_parms *cmd, void *dc, const char *arg)
{
    hmac_dir_conf *c = dc;
    const char *path = ap_server_root_relative(cmd->pool, arg);
    const char *err = set_source(cmd, c, HMAC_SOURCE_DBM);

    if (err)
        return err;
    if (!path)
        return apr_pstrcat(cmd->pool, D_DBMFILE ": invalid path '", arg,
                           "' (a path to a DBM file, as htdbm writes it)",
                           NULL);
    c->dbm = authn_hmac_dbm_make(path, cmd->pool);
    c->scope = apr_pstrcat(cmd->pool, "dbm:", path, NULL);
    c->scope_len = strlen(c->scope);
    return NULL;
}

static const char *set_dbmtype(cmd_parms *cmd, void *dc, const char *arg)
{
    hmac_dir_conf *c = dc;
    const char *why = authn_hmac_dbm_type_check(arg, cmd->temp_pool);

    if (why)
        return apr_pstrcat(cmd->pool, D_DBMTYPE ": ", why, NULL);
    c->dbm_type = arg;
    return NULL;
}

static const char *set_dbdquery(cmd_parms *cmd, void *dc, const char *arg)
{
    static unsigned labels;
    hmac_dir_conf *c = dc;
    const char *err = set_source(cmd, c, HMAC_SOURCE_DBD);

    if (err)
        return err;
    if (!hmac_dbd_prepare && !hmac_dbd_find())
        return D_DBDQUERY ": mod_dbd is not loaded (LoadModule dbd_module, "
                          "or a2enmod dbd) and configured (DBDriver, "
                          "DBDParams)";
    if (!*arg)
        return D_DBDQUERY ": an empty query (an SQL query whose first "
                          "column is the user's password hash, with %s "
                          "where the user's name goes)";
    c->dbd_label = apr_psprintf(cmd->pool, "authn_hmac_%u", ++labels);
    hmac_dbd_prepare(cmd->server, arg, c->dbd_label);
    c->scope = apr_pstrcat(cmd->pool, "dbd:", arg, NULL);
    c->scope_len = strlen(c->scope);
    c->hashes = authn_hmac_source_make(cmd->pool);
    return NULL;
}

/* Another authn provider (an AuthnProviderAlias too), found as
 * mod_auth_basic finds its providers: when the directive is read. */
static const char *set_provider(cmd_parms *cmd, void *dc, const char *arg)
{
    hmac_dir_conf *c = dc;
    const authn_provider *p;
    const char *err = set_source(cmd, c, HMAC_SOURCE_PROVIDER);

    if (err)
        return err;
    if (!strcasecmp(arg, "hmac"))
        return D_PROVIDER ": hmac cannot wrap itself (name another authn "
                          "provider, such as ldap, dbd or an "
                          "AuthnProviderAlias)";
    p = ap_lookup_provider(AUTHN_PROVIDER_GROUP, arg, AUTHN_PROVIDER_VERSION);
    if (!p)
        return apr_psprintf(cmd->pool,
                            D_PROVIDER
                            ": no authn provider named '%s' (load "
                            "its module first, such as authnz_ldap for "
                            "ldap, or define its AuthnProviderAlias before "
                            "this line)",
                            arg);
    if (!p->check_password)
        return apr_psprintf(cmd->pool,
                            D_PROVIDER ": the authn provider '%s' cannot "
                                       "check a password (Basic auth)",
                            arg);
    c->wrapped = p;
    c->wrapped_name = apr_pstrdup(cmd->pool, arg);
    /* NB: the request adds where it is (see the provider). */
    c->scope = apr_pstrcat(cmd->pool, "provider:", arg, NULL);
    c->scope_len = strlen(c->scope);
    return NULL;
}

/* A per-directory duration: where it goes, its bounds, and what 0 means
 * (NULL: 0 is refused). */
typedef struct {
    apr_size_t value, set; /* offsets in hmac_dir_conf */
    const char *zero;
    uint64_t max;
} ttl_spec;

static ttl_spec ttl_spec_cache = {APR_OFFSETOF(hmac_dir_conf, ttl),
                                  APR_OFFSETOF(hmac_dir_conf, ttl_set),
                                  "caching", MAX_TTL};
static ttl_spec ttl_spec_negative = {
    APR_OFFSETOF(hmac_dir_conf, negative_ttl),
    APR_OFFSETOF(hmac_dir_conf, negative_ttl_set), "the negative cache",
    MAX_TTL};
static ttl_spec ttl_spec_max_age = {APR_OFFSETOF(hmac_dir_conf, max_age),
                                    APR_OFFSETOF(hmac_dir_conf, max_age_set),
                                    NULL, MAX_MAX_AGE};

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

/* One pepper file (prev: the second one, a rotation's previous pepper).
 * NB: a file that is missing or unreadable stops httpd (and apachectl -t),
 * naming it and what to do: never a random pepper in its place, which
 * would part a server from its farm and lose its cache at each start
 * (issue 37: the <IfFile> that the shipped authn_hmac.conf had did that
 * when a rotation's old file was removed). */
static const char *read_pepper(cmd_parms *cmd, const char *arg,
                               authn_hmac_secret_t **out, int prev)
{
    const char *path = ap_server_root_relative(cmd->pool, arg);
    const char *err =
        path ? authn_hmac_secret_read(out, path, AUTHN_HMAC_PEPPER_MIN,
                                      AUTHN_HMAC_SECRET_MAX, cmd->pool)
             : apr_pstrcat(cmd->pool, "invalid path '", arg, "'", NULL);
    const char *todo = "";
    struct stat st;

    if (!err)
        return NULL;
    if (path && lstat(path, &st) != 0 && errno == ENOENT)
        todo = prev ? apr_psprintf(cmd->pool,
                                   ": if the rotation is over, remove '%s' "
                                   "from " D_PEPPER " (its second path) and "
                                   "restart; else put the file back",
                                   path)
                    : apr_psprintf(cmd->pool,
                                   ": make one with `authn-hmac-pepper %s`, "
                                   "or copy the farm's there",
                                   path);
    return apr_psprintf(cmd->pool,
                        D_PEPPER ": %s%s (a file of %d to %d random bytes, "
                                 "mode 0600 or 0400, owned by root%s)",
                        prev ? "the previous pepper: " : "", err,
                        AUTHN_HMAC_PEPPER_MIN, AUTHN_HMAC_SECRET_MAX, todo);
}

/* AuthHMACPepperFile current [previous]: the current pepper makes every
 * entry and value; the previous one only checks them, during a rotation. */
static const char *set_pepper(cmd_parms *cmd, void *dc, const char *arg,
                              const char *prev)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    hmac_conf.pepper_prev = NULL;
    if ((err = read_pepper(cmd, arg, &hmac_conf.pepper, 0)) != NULL ||
        (prev &&
         (err = read_pepper(cmd, prev, &hmac_conf.pepper_prev, 1)) != NULL))
        return err;
    if (prev && hmac_conf.pepper && hmac_conf.pepper_prev &&
        hmac_conf.pepper->len == hmac_conf.pepper_prev->len &&
        CRYPTO_memcmp(hmac_conf.pepper->data, hmac_conf.pepper_prev->data,
                      hmac_conf.pepper->len) == 0)
        return apr_psprintf(cmd->pool,
                            D_PEPPER ": '%s' and '%s' hold the same pepper "
                                     "(the second file is the previous "
                                     "pepper, during a rotation: see "
                                     "docs/operations.md)",
                            arg, prev);
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
    hmac_conf.size = v;
    return NULL;
}

static const char *set_redis(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_redis_parse_server(arg, &hmac_conf.redis, cmd->pool);
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
    hmac_conf.redis_name = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

/* AuthHMACRedisAuthFile, and AuthHMACRedisSentinelAuthFile (info set). */
static const char *set_redis_auth(cmd_parms *cmd, void *dc, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *path = ap_server_root_relative(cmd->pool, arg);
    authn_hmac_secret_t **secret =
        cmd->info ? &hmac_conf.sentinel_secret : &hmac_conf.redis_secret;
    authn_hmac_redis_conf_t *conf =
        cmd->info ? &hmac_conf.sentinel.conn : &hmac_conf.redis;

    (void)dc;
    if (err)
        return err;
    /* NB: named in a refused AUTH, which looks the same from a Sentinel as
     * from the primary. */
    conf->auth_from = cmd->cmd->name;
    err = path ? authn_hmac_secret_read(secret, path, 1, AUTHN_HMAC_SECRET_MAX,
                                        cmd->pool)
               : apr_pstrcat(cmd->pool, "invalid path '", arg, "'", NULL);
    if (!err)
        err = authn_hmac_redis_parse_auth(*secret, conf);
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
    err = authn_hmac_sentinel_parse(arg, &hmac_conf.sentinel, cmd->pool);
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
    hmac_conf.sentinel.master = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

/* A server-wide integer directive: where it goes and what it accepts. */
typedef struct {
    int *field;
    uint64_t min, max;
    const char *accepts;
} int_spec;

static int_spec redis_timeout_spec = {&hmac_conf.redis.timeout_ms, 1,
                                      MAX_REDIS_TIMEOUT_MS,
                                      "milliseconds from 1 to 10000"};
static int_spec redis_db_spec = {&hmac_conf.redis.db, 0, 65535,
                                 "a database number from 0 to 65535"};
static int_spec max_verifications_spec = {
    &hmac_conf.max_verifications, 1, AUTHN_HMAC_MAX_CAP,
    "verifications at once in the server, from 1 to 64"};
static int_spec backlog_spec = {
    &hmac_conf.backlog, 0, AUTHN_HMAC_QUEUE_SLOTS - AUTHN_HMAC_MAX_CAP,
    "verifications that may wait for a turn, from 0 to 192"};

static int_spec max_failures_spec = {
    &hmac_conf.throttle.max_failures, 0, MAX_FAILURES,
    "distinct wrong passwords for one user from one client, from 1 to "
    "100000; 0 turns this limit off"};
static int_spec max_client_failures_spec = {
    &hmac_conf.throttle.max_client_failures, 0, MAX_FAILURES,
    "distinct wrong passwords from one client for all users, from 1 to "
    "100000; 0 turns this limit off"};

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

/* The throttle's window and ban time: seconds (s, m, h, d). */
static const char *set_throttle_time(cmd_parms *cmd, void *dc, const char *arg)
{
    apr_interval_time_t *field = cmd->info;
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    uint64_t v = 0;

    (void)dc;
    if (err)
        return err;
    err = authn_hmac_parse_seconds(arg, &v, cmd->pool);
    if (!err && v > MAX_THROTTLE_SECONDS)
        err = "too long";
    if (!err && v == 0)
        err = "too short";
    if (err)
        return apr_psprintf(cmd->pool,
                            "%s: '%s' is %s (seconds from 1 to %d, with an "
                            "optional unit s, m, h or d)",
                            cmd->cmd->name, arg, err, MAX_THROTTLE_SECONDS);
    *field = apr_time_from_sec((apr_time_t)v);
    return NULL;
}

static const char *set_server_status(cmd_parms *cmd, void *dc, int on)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    hmac_conf.server_status = on;
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
    hmac_conf.redis.prefix = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

static const char *set_tls(cmd_parms *cmd, void *dc, int on)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    hmac_conf.redis_tls = on;
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
        hmac_conf.tls.cert_file = path;
    else
        hmac_conf.tls.ca_file = path;
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
    hmac_conf.tls.server_name = apr_pstrdup(cmd->pool, arg);
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
    err = authn_hmac_secret_read(&hmac_conf.tls_key, path, 1,
                                 authn_hmac_redis_tls_key_max(), cmd->pool);
    if (err)
        return apr_psprintf(cmd->pool,
                            D_TLSKEY ": %s (a PEM private key, not encrypted, "
                                     "mode 0600 or 0400, owned by root)",
                            err);
    hmac_conf.tls.key = hmac_conf.tls_key;
    return NULL;
}

/* ------------------------------------------------------ the command table */

/* NB: httpd answers a directive given more than one word with its usage
 * text alone ("AuthHMACCacheTTL 5 min"): it says what is accepted. */
#define DURATION                                                               \
    "a number of seconds, or one with a unit s, m, h or d and no space "       \
    "(90, 5m, 8h)"

const command_rec hmac_cmds[] = {
    AP_INIT_TAKE1(D_USERFILE, set_userfile, NULL,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "the htpasswd file to check credentials against"),
    AP_INIT_TAKE1(D_DBMFILE, set_dbmfile, NULL,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "the DBM file to check credentials against (as htdbm "
                  "writes it)"),
    AP_INIT_TAKE1(D_DBMTYPE, set_dbmtype, NULL,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "the type of " D_DBMFILE ": default, db, gdbm, ndbm or "
                  "sdbm (as AuthDBMType)"),
    AP_INIT_TAKE1(D_DBDQUERY, set_dbdquery, NULL, RSRC_CONF | ACCESS_CONF,
                  "an SQL query (through mod_dbd) whose first column is the "
                  "user's password hash, %s the user's name (as "
                  "AuthDBDUserPWQuery)"),
    AP_INIT_TAKE1(D_PROVIDER, set_provider, NULL,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "another authn provider to check credentials with, behind "
                  "the cache (ldap, dbd, an AuthnProviderAlias...)"),
    AP_INIT_TAKE1(D_TTL, set_ttl, &ttl_spec_cache,
                  RSRC_CONF | ACCESS_CONF | OR_AUTHCFG,
                  "idle timeout of a verified credential: how long it stays "
                  "cached after its last use: " DURATION " (default 300)"),
    AP_INIT_TAKE1(D_MAXAGE, set_ttl, &ttl_spec_max_age, RSRC_CONF | ACCESS_CONF,
                  "how long a verified credential may stay cached however "
                  "often it is used, from its verification: " DURATION
                  " (default 8h, at most 30d)"),
    AP_INIT_TAKE1(D_NEGTTL, set_ttl, &ttl_spec_negative,
                  RSRC_CONF | ACCESS_CONF,
                  "how long a refused credential is refused again without "
                  "bcrypt: " DURATION " (default 30)"),
    AP_INIT_FLAG(D_HIDE, ap_set_flag_slot,
                 (void *)APR_OFFSETOF(hmac_dir_conf, hide_unknown),
                 RSRC_CONF | ACCESS_CONF,
                 "On (default): an unknown or locked user costs what a "
                 "known user's wrong password does, so that timing does not "
                 "tell names"),
    AP_INIT_TAKE12(
        D_PEPPER, set_pepper, NULL, RSRC_CONF,
        "file holding the secret pepper (default: random, kept until httpd "
        "stops), and optionally the previous pepper's file (during a "
        "rotation: it only checks)"),
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
                  "server (default: half the cores)"),
    AP_INIT_TAKE1(D_BACKLOG, set_global_int, &backlog_spec, RSRC_CONF,
                  "verifications that may wait for a turn; beyond, 503 "
                  "(default: 8 per " D_MAXVER ")"),
    AP_INIT_TAKE1(D_MAXFAIL, set_global_int, &max_failures_spec, RSRC_CONF,
                  "distinct wrong passwords for one user from one client "
                  "within " D_FWINDOW " before a ban (default 10; 0: off)"),
    AP_INIT_TAKE1(D_MAXCFAIL, set_global_int, &max_client_failures_spec,
                  RSRC_CONF,
                  "distinct wrong passwords from one client for all users "
                  "within " D_FWINDOW " before a ban (default 30; 0: off)"),
    AP_INIT_TAKE1(D_FWINDOW, set_throttle_time, &hmac_conf.throttle.window,
                  RSRC_CONF,
                  "the window in which wrong passwords are counted: " DURATION
                  " (default 10m)"),
    AP_INIT_TAKE1(D_BANTIME, set_throttle_time, &hmac_conf.throttle.ban,
                  RSRC_CONF,
                  "how long a client that reached a limit is refused "
                  "without a verification: " DURATION " (default 10m)"),
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

/* ----------------------------------------------- checks across directives */

/* What the Sentinel directives need of each other and of the rest, or
 * NULL; then Redis is the primary they name. */
static const char *check_sentinel(apr_pool_t *p)
{
    if (!hmac_conf.sentinel.n && !hmac_conf.sentinel.master &&
        !hmac_conf.sentinel_secret)
        return NULL;
    if (hmac_conf.sentinel.n && hmac_conf.redis_name)
        return D_SENT " and " D_REDIS " exclude each other: the Sentinels "
                      "name the primary (remove one of them)";
    if (!hmac_conf.sentinel.n)
        return hmac_conf.sentinel.master ? D_SMASTER " needs " D_SENT
                                         : D_SAUTH " needs " D_SENT;
    if (!hmac_conf.sentinel.master)
        return D_SENT " needs " D_SMASTER
                      " (the name the Sentinels monitor the primary by)";
    hmac_conf.sentinel.conn.timeout_ms = hmac_conf.redis.timeout_ms;
    hmac_conf.sentinel.conn.prefix = hmac_conf.redis.prefix;
    hmac_conf.redis_name = apr_psprintf(
        p, "'%s' (the primary the Sentinels name)", hmac_conf.sentinel.master);
    return NULL;
}

/* The TLS contexts (the primary's, and the Sentinels' if any), or what is
 * wrong with the TLS directives' files. The key goes either way. */
static const char *make_tls_contexts(apr_pool_t *pconf)
{
    static const char *const part_name[] = {
        [AUTHN_HMAC_TLS_OTHER] = D_TLS,  [AUTHN_HMAC_TLS_NAME] = D_TLSNAME,
        [AUTHN_HMAC_TLS_CA] = D_TLSCA,   [AUTHN_HMAC_TLS_CERT] = D_TLSCERT,
        [AUTHN_HMAC_TLS_KEY] = D_TLSKEY,
    };
    authn_hmac_tls_part part = AUTHN_HMAC_TLS_OTHER;
    const char *err = authn_hmac_redis_tls_create(
        &hmac_conf.redis.tls, &hmac_conf.tls,
        hmac_conf.sentinel.n ? hmac_conf.sentinel.host[0]
                             : hmac_conf.redis.host,
        &part, pconf);

    /* NB: with Sentinel, each connection names its peer: a Sentinel
     * by its host, the primary by AuthHMACRedisTLSServerName or the
     * host the Sentinels name. The Sentinels get a context of their
     * own, the same but for that name, so that their sessions and the
     * primary's do not replace each other. */
    if (!err && hmac_conf.sentinel.n) {
        authn_hmac_redis_tls_conf_t tc = hmac_conf.tls;

        tc.server_name = NULL;
        hmac_conf.sentinel.primary_name = hmac_conf.tls.server_name;
        err = authn_hmac_redis_tls_create(&hmac_conf.sentinel.conn.tls, &tc,
                                          hmac_conf.sentinel.host[0], &part,
                                          pconf);
    }
    if (err)
        err = apr_pstrcat(pconf, part_name[part], ": ", err, NULL);
    /* NB: the context holds the key now, in OpenSSL's secure heap. */
    authn_hmac_secret_wipe(hmac_conf.tls_key);
    hmac_conf.tls_key = NULL;
    hmac_conf.tls.key = NULL;
    return err;
}

/* The TLS context, made once per reading of the configuration (in the
 * parent; the children share it), or what is wrong, logged. */
static int check_tls(server_rec *s, apr_pool_t *pconf)
{
    const char *set = hmac_conf.tls.ca_file       ? D_TLSCA
                      : hmac_conf.tls.server_name ? D_TLSNAME
                      : hmac_conf.tls.cert_file   ? D_TLSCERT
                      : hmac_conf.tls_key         ? D_TLSKEY
                                                  : NULL;
    const char *err;

    if (!hmac_conf.redis_tls && set)
        err = apr_pstrcat(pconf, set, " needs " D_TLS " on", NULL);
    else if (!hmac_conf.redis_tls)
        return OK;
    else if (!hmac_conf.redis_name)
        err = D_TLS " on needs " D_REDIS " or " D_SENT;
    else if (hmac_conf.redis.socket)
        err = D_TLS " on needs a host:port in " D_REDIS
                    ", not a unix socket (which is local: no TLS)";
    else if (!hmac_conf.tls.cert_file != !hmac_conf.tls_key)
        err = hmac_conf.tls_key ? D_TLSKEY " needs " D_TLSCERT
                                : D_TLSCERT " needs " D_TLSKEY;
    /* NB: a Sentinel names the primary, and the primary gets AUTH with
     * the Redis password once its certificate verifies for the name the
     * Sentinel gave. With the system store any host with a public
     * certificate (for a name, or now for an address) would verify: a
     * rogue Sentinel would get the password. Your own CA, or one name
     * every primary must carry, keeps it among your servers. */
    else if (hmac_conf.sentinel.n && !hmac_conf.tls.ca_file &&
             !hmac_conf.tls.server_name)
        err = D_TLS " on with " D_SENT " needs " D_TLSCA " or " D_TLSNAME
                    " (with the system store, a Sentinel could name any host "
                    "with a public certificate, and it would get the Redis "
                    "password)";
    else
        err = make_tls_contexts(pconf);
    if (!err)
        return OK;
    ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s, "AHMAC0021: %s",
                 err);
    return HTTP_INTERNAL_SERVER_ERROR;
}

/* Checks that span directives, so that `apachectl -t` sees them. */
int hmac_check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                      server_rec *s)
{
    const char *err = check_sentinel(pconf);

    (void)plog;
    if (err) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s,
                     "AHMAC0022: %s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    if (hmac_conf.redis_name && !hmac_conf.pepper) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s,
                     "AHMAC0008: %s needs " D_PEPPER ": the servers sharing a "
                     "Redis must share one pepper (none is set; a line "
                     "inside <IfFile>, as an older authn_hmac.conf has it, "
                     "is skipped when the file is missing: make it with "
                     "authn-hmac-pepper, or copy the farm's)",
                     hmac_conf.sentinel.n ? D_SENT : D_REDIS);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    /* NB: the warnings go to the error log once per start (post_config);
     * `apachectl -t` prints them here. */
    if (hmac_check_userfiles(
            ptemp, s, ap_state_query(AP_SQ_RUN_MODE) == AP_SQ_RM_CONFIG_TEST))
        return HTTP_INTERNAL_SERVER_ERROR;
    return check_tls(s, pconf);
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
    const ap_directive_t *max_age;      /* AuthHMACCacheMaxAge here or above */
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

/* Whether d sets a section's source of users. */
static int is_source(const ap_directive_t *d)
{
    return is(d, D_USERFILE) || is(d, D_DBMFILE) || is(d, D_DBDQUERY) ||
           is(d, D_PROVIDER);
}

/* Whether the children's User (uid, gid, its groups) may do what mask
 * asks (S_IRUSR for read, S_IXUSR for search, as the owner's bits) on a
 * file of sb. */
static int may(const struct stat *sb, uid_t uid, const gid_t *groups, int n,
               mode_t mask)
{
    int i;

    if (uid == 0)
        return 1;
    if (sb->st_uid == uid)
        return (sb->st_mode & mask) != 0;
    for (i = 0; i < n; i++)
        if (sb->st_gid == groups[i])
            return (sb->st_mode & (mask >> 3)) != 0;
    return (sb->st_mode & (mask >> 6)) != 0;
}

/* Logs an AuthHMACUserFile that the children cannot read now: each login
 * it is to answer gets a 500 until they can (a misspelled path passed
 * `apachectl -t` silently). A warning, not a refusal: a file made after
 * the start works from then on, as with mod_authn_file. NB: nothing is
 * opened (a FIFO there would block the start, a device may act on an
 * open: found by review), and the check is for the children's User, not
 * for root, which reads what they cannot. */
static void check_opens(const check_state *st, const ap_directive_t *d)
{
    const char *args = d->args;
    const char *word = ap_getword_conf(st->p, &args);
    char *path = *word ? ap_server_root_relative(st->p, word) : NULL;
    uid_t uid = geteuid() == 0 ? ap_unixd_config.user_id : geteuid();
    gid_t gid = geteuid() == 0 ? ap_unixd_config.group_id : getegid();
    gid_t groups[64];
    int i, n = 64, err = 0;
    const char *why = NULL, *name = ap_unixd_config.user_name;
    struct passwd *pw;
    struct stat sb;
    char *slash, *real, *walk;

    if (!path)
        return;
    /* NB: "User #1000" names no account: its name is the uid's. */
    if (name && *name == '#' && (pw = getpwuid(uid)) != NULL)
        name = pw->pw_name;
    for (i = 0; i < 64; i++)
        groups[i] = gid; /* NB: what getgrouplist may leave is the user's */
    if (geteuid() == 0 && name && getgrouplist(name, gid, groups, &n) < 0)
        n = 64; /* the first 64 */
    else if (geteuid() != 0) {
        int k = getgroups(63, groups + 1);

        n = 1 + (k > 0 ? k : 0);
    }
    if (stat(path, &sb) != 0)
        err = errno;
    else if (!S_ISREG(sb.st_mode))
        why = " as a regular file";
    else if (!may(&sb, uid, groups, n, S_IRUSR))
        why = apr_psprintf(st->p,
                           " by the children's User (mode %04o, owner "
                           "uid %ld)",
                           (unsigned)(sb.st_mode & 07777), (long)sb.st_uid);
    /* The directories on the way, each searchable by them: those of the
     * file itself, where links lead (a review of this check: a link into
     * /root passed). */
    real = realpath(path, NULL);
    walk = apr_pstrdup(st->p, real ? real : path);
    free(real);
    for (slash = strchr(walk + 1, '/'); !err && !why && slash;
         slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (stat(walk, &sb) == 0 && !may(&sb, uid, groups, n, S_IXUSR))
            why = apr_psprintf(st->p,
                               " by the children's User (%s is mode %04o, "
                               "owner uid %ld)",
                               walk, (unsigned)(sb.st_mode & 07777),
                               (long)sb.st_uid);
        *slash = '/';
    }
    if (!err && !why)
        return;
    ap_log_error(APLOG_MARK, APLOG_WARNING, err ? APR_FROM_OS_ERROR(err) : 0,
                 st->s,
                 "AHMAC0031: " D_USERFILE " %s (%s:%d) cannot be opened%s: "
                 "each login it is to answer gets a 500 until it can",
                 path, d->filename, d->line_num, why ? why : "");
}

/* Notes every AuthHMACUserFile (with its virtual host) and whether
 * .htaccess may set one; with warn, logs those that cannot be opened. */
static void survey(check_state *st, const ap_directive_t *d,
                   const ap_directive_t *vhost)
{
    for (; d; d = d->next) {
        if (is(d, D_USERFILE) && st->warn)
            check_opens(st, d);
        if (is_source(d))
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

/* Notes in sc what the directives of one level (first: its first
 * directive) set, and returns its AuthBasicProvider naming hmac, or
 * NULL; and its AuthHMACProvider ldap in *ldap, or NULL. */
static const ap_directive_t *scan_level(const check_state *st,
                                        const ap_directive_t *first,
                                        check_scope *sc,
                                        const ap_directive_t **ldap)
{
    const ap_directive_t *d, *provider = NULL;

    *ldap = NULL;
    for (d = first; d; d = d->next) {
        if (is_source(d))
            sc->userfile = 1;
        if (is(d, D_PROVIDER) && has_word(d->args, "ldap", st->p))
            *ldap = d;
        else if (is(d, D_MAXAGE))
            sc->max_age = d;
        else if (is(d, "AuthUserFile"))
            sc->authuserfile = d;
        else if (is(d, "AuthType"))
            sc->basic = has_word(d->args, "Basic", st->p);
        else if (is(d, "AuthBasicProvider") && has_word(d->args, "hmac", st->p))
            provider = d;
    }
    return provider;
}

/* Logs a provider of sc's with no AuthHMACUserFile there nor above: an
 * error if none could apply (then the start is refused), else a warning
 * (with warn). */
static void report_provider(check_state *st, const check_scope *sc,
                            const ap_directive_t *provider)
{
    int file = file_first(provider->args, st->p);
    int none = !could_have_userfile(st, sc);
    const char *hint =
        sc->authuserfile && !file
            ? apr_psprintf(st->p,
                           "; AuthUserFile is set; did you mean " D_USERFILE
                           "? (AuthUserFile at %s:%d)",
                           sc->authuserfile->filename,
                           sc->authuserfile->line_num)
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

/* mod_ldap's caches of binds (LDAPCacheTTL) and of compares
 * (LDAPOpCacheTTL), in seconds, 0 where off. */
typedef struct {
    long bind, compare;
} ldap_caches;

static ldap_caches ldap_caches_of(server_rec *s)
{
    ldap_caches c = {0, 0};
#if APR_HAS_LDAP /* util_ldap.h has its state only then, as has mod_ldap */
    module *m = ap_find_linked_module("util_ldap.c");
    const util_ldap_state_t *ls =
        m ? ap_get_module_config(s->module_config, m) : NULL;

    if (ls && ls->search_cache_size > 0 && ls->search_cache_ttl > 0)
        c.bind = ls->search_cache_ttl / 1000000;
    if (ls && ls->compare_cache_size > 0 && ls->compare_cache_ttl > 0)
        c.compare = ls->compare_cache_ttl / 1000000;
#else
    (void)s;
#endif
    return c;
}

/* Logs an AuthHMACProvider ldap whose section's max age mod_ldap's own
 * caches outlast: they answer a miss of the module's, which comes at the
 * max age at the latest, from what they learned up to their TTL before. */
static void report_ldap(check_state *st, const check_scope *sc,
                        const ap_directive_t *wrap)
{
    ldap_caches c = ldap_caches_of(st->s);
    long longest = c.bind > c.compare ? c.bind : c.compare;
    uint64_t age = WRAPPED_MAX_AGE;
    const char *args = sc->max_age ? sc->max_age->args : NULL;

    if (args &&
        authn_hmac_parse_seconds(ap_getword_conf(st->p, &args), &age, st->p))
        return; /* refused already */
    if ((uint64_t)longest <= age)
        return;
    ap_log_error(
        APLOG_MARK, APLOG_WARNING, 0, st->s,
        "AHMAC0040: " D_PROVIDER " ldap in %s (%s:%d): mod_ldap's "
        "own caches (LDAPCacheTTL %ld s, LDAPOpCacheTTL %ld s; 0: "
        "off) outlast the section's " D_MAXAGE " (%" APR_UINT64_T_FMT
        " s): a user removed from the directory, or a password "
        "changed there, may still be let in for up to %" APR_UINT64_T_FMT
        " s; set both to at most %" APR_UINT64_T_FMT
        ", or to 0 (the module caches already)",
        section_name(sc->section, st->p), wrap->filename, wrap->line_num,
        c.bind, c.compare, age, age + (uint64_t)longest, age);
}

/* Checks the sections of one level (first: its first directive), then
 * the levels below. */
static void check_level(check_state *st, const ap_directive_t *first,
                        check_scope *sc)
{
    const ap_directive_t *d, *ldap,
        *provider = scan_level(st, first, sc, &ldap);

    if (provider && !sc->userfile)
        report_provider(st, sc, provider);
    if (ldap && st->warn)
        report_ldap(st, sc, ldap);
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
int hmac_check_userfiles(apr_pool_t *ptemp, server_rec *s, int warn)
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
