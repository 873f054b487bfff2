/*
 * mod_authn_hmac.c: httpd glue for the "hmac" authn provider.
 *
 * A credential is checked against the htpasswd file once (bcrypt, apr1,
 * SHA1 or crypt, through apr_password_validate); then a peppered HMAC of it
 * is kept in shared memory, and later requests skip the slow hash. The core
 * (src/) does the work. This file holds the module record, its hooks and
 * its life: the configuration's defaults, the shared segment kept across
 * restarts, the pepper, the user files' shared index, what each child
 * sets up, and each child's registry of the files named in .htaccess. The
 * directives are in mod_authn_hmac_config.c, their checks in
 * mod_authn_hmac_check.c and mod_authn_hmac_walk.c, the provider in
 * mod_authn_hmac_provider.c, the status in mod_authn_hmac_status.c (the
 * map is in mod_authn_hmac.h).
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
#include "unixd.h"

#include "apr_md5.h"
#include "apr_shm.h"
#include "apr_strings.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <bsd/string.h>

#include "core/cred.h"
#include "request/engine.h"
#include "sources/htpasswd.h"
#include "redis/redis.h"
#include "core/secret.h"
#include "redis/sentinel.h"
#include "shm/share.h"
#include "request/annex.h"
#include "shm/table.h"

#include "mod_authn_hmac.h"
#include "mod_authn_hmac_check.h"
#include "mod_authn_hmac_child.h"
#include "mod_authn_hmac_config.h"
#include "mod_authn_hmac_provider.h"
#include "mod_authn_hmac_status.h"
#include "mod_authn_hmac_walk.h"

#define MUTEX_TYPE         "authn-hmac-shm"
#define MAX_HTACCESS_FILES 256 /* per process */
/* NB: an index takes up to ~15 times its file's size (short lines); a
 * file named only in .htaccess is a tenant's choice, so these bound what
 * a child holds for them (and what one request reads beyond the budget). */
#define HTACCESS_MAX_BYTES ((apr_off_t)1 << 20)
#define HTACCESS_BUDGET    ((uint64_t)16 << 20) /* per process */

hmac_child_t hmac_child;

static int pre_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    (void)plog;
    (void)ptemp;
    memset(&hmac_child, 0, sizeof(hmac_child));
    hmac_conf_reset(pconf);
    return ap_mutex_register(pconf, MUTEX_TYPE, NULL, APR_LOCK_DEFAULT, 0);
}

/* ----------------------------------------------------- the shared segment */

/* What outlives a restart, graceful or not, in the process pool: the
 * shared segment, its writers' mutex and a random pepper, so that the cache
 * stays warm (Debian's logrotate restarts httpd gracefully every night). A
 * changed pepper or AuthHMACCacheSize starts a fresh segment; a full stop
 * ends it all with the process. */
/* NB: a new layout of retained_t needs a new key: the old generation's
 * data is read by the new module after an upgrade and a restart. */
#define RETAINED "authn_hmac_retained/2"

typedef struct {
    apr_shm_t *shm;
    apr_size_t size;
    apr_global_mutex_t *mutex;
    authn_hmac_secret_t *random_pepper; /* when there is no pepper file */
    /* Keys the digest of the Redis settings: random, kept out of core
     * dumps, the same for the whole run (a pepper rotation is no change
     * of the Redis settings). */
    authn_hmac_secret_t *settings_key;
    unsigned char fingerprint[AUTHN_HMAC_KEY_LEN];    /* the segment's pepper */
    unsigned char redis_settings[AUTHN_HMAC_KEY_LEN]; /* the last start's */
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

/* A fresh segment for the pepper of fingerprint fp, in place of the one
 * kept, if any; hmac_conf.table stays NULL if it cannot be made. */
static apr_status_t new_segment(retained_t *rd, apr_size_t size,
                                const unsigned char *fp, apr_pool_t *pglobal,
                                apr_pool_t *pconf)
{
    apr_status_t rv;

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
        memcpy(rd->fingerprint, fp, sizeof(rd->fingerprint));
        hmac_conf.table = authn_hmac_table_attach(apr_shm_baseaddr_get(rd->shm),
                                                  hmac_conf.mutex, pconf);
    }
    return rv;
}

