/*
 * mod_authn_hmac_provider.c: the "hmac" authn provider. It hands the
 * credential to the engine (src/request/engine.c) with the section's source of
 * users: the htpasswd file, a DBM file, an SQL query through mod_dbd, or
 * another authn provider that it wraps (asked as mod_auth_basic asks one,
 * its grants kept only in the sections named at start by
 * hmac_wrapped_sections, from their place and a digest of the
 * configuration); the engine's outcome becomes an authn_status and the
 * note "authn-hmac". When too many passwords wait to be verified the
 * answer is a 503 with Retry-After; mod_auth_basic makes a provider's
 * error a 500, so that path runs through four hooks: the provider (the
 * error document, the user's name put aside), the error filter and the
 * redirect to an ErrorDocument (the 503), and the log (the name back).
 */
#include "httpd.h"
#include "http_config.h"
#include "http_core.h"
#include "http_log.h"
#include "http_protocol.h"
#include "http_request.h"
#include "mod_auth.h"
#include "mod_core.h"

#include "apr_escape.h"
#include "apr_sha1.h"
#include "apr_strings.h"

#include <string.h>

#include "request/dbm.h"
#include "request/sql.h"
#include "request/engine.h"
#include "shm/table.h"
#include "core/util.h"

#include "mod_authn_hmac.h"
#include "mod_authn_hmac_child.h"
#include "mod_authn_hmac_config.h"
#include "mod_authn_hmac_provider.h"

#define NOTE "authn-hmac"
/* Set while a wrapped provider answers: hmac inside it is a loop. */
#define NOTE_WRAPPING "authn-hmac-wrapping"
#define BUSY_BODY                                                              \
    "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n"                   \
    "<html><head>\n<title>503 Service Unavailable</title>\n</head><body>\n"    \
    "<h1>Service Unavailable</h1>\n<p>Too many logins are being checked "      \
    "right now. Please try again shortly.</p>\n</body></html>\n"

/* A line of the htpasswd file that is not used, as this request's. */
static void log_bad_line(void *baton, int level, const char *msg)
{
    request_rec *r = baton;
    hmac_dir_conf *c =
        ap_get_module_config(r->per_dir_config, &authn_hmac_module);

    ap_log_rerror(APLOG_MARK, level, 0, r, "AHMAC0001: %s %s", c->scope, msg);
}

static authn_status done(request_rec *r, const char *note, authn_status st)
{
    apr_table_setn(r->notes, NOTE, note);
    return st;
}

/* A 503 for want of a turn to verify: a line for each, with its client
 * and user (fail2ban's filter in conf/fail2ban matches it), and what to
 * do about it at most once a minute per process (the counter busy has
 * them all). */
static void log_busy(request_rec *r, const char *user)
{
    static apr_time_t last;

    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                  "AHMAC0030: user %s: no turn to verify the password: "
                  "answered 503",
                  user);
    if (authn_hmac_log_due(&last, authn_hmac_monotonic(),
                           apr_time_from_sec(60)))
        ap_log_rerror(
            APLOG_MARK, APLOG_WARNING, 0, r,
            "AHMAC0007: too many passwords to verify at once (" D_MAXVER
            " %d, " D_BACKLOG " %d): answering 503 with Retry-After "
            "(the counter busy counts them; logged at most once a "
            "minute per process)",
            hmac_conf.max_verifications, hmac_conf.backlog);
}

