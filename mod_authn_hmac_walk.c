/*
 * mod_authn_hmac_walk.c: the walk of the configuration's sections at
 * start (check_config, and post_config for the error log): a section
 * whose provider hmac can have no AuthHMACUserFile, a user file the
 * children cannot open, mod_ldap's caches that outlast a wrapped ldap's
 * max age. It reads httpd's tree of directives (ap_conftree), not the
 * records: a directive's place in it tells what may apply where.
 */
#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "unixd.h"
#include "util_ldap.h"

#include "apr_strings.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

#include "mod_authn_hmac.h"
#include "mod_authn_hmac_config.h"
#include "mod_authn_hmac_walk.h"

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
    const ap_directive_t *recheck;      /* AuthHMACRecheck here or above */
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
        else if (is(d, D_RECHECK))
            sc->recheck = d;
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

/* A section's duration directive d (NULL: unset) in seconds, else
 * dflt; 0 if its value is refused (httpd says so already). */
static int seconds_of(check_state *st, const ap_directive_t *d, uint64_t dflt,
                      uint64_t *out)
{
    const char *args = d ? d->args : NULL;

    *out = dflt;
    return !args ||
           !authn_hmac_parse_seconds(ap_getword_conf(st->p, &args), out, st->p);
}

/* An AuthHMACProvider ldap where mod_ldap's search cache (LDAPCacheTTL)
 * could answer: it answers a bind with the password it saw from memory,
 * and would answer the module's recheck, so that a user removed, locked or
 * whose password changed would be let in for its TTL: the start is
 * refused. Its compare cache (LDAPOpCacheTTL, for Require ldap-*) outliving
 * the recheck is a warning (with warn). */
static void report_ldap(check_state *st, const check_scope *sc,
                        const ap_directive_t *wrap)
{
    ldap_caches c = ldap_caches_of(st->s);
    uint64_t recheck;
    const char *why;
    int level = APLOG_WARNING;

    if (c.bind > 0) {
        st->refused = 1;
        level = APLOG_STARTUP | APLOG_EMERG;
        why = apr_psprintf(
            st->p,
            "search cache (LDAPCacheTTL %ld s) would answer the module's "
            "recheck of a password from memory, letting a user removed, "
            "locked or whose password changed in the directory in for that "
            "long: set LDAPCacheTTL 0 in the server configuration (or "
            "LDAPCacheEntries 0); the module's own cache replaces it",
            c.bind);
    }
    else if (st->warn &&
             seconds_of(st, sc->recheck, DEFAULT_RECHECK_WRAPPED, &recheck) &&
             (uint64_t)c.compare > recheck)
        why = apr_psprintf(
            st->p,
            "compare cache (LDAPOpCacheTTL %ld s), which answers Require "
            "ldap-group and ldap-attribute, outlasts the section's " D_RECHECK
            " (%" APR_UINT64_T_FMT " s): a change of a group or an attribute "
            "may take that long; set LDAPOpCacheTTL to at most "
            "%" APR_UINT64_T_FMT ", or 0",
            c.compare, recheck, recheck);
    else
        return;
    ap_log_error(APLOG_MARK, level, 0, st->s,
                 "AHMAC0040: " D_PROVIDER " ldap in %s (%s:%d): mod_ldap's %s",
                 section_name(sc->section, st->p), wrap->filename,
                 wrap->line_num, why);
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
    if (ldap)
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