/* The segment this generation uses: the one kept from the last, if it was
 * made for the same pepper and size, else a fresh one. */
static int attach_segment(retained_t *rd, apr_size_t size, server_rec *s,
                          apr_pool_t *pconf)
{
    apr_pool_t *pglobal = s->process->pool;
    unsigned char fp[AUTHN_HMAC_KEY_LEN], fp_prev[AUTHN_HMAC_KEY_LEN] = {0};
    apr_status_t rv;

    if (!rd->mutex) {
        rv = ap_global_mutex_create(&rd->mutex, NULL, MUTEX_TYPE, NULL, s,
                                    pglobal, 0);
        if (rv != APR_SUCCESS)
            return HTTP_INTERNAL_SERVER_ERROR; /* httpd has logged why */
    }
    hmac_conf.mutex = rd->mutex;
    hmac_conf.table = NULL;
    authn_hmac_subkey(hmac_conf.pepper, "authn_hmac v2 fingerprint", fp);
    if (hmac_conf.pepper_prev)
        authn_hmac_subkey(hmac_conf.pepper_prev, "authn_hmac v2 fingerprint",
                          fp_prev);
    /* NB: a kept segment of another layout (the module was upgraded) does
     * not attach: it is replaced like one of another pepper or size. One
     * made under what is now the previous pepper is kept (a rotation's
     * flip): its entries are found under that pepper, and stored again
     * under the current one. */
    if (rd->shm && rd->size == size &&
        (memcmp(rd->fingerprint, fp, sizeof(fp)) == 0 ||
         (hmac_conf.pepper_prev &&
          memcmp(rd->fingerprint, fp_prev, sizeof(fp_prev)) == 0)))
        hmac_conf.table = authn_hmac_table_attach(apr_shm_baseaddr_get(rd->shm),
                                                  hmac_conf.mutex, pconf);
    explicit_bzero(fp_prev, sizeof(fp_prev));
    if (hmac_conf.table) {
        memcpy(rd->fingerprint, fp, sizeof(fp));
        explicit_bzero(fp, sizeof(fp));
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s,
                     "AHMAC0010: shared-memory cache kept across the restart");
        return OK;
    }
    rv = new_segment(rd, size, fp, pglobal, pconf);
    explicit_bzero(fp, sizeof(fp));
    if (!hmac_conf.table) {
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

/* ------------------------------------------------------------ post_config */

/* The pepper of this generation: the file's, else the random one kept
 * from an earlier start, else a new random one. */
static int choose_pepper(retained_t *rd, server_rec *s)
{
    apr_status_t rv;

    if (!hmac_conf.pepper) {
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
            /* NB: notice, which httpd logs whatever LogLevel: the one
             * trace of a random pepper, said once per pepper (a restart
             * keeps it). */
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                         "AHMAC0014: no " D_PEPPER " set; using a random "
                         "pepper until httpd stops (the cache starts empty, "
                         "and is lost at each stop; servers sharing a Redis "
                         "need a pepper file: authn-hmac-pepper)");
        }
        hmac_conf.pepper = rd->random_pepper;
        hmac_conf.pepper_random = 1;
    }
    else if (rd->random_pepper) {
        /* A pepper file now: the random one of earlier starts goes. */
        authn_hmac_secret_wipe(rd->random_pepper);
    }
    return OK;
}

/* What goes wrong with sharing a file's index, in a child. */
static void share_warn(void *baton, int level, const char *msg)
{
    ap_log_error(APLOG_MARK, level, 0, (server_rec *)baton, "AHMAC0026: %s",
                 msg);
}

/* One index per server for each file of the main configuration: the
 * versions in a directory of the runtime directory, given to the
 * children's user. Without it each child keeps its own. */
