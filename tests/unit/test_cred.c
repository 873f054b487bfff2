/* Unit tests: credential encoding, MAC and secret files. */
#include "core/cred.h"
#include "redis/redis.h"
#include "core/secret.h"
#include "testing/testing.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <apr_md5.h>
#include <apr_sha1.h>
#include <apr_strings.h>
#include <apr_time.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

/* An idle timeout too long to matter, where a test is about the max age. */
#define WEEK apr_time_from_sec(604800)

typedef struct {
    unsigned char buf[4096];
    size_t len;
} buf_t;

static void to_buf(void *baton, const void *data, size_t len)
{
    buf_t *b = baton;

    if (b->len + len <= sizeof(b->buf))
        memcpy(b->buf + b->len, data, len);
    b->len += len;
}

/* What a credential MAC is made of: SHA-256(encode(scope, user, hash)),
 * then the password. */
static buf_t enc(const char *scope, const char *u, size_t ul, const char *pw,
                 size_t pl, const char *h)
{
    buf_t e, b;
    unsigned int dl = 0;

    e.len = 0;
    authn_hmac_encode(to_buf, &e, scope, strlen(scope), u, ul, h, strlen(h));
    CHECK(e.len <= sizeof(e.buf) && pl <= sizeof(b.buf) - 32);
    CHECK(EVP_Digest(e.buf, e.len, b.buf, &dl, EVP_sha256(), NULL) == 1);
    CHECK(dl == 32);
    memcpy(b.buf + 32, pw, pl);
    b.len = 32 + pl;
    return b;
}

/* What a user id is made of: version, scope, user. */
static buf_t head(const char *scope, const char *u, size_t ul)
{
    buf_t b;

    b.len = 0;
    authn_hmac_encode(to_buf, &b, scope, strlen(scope), u, ul, "", 0);
    b.len -= 4; /* the empty hash's length */
    return b;
}

static int same(const buf_t *a, const buf_t *b)
{
    return a->len == b->len && memcmp(a->buf, b->buf, a->len) == 0;
}

static void test_encoding_layout(apr_pool_t *p)
{
    static const unsigned char want[] = {0, 0, 0, 3,   0,   0, 0, 1, 'S', 0,
                                         0, 0, 2, 'a', 'b', 0, 0, 0, 1,   'H'};
    buf_t b, m = enc("S", "ab", 2, "c", 1, "H");
    unsigned char d[32];

    (void)p;
    b.len = 0;
    CHECK(authn_hmac_encode(to_buf, &b, "S", 1, "ab", 2, "H", 1) ==
          sizeof(want));
    CHECK(b.len == sizeof(want));
    CHECK(memcmp(b.buf, want, sizeof(want)) == 0);
    /* The digest is the SHA-256 of that, and comes first in a MAC's input. */
    authn_hmac_cred_digest("S", 1, "ab", 2, "H", 1, d);
    CHECK(m.len == 33 && memcmp(m.buf, d, 32) == 0 && m.buf[32] == 'c');
}

/* A credential as enc() takes it. */
typedef struct {
    const char *scope, *u;
    size_t ul;
    const char *pw;
    size_t pl;
    const char *h;
} cred_in_t;

/* How many of the n pairs of credentials encode the same (each told). */
static int encode_alike(const cred_in_t (*pairs)[2], size_t n)
{
    int alike = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        const cred_in_t *x = &pairs[i][0], *y = &pairs[i][1];
        buf_t a = enc(x->scope, x->u, x->ul, x->pw, x->pl, x->h);
        buf_t b = enc(y->scope, y->u, y->ul, y->pw, y->pl, y->h);

        if (same(&a, &b)) {
            fprintf(stderr, "pair %zu encodes the same\n", i);
            alike++;
        }
    }
    return alike;
}

static void test_split_points_differ(apr_pool_t *p)
{
    static const cred_in_t pairs[][2] = {
        {{"/x", "ab", 2, "c", 1, "h"}, {"/x", "a", 1, "bc", 2, "h"}},
        {{"/x", "a:b", 3, "c", 1, "h"}, {"/x", "a", 1, "b:c", 3, "h"}},
        {{"/x", "a\0b", 3, "c", 1, "h"}, {"/x", "a", 1, "b\0c", 3, "h"}},
    };

    (void)p;
    CHECK(encode_alike(pairs, sizeof(pairs) / sizeof(pairs[0])) == 0);
}

