/*
 * mod_authn_hmac_config.c: the module's configuration: the records and
 * their merge, each directive's handler and the command table. Each
 * handler checks its own directive, through the core's parsers (src/);
 * the checks that span directives are in mod_authn_hmac_check.c, the
 * walk of the sections in mod_authn_hmac_walk.c, and a file named in
 * .htaccess gets its index from the child's registry (mod_authn_hmac.c).
 */
#include "httpd.h"
#include "http_config.h"
#include "ap_provider.h"

#include "apr_lib.h"
#include "apr_strings.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/secret.h"
#include "core/util.h"
#include "redis/redis.h"
#include "redis/sentinel.h"
#include "request/dbm.h"
#include "request/source.h"
#include "shm/queue.h"
#include "sources/htpasswd.h"

#include "mod_authn_hmac.h"
#include "mod_authn_hmac_child.h"
#include "mod_authn_hmac_config.h"
#include "mod_authn_hmac_provider.h"

#define DEFAULT_SIZE         ((uint64_t)4 << 20)
#define MIN_SIZE             ((uint64_t)16 << 10)
#define MAX_SIZE             ((uint64_t)1 << 30)
#define DEFAULT_TTL          300
#define DEFAULT_NEGATIVE_TTL 30
#define MAX_TTL              604800  /* 7 days */
#define DEFAULT_MAX_AGE      28800   /* 8 hours */
#define MAX_MAX_AGE          2592000 /* 30 days */
#define MAX_RECHECK          86400   /* a day */
/* A source's outage serves for an hour the credentials it confirmed in the
 * hour before: a directory's restart, upgrade or failover logs no one out,
 * and a leaver whose removal an outage hid keeps access an hour at most. */
#define DEFAULT_OFFLINE_GRACE 3600
#define MAX_OFFLINE_GRACE     2592000 /* 30 days */

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
    c->offline_grace = apr_time_from_sec(DEFAULT_OFFLINE_GRACE);
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
    c->recheck_set = add->recheck_set || base->recheck_set;
    c->recheck = add->recheck_set ? add->recheck : base->recheck;
    c->offline_grace_set = add->offline_grace_set || base->offline_grace_set;
    c->offline_grace =
        add->offline_grace_set ? add->offline_grace : base->offline_grace;
    c->hide_unknown =
        add->hide_unknown >= 0 ? add->hide_unknown : base->hide_unknown;
    return c;
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
        c->uf = hmac_htaccess_userfile(path, cmd->pool);
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
static ttl_spec ttl_spec_recheck = {APR_OFFSETOF(hmac_dir_conf, recheck),
                                    APR_OFFSETOF(hmac_dir_conf, recheck_set),
                                    "waiting between asks", MAX_RECHECK};
static ttl_spec ttl_spec_grace = {
    APR_OFFSETOF(hmac_dir_conf, offline_grace),
    APR_OFFSETOF(hmac_dir_conf, offline_grace_set), "serving through outages",
    MAX_OFFLINE_GRACE};

/* A directive's value refused: err says what it is, accepts what would
 * do. */
static const char *refused(cmd_parms *cmd, const char *arg, const char *err,
                           const char *accepts)
{
    return apr_psprintf(cmd->pool, "%s: '%s' is %s (%s)", cmd->cmd->name, arg,
                        err, accepts);
}

/* arg as seconds (s, m, h, d) in *v, at most max, and at least 1 unless
 * zero says what 0 turns off: NULL, or the directive's refusal. */
static const char *parse_duration(cmd_parms *cmd, const char *arg, uint64_t max,
                                  const char *zero, uint64_t *v)
{
    const char *err = authn_hmac_parse_seconds(arg, v, cmd->pool);

    if (!err && *v > max)
        err = "too long";
    if (!err && *v == 0 && !zero)
        err = "too short";
    if (!err)
        return NULL;
    return refused(cmd, arg, err,
                   apr_psprintf(cmd->pool,
                                "seconds from %d to %" APR_UINT64_T_FMT
                                ", with an optional unit s, m, h or d%s",
                                zero ? 0 : 1, max,
                                zero ? apr_pstrcat(cmd->pool, "; 0 turns ",
                                                   zero, " off", NULL)
                                     : ""));
}

static const char *set_ttl(cmd_parms *cmd, void *dc, const char *arg)
{
    const ttl_spec *spec = cmd->info;
    uint64_t v;
    const char *err = parse_duration(cmd, arg, spec->max, spec->zero, &v);

    if (err)
        return err;
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
        return refused(cmd, arg, err,
                       "bytes with an optional unit K, M or G, from 16K to "
                       "1G; 0 turns the shared-memory cache off");
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
        return refused(cmd, arg, err,
                       "the name the Sentinels monitor: letters, digits and "
                       ".-_, up to 64");
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
        return refused(cmd, arg, err, spec->accepts);
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
    err = parse_duration(cmd, arg, MAX_THROTTLE_SECONDS, NULL, &v);
    if (err)
        return err;
    *field = apr_time_from_sec((apr_time_t)v);
    return NULL;
}

/* A server-wide flag: AuthHMACServerStatus, AuthHMACRedisTLS (info: its
 * field). */
static const char *set_global_flag(cmd_parms *cmd, void *dc, int on)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dc;
    if (err)
        return err;
    *(int *)cmd->info = on;
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
        return refused(cmd, arg, "not valid",
                       "up to 64 printable characters, no spaces");
    hmac_conf.redis.prefix = apr_pstrdup(cmd->pool, arg);
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
        return refused(cmd, arg, "not valid",
                       "the host name or IP address the Redis server's "
                       "certificate names");
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
    AP_INIT_TAKE1(D_RECHECK, set_ttl, &ttl_spec_recheck,
                  RSRC_CONF | ACCESS_CONF,
                  "how often a grant is confirmed with its source (SQL, a "
                  "wrapped provider) for the whole farm: " DURATION
                  " (default 1 for SQL, 60 for a wrapped provider)"),
    AP_INIT_TAKE1(D_GRACE, set_ttl, &ttl_spec_grace, RSRC_CONF | ACCESS_CONF,
                  "while the source fails, how long credentials it confirmed "
                  "are still served: " DURATION " (default 1h)"),
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
    AP_INIT_FLAG(D_TLS, set_global_flag, &hmac_conf.redis_tls, RSRC_CONF,
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
    AP_INIT_FLAG(D_SSTATUS, set_global_flag, &hmac_conf.server_status,
                 RSRC_CONF,
                 "On: mod_status's server-status shows the counters too "
                 "(default Off: they tell unknown names from wrong passwords "
                 "to whoever may read it)"),
    {NULL, {NULL}, NULL, 0, RAW_ARGS, NULL}};