static authn_status status_of(authn_hmac_outcome o)
{
    switch (o) {
    case AUTHN_HMAC_HIT:
    case AUTHN_HMAC_REDIS_HIT:
    case AUTHN_HMAC_VERIFIED:
    case AUTHN_HMAC_COALESCED:
    case AUTHN_HMAC_OFFLINE_HIT:
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

/* What a section asks of the engine. */
static void policy_of(const hmac_dir_conf *c, authn_hmac_policy_t *pol)
{
    /* NB: a wrapped provider gives no hash to bind a grant to: it lives
     * 10 minutes unless the section says otherwise (util_ldap's cache
     * keeps a bind 600 s). */
    apr_interval_time_t max_age =
        c->source == HMAC_SOURCE_PROVIDER && !c->max_age_set
            ? apr_time_from_sec(WRAPPED_MAX_AGE)
            : c->max_age;

    /* NB: no entry outlives its max age, whatever the idle timeout. */
    pol->ttl = c->ttl < max_age ? c->ttl : max_age;
    pol->max_age = max_age;
    pol->negative_ttl = c->negative_ttl;
    pol->hide_unknown = c->hide_unknown != 0;
    pol->recheck = c->recheck_set ? c->recheck
                   : c->source == HMAC_SOURCE_PROVIDER
                       ? apr_time_from_sec(DEFAULT_RECHECK_WRAPPED)
                       : apr_time_from_sec(DEFAULT_RECHECK_SQL);
    pol->offline_grace = c->offline_grace;
    pol->cached_only = 0;
}

/* ------------------------------------------------ SQL, through mod_dbd */

APR_OPTIONAL_FN_TYPE(ap_dbd_prepare) * hmac_dbd_prepare;
static APR_OPTIONAL_FN_TYPE(ap_dbd_acquire) * dbd_acquire;

int hmac_dbd_find(void)
{
    hmac_dbd_prepare = APR_RETRIEVE_OPTIONAL_FN(ap_dbd_prepare);
    dbd_acquire = APR_RETRIEVE_OPTIONAL_FN(ap_dbd_acquire);
    return hmac_dbd_prepare && dbd_acquire;
}

/* The user's hash from the section's query, as mod_authn_dbd reads it
 * (its first row's first column; every row is read, so that the driver
 * is done with the result) into *hash, or NULL for no such user. Returns
 * NULL, or what kept the query from answering. */
static const char *dbd_hash(request_rec *r, const hmac_dir_conf *c,
                            const char *user, const char **hash)
{
    ap_dbd_t *dbd = dbd_acquire ? dbd_acquire(r) : NULL;
    apr_dbd_prepared_t *st;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rc, i;

    *hash = NULL;
    if (!dbd)
        return "no connection to the database (mod_dbd)";
    st = apr_hash_get(dbd->prepared, c->dbd_label, APR_HASH_KEY_STRING);
    if (!st)
        return "mod_dbd did not prepare the query (is DBDriver set for this "
               "virtual host?)";
    /* NB: random access (1): in the sequential mode mod_authn_dbd uses,
     * apr-util's pgsql driver reports a failed query as no rows (an
     * unknown user, where the database did not answer). */
    rc = apr_dbd_pvbselect(dbd->driver, r->pool, dbd->handle, &res, st, 1, user,
                           NULL);
    if (rc != 0) {
        /* A connection mod_dbd made again (the server restarted) may have
         * lost the prepared query: prepared once more, and tried again.
         * NB: in a pool of its own, gone if that fails (a name PostgreSQL
         * refuses, sent on purpose, must not make the connection grow). */
        apr_dbd_prepared_t *again = NULL;
        apr_pool_t *sp;

        if (apr_pool_create(&sp, dbd->pool) == APR_SUCCESS) {
            if (apr_dbd_prepare(dbd->driver, sp, dbd->handle,
                                c->scope + 4 /* "dbd:" */, c->dbd_label,
                                &again) == 0) {
                apr_hash_set(dbd->prepared, c->dbd_label, APR_HASH_KEY_STRING,
                             again);
                res = NULL;
                rc = apr_dbd_pvbselect(dbd->driver, r->pool, dbd->handle, &res,
                                       again, 1, user, NULL);
            }
            else
                apr_pool_destroy(sp);
        }
    }
    if (rc != 0)
        return apr_pstrcat(r->pool, "the query failed: ",
                           apr_dbd_error(dbd->driver, dbd->handle, rc), NULL);
    /* NB: in random access, rows by number from 1 (mysql's driver takes
     * no -1 there). */
    for (i = 1;
         (rc = apr_dbd_get_row(dbd->driver, r->pool, res, &row, i)) != -1;
         i++) {
        if (rc != 0)
            return apr_pstrcat(r->pool, "a row could not be read: ",
                               apr_dbd_error(dbd->driver, dbd->handle, rc),
                               NULL);
        if (!*hash) {
            const char *v = apr_dbd_get_entry(dbd->driver, row, 0);

            *hash = v ? apr_pstrdup(r->pool, v) : NULL;
        }
    }
    return NULL;
}

/* dbd_hash as the SQL path's lookup (request/sql.h). */
typedef struct {
    request_rec *r;
    const hmac_dir_conf *c;
} dbd_ctx_t;

static int dbd_lookup(void *ctx, const char *user, const char **hash,
                      const char **why)
{
    dbd_ctx_t *d = ctx;

    *why = dbd_hash(d->r, d->c, user, hash);
    return *why ? -1 : 0;
}

/* ---------------------------------------------- another provider, wrapped */

typedef struct {
    request_rec *r;
    const hmac_dir_conf *c;
    const char *user;
    int keep; /* its answers may be kept (cached) */
} wrapped_t;

static void log_renamed(request_rec *r, const char *provider)
{
    static apr_time_t last;

    if (authn_hmac_log_due(&last, authn_hmac_monotonic(),
                           apr_time_from_sec(60)))
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                      "AHMAC0036: " D_PROVIDER " %s gave the user another "
                      "name (AuthLDAPRemoteUserAttribute?): its grants are "
                      "not cached (logged at most once a minute per process)",
                      provider);
}

/* The wrapped provider's answer, asked as mod_auth_basic asks a provider:
 * with the provider-name note set to its name (an AuthnProviderAlias finds
 * its configuration by it). */
static apr_status_t ask_wrapped(void *ctx, const char *password)
{
    wrapped_t *w = ctx;
    apr_table_t *notes = w->r->notes;
    const char *was = apr_table_get(notes, AUTHN_PROVIDER_NAME_NOTE);
    const char *user = w->r->user;
    authn_status st;

    apr_table_setn(notes, AUTHN_PROVIDER_NAME_NOTE, w->c->wrapped_name);
    apr_table_setn(notes, NOTE_WRAPPING, "1");
    st = w->c->wrapped->check_password(w->r, w->user, password);
    apr_table_unset(notes, NOTE_WRAPPING);
    if (was)
        apr_table_setn(notes, AUTHN_PROVIDER_NAME_NOTE, was);
    else
        apr_table_unset(notes, AUTHN_PROVIDER_NAME_NOTE);
    switch (st) {
    case AUTH_GRANTED:
        /* NB: a provider that named the user anew (mod_authnz_ldap's
         * AuthLDAPRemoteUserAttribute, AuthLDAPRemoteUserIsDN) granted
         * another name than the one sent: a hit could not name it, so the
         * grant is not cached (authz must see the provider's name). */
        if (!user != !w->r->user ||
            (user && w->r->user && strcmp(user, w->r->user) != 0)) {
            log_renamed(w->r, w->c->wrapped_name);
            return APR_INCOMPLETE;
        }
        return w->keep ? APR_SUCCESS : APR_INCOMPLETE;
    case AUTH_DENIED:
    case AUTH_USER_NOT_FOUND:
        return w->keep ? APR_EMISMATCH : APR_NOTFOUND;
    default:
        return APR_EGENERAL;
    }
}

/* ------------------------------------------------ a wrapped provider's scope
 *
 * A grant of the wrapped provider must count only where the same
 * configuration of that provider answers. Its directives (AuthLDAPURL and
 * its filter...) are its module's, per section; for the modules whose
 * per-directory configuration is overridden, not merged (mod_authnz_ldap,
 * mod_authn_file), the configuration a request gets is one section's, the
 * same object in every process: named here once, at start, by the
 * section it comes from (its server's place in the list, kind, path and
 * place), with a digest of the whole configuration (a grant does not
 * outlive a change of it, across a restart or between the servers of a
 * farm). Any other provider (an AuthnProviderAlias, a module that merges),
 * or a configuration not named (.htaccess), is asked every time: nothing
 * it answers is kept (an <If> on a header or the method may make another
 * configuration of the same URL). */

static const struct {
    const char *provider, *module;
} overriding[] = {{"ldap", "mod_authnz_ldap.c"}, {"file", "mod_authn_file.c"}};

static apr_hash_t *wrapped_sections; /* config pointer -> its section's name */
static apr_hash_t *wrapped_servers;  /* server_rec pointer -> its name */
static apr_hash_t *dbd_servers;      /* server_rec pointer -> its database */

static module *module_of(const char *provider)
{
    size_t i;

    for (i = 0; i < sizeof(overriding) / sizeof(overriding[0]); i++)
        if (!strcmp(provider, overriding[i].provider))
            return ap_find_linked_module(overriding[i].module);
    return NULL;
}

static void name_config(apr_pool_t *p, module *m, ap_conf_vector_t *v,
                        const char *name)
{
    void *conf = v ? ap_get_module_config(v, m) : NULL;

    if (conf && !apr_hash_get(wrapped_sections, &conf, sizeof(conf))) {
        void **k = apr_palloc(p, sizeof(*k));

        *k = conf;
        apr_hash_set(wrapped_sections, k, sizeof(*k), name);
    }
}

static void name_sections(apr_pool_t *p, module *m, apr_array_header_t *secs,
                          const char *prefix)
{
    int i;

    for (i = 0; secs && i < secs->nelts; i++) {
        ap_conf_vector_t *v = APR_ARRAY_IDX(secs, i, ap_conf_vector_t *);
        core_dir_config *cd = ap_get_core_module_config(v);
        const char *name =
            apr_psprintf(p, "%s#%d %s", prefix, i, cd && cd->d ? cd->d : "");

        name_config(p, m, v, name);
        if (cd) {
            name_sections(p, m, cd->sec_file,
                          apr_pstrcat(p, name, " files", NULL));
            name_sections(p, m, cd->sec_if, apr_pstrcat(p, name, " if", NULL));
        }
    }
}

/* The directives that only place a server on its host: where it listens
 * and keeps its own files (and the module's Redis secret, and the pepper
 * files: no provider answers by them, and each step of a rotation changes
 * the pepper's; its grants, kept under the previous pepper, are hits after
 * the step). The servers of a farm differ there and nowhere else: they
 * share the grants of a wrapped provider through Redis. */
static int host_only(const char *directive)
{
    static const char *const names[] = {
        D_PEPPER,    "AuthHMACRedisAuthFile", "Listen",         "ServerRoot",
        "PidFile",   "DefaultRuntimeDir",     "Mutex",          "ErrorLog",
        "CustomLog", "TransferLog",           "ScoreBoardFile", "DocumentRoot"};
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcasecmp(directive, names[i]) == 0)
            return 1;
    return 0;
}