/* Every pair of short strings over an alphabet with the separators people
 * use (':' and NUL) encodes differently: no two pairs share an input. */
static void test_encoding_injective(apr_pool_t *p)
{
    static const char alpha[] = {'a', ':', '\0'};
    char strs[40][3];
    size_t lens[40], n = 0, i, j, k, l;
    buf_t *all;
    size_t count = 0;

    lens[n++] = 0;
    for (i = 0; i < 3; i++) {
        strs[n][0] = alpha[i];
        lens[n++] = 1;
    }
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++) {
            strs[n][0] = alpha[i];
            strs[n][1] = alpha[j];
            lens[n++] = 2;
        }
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++)
            for (k = 0; k < 3; k++) {
                strs[n][0] = alpha[i];
                strs[n][1] = alpha[j];
                strs[n][2] = alpha[k];
                lens[n++] = 3;
            }
    all = apr_pcalloc(p, sizeof(buf_t) * n * n);
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++)
            all[count++] = enc("/s", strs[i], lens[i], strs[j], lens[j], "h");
    for (k = 0; k < count; k++)
        for (l = k + 1; l < count; l++)
            if (same(&all[k], &all[l])) {
                CHECK(!"two distinct (user, password) pairs share an input");
                return;
            }
    CHECK(count == 40 * 40);
}

static void test_scope_and_hash_matter(apr_pool_t *p)
{
    static const cred_in_t pairs[][2] = {
        {{"/a", "u", 1, "p", 1, "h"}, {"/b", "u", 1, "p", 1, "h"}},
        {{"/a", "u", 1, "p", 1, "h"}, {"/a", "u", 1, "p", 1, "h2"}},
    };

    (void)p;
    CHECK(encode_alike(pairs, sizeof(pairs) / sizeof(pairs[0])) == 0);
}

static authn_hmac_secret_t *pepper(apr_pool_t *p, unsigned char fill)
{
    authn_hmac_secret_t *s = NULL;

    CHECK(authn_hmac_secret_random(&s, 32, p) == APR_SUCCESS);
    memset(s->data, fill, s->len);
    return s;
}

static void hex_to(const char *hex, unsigned char *out, size_t n)
{
    size_t i;
    unsigned v;

    for (i = 0; i < n; i++) {
        CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
        out[i] = (unsigned char)v;
    }
}

/* OpenSSL's own HKDF and HMAC, for an independent check. */
static void openssl_subkey(const authn_hmac_secret_t *pep, const char *label,
                           unsigned char out[32])
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kctx = EVP_KDF_CTX_new(kdf);
    OSSL_PARAM params[5];
    char digest[] = "SHA256", salt[] = "mod_authn_hmac", info[64];

    strncpy(info, label, sizeof(info) - 1);
    info[sizeof(info) - 1] = '\0';
    params[0] = OSSL_PARAM_construct_utf8_string("digest", digest, 0);
    params[1] = OSSL_PARAM_construct_octet_string("salt", salt, 14);
    params[2] = OSSL_PARAM_construct_octet_string("key", pep->data, pep->len);
    params[3] = OSSL_PARAM_construct_octet_string("info", info, strlen(info));
    params[4] = OSSL_PARAM_construct_end();
    CHECK(EVP_KDF_derive(kctx, out, 32, params) == 1);
    EVP_KDF_CTX_free(kctx);
    EVP_KDF_free(kdf);
}

static void test_hkdf_rfc5869(apr_pool_t *p)
{
    /* RFC 5869, A.1 and A.3. */
    unsigned char ikm[22], salt[13], info[10], okm[42], want[42];
    size_t i;

    (void)p;
    memset(ikm, 0x0b, sizeof(ikm));
    for (i = 0; i < sizeof(salt); i++)
        salt[i] = (unsigned char)i;
    for (i = 0; i < sizeof(info); i++)
        info[i] = (unsigned char)(0xf0 + i);
    authn_hmac_hkdf(salt, sizeof(salt), ikm, sizeof(ikm), info, sizeof(info),
                    okm, sizeof(okm));
    hex_to("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf3"
           "4007208d5b887185865",
           want, sizeof(want));
    CHECK(memcmp(okm, want, sizeof(want)) == 0);
    authn_hmac_hkdf(NULL, 0, ikm, sizeof(ikm), NULL, 0, okm, sizeof(okm));
    hex_to("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9"
           "d201395faa4b61a96c8",
           want, sizeof(want));
    CHECK(memcmp(okm, want, sizeof(want)) == 0);
}

