/* cred.c: the length-prefixed credential encoding, the keys derived from the
 * pepper, and the MACs made with them.
 *
 * Three subkeys come from the pepper through HKDF-SHA256 (RFC 5869), one per
 * purpose, so that a value made for one purpose is never valid for another:
 *   entry  names a cache entry: MAC(digest, password)
 *   user   names a user's bucket: MAC(scope, user)
 *   value  authenticates what Redis gives back
 *   index  authenticates the blocks of a shared htpasswd index
 *   memo   hides a memo's digest in Redis (a pad per user and time)
 * (and a fourth, negative, names a refused credential as entry does). The
 * digest is the SHA-256 of the encoding of (scope, user, stored hash): no
 * secret, so the index of the file keeps it with the user's entry, and a
 * hit's MAC hashes 32 bytes and the password, two compressions of SHA-256
 * for a password of up to 23 bytes instead of four (hitbench).
 * Each is kept as two SHA-256 states keyed once (RFC 2104's inner and outer
 * pads). The states are as good as the pepper, so they live in a locked page
 * excluded from core dumps, never on the heap: plain SHA256_CTX structures
 * can be placed there, EVP contexts cannot.
 */
#include "core/cred.h"
#include "core/secret.h"

#include <string.h>

#include <bsd/string.h>

/* The low-level SHA-256 interface is deprecated in OpenSSL 3 in favour of
 * EVP, whose contexts are allocated by OpenSSL on its own heap. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#define SHA256_BLOCK 64

typedef struct {
    SHA256_CTX inner; /* SHA-256 after (K ^ ipad) */
    SHA256_CTX outer; /* SHA-256 after (K ^ opad) */
} hmac_key_t;

struct authn_hmac_mac {
    hmac_key_t entry, user, value, negative, dummy, index, memo;
    authn_hmac_secret_t *page; /* where this structure lives */
};

static const char HKDF_SALT[] = "mod_authn_hmac";

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
                         size_t user_len, const char *hash, size_t hash_len)
{
    size_t n = 4;

    put_u32(sink, baton, AUTHN_HMAC_ENCODING_VERSION);
    n += put_field(sink, baton, scope, scope_len);
    n += put_field(sink, baton, user, user_len);
    n += put_field(sink, baton, hash, hash_len);
    return n;
}

/* ------------------------------------------------------------- HMAC */

/* Keys an HMAC-SHA256 (RFC 2104). */
static void hmac_key(hmac_key_t *k, const unsigned char *key, size_t len)
{
    unsigned char k0[SHA256_BLOCK], pad[SHA256_BLOCK];
    int i;

    memset(k0, 0, sizeof(k0));
    if (len > SHA256_BLOCK)
        SHA256(key, len, k0);
    else if (len)
        memcpy(k0, key, len);
    for (i = 0; i < SHA256_BLOCK; i++)
        pad[i] = k0[i] ^ 0x36;
    SHA256_Init(&k->inner);
    SHA256_Update(&k->inner, pad, sizeof(pad));
    for (i = 0; i < SHA256_BLOCK; i++)
        pad[i] = k0[i] ^ 0x5c;
    SHA256_Init(&k->outer);
    SHA256_Update(&k->outer, pad, sizeof(pad));
    explicit_bzero(k0, sizeof(k0));
    explicit_bzero(pad, sizeof(pad));
}

/* Finishes an HMAC whose inner hash has seen the message in *ctx. */
static void hmac_finish(const hmac_key_t *k, SHA256_CTX *ctx,
                        unsigned char out[AUTHN_HMAC_KEY_LEN])
{
    unsigned char inner[AUTHN_HMAC_KEY_LEN];

    SHA256_Final(inner, ctx);
    *ctx = k->outer;
    SHA256_Update(ctx, inner, sizeof(inner));
    SHA256_Final(out, ctx);
    explicit_bzero(ctx, sizeof(*ctx));
    explicit_bzero(inner, sizeof(inner));
}

static void hmac_once(const hmac_key_t *k, const void *data, size_t len,
                      unsigned char out[AUTHN_HMAC_KEY_LEN])
{
    SHA256_CTX ctx = k->inner;

    SHA256_Update(&ctx, data, len);
    hmac_finish(k, &ctx, out);
}