/* A directive's arguments; the file one names first, for the directives
 * that name a provider's file, as its server reads it (resolved under
 * its ServerRoot, which the digest leaves out: a relative file is not one
 * source across servers of other roots). */
static void digest_args(apr_sha1_ctx_t *ctx, const ap_directive_t *d,
                        apr_pool_t *p)
{
    static const char *const files[] = {"AuthUserFile",  "AuthDBMUserFile",
                                        "AuthGroupFile", "AuthDBMGroupFile",
                                        D_USERFILE,      D_DBMFILE};
    const char *args = d->args, *word, *path;
    size_t i;

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (strcasecmp(d->directive, files[i]) != 0)
            continue;
        word = ap_getword_conf(p, &args);
        path = *word ? ap_server_root_relative(p, word) : NULL;
        if (!path)
            break;
        apr_sha1_update(ctx, path, (unsigned)strlen(path));
        apr_sha1_update(ctx, " ", 1);
        apr_sha1_update(ctx, args, (unsigned)strlen(args));
        return;
    }
    apr_sha1_update(ctx, d->args, (unsigned)strlen(d->args));
}

/* A digest of the configuration's directives and arguments, in order and
 * nesting (not their files and lines: the servers of a farm may keep them
 * elsewhere), but those that only place the server on its host. */
