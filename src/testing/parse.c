/* testing/parse.c: TEST ONLY (libauthnhmac_test.la, see
 * testing/testing.h): the whole-buffer parser that the unit tests and
 * the fuzzer read a file with, and a view's counts. */
#include "sources/userfile.h"

#include "testing/testing.h"

#include <string.h>

/* A file's index, in memory of p (authn_hmac_htpasswd_parse). */
struct authn_hmac_htpasswd {
    authn_hmac_index_t v;
};

apr_status_t authn_hmac_index_build(void *area, size_t cap, char *buf,
                                    size_t len, const void *meta,
                                    size_t meta_len,
                                    const authn_hmac_mac_t *mac,
                                    authn_hmac_log_fn bad, void *baton,
                                    size_t *used, apr_pool_t *p)
{
    authn_hmac_index_builder_t *b;
    apr_status_t rv = authn_hmac_index_begin(&b, area, cap, len,
                                             authn_hmac_index_lines(buf, len),
                                             meta, meta_len, p);

    if (rv != APR_SUCCESS)
        return rv;
    (void)authn_hmac_index_feed(b, buf, len, 1, bad, baton);
    return authn_hmac_index_end(b, mac, bad, baton, used);
}

apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_log_fn bad,
                                       void *baton, apr_pool_t *p)
{
    authn_hmac_htpasswd_t *idx = apr_pcalloc(p, sizeof(*idx));
    size_t cap = authn_hmac_index_bound(len, authn_hmac_index_lines(buf, len)),
           used;
    void *area = apr_palloc(p, cap);
    apr_status_t rv;

    rv = authn_hmac_index_build(area, cap, buf, len, NULL, 0, NULL, bad, baton,
                                &used, p);
    if (rv == APR_SUCCESS)
        rv = authn_hmac_index_open(&idx->v, area, used, NULL);
    if (rv == APR_SUCCESS)
        *out = idx;
    return rv;
}

const char *authn_hmac_htpasswd_get(const authn_hmac_htpasswd_t *idx,
                                    const char *user, size_t *hash_len)
{
    authn_hmac_index_entry_t e;
    uint32_t ord;
    uint64_t off = authn_hmac_index_find(&idx->v, user, strlen(user), &ord);

    if (!off || authn_hmac_index_entry(&idx->v, off, NULL, &e) != APR_SUCCESS)
        return NULL;
    *hash_len = e.hash_len;
    return e.hash;
}

const char *authn_hmac_htpasswd_typical(const authn_hmac_htpasswd_t *idx,
                                        size_t *len)
{
    authn_hmac_index_entry_t e;
    uint64_t off = authn_hmac_index_typical(&idx->v);

    *len = 0;
    if (!off || authn_hmac_index_entry(&idx->v, off, NULL, &e) != APR_SUCCESS)
        return NULL;
    *len = e.hash_len;
    return e.hash;
}

unsigned authn_hmac_htpasswd_count(const authn_hmac_htpasswd_t *idx)
{
    return idx->v.count;
}

unsigned authn_hmac_htpasswd_bad_lines(const authn_hmac_htpasswd_t *idx)
{
    return idx->v.bad;
}

void authn_hmac_userfile_shared(authn_hmac_userfile_t *uf, unsigned *built,
                                unsigned *adopted)
{
    apr_thread_mutex_lock(uf->lock);
    *built = uf->built;
    *adopted = uf->adopted;
    apr_thread_mutex_unlock(uf->lock);
}

unsigned authn_hmac_userfile_reads(authn_hmac_userfile_t *uf)
{
    unsigned n;

    apr_thread_mutex_lock(uf->lock);
    n = uf->reads;
    apr_thread_mutex_unlock(uf->lock);
    return n;
}

apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len, authn_hmac_log_fn bad,
                                        void *baton, apr_pool_t *p)
{
    return authn_hmac_userfile_lookup_id(uf, user, NULL, NULL, 0, hash,
                                         hash_len, NULL, NULL, bad, baton, p,
                                         NULL);
}

unsigned authn_hmac_userfile_settles(authn_hmac_userfile_t *uf)
{
    return __atomic_load_n(&uf->settles, __ATOMIC_RELAXED);
}

apr_status_t authn_hmac_userfile_lookup_settled(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char *id, unsigned char *digest, apr_pool_t *p)
{
    apr_time_t since = authn_hmac_monotonic();
    authn_hmac_reading_t rd;
    apr_status_t rv =
        authn_hmac_userfile_lookup_id(uf, user, mac, scope, scope_len, hash,
                                      hash_len, id, digest, NULL, NULL, p, &rd);

    if ((rv == APR_NOTFOUND || rv == AUTHN_HMAC_LOCKED) &&
        authn_hmac_userfile_unsettled(&rd, since))
        rv = authn_hmac_userfile_settle(uf, user, mac, scope, scope_len, hash,
                                        hash_len, id, digest, NULL, NULL, p,
                                        &rd, authn_hmac_monotonic());
    return rv;
}