/* The three subkeys of a fixed pepper (bytes 0..31), as computed by
 * Python's hmac module: a change of labels or salt shows here. */
static void test_subkey_vectors(apr_pool_t *p)
{
    static const struct {
        const char *label, *hex;
    } v[] = {
        {AUTHN_HMAC_LABEL_ENTRY,
         "344296a7c6a2d3c94717ce1fd3c95b0a769d49495a6931b33df86fa314ea55f0"},
        {AUTHN_HMAC_LABEL_USER,
         "117e5ddb00500d62c66cf24eefb8966208f03dc4efb5f80b3c5ebe9b740fecb8"},
        {AUTHN_HMAC_LABEL_VALUE,
         "12843ca6dc93bf6919934f6d460039194f3ace920acfa644673f97c33f041eb9"},
        {AUTHN_HMAC_LABEL_NEGATIVE,
         "a792f603736ab1740863fdf2b600e93768d0d8c62eced2a623b3b7ad44bfc85c"},
    };
    authn_hmac_secret_t *pep = NULL;
    unsigned char got[32], want[32], ossl[32];
    size_t i;

    CHECK(authn_hmac_secret_alloc(&pep, 32, p) == APR_SUCCESS);
    for (i = 0; i < 32; i++)
        pep->data[i] = (unsigned char)i;
    for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        authn_hmac_subkey(pep, v[i].label, got);
        hex_to(v[i].hex, want, sizeof(want));
        openssl_subkey(pep, v[i].label, ossl);
        CHECK(memcmp(got, want, 32) == 0);
        CHECK(memcmp(got, ossl, 32) == 0);
    }
}

static void test_mac_matches_hmac_of_encoding(apr_pool_t *p)
{
    authn_hmac_secret_t *pep = pepper(p, 7);
    authn_hmac_mac_t *m;
    unsigned char k1[32], k2[32], want[32], sub[32];
    size_t wl = 0;
    buf_t b = enc("/scope", "alice", 5, "secret", 6, "$2y$12$x");

    CHECK(authn_hmac_mac_create(&m, pep, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_compute(m, "/scope", 6, "alice", 5, "secret", 6,
                                 "$2y$12$x", 8, k1) == APR_SUCCESS);
    openssl_subkey(pep, AUTHN_HMAC_LABEL_ENTRY, sub);
    CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, sub, sizeof(sub), b.buf,
                    b.len, want, sizeof(want), &wl) != NULL);
    CHECK(wl == 32 && memcmp(k1, want, 32) == 0);
    /* The same input gives the same key; one changed byte a different one. */
    CHECK(authn_hmac_mac_compute(m, "/scope", 6, "alice", 5, "secret", 6,
                                 "$2y$12$x", 8, k2) == APR_SUCCESS);
    CHECK(memcmp(k1, k2, 32) == 0);
    CHECK(authn_hmac_mac_compute(m, "/scope", 6, "alice", 5, "secreT", 6,
                                 "$2y$12$x", 8, k2) == APR_SUCCESS);
    CHECK(memcmp(k1, k2, 32) != 0);
}

/* At each length of each field, across SHA-256's block boundaries: the
 * credential MAC is HMAC(entry subkey, digest | password), whether the
 * digest is worked out or given (as the index keeps it); the negative key
 * is the same under the negative subkey; the user id is HMAC(user subkey,
 * version | scope | user). */