static void digest_tree(apr_sha1_ctx_t *ctx, const ap_directive_t *d, int depth,
                        apr_pool_t *p)
{
    for (; d; d = d->next) {
        char level[16];

        if (host_only(d->directive))
            continue;
        apr_snprintf(level, sizeof(level), "%d\n", depth);
        apr_sha1_update(ctx, level, (unsigned)strlen(level));
        apr_sha1_update(ctx, d->directive, (unsigned)strlen(d->directive));
        apr_sha1_update(ctx, "\n", 1);
        if (d->args)
            digest_args(ctx, d, p);
        apr_sha1_update(ctx, "\n", 1);
        digest_tree(ctx, d->first_child, depth + 1, p);
    }
}

/* A digest of mod_dbd's directives (DBDriver, DBDParams...: per server)
 * and of the virtual hosts, in order: with a server's place in the list,
 * it names the database the server's queries ask, the same on the servers
 * of a farm that share it, whatever else differs in their files. */
static void digest_dbd(apr_sha1_ctx_t *ctx, const ap_directive_t *d, int depth)
{
    for (; d; d = d->next) {
        int vhost = strcasecmp(d->directive, "<VirtualHost") == 0;
        char level[16];

        if (!vhost && strncasecmp(d->directive, "DBD", 3) != 0) {
            digest_dbd(ctx, d->first_child, depth + 1);
            continue;
        }
        apr_snprintf(level, sizeof(level), "%d\n", depth);
        apr_sha1_update(ctx, level, (unsigned)strlen(level));
        apr_sha1_update(ctx, d->directive, (unsigned)strlen(d->directive));
        apr_sha1_update(ctx, "\n", 1);
        if (d->args)
            apr_sha1_update(ctx, d->args, (unsigned)strlen(d->args));
        apr_sha1_update(ctx, "\n", 1);
        digest_dbd(ctx, d->first_child, depth + 1);
    }
}