static void share_userfiles(server_rec *s, apr_pool_t *pconf)
{
    unsigned n = apr_hash_count(hmac_conf.userfiles), i = 0;
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
    for (hi = apr_hash_first(pconf, hmac_conf.userfiles); hi;
         hi = apr_hash_next(hi)) {
        apr_finfo_t f;

        authn_hmac_userfile_share(apr_hash_this_val(hi), sh, i++, hmac_conf.mac,
                                  hmac_conf.table, share_warn, s);
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

/* AuthHMACMaxVerifications and AuthHMACVerifyBacklog where they are not
 * set: half the cores the server may use (at least one), and 8 waiting per
 * verification.
 * Verifications run at the requests' own priority, so the cap is what
 * leaves the other half of the cores to the pages while passwords flood
 * in (libuv caps its slow work at half its pool too). */
static void default_verifications(void)
{
    if (hmac_conf.max_verifications == 0) {
        /* NB: the cores this server may run on (a cpuset, taskset), not
         * all of the machine's. */
        cpu_set_t set;
        long n = sched_getaffinity(0, sizeof(set), &set) == 0
                     ? CPU_COUNT(&set) / 2
                     : sysconf(_SC_NPROCESSORS_ONLN) / 2;

        if (n < 1)
            n = 1;
        else if (n > AUTHN_HMAC_MAX_CAP)
            n = AUTHN_HMAC_MAX_CAP;
        hmac_conf.max_verifications = (int)n;
    }
    if (hmac_conf.backlog < 0) {
        hmac_conf.backlog = 8 * hmac_conf.max_verifications;
        if (hmac_conf.backlog > AUTHN_HMAC_QUEUE_SLOTS - AUTHN_HMAC_MAX_CAP)
            hmac_conf.backlog = AUTHN_HMAC_QUEUE_SLOTS - AUTHN_HMAC_MAX_CAP;
    }
}

/* A digest of every Redis and Sentinel setting (the passwords as the
 * HKDF's input, never copied), and when the TLS files last changed, keyed
 * with key (the run's, out of core dumps). NB: it is kept in the parent's
 * ordinary memory, which every child's core dump holds: unkeyed, it would
 * let a weak Redis password be guessed offline (found by review). */
static void redis_settings(apr_pool_t *p, const authn_hmac_secret_t *key,
                           unsigned char out[AUTHN_HMAC_KEY_LEN])
{
    const authn_hmac_redis_conf_t *r = &hmac_conf.redis;
    const authn_hmac_sentinel_conf_t *sc = &hmac_conf.sentinel;
    const char *files[2] = {hmac_conf.tls.ca_file, hmac_conf.tls.cert_file};
    const char *text =
        apr_psprintf(p, "%s|%s|%d|%s|%d|%s|%d|%s|%d|%s|%s|%s|%s|%d|%s|%s",
                     hmac_conf.redis_name, r->host, r->port, r->socket, r->db,
                     r->prefix, r->timeout_ms, r->user, hmac_conf.redis_tls,
                     files[0], files[1], hmac_conf.tls.server_name, sc->master,
                     sc->n, sc->conn.user, sc->primary_name);
    int i;

    for (i = 0; i < sc->n; i++)
        text = apr_psprintf(p, "%s|%s:%d", text, sc->host[i], sc->port[i]);
    for (i = 0; i < 2; i++) {
        apr_finfo_t fi;

        if (files[i] &&
            apr_stat(&fi, files[i], APR_FINFO_MTIME | APR_FINFO_SIZE, p) ==
                APR_SUCCESS)
            text = apr_psprintf(p, "%s|%" APR_TIME_T_FMT "|%" APR_OFF_T_FMT,
                                text, fi.mtime, fi.size);
    }
    authn_hmac_hkdf(key->data, key->len, (const unsigned char *)text,
                    strlen(text), (const unsigned char *)"redis settings", 14,
                    out, AUTHN_HMAC_KEY_LEN);
    if (r->password)
        authn_hmac_hkdf(out, AUTHN_HMAC_KEY_LEN,
                        (const unsigned char *)r->password, r->password_len,
                        (const unsigned char *)"redis password", 14, out,
                        AUTHN_HMAC_KEY_LEN);
    if (sc->conn.password)
        authn_hmac_hkdf(
            out, AUTHN_HMAC_KEY_LEN, (const unsigned char *)sc->conn.password,
            sc->conn.password_len, (const unsigned char *)"sentinel password",
            17, out, AUTHN_HMAC_KEY_LEN);
}

/* A restart that changed any Redis setting starts the tier afresh: the
 * breaker and the outage kept in the segment were the old settings'
 * (a fixed password went on showing the old error, and a new error was
 * not logged). */
static void redis_restart(retained_t *rd, apr_pool_t *ptemp, server_rec *s)
{
    unsigned char now[AUTHN_HMAC_KEY_LEN];

    if ((!rd->settings_key || !rd->settings_key->data) &&
        authn_hmac_secret_random_retained(&rd->settings_key, 32,
                                          s->process->pool) != APR_SUCCESS)
        return; /* NB: out of memory: the tier is not reset */
    redis_settings(ptemp, rd->settings_key, now);
    if (memcmp(now, rd->redis_settings, sizeof(now)) != 0) {
        authn_hmac_redis_health_restart(
            authn_hmac_annex_redis_health(hmac_conf.table));
        authn_hmac_sentinel_restart(authn_hmac_annex_sentinel(hmac_conf.table),
                                    authn_hmac_monotonic());
        memcpy(rd->redis_settings, now, sizeof(now));
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s,
                     "Redis settings changed: the tier starts afresh");
    }
    explicit_bzero(now, sizeof(now));
}

static int post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                       server_rec *s)
{
    apr_size_t size = authn_hmac_table_size((size_t)hmac_conf.size);
    retained_t *rd;
    apr_status_t rv;
    int status;

    (void)plog;
    default_verifications();
    /* NB: the first pass at startup only tests the configuration. */
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG)
        return OK;
    (void)hmac_check_userfiles(ptemp, s, 1);
    hmac_wrapped_sections(pconf, s);
    rd = ap_retained_data_get(RETAINED);
    if (!rd)
        rd = ap_retained_data_create(RETAINED, sizeof(*rd));
    status = choose_pepper(rd, s);
    if (status != OK)
        return status;
    rv = authn_hmac_mac_create(&hmac_conf.mac, hmac_conf.pepper, pconf);
    if (rv == APR_SUCCESS && hmac_conf.pepper_prev)
        rv = authn_hmac_mac_create(&hmac_conf.mac_prev, hmac_conf.pepper_prev,
                                   pconf);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "AHMAC0015: cannot derive the keys");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    share_userfiles(s, pconf);
    status = attach_segment(rd, size, s, pconf);
    if (status == OK)
        redis_restart(rd, ptemp, s);
    return status;
}