static void test_mac_at_every_length(apr_pool_t *p)
{
    authn_hmac_secret_t *pep = pepper(p, 9);
    authn_hmac_mac_t *m;
    unsigned char k[32], want[32], sub[32], usub[32], nsub[32], d[32];
    char s[600];
    size_t wl = 0, n;
    buf_t b;

    memset(s, 'x', sizeof(s));
    s[sizeof(s) - 1] = '\0';
    CHECK(authn_hmac_mac_create(&m, pep, p) == APR_SUCCESS);
    openssl_subkey(pep, AUTHN_HMAC_LABEL_ENTRY, sub);
    openssl_subkey(pep, AUTHN_HMAC_LABEL_USER, usub);
    openssl_subkey(pep, AUTHN_HMAC_LABEL_NEGATIVE, nsub);
    for (n = 0; n < 300; n++) {
        const char *f = s + sizeof(s) - 1 - n; /* n bytes */
        int field;

        for (field = 0; field < 4; field++) {
            const char *sc = field == 0 ? f : "/s", *u = field == 1 ? f : "u",
                       *pw = field == 2 ? f : "pw", *h = field == 3 ? f : "h";

            b = enc(sc, u, strlen(u), pw, strlen(pw), h);
            authn_hmac_mac_compute(m, sc, strlen(sc), u, strlen(u), pw,
                                   strlen(pw), h, strlen(h), k);
            CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, sub,
                            sizeof(sub), b.buf, b.len, want, sizeof(want),
                            &wl) != NULL);
            CHECK(memcmp(k, want, 32) == 0);
            authn_hmac_cred_digest(sc, strlen(sc), u, strlen(u), h, strlen(h),
                                   d);
            memset(k, 0, sizeof(k));
            authn_hmac_cred_mac(m, d, pw, strlen(pw), k);
            CHECK(memcmp(k, want, 32) == 0);
            CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, nsub,
                            sizeof(nsub), b.buf, b.len, want, sizeof(want),
                            &wl) != NULL);
            authn_hmac_negative_key(m, sc, strlen(sc), u, strlen(u), pw,
                                    strlen(pw), h, strlen(h), k);
            CHECK(memcmp(k, want, 32) == 0);
            memset(k, 0, sizeof(k));
            authn_hmac_cred_negative(m, d, pw, strlen(pw), k);
            CHECK(memcmp(k, want, 32) == 0);
        }
        b = head("/s", f, n);
        authn_hmac_user_id(m, "/s", 2, f, n, k);
        CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, usub, sizeof(usub),
                        b.buf, b.len, want, sizeof(want), &wl) != NULL);
        CHECK(memcmp(k, want, 32) == 0);
    }
}

/* The user id is HMAC(user subkey, version | scope | user), and the pepper
 * itself is never the key of any MAC. Peppers longer than SHA-256's block
 * go through HKDF like any other. */
static void test_user_id_and_long_pepper(apr_pool_t *p)
{
    authn_hmac_secret_t *pep = NULL;
    authn_hmac_mac_t *m;
    unsigned char id[32], want[32], sub[32], k[32], raw[32];
    size_t wl = 0, i;
    buf_t b;

    CHECK(authn_hmac_secret_random(&pep, 200, p) == APR_SUCCESS);
    for (i = 0; i < pep->len; i++)
        pep->data[i] = (unsigned char)i;
    CHECK(authn_hmac_mac_create(&m, pep, p) == APR_SUCCESS);
    authn_hmac_user_id(m, "/s", 2, "u", 1, id);
    b = head("/s", "u", 1);
    openssl_subkey(pep, AUTHN_HMAC_LABEL_USER, sub);
    CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, sub, sizeof(sub), b.buf,
                    b.len, want, sizeof(want), &wl) != NULL);
    CHECK(memcmp(id, want, 32) == 0);
    authn_hmac_mac_compute(m, "/s", 2, "u", 1, "pw", 2, "h", 1, k);
    b = enc("/s", "u", 1, "pw", 2, "h");
    CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, pep->data, pep->len,
                    b.buf, b.len, raw, sizeof(raw), &wl) != NULL);
    CHECK(memcmp(k, raw, 32) != 0);
}

/* A Redis value verifies only for the user and pepper it was made for, and
 * only whole; a value of another version is a plain miss (-1). */
