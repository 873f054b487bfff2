/* cred.c: the length-prefixed credential encoding and its peppered MAC. */
#include "authn_hmac.h"

#include <string.h>

#include <bsd/string.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

struct authn_hmac_mac {
    EVP_MAC_CTX *tmpl; /* keyed once; duplicated per computation */
};

/* Sends a 4-byte big-endian value. */
static void put_u32(authn_hmac_sink_fn sink, void *baton, uint32_t v)
{
    unsigned char b[4];

    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
    sink(baton, b, sizeof(b));
}

/* Sends one field as length then bytes. */
static size_t put_field(authn_hmac_sink_fn sink, void *baton, const char *s,
                        size_t len)
{
    put_u32(sink, baton, (uint32_t)len);
    if (len)
        sink(baton, s, len);
    return 4 + len;
}

size_t authn_hmac_encode(authn_hmac_sink_fn sink, void *baton,
                         const char *scope, size_t scope_len, const char *user,
                         size_t user_len, const char *password,
                         size_t password_len, const char *hash, size_t hash_len)
{
    size_t n = 4;

    put_u32(sink, baton, AUTHN_HMAC_ENCODING_VERSION);
    n += put_field(sink, baton, scope, scope_len);
    n += put_field(sink, baton, user, user_len);
    n += put_field(sink, baton, password, password_len);
    n += put_field(sink, baton, hash, hash_len);
    return n;
}

static apr_status_t mac_cleanup(void *data)
{
    authn_hmac_mac_t *m = data;

    EVP_MAC_CTX_free(m->tmpl); /* OpenSSL cleanses the key state */
    m->tmpl = NULL;
    return APR_SUCCESS;
}

apr_status_t authn_hmac_mac_create(authn_hmac_mac_t **out,
                                   const authn_hmac_secret_t *pepper,
                                   apr_pool_t *p)
{
    authn_hmac_mac_t *m = apr_pcalloc(p, sizeof(*m));
    static char sha256[] = "SHA256";
    OSSL_PARAM params[2];
    EVP_MAC *hmac;

    if (pepper->len > 0x7fffffff)
        return APR_EINVAL;
    hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!hmac)
        return APR_ENOTIMPL;
    m->tmpl = EVP_MAC_CTX_new(hmac);
    EVP_MAC_free(hmac); /* the context keeps its own reference */
    if (!m->tmpl)
        return APR_ENOMEM;
    apr_pool_cleanup_register(p, m, mac_cleanup, apr_pool_cleanup_null);
    params[0] =
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, sha256, 0);
    params[1] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_init(m->tmpl, pepper->data, pepper->len, params))
        return APR_EGENERAL;
    *out = m;
    return APR_SUCCESS;
}

typedef struct {
    EVP_MAC_CTX *ctx;
    int ok;
} mac_sink_t;

static void mac_sink(void *baton, const void *data, size_t len)
{
    mac_sink_t *s = baton;

    if (s->ok && !EVP_MAC_update(s->ctx, data, len))
        s->ok = 0;
}

apr_status_t authn_hmac_mac_compute(const authn_hmac_mac_t *mac,
                                    const char *scope, size_t scope_len,
                                    const char *user, size_t user_len,
                                    const char *password, size_t password_len,
                                    const char *hash, size_t hash_len,
                                    unsigned char key[AUTHN_HMAC_KEY_LEN])
{
    mac_sink_t s;
    size_t outl = 0;

    /* NB: the password is streamed into the MAC; no copy of it is made. */
    s.ctx = EVP_MAC_CTX_dup(mac->tmpl);
    if (!s.ctx)
        return APR_ENOMEM;
    s.ok = 1;
    authn_hmac_encode(mac_sink, &s, scope, scope_len, user, user_len, password,
                      password_len, hash, hash_len);
    if (s.ok && !EVP_MAC_final(s.ctx, key, &outl, AUTHN_HMAC_KEY_LEN))
        s.ok = 0;
    EVP_MAC_CTX_free(s.ctx); /* cleanses the state that saw the password */
    if (!s.ok || outl != AUTHN_HMAC_KEY_LEN) {
        explicit_bzero(key, AUTHN_HMAC_KEY_LEN);
        return APR_EGENERAL;
    }
    return APR_SUCCESS;
}