void authn_hmac_hkdf(const unsigned char *salt, size_t salt_len,
                     const unsigned char *ikm, size_t ikm_len,
                     const unsigned char *info, size_t info_len,
                     unsigned char *out, size_t out_len)
{
    unsigned char prk[AUTHN_HMAC_KEY_LEN], t[AUTHN_HMAC_KEY_LEN];
    unsigned char counter = 0;
    size_t t_len = 0, n;
    hmac_key_t k;
    SHA256_CTX ctx;

    /* Extract: PRK = HMAC(salt, IKM). Expand: T(i) = HMAC(PRK, T(i-1) |
     * info | i). At most 255 blocks (RFC 5869). */
    hmac_key(&k, salt, salt_len);
    hmac_once(&k, ikm, ikm_len, prk);
    hmac_key(&k, prk, sizeof(prk));
    while (out_len > 0 && counter < 255) {
        counter++;
        ctx = k.inner;
        SHA256_Update(&ctx, t, t_len);
        SHA256_Update(&ctx, info, info_len);
        SHA256_Update(&ctx, &counter, 1);
        hmac_finish(&k, &ctx, t);
        t_len = sizeof(t);
        n = out_len < sizeof(t) ? out_len : sizeof(t);
        memcpy(out, t, n);
        out += n;
        out_len -= n;
    }
    explicit_bzero(prk, sizeof(prk));
    explicit_bzero(t, sizeof(t));
    explicit_bzero(&k, sizeof(k));
}

/* One subkey, as a keyed HMAC. */
static void derive(hmac_key_t *k, const authn_hmac_secret_t *pepper,
                   const char *label)
{
    unsigned char sub[AUTHN_HMAC_KEY_LEN];

    authn_hmac_subkey(pepper, label, sub);
    hmac_key(k, sub, sizeof(sub));
    explicit_bzero(sub, sizeof(sub));
}

void authn_hmac_subkey(const authn_hmac_secret_t *pepper, const char *label,
                       unsigned char out[AUTHN_HMAC_KEY_LEN])
{
    authn_hmac_hkdf((const unsigned char *)HKDF_SALT, sizeof(HKDF_SALT) - 1,
                    pepper->data, pepper->len, (const unsigned char *)label,
                    strlen(label), out, AUTHN_HMAC_KEY_LEN);
}

apr_status_t authn_hmac_mac_create(authn_hmac_mac_t **out,
                                   const authn_hmac_secret_t *pepper,
                                   apr_pool_t *p)
{
    authn_hmac_secret_t *page = NULL;
    authn_hmac_mac_t *m;
    apr_status_t rv = authn_hmac_secret_alloc(&page, sizeof(*m), p);

    if (rv != APR_SUCCESS)
        return rv;
    m = (authn_hmac_mac_t *)(void *)page->data; /* page-aligned */
    derive(&m->entry, pepper, AUTHN_HMAC_LABEL_ENTRY);
    derive(&m->user, pepper, AUTHN_HMAC_LABEL_USER);
    derive(&m->value, pepper, AUTHN_HMAC_LABEL_VALUE);
    derive(&m->negative, pepper, AUTHN_HMAC_LABEL_NEGATIVE);
    derive(&m->dummy, pepper, AUTHN_HMAC_LABEL_DUMMY);
    derive(&m->index, pepper, AUTHN_HMAC_LABEL_INDEX);
    derive(&m->memo, pepper, AUTHN_HMAC_LABEL_MEMO);
    m->page = page;
    *out = m;
    return APR_SUCCESS;
}

void authn_hmac_mac_relock(const authn_hmac_mac_t *mac)
{
    if (mac)
        authn_hmac_secret_relock(mac->page);
}

/* Streams the encoding into a digest. */
static void sha_sink(void *baton, const void *data, size_t len)
{
    SHA256_Update(baton, data, len);
}

void authn_hmac_cred_digest(const char *scope, size_t scope_len,
                            const char *user, size_t user_len, const char *hash,
                            size_t hash_len,
                            unsigned char digest[AUTHN_HMAC_DIGEST_LEN])
{
    SHA256_CTX ctx;

    SHA256_Init(&ctx);
    authn_hmac_encode(sha_sink, &ctx, scope, scope_len, user, user_len, hash,
                      hash_len);
    SHA256_Final(digest, &ctx);
}

/* HMAC of digest | password under k. NB: the digest state that saw the
 * password is wiped by hmac_finish. */
static void cred_mac(const hmac_key_t *k,
                     const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                     const char *password, size_t password_len,
                     unsigned char out[AUTHN_HMAC_KEY_LEN])
{
    SHA256_CTX ctx = k->inner;

    SHA256_Update(&ctx, digest, AUTHN_HMAC_DIGEST_LEN);
    SHA256_Update(&ctx, password, password_len);
    hmac_finish(k, &ctx, out);
}

void authn_hmac_cred_mac(const authn_hmac_mac_t *mac,
                         const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                         const char *password, size_t password_len,
                         unsigned char key[AUTHN_HMAC_KEY_LEN])
{
    cred_mac(&mac->entry, digest, password, password_len, key);
}

void authn_hmac_cred_negative(const authn_hmac_mac_t *mac,
                              const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                              const char *password, size_t password_len,
                              unsigned char nkey[AUTHN_HMAC_KEY_LEN])
{
    cred_mac(&mac->negative, digest, password, password_len, nkey);
}