/* Names each server's database (dbd_servers). */
static void name_databases(apr_pool_t *pconf, server_rec *s)
{
    unsigned char sum[APR_SHA1_DIGESTSIZE];
    apr_sha1_ctx_t ctx;
    const char *dbd;
    server_rec *v;
    int n;

    apr_sha1_init(&ctx);
    digest_dbd(&ctx, ap_conftree, 0);
    apr_sha1_final(sum, &ctx);
    dbd = apr_pescape_hex(pconf, sum, sizeof(sum), 0);
    dbd_servers = apr_hash_make(pconf);
    for (v = s, n = 0; v; v = v->next, n++) {
        const void **k = apr_palloc(pconf, sizeof(*k));

        *k = v;
        apr_hash_set(dbd_servers, k, sizeof(*k),
                     apr_psprintf(pconf, "dbd %s server %d", dbd, n));
    }
}

void hmac_wrapped_sections(apr_pool_t *pconf, server_rec *s)
{
    unsigned char sum[APR_SHA1_DIGESTSIZE];
    apr_sha1_ctx_t ctx;
    const char *tree;
    server_rec *v;
    int n;
    size_t i;

    apr_sha1_init(&ctx);
    digest_tree(&ctx, ap_conftree, 0, pconf);
    apr_sha1_final(sum, &ctx);
    tree = apr_pescape_hex(pconf, sum, sizeof(sum), 0);
    wrapped_sections = apr_hash_make(pconf);
    wrapped_servers = apr_hash_make(pconf);
    name_databases(pconf, s);
    /* NB: a server by its place in the list: two virtual hosts may come
     * from the same file and line (one file included twice). */
    for (v = s, n = 0; v; v = v->next, n++) {
        const void **k = apr_palloc(pconf, sizeof(*k));

        *k = v;
        apr_hash_set(wrapped_servers, k, sizeof(*k),
                     apr_psprintf(pconf, "config %s server %d", tree, n));
    }
    for (i = 0; i < sizeof(overriding) / sizeof(overriding[0]); i++) {
        module *m = ap_find_linked_module(overriding[i].module);

        for (v = s, n = 0; m && v; v = v->next, n++) {
            core_server_config *sc =
                ap_get_core_module_config(v->module_config);
            core_dir_config *top =
                ap_get_core_module_config(v->lookup_defaults);
            const char *name = apr_psprintf(pconf, "server %d", n);

            name_sections(pconf, m, sc->sec_dir,
                          apr_pstrcat(pconf, name, " dir", NULL));
            name_sections(pconf, m, sc->sec_url,
                          apr_pstrcat(pconf, name, " loc", NULL));
            if (top) {
                name_sections(pconf, m, top->sec_file,
                              apr_pstrcat(pconf, name, " files", NULL));
                name_sections(pconf, m, top->sec_if,
                              apr_pstrcat(pconf, name, " if", NULL));
            }
            name_config(pconf, m, v->lookup_defaults,
                        apr_pstrcat(pconf, name, " top", NULL));
        }
    }
}