static void test_value_tag(apr_pool_t *p)
{
    authn_hmac_mac_t *m, *other;
    unsigned char uid[32], uid2[32], k1[32], k2[32];
    authn_hmac_entries_t es, got;
    char v[AUTHN_HMAC_VALUE_MAX], w[AUTHN_HMAC_VALUE_MAX + 8];
    apr_time_t now = apr_time_from_sec(1700000000), vt = 0, ut = 0;
    size_t len, i;

    CHECK(authn_hmac_mac_create(&m, pepper(p, 3), p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&other, pepper(p, 4), p) == APR_SUCCESS);
    authn_hmac_user_id(m, "/s", 2, "alice", 5, uid);
    authn_hmac_user_id(m, "/s", 2, "bob", 3, uid2);
    authn_hmac_mac_compute(m, "/s", 2, "alice", 5, "pw1", 3, "h", 1, k1);
    authn_hmac_mac_compute(m, "/s", 2, "alice", 5, "pw2", 3, "h", 1, k2);
    es.n = 0;
    authn_hmac_entries_add(&es, k1, now - apr_time_from_sec(10),
                           now - apr_time_from_sec(4));
    authn_hmac_entries_add(&es, k2, now, now);
    CHECK(es.n == 2);
    len = authn_hmac_value_encode(m, uid, &es, v);
    CHECK(len == strlen(v) && len < AUTHN_HMAC_VALUE_MAX && v[0] == '4');
    CHECK(authn_hmac_value_decode(m, uid, v, len, &got) == 1 && got.n == 2);
    CHECK(authn_hmac_entries_find(&got, k1, now, WEEK, apr_time_from_sec(300),
                                  &vt, &ut));
    CHECK(vt == now - apr_time_from_sec(10) &&
          ut == now - apr_time_from_sec(4));
    CHECK(authn_hmac_entries_find(&got, k2, now, WEEK, apr_time_from_sec(300),
                                  &vt, &ut));
    /* Replayed under another user, or read with another pepper. */
    CHECK(authn_hmac_value_decode(m, uid2, v, len, &got) == 0 && got.n == 0);
    CHECK(authn_hmac_value_decode(other, uid, v, len, &got) == 0);
    /* Truncated anywhere, or one byte more. */
    for (i = 0; i < len; i++)
        CHECK(authn_hmac_value_decode(m, uid, v, i, &got) == 0);
    memcpy(w, v, len);
    w[len] = '0';
    CHECK(authn_hmac_value_decode(m, uid, w, len + 1, &got) == 0);
    /* Any one byte changed: a time moved on, a MAC swapped, the tag. */
    for (i = 0; i < len; i++) {
        memcpy(w, v, len);
        w[i] = w[i] == 'f' ? 'e' : (w[i] == ':' ? '0' : 'f');
        CHECK(authn_hmac_value_decode(m, uid, w, len, &got) == 0 && got.n == 0);
    }
    /* What version 1 wrote (a bare time), what version 3 wrote (the same
     * layout, times (stored, expires)), what a later version may write:
     * another version, a plain miss. */
    CHECK(authn_hmac_value_decode(m, uid, "1700000000000000", 16, &got) == -1 &&
          got.n == 0);
    memcpy(w, v, len);
    w[0] = '3';
    CHECK(authn_hmac_value_decode(m, uid, w, len, &got) == -1 && got.n == 0);
    w[0] = '5';
    CHECK(authn_hmac_value_decode(m, uid, w, len, &got) == -1 && got.n == 0);
    /* Idle longer than the TTL; a section with a shorter max age sees
     * less. */
    CHECK(authn_hmac_value_decode(m, uid, v, len, &got) == 1);
    CHECK(!authn_hmac_entries_find(&got, k1, now, apr_time_from_sec(4),
                                   apr_time_from_sec(300), &vt, &ut));
    CHECK(authn_hmac_entries_find(&got, k1, now, apr_time_from_sec(5),
                                  apr_time_from_sec(11), &vt, &ut));
    CHECK(!authn_hmac_entries_find(&got, k1, now, WEEK, apr_time_from_sec(10),
                                   &vt, &ut));
}

/* One entry serves sections of every TTL: each applies its own idle
 * timeout to the last use, and its own max age to the verification. */