void authn_hmac_user_id(const authn_hmac_mac_t *mac, const char *scope,
                        size_t scope_len, const char *user, size_t user_len,
                        unsigned char id[AUTHN_HMAC_KEY_LEN])
{
    SHA256_CTX ctx = mac->user.inner;

    put_u32(sha_sink, &ctx, AUTHN_HMAC_ENCODING_VERSION);
    put_field(sha_sink, &ctx, scope, scope_len);
    put_field(sha_sink, &ctx, user, user_len);
    hmac_finish(&mac->user, &ctx, id);
}

size_t authn_hmac_dummy_hash(const authn_hmac_mac_t *mac, const char *tmpl,
                             size_t len, char out[AUTHN_HMAC_DUMMY_MAX])
{
    static const char itoa64[] = /* MD5-crypt, SHA-crypt, DES */
        "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static const char bf64[] = /* bcrypt */
        "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static const char b64[] = /* {SHA} */
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *alpha = itoa64, *last;
    unsigned char r[AUTHN_HMAC_KEY_LEN];
    size_t keep = 0, n, pad = 0, i;
    int bcrypt = 0;

    if (len == 0 || len >= AUTHN_HMAC_DUMMY_MAX)
        return 0;
    if (len > 5 && memcmp(tmpl, "{SHA}", 5) == 0) {
        keep = 5;
        alpha = b64;
        while (pad < len - keep && tmpl[len - 1 - pad] == '=')
            pad++;
    }
    else if (tmpl[0] == '$') {
        for (last = tmpl + len - 1; *last != '$';)
            last--;
        keep = (size_t)(last - tmpl) + 1;
        bcrypt = keep == 7 && tmpl[1] == '2';
        if (bcrypt)
            alpha = bf64;
    }
    n = len - keep - pad;
    if (n == 0)
        return 0;
    memcpy(out, tmpl, keep);
    for (i = 0; i < n; i++) {
        if (i % sizeof(r) == 0) {
            SHA256_CTX ctx = mac->dummy.inner;

            put_field(sha_sink, &ctx, tmpl, keep);
            put_u32(sha_sink, &ctx, (uint32_t)n);
            put_u32(sha_sink, &ctx, (uint32_t)(i / sizeof(r)));
            hmac_finish(&mac->dummy, &ctx, r);
        }
        out[keep + i] = alpha[r[i % sizeof(r)] & 63];
    }
    /* NB: bcrypt's salt (22 characters) ends in 4 padding bits, kept 0 here
     * (a salt is decoded before any work is done); its digest, as the
     * others', ends in the padding bits that are never 1 in what the scheme
     * writes: the last character here has them all set. */
    if (bcrypt && n > 21)
        out[keep + 21] = alpha[(r[21 % sizeof(r)] & 3) << 4];
    out[keep + n - 1] = alpha[63];
    memcpy(out + keep + n, tmpl + len - pad, pad);
    out[len] = '\0';
    explicit_bzero(r, sizeof(r));
    return len;
}

void authn_hmac_value_tag(const authn_hmac_mac_t *mac,
                          const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                          const void *body, size_t len,
                          unsigned char tag[AUTHN_HMAC_KEY_LEN])
{
    SHA256_CTX ctx = mac->value.inner;

    SHA256_Update(&ctx, uid, AUTHN_HMAC_KEY_LEN);
    SHA256_Update(&ctx, body, len);
    hmac_finish(&mac->value, &ctx, tag);
}

void authn_hmac_memo_pad(const authn_hmac_mac_t *mac,
                         const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                         int64_t confirmed,
                         unsigned char pad[AUTHN_HMAC_DIGEST_LEN])
{
    SHA256_CTX ctx = mac->memo.inner;
    unsigned char t[8];
    int i;

    for (i = 0; i < 8; i++)
        t[i] = (unsigned char)((uint64_t)confirmed >> (56 - 8 * i));
    SHA256_Update(&ctx, uid, AUTHN_HMAC_KEY_LEN);
    SHA256_Update(&ctx, t, sizeof(t));
    hmac_finish(&mac->memo, &ctx, pad);
}

void authn_hmac_index_tag(const authn_hmac_mac_t *mac,
                          const unsigned char vkey[AUTHN_HMAC_DIGEST_LEN],
                          uint32_t block, const void *data, size_t len,
                          unsigned char tag[AUTHN_HMAC_KEY_LEN])
{
    SHA256_CTX ctx = mac->index.inner;
    unsigned char b[4];

    b[0] = (unsigned char)(block >> 24);
    b[1] = (unsigned char)(block >> 16);
    b[2] = (unsigned char)(block >> 8);
    b[3] = (unsigned char)block;
    SHA256_Update(&ctx, vkey, AUTHN_HMAC_DIGEST_LEN);
    SHA256_Update(&ctx, b, sizeof(b));
    SHA256_Update(&ctx, data, len);
    hmac_finish(&mac->index, &ctx, tag);
}