/* r's server's name in names (hmac_wrapped_sections), or "". */
static const char *server_name(apr_hash_t *names, const request_rec *r)
{
    const void *key = r->server;
    const char *name = names ? apr_hash_get(names, &key, sizeof(key)) : NULL;

    return name ? name : "";
}

/* The wrapped provider's scope for r (fine: where its grants count; NULL:
 * nowhere, not cached) and the user's (coarse: the provider in this
 * virtual host, for the user's id: the throttle's count of the user's
 * guesses and the user's entries are one across its sections). */
static void wrapped_scope(request_rec *r, const hmac_dir_conf *c,
                          const char **fine, const char **coarse)
{
    module *m = module_of(c->wrapped_name);
    void *conf = m ? ap_get_module_config(r->per_dir_config, m) : NULL;
    const char *section =
        conf && wrapped_sections
            ? apr_hash_get(wrapped_sections, &conf, sizeof(conf))
            : NULL;
    const char *server = server_name(wrapped_servers, r);

    *coarse = apr_pstrcat(r->pool, c->scope, "\n", server, NULL);
    *fine = section && *server
                ? apr_pstrcat(r->pool, *coarse, "\nsection ", section, NULL)
                : NULL;
}

/* SQL through mod_dbd (request/sql.h): the query's error logged here. */
static authn_hmac_outcome from_sql(request_rec *r, const hmac_dir_conf *c,
                                   const authn_hmac_policy_t *pol,
                                   authn_hmac_cred_t *cred, apr_status_t *rv)
{
    const authn_hmac_engine_t *e = &hmac_child.engine;
    const char *why;
    dbd_ctx_t d;
    authn_hmac_outcome o;

    /* NB: a collation may match names whatever their case. */
    cred->fold = 1;
    /* NB: DBDriver and DBDParams are the virtual host's: the same query
     * may ask another database there. The user's id (its memo, the query's
     * flight and claim, its throttle) is the query's on this server's
     * database (name_databases); the servers of a farm whose mod_dbd
     * directives and virtual hosts are the same share it. */
    cred->uid_scope =
        apr_pstrcat(r->pool, c->scope, "\n", server_name(dbd_servers, r), NULL);
    cred->uid_scope_len = strlen(cred->uid_scope);
    d.r = r;
    d.c = c;
    o = authn_hmac_check_sql(e, pol, c->hashes, cred, dbd_lookup, &d, r,
                             r->pool, &why);
    cred->uid_scope = NULL;
    *rv = APR_SUCCESS;
    if (why) {
        ap_log_rerror(
            APLOG_MARK, APLOG_ERR, 0, r,
            "AHMAC0033: could not look up user %s with " D_DBDQUERY ": %s%s",
            cred->user, why,
            o == AUTHN_HMAC_OFFLINE_HIT ? " (served: confirmed within "
                                          "AuthHMACOfflineGrace)"
                                        : "");
        if (o != AUTHN_HMAC_OFFLINE_HIT)
            *rv = APR_EGENERAL;
    }
    return o;
}