static void test_entries_idle_timeout(apr_pool_t *p)
{
    unsigned char k[32];
    authn_hmac_entries_t es;
    apr_time_t now = apr_time_from_sec(1000000), vt = 0, ut = 0;

    (void)p;
    memset(k, 7, sizeof(k));
    es.n = 0;
    authn_hmac_entries_add(&es, k, now - apr_time_from_sec(100),
                           now - apr_time_from_sec(40));
    CHECK(authn_hmac_entries_find(&es, k, now, apr_time_from_sec(300),
                                  apr_time_from_sec(3600), &vt, &ut) &&
          vt == now - apr_time_from_sec(100) &&
          ut == now - apr_time_from_sec(40));
    /* Idle 40 s: live for a 60 s TTL, not for a 30 s one. */
    CHECK(authn_hmac_entries_find(&es, k, now, apr_time_from_sec(60),
                                  apr_time_from_sec(3600), &vt, &ut));
    CHECK(!authn_hmac_entries_find(&es, k, now, apr_time_from_sec(30),
                                   apr_time_from_sec(3600), &vt, &ut));
    /* Used just now under a long TTL: still live for the short one (the
     * fight this format ends: an expiry made for 300 s was refused by a
     * section of 60 s, which verified again). */
    authn_hmac_entries_add(&es, k, now - apr_time_from_sec(100), now);
    CHECK(authn_hmac_entries_find(&es, k, now, apr_time_from_sec(60),
                                  apr_time_from_sec(3600), &vt, &ut) &&
          ut == now);
    /* The max age bounds it from the verification, however recent the
     * last use. */
    CHECK(authn_hmac_entries_find(&es, k, now, apr_time_from_sec(300),
                                  apr_time_from_sec(101), &vt, &ut));
    CHECK(!authn_hmac_entries_find(&es, k, now, apr_time_from_sec(300),
                                   apr_time_from_sec(100), &vt, &ut));
    /* Another server's clock a little ahead: taken as now. Far ahead: not
     * trusted. */
    es.n = 0;
    authn_hmac_entries_add(&es, k, now + apr_time_from_sec(3),
                           now + apr_time_from_sec(3));
    CHECK(authn_hmac_entries_find(&es, k, now, apr_time_from_sec(60),
                                  apr_time_from_sec(3600), &vt, &ut) &&
          vt == now && ut == now);
    es.n = 0;
    authn_hmac_entries_add(&es, k, now - apr_time_from_sec(3),
                           now + apr_time_from_sec(60));
    CHECK(!authn_hmac_entries_find(&es, k, now, apr_time_from_sec(60),
                                   apr_time_from_sec(3600), &vt, &ut));
    /* Verified again here, with this clock: the times from that clock
     * are not kept (the entry would stay unreadable until they came; found
     * by review), for this key or another. */
    es.e[1] = es.e[0];
    es.e[1].mac[0] ^= 1;
    es.n = 2;
    authn_hmac_entries_add(&es, k, now, now);
    CHECK(es.n == 1);
    CHECK(authn_hmac_entries_find(&es, k, now, apr_time_from_sec(60),
                                  apr_time_from_sec(3600), &vt, &ut) &&
          vt == now && ut == now);
}

/* A user keeps its most recently used entries only: a third replaces the
 * least recently used; adding a key again keeps the later of its times. */
static void test_entries_newest_kept(apr_pool_t *p)
{
    unsigned char k[3][32];
    authn_hmac_entries_t es;
    apr_time_t now = apr_time_from_sec(1000), vt, ut;
    int i;

    (void)p;
    es.n = 0;
    for (i = 0; i < 3; i++) {
        memset(k[i], i + 1, 32);
        authn_hmac_entries_add(&es, k[i], now + i, now + i);
    }
    CHECK(es.n == AUTHN_HMAC_PER_USER);
    CHECK(!authn_hmac_entries_find(&es, k[0], now + 3, WEEK, 1000, &vt, &ut));
    CHECK(authn_hmac_entries_find(&es, k[1], now + 3, WEEK, 1000, &vt, &ut));
    CHECK(authn_hmac_entries_find(&es, k[2], now + 3, WEEK, 1000, &vt, &ut));
    /* Adding a key again refreshes it instead of keeping two copies. */
    authn_hmac_entries_add(&es, k[1], now + 1, now + 5);
    CHECK(es.n == 2 && memcmp(es.e[0].mac, k[1], 32) == 0 &&
          memcmp(es.e[1].mac, k[2], 32) == 0 && es.e[0].used == now + 5);
    /* A writer with older times (it read them before another server's
     * refresh) does not move them back. */
    authn_hmac_entries_add(&es, k[1], now + 1, now + 3);
    CHECK(es.e[0].verified == now + 1 && es.e[0].used == now + 5);
    /* The most recently used other entry is kept, whatever its age. */
    authn_hmac_entries_add(&es, k[0], now + 6, now + 6);
    CHECK(es.n == 2 && memcmp(es.e[1].mac, k[1], 32) == 0);
}

static void test_mac_depends_on_pepper(apr_pool_t *p)
{
    authn_hmac_mac_t *m1, *m2;
    unsigned char k1[32], k2[32];

    CHECK(authn_hmac_mac_create(&m1, pepper(p, 1), p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&m2, pepper(p, 2), p) == APR_SUCCESS);
    authn_hmac_mac_compute(m1, "/s", 2, "u", 1, "p", 1, "h", 1, k1);
    authn_hmac_mac_compute(m2, "/s", 2, "u", 1, "p", 1, "h", 1, k2);
    CHECK(memcmp(k1, k2, 32) != 0);
}