/* ----------------------------------------------- files named in .htaccess */

/* Sets up this child's registry. */
static void htaccess_child_init(apr_pool_t *pchild)
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
 * file: slower, but right. NULL if none can be set up (or no registry). */
authn_hmac_userfile_t *hmac_htaccess_userfile(const char *path,
                                              apr_pool_t *pool)
{
    hmac_htaccess_t *reg = &hmac_child.htaccess;
    authn_hmac_userfile_t *uf;
    apr_pool_t *home = reg->pool;

    if (!reg->pool)
        return NULL; /* no registry */
    /* NB: read-only in a child, so safe to read from any thread. */
    uf = apr_hash_get(hmac_conf.userfiles, path, APR_HASH_KEY_STRING);
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

/* ------------------------------------------------------------- child_init */

/* The Sentinel thread's messages, of the server, not of a request. */
static void sentinel_log(void *baton, int level, const char *msg)
{
    ap_log_error(APLOG_MARK, level, 0, (server_rec *)baton, "%s", msg);
}

/* The engine's messages, as this request's. */
static void engine_log(void *baton, int level, const char *msg)
{
    request_rec *r = baton;

    ap_log_rerror(APLOG_MARK, level, 0, r, "%s", msg);
}

/* The secrets' pages locked again in this child, and its copy of the
 * pepper wiped. NB: a child does not inherit its parent's memory locks;
 * the pages stay excluded from core dumps. The pepper itself is not
 * needed once the subkeys are derived. */
static void relock_secrets(void)
{
    authn_hmac_mac_relock(hmac_conf.mac);
    if (hmac_conf.mac_prev)
        authn_hmac_mac_relock(hmac_conf.mac_prev);
    authn_hmac_secret_relock(hmac_conf.redis_secret);
    authn_hmac_secret_relock(hmac_conf.sentinel_secret);
    authn_hmac_secret_wipe(hmac_conf.pepper);
    hmac_conf.pepper = NULL;
    authn_hmac_secret_wipe(hmac_conf.pepper_prev);
    hmac_conf.pepper_prev = NULL;
}

/* This child's pool of Redis connections, with its Sentinel thread if the
 * primary is found through Sentinel. */
static void start_redis(apr_pool_t *pchild, server_rec *s)
{
    int threads = 1;
    apr_status_t rv;

    ap_mpm_query(AP_MPMQ_MAX_THREADS, &threads);
    rv = authn_hmac_redis_pool_create(
        &hmac_child.redis_pool, &hmac_conf.redis, threads > 0 ? threads : 1,
        authn_hmac_annex_redis_health(hmac_conf.table), pchild);
    /* NB: without its thread, the pool has no primary: no Redis. */
    if (rv == APR_SUCCESS && hmac_conf.sentinel.n) {
        rv = authn_hmac_sentinel_start(
            &hmac_child.sentinel, &hmac_conf.sentinel, &hmac_conf.redis,
            authn_hmac_annex_sentinel(hmac_conf.table),
            authn_hmac_annex_redis_health(hmac_conf.table), sentinel_log, s,
            pchild);
        authn_hmac_redis_pool_use(
            hmac_child.redis_pool,
            authn_hmac_sentinel_source(hmac_child.sentinel));
    }
    else if (rv == APR_SUCCESS)
        authn_hmac_redis_pool_use(
            hmac_child.redis_pool,
            authn_hmac_redis_server(&hmac_conf.redis, pchild));
    if (rv != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "AHMAC0017: cannot set up the Redis pool");
}

static void init_engine(void)
{
    hmac_child.engine.mac = hmac_conf.mac;
    hmac_child.engine.mac_prev = hmac_conf.mac_prev;
    hmac_child.engine.table = hmac_conf.table;
    hmac_child.engine.redis = hmac_child.redis_pool;
    hmac_child.engine.redis_conf = &hmac_conf.redis;
    hmac_child.engine.redis_name = hmac_conf.redis_name;
    hmac_child.engine.verify = apr_password_validate;
    hmac_child.engine.log = engine_log;
    hmac_child.engine.max_verifications = hmac_conf.max_verifications;
    hmac_child.engine.backlog = hmac_conf.backlog;
    hmac_child.engine.throttle = hmac_conf.throttle;
}

/* Each file of the server configuration: its index in this child,
 * watched, and the thread that lets go of replaced versions. */
static void start_userfiles(apr_pool_t *pchild, server_rec *s)
{
    apr_hash_index_t *hi;
    apr_status_t rv;

    for (hi = apr_hash_first(pchild, hmac_conf.userfiles); hi;
         hi = apr_hash_next(hi)) {
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

static void child_init(apr_pool_t *pchild, server_rec *s)
{
    apr_global_mutex_t *mutex = hmac_conf.mutex;
    apr_status_t rv;

    htaccess_child_init(pchild);
    if (!mutex)
        return;
    relock_secrets();
    /* NB: attaches in place: the table holds the same mutex. */
    rv = apr_global_mutex_child_init(&mutex, apr_global_mutex_lockfile(mutex),
                                     pchild);
    if (rv != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "AHMAC0016: cannot attach the cache mutex in this child");
    if (hmac_conf.redis_name)
        start_redis(pchild, s);
    init_engine();
    start_userfiles(pchild, s);
}

/* ------------------------------------------------------------------ hooks */

static void register_hooks(apr_pool_t *p)
{
    ap_register_auth_provider(p, AUTHN_PROVIDER_GROUP, "hmac",
                              AUTHN_PROVIDER_VERSION, &hmac_provider,
                              AP_AUTH_INTERNAL_PER_CONF);
    ap_hook_pre_config(pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_check_config(hmac_check_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_handler(hmac_status_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_insert_error_filter(hmac_busy_error, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_type_checker(hmac_busy_redirect, NULL, NULL, APR_HOOK_REALLY_FIRST);
    ap_hook_log_transaction(hmac_busy_log, NULL, NULL, APR_HOOK_REALLY_FIRST);
    APR_OPTIONAL_HOOK(ap, status_hook, hmac_status_hook, NULL, NULL,
                      APR_HOOK_MIDDLE);
}

module AP_MODULE_DECLARE_DATA authn_hmac_module = {STANDARD20_MODULE_STUFF,
                                                   hmac_create_dir_conf,
                                                   hmac_merge_dir_conf,
                                                   NULL,
                                                   NULL,
                                                   hmac_cmds,
                                                   register_hooks,
                                                   AP_MODULE_FLAG_NONE};
