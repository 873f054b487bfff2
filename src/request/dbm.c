/* dbm.c: the request path from a DBM file (AuthHMACUserDBMFile): the
 * user's hash as the file gives it (src/sources/dbm.c: the reading, the
 * lookup, the per-process memo), then down the engine's tiers through
 * src/request/source.c, with an unknown user's dummy made from another
 * user's hash (the file's first record, while this process knows none).
 */
#include "request/dbm.h"

#include "apr_strings.h"

struct authn_hmac_dbm_t {
    authn_hmac_dbmfile_t *file;
    authn_hmac_source_t *source;
};

authn_hmac_dbm_t *authn_hmac_dbm_make(const char *path, apr_pool_t *p)
{
    authn_hmac_dbm_t *d = apr_pcalloc(p, sizeof(*d));

    d->file = authn_hmac_dbmfile_make(path, p);
    d->source = authn_hmac_source_make(p);
    return d;
}

authn_hmac_outcome authn_hmac_check_dbm(const authn_hmac_engine_t *e,
                                        const authn_hmac_policy_t *pol,
                                        authn_hmac_dbm_t *d, const char *type,
                                        authn_hmac_cred_t *c, void *baton,
                                        apr_pool_t *p, apr_status_t *rv)
{
    const char *user = apr_pstrmemdup(p, c->user, c->user_len);
    const char *hash = NULL, *other = NULL;

    *rv = authn_hmac_dbmfile_lookup(d->file, type, user, c->user_len,
                                    !authn_hmac_source_has_template(d->source),
                                    &hash, &other, p);
    if (*rv != APR_SUCCESS)
        return AUTHN_HMAC_ERROR;
    return authn_hmac_check_hash(e, pol, d->source, c, hash, other, baton, p);
}