static const char *write_file(apr_pool_t *p, const char *dir, const char *name,
                              size_t len, mode_t mode)
{
    const char *path = apr_pstrcat(p, dir, "/", name, NULL);
    FILE *f = fopen(path, "w");
    size_t i;

    for (i = 0; i < len; i++)
        fputc('k', f);
    fclose(f);
    chmod(path, mode);
    return path;
}

static void test_secret_file_checks(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    authn_hmac_secret_t *s = NULL;
    const char *err;

    CHECK(mkdtemp(dir) != NULL);
    err = authn_hmac_secret_read(&s, write_file(p, dir, "ok", 40, 0600), 32,
                                 1024, p);
    CHECK(err == NULL && s && s->len == 40 && s->data[39] == 'k');
    err = authn_hmac_secret_read(&s, write_file(p, dir, "short", 31, 0600), 32,
                                 1024, p);
    CHECK(err && strstr(err, "31 bytes"));
    err = authn_hmac_secret_read(&s, write_file(p, dir, "g", 40, 0640), 32,
                                 1024, p);
    CHECK(err && strstr(err, "group or others"));
    err = authn_hmac_secret_read(&s, write_file(p, dir, "o", 40, 0604), 32,
                                 1024, p);
    CHECK(err && strstr(err, "group or others"));
    err = authn_hmac_secret_read(&s, apr_pstrcat(p, dir, "/none", NULL), 32,
                                 1024, p);
    CHECK(err && strstr(err, "cannot open"));
    /* A symbolic link, even to a good file: refused, naming the file. */
    CHECK(symlink(apr_pstrcat(p, dir, "/ok", NULL),
                  apr_pstrcat(p, dir, "/link", NULL)) == 0);
    err = authn_hmac_secret_read(&s, apr_pstrcat(p, dir, "/link", NULL), 32,
                                 1024, p);
    CHECK(err && strstr(err, "is a symbolic link, and those are refused") &&
          strstr(err, "/ok')"));
    /* NB: no message may quote the file's contents. */
    CHECK(err && !strstr(err, "kkkk"));
    CHECK(system(apr_pstrcat(p, "rm -rf ", dir, NULL)) == 0);
}

static apr_interval_time_t time_check(const char *password, const char *hash,
                                      apr_status_t *rv)
{
    apr_time_t t0 = apr_time_now();

    *rv = apr_password_validate(password, hash);
    return apr_time_now() - t0;
}

static int by_time(const void *a, const void *b)
{
    apr_interval_time_t x = *(const apr_interval_time_t *)a;
    apr_interval_time_t y = *(const apr_interval_time_t *)b;

    return x < y ? -1 : x > y;
}

/* The dummy hash: the template's scheme and cost, the same under one
 * pepper and another under another, and matched by no password, not even
 * the template's own (the dummy was a user's own hash, an oracle for its
 * password). Each scheme the verifier knows, by apr_password_validate. A
 * bcrypt dummy costs what its template costs: medians of 5 checks each, in
 * turns. */