/* The outcome from the section's source of users: the htpasswd file, a
 * DBM file, SQL or a wrapped provider. *rv an error (logged here, but the
 * htpasswd file's) that kept the source from being read. */
static authn_hmac_outcome from_source(request_rec *r, const hmac_dir_conf *c,
                                      const authn_hmac_policy_t *pol,
                                      authn_hmac_cred_t *cred, apr_status_t *rv)
{
    const authn_hmac_engine_t *e = &hmac_child.engine;

    switch (c->source) {
    case HMAC_SOURCE_DBM: {
        authn_hmac_outcome o = authn_hmac_check_dbm(
            e, pol, c->dbm, c->dbm_type ? c->dbm_type : "default", cred, r,
            r->pool, rv);

        if (*rv != APR_SUCCESS)
            ap_log_rerror(APLOG_MARK, APLOG_ERR, *rv, r,
                          "AHMAC0034: could not open the DBM file %s "
                          "(" D_DBMTYPE " %s) to look up user %s",
                          c->scope + 4 /* "dbm:" */,
                          c->dbm_type ? c->dbm_type : "default", cred->user);
        return o;
    }
    case HMAC_SOURCE_DBD:
        return from_sql(r, c, pol, cred, rv);
    case HMAC_SOURCE_PROVIDER: {
        wrapped_t w;
        const char *coarse;
        authn_hmac_outcome o;

        w.r = r;
        w.c = c;
        w.user = cred->user;
        wrapped_scope(r, c, &cred->scope, &coarse);
        /* NB: not named: asked every time (see wrapped_scope). */
        w.keep = cred->scope != NULL;
        if (!cred->scope)
            cred->scope = coarse;
        cred->scope_len = strlen(cred->scope);
        /* NB: the user's id is the provider's on this server, under either
         * pepper (a rotation finds what every section kept). */
        cred->uid_scope = coarse;
        cred->uid_scope_len = strlen(coarse);
        /* NB: no hash: the scope names the provider (never a locked
         * line's "!" or "*"), and the grant lives its max age. */
        cred->hash = c->scope;
        cred->hash_len = c->scope_len;
        cred->ask = ask_wrapped;
        cred->ask_ctx = &w; // cppcheck-suppress autoVariables
        /* NB: LDAP matches uid whatever its case and outer spaces. */
        cred->fold = 1;
        *rv = APR_SUCCESS;
        o = authn_hmac_check(e, pol, cred, r, r->pool);
        cred->uid_scope = NULL;
        cred->ask = NULL;
        cred->ask_ctx = NULL;
        return o;
    }
    default:
        return authn_hmac_check_user(e, pol, c->uf, cred, log_bad_line, r,
                                     r->pool, rv);
    }
}

/* The provider: the engine (src/request/engine.c) finds the user's stored hash
 * and does the rest; here its outcome becomes an authn_status. */
