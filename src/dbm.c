/* dbm.c: users in a DBM file (AuthHMACUserDBMFile), as htdbm writes them:
 * a source of stored hashes, whose credentials go down the engine's tiers
 * through src/source.c.
 *
 * The file is opened for each lookup, read-only, as mod_authn_dbm does:
 * a gdbm reader that kept it open would lock htdbm out. A writer's lock is
 * waited for, up to a second.
 */
#include "authn_hmac/dbm.h"

#include "apr_dbm.h"
#include "apr_strings.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define WRITER_WAIT_MS 1000
#define WRITER_NAP_MS  10

const char *authn_hmac_dbm_type_check(const char *type, apr_pool_t *p)
{
    const char *used1 = NULL, *used2 = NULL;
    apr_status_t rv;

    rv = apr_dbm_get_usednames_ex(p, type, "/nonexistent/x", &used1, &used2);
    if (rv != APR_SUCCESS || !used1)
        return apr_psprintf(p,
                            "'%s' is not a DBM type this apr-util can open "
                            "(default, db, gdbm, ndbm or sdbm, where built "
                            "in)",
                            type);
    return NULL;
}

/* Opens the file read-only; a file that exists but cannot be opened is
 * taken for one a writer holds, and tried again for up to a second. */
static apr_status_t open_ro(const char *path, const char *type, apr_dbm_t **db,
                            apr_pool_t *p)
{
    struct timespec nap = {0, WRITER_NAP_MS * 1000000L};
    apr_status_t rv;
    struct stat sb;
    int i;

    for (i = 0;; i++) {
        rv = apr_dbm_open_ex(db, type, path, APR_DBM_READONLY, APR_OS_DEFAULT,
                             p);
        if (rv == APR_SUCCESS || i >= WRITER_WAIT_MS / WRITER_NAP_MS)
            return rv;
        /* NB: the file of gdbm and db, or the ".pag" of sdbm and ndbm. */
        if (stat(path, &sb) != 0 &&
            stat(apr_pstrcat(p, path, ".pag", NULL), &sb) != 0)
            return APR_FROM_OS_ERROR(errno);
        nanosleep(&nap, NULL);
    }
}

/* The value's hash: up to its first ':'. */
static const char *hash_of(apr_datum_t v, apr_pool_t *p)
{
    const char *colon = memchr(v.dptr, ':', v.dsize);

    return apr_pstrmemdup(p, v.dptr,
                          colon ? (apr_size_t)(colon - v.dptr) : v.dsize);
}

authn_hmac_outcome authn_hmac_check_dbm(const authn_hmac_engine_t *e,
                                        const authn_hmac_policy_t *pol,
                                        authn_hmac_source_t *s,
                                        const char *path, const char *type,
                                        authn_hmac_cred_t *c, void *baton,
                                        apr_pool_t *p, apr_status_t *rv)
{
    const char *hash = NULL, *other = NULL;
    apr_datum_t k, v;
    apr_dbm_t *db;

    *rv = open_ro(path, type, &db, p);
    if (*rv != APR_SUCCESS)
        return AUTHN_HMAC_ERROR;
    k.dptr = apr_pstrmemdup(p, c->user, c->user_len);
    k.dsize = c->user_len;
    *rv = apr_dbm_fetch(db, k, &v);
    if (*rv == APR_SUCCESS && v.dptr)
        hash = hash_of(v, p);
    /* NB: an unknown user's dummy needs another user's hash: the file's
     * first record, while this process knows none (one more read, once). */
    else if (*rv == APR_SUCCESS && !authn_hmac_source_has_template(s) &&
             apr_dbm_firstkey(db, &k) == APR_SUCCESS && k.dptr &&
             apr_dbm_fetch(db, k, &v) == APR_SUCCESS && v.dptr)
        other = hash_of(v, p);
    apr_dbm_close(db);
    if (*rv != APR_SUCCESS)
        return AUTHN_HMAC_ERROR;
    return authn_hmac_check_hash(e, pol, s, c, hash, other, baton, p);
}