static void test_dummy_hash(apr_pool_t *p)
{
    static const unsigned char salt[16] = "0123456789abcdef";
    char bc[64], bc4[64], md5[64], sha[64];
    const char *tmpl[9];
    authn_hmac_secret_t *pep = NULL, *pep2 = NULL;
    authn_hmac_mac_t *mac = NULL, *mac2 = NULL;
    char d[AUTHN_HMAC_DUMMY_MAX], d2[AUTHN_HMAC_DUMMY_MAX];
    apr_interval_time_t td[5], tt[5];
    apr_status_t rv;
    size_t i, n;

    CHECK(authn_hmac_secret_random(&pep, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_secret_random(&pep2, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mac, pep, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mac2, pep2, p) == APR_SUCCESS);
    CHECK(apr_bcrypt_encode("secret", 8, salt, sizeof(salt), bc, sizeof(bc)) ==
          APR_SUCCESS);
    CHECK(apr_bcrypt_encode("secret", 4, salt, sizeof(salt), bc4,
                            sizeof(bc4)) == APR_SUCCESS);
    CHECK(apr_md5_encode("secret", "$apr1$abcdefgh$", md5, sizeof(md5)) ==
          APR_SUCCESS);
    apr_sha1_base64("secret", 6, sha);
    tmpl[0] = bc;
    tmpl[1] = bc4;
    tmpl[2] = md5;
    tmpl[3] = sha;
    /* glibc's crypt(3), as Python's crypt.crypt("secret", salt) wrote. */
    tmpl[4] =
        "$6$abcdefghijklmnop$J/AWykHqo2Tx5UtavGnFc3ytI33la50JpzLTarSWVhkIX"
        "K6wOjNwwZjsrIw2UgmrER2EKrSHCeQyAINEEXAk1/";
    tmpl[5] = "$5$abcdefghijklmnop$i7zHaTeYqXlesRXJ8dXj6o.MEFQdzfIJpJpcWAtszs6";
    tmpl[6] =
        "$6$rounds=20000$abcdefgh$y0G/BDQHO.jY7VjD9./AAFQmNb1Ovdf17iiMzLKb"
        "vrzipJpL63kWQVUpkzEScr8D.45iKzhY./gHQ79P3Xexr.";
    tmpl[7] = "$1$abcdefgh$cHJi5PXp/ki/ktXzqlk6I1";
    tmpl[8] = "abNANd1rDfiNc"; /* DES */
    for (i = 0; i < sizeof(tmpl) / sizeof(tmpl[0]); i++) {
        const char *cut = strrchr(tmpl[i], '$');
        size_t keep = tmpl[i][0] == '$'   ? (size_t)(cut - tmpl[i]) + 1
                      : tmpl[i][0] == '{' ? 5
                                          : 0;

        CHECK(apr_password_validate("secret", tmpl[i]) == APR_SUCCESS);
        n = authn_hmac_dummy_hash(mac, tmpl[i], strlen(tmpl[i]), d);
        CHECK(n == strlen(tmpl[i]) && strlen(d) == n);
        CHECK(strncmp(d, tmpl[i], keep) == 0); /* scheme and cost */
        CHECK(strcmp(d, tmpl[i]) != 0);
        CHECK(apr_password_validate("secret", d) == APR_EMISMATCH);
        CHECK(apr_password_validate("", d) == APR_EMISMATCH);
        CHECK(authn_hmac_dummy_hash(mac, tmpl[i], strlen(tmpl[i]), d2) == n &&
              strcmp(d, d2) == 0);
        CHECK(authn_hmac_dummy_hash(mac2, tmpl[i], strlen(tmpl[i]), d2) == n &&
              strcmp(d, d2) != 0);
    }
    /* The salt part of bcrypt's dummy is not the template's. */
    n = authn_hmac_dummy_hash(mac, bc, strlen(bc), d);
    CHECK(strncmp(d + 7, bc + 7, 22) != 0);
    for (i = 0; i < 5; i++) {
        td[i] = time_check("guess", d, &rv);
        CHECK(rv == APR_EMISMATCH);
        tt[i] = time_check("guess", bc, &rv);
        CHECK(rv == APR_EMISMATCH);
    }
    qsort(td, 5, sizeof(td[0]), by_time);
    qsort(tt, 5, sizeof(tt[0]), by_time);
    printf("  bcrypt cost 8: dummy %" APR_TIME_T_FMT
           " us, template %" APR_TIME_T_FMT " us (medians)\n",
           td[2], tt[2]);
    CHECK(td[2] * 2 > tt[2] && tt[2] * 2 > td[2]);
    CHECK(authn_hmac_dummy_hash(mac, "", 0, d) == 0);
    CHECK(authn_hmac_dummy_hash(mac, "$2y$05$", 7, d) == 0);
    CHECK(authn_hmac_dummy_hash(mac, "{SHA}=", 6, d) == 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_encoding_layout, p);
    RUN(test_split_points_differ, p);
    RUN(test_encoding_injective, p);
    RUN(test_scope_and_hash_matter, p);
    RUN(test_hkdf_rfc5869, p);
    RUN(test_subkey_vectors, p);
    RUN(test_mac_matches_hmac_of_encoding, p);
    RUN(test_mac_at_every_length, p);
    RUN(test_user_id_and_long_pepper, p);
    RUN(test_value_tag, p);
    RUN(test_entries_newest_kept, p);
    RUN(test_entries_idle_timeout, p);
    RUN(test_mac_depends_on_pepper, p);
    RUN(test_secret_file_checks, p);
    RUN(test_dummy_hash, p);
    return unit_end();
}