static authn_status check_password(request_rec *r, const char *user,
                                   const char *password)
{
    hmac_dir_conf *c =
        ap_get_module_config(r->per_dir_config, &authn_hmac_module);
    authn_hmac_cred_t cred;
    authn_hmac_policy_t pol;
    authn_hmac_outcome o;
    apr_status_t rv;

    memset(&cred, 0, sizeof(cred));
    if (apr_table_get(r->notes, NOTE_WRAPPING)) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "AHMAC0035: " D_PROVIDER " leads back to hmac (through "
                      "an AuthnProviderAlias?): refused");
        return AUTH_GENERAL_ERROR;
    }
    if (!c->source || !hmac_conf.table) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "AHMAC0003: AuthBasicProvider hmac needs " D_USERFILE
                      "%s",
                      authuserfile_set(r) ? " (AuthUserFile is set; did you "
                                            "mean " D_USERFILE "?)"
                                          : "");
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    cred.scope = c->scope;
    cred.scope_len = c->scope_len;
    cred.user = user;
    cred.user_len = strlen(user);
    cred.password = password;
    cred.password_len = strlen(password);
    cred.client = r->useragent_ip;
    policy_of(c, &pol);
    o = from_source(r, c, &pol, &cred, &rv);
    if (rv != APR_SUCCESS && c->source != HMAC_SOURCE_FILE) {
        authn_hmac_table_count(hmac_conf.table, AUTHN_HMAC_C_ERRORS, 1);
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    if (rv == APR_ENOSPC) {
        authn_hmac_table_count(hmac_conf.table, AUTHN_HMAC_C_ERRORS, 1);
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "AHMAC0009: password file too large: %s (at most "
                      "1 GiB; 1 MiB for a file named only in .htaccess, "
                      "and 16 MiB for all of those in one process: name a "
                      "larger one in the server configuration)",
                      c->scope);
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    if (rv != APR_SUCCESS) {
        authn_hmac_table_count(hmac_conf.table, AUTHN_HMAC_C_ERRORS, 1);
        ap_log_rerror(APLOG_MARK, APLOG_ERR, rv, r,
                      "AHMAC0002: could not open password file: %s", c->scope);
        return done(r, "error", AUTH_GENERAL_ERROR);
    }
    if (o == AUTHN_HMAC_THROTTLED)
        /* NB: refused as the user's wrong password or unknown name is, so
         * that mod_auth_basic logs AH01617 or AH01618 (fail2ban). */
        return done(r, authn_hmac_outcome_name(o),
                    cred.hash || cred.locked ? AUTH_DENIED
                                             : AUTH_USER_NOT_FOUND);
    if (o == AUTHN_HMAC_ERROR) /* a wrapped provider's (its directory down) */
        authn_hmac_table_count(hmac_conf.table, AUTHN_HMAC_C_ERRORS, 1);
    if (o == AUTHN_HMAC_BUSY) {
        log_busy(r, user);
        busy_document(r);
        busy_unname(r);
    }
    return done(r, authn_hmac_outcome_name(o), status_of(o));
}

/* -------------------------------------- busy: the 503 after the provider */

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
    apr_table_setn(
        r->err_headers_out, "Retry-After",
        apr_itoa(r->pool, authn_hmac_retry_after(&hmac_child.engine)));
    return 1;
}

/* httpd's own error page, or an ErrorDocument text: the response is made
 * from r->status, which is set before this runs. */
void hmac_busy_error(request_rec *r)
{
    (void)make_busy(r, r);
}

/* An ErrorDocument 503 that is a local document: httpd redirects to it
 * with the 500, as it would for ErrorDocument 500, and this runs first
 * among the hooks that follow the check of the user (which the redirect
 * skips under the same configuration). The note goes along, for the
 * access log's final request. NB: the user's name does not (see
 * busy_unname). */
int hmac_busy_redirect(request_rec *r)
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
int hmac_busy_log(request_rec *r)
{
    char *user = ap_get_module_config(r->request_config, &authn_hmac_module);

    if (user && !r->user)
        r->user = user;
    return DECLINED;
}

const authn_provider hmac_provider = {check_password, NULL};
