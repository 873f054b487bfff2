/* cred.c: the length-prefixed credential encoding and its peppered MAC. */
#include "authn_hmac.h"

#include <string.h>

#include <bsd/string.h>
#include <openssl/evp.h>

/* HMAC-SHA256 (RFC 2104) from two digest states keyed once: copying a
 * state costs a fraction of duplicating an EVP_MAC context. */
#define SHA256_BLOCK 64

struct authn_hmac_mac {
    EVP_MD_CTX *inner; /* SHA-256 after (K ^ ipad) */
    EVP_MD_CTX *outer; /* SHA-256 after (K ^ opad) */
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

    EVP_MD_CTX_free(m->inner); /* OpenSSL cleanses the states */
    EVP_MD_CTX_free(m->outer);
    m->inner = m->outer = NULL;
    return APR_SUCCESS;
}

apr_status_t authn_hmac_mac_create(authn_hmac_mac_t **out,
                                   const authn_hmac_secret_t *pepper,
                                   apr_pool_t *p)
{
    authn_hmac_mac_t *m = apr_pcalloc(p, sizeof(*m));
    unsigned char k0[SHA256_BLOCK], ipad[SHA256_BLOCK], opad[SHA256_BLOCK];
    apr_status_t rv = APR_EGENERAL;
    EVP_MD *sha256;
    int i;

    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!sha256)
        return APR_ENOTIMPL;
    m->inner = EVP_MD_CTX_new();
    m->outer = EVP_MD_CTX_new();
    apr_pool_cleanup_register(p, m, mac_cleanup, apr_pool_cleanup_null);
    memset(k0, 0, sizeof(k0));
    if (pepper->len > SHA256_BLOCK) {
        if (!EVP_Digest(pepper->data, pepper->len, k0, NULL, sha256, NULL))
            goto done;
    }
    else {
        memcpy(k0, pepper->data, pepper->len);
    }
    for (i = 0; i < SHA256_BLOCK; i++) {
        ipad[i] = k0[i] ^ 0x36;
        opad[i] = k0[i] ^ 0x5c;
    }
    if (m->inner && m->outer && EVP_DigestInit_ex(m->inner, sha256, NULL) &&
        EVP_DigestUpdate(m->inner, ipad, sizeof(ipad)) &&
        EVP_DigestInit_ex(m->outer, sha256, NULL) &&
        EVP_DigestUpdate(m->outer, opad, sizeof(opad))) {
        *out = m;
        rv = APR_SUCCESS;
    }
done:
    EVP_MD_free(sha256); /* the contexts keep their own references */
    explicit_bzero(k0, sizeof(k0));
    explicit_bzero(ipad, sizeof(ipad));
    explicit_bzero(opad, sizeof(opad));
    return rv;
}

typedef struct {
    EVP_MD_CTX *ctx;
    int ok;
} mac_sink_t;

static void mac_sink(void *baton, const void *data, size_t len)
{
    mac_sink_t *s = baton;

    if (s->ok && !EVP_DigestUpdate(s->ctx, data, len))
        s->ok = 0;
}

apr_status_t authn_hmac_mac_compute(const authn_hmac_mac_t *mac,
                                    const char *scope, size_t scope_len,
                                    const char *user, size_t user_len,
                                    const char *password, size_t password_len,
                                    const char *hash, size_t hash_len,
                                    unsigned char key[AUTHN_HMAC_KEY_LEN])
{
    unsigned char inner[AUTHN_HMAC_KEY_LEN];
    unsigned int il = 0, ol = 0;
    mac_sink_t s;

    /* NB: the password is streamed into the digest; no copy of it is made. */
    s.ctx = EVP_MD_CTX_new();
    s.ok = s.ctx && EVP_MD_CTX_copy_ex(s.ctx, mac->inner);
    authn_hmac_encode(mac_sink, &s, scope, scope_len, user, user_len, password,
                      password_len, hash, hash_len);
    s.ok = s.ok && EVP_DigestFinal_ex(s.ctx, inner, &il) &&
           EVP_MD_CTX_copy_ex(s.ctx, mac->outer) &&
           EVP_DigestUpdate(s.ctx, inner, il) &&
           EVP_DigestFinal_ex(s.ctx, key, &ol);
    EVP_MD_CTX_free(s.ctx); /* cleanses the state that saw the password */
    explicit_bzero(inner, sizeof(inner));
    if (!s.ok || ol != AUTHN_HMAC_KEY_LEN) {
        explicit_bzero(key, AUTHN_HMAC_KEY_LEN);
        return APR_EGENERAL;
    }
    return APR_SUCCESS;
}
