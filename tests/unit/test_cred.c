/* Unit tests: credential encoding, MAC and secret files. */
#include "authn_hmac.h"
#include "unit.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <apr_strings.h>
#include <openssl/evp.h>

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

static buf_t enc(const char *scope, const char *u, size_t ul, const char *pw,
                 size_t pl, const char *h)
{
    buf_t b;

    b.len = 0;
    authn_hmac_encode(to_buf, &b, scope, strlen(scope), u, ul, pw, pl, h,
                      strlen(h));
    return b;
}

static int same(const buf_t *a, const buf_t *b)
{
    return a->len == b->len && memcmp(a->buf, b->buf, a->len) == 0;
}

static void test_encoding_layout(apr_pool_t *p)
{
    buf_t b = enc("S", "ab", 2, "c", 1, "H");
    static const unsigned char want[] = {0, 0,   0, 1, 0,   0,   0,  1, 'S',
                                         0, 0,   0, 2, 'a', 'b', 0,  0, 0,
                                         1, 'c', 0, 0, 0,   1,   'H'};

    (void)p;
    CHECK(b.len == sizeof(want));
    CHECK(memcmp(b.buf, want, sizeof(want)) == 0);
}

static void test_split_points_differ(apr_pool_t *p)
{
    buf_t a = enc("/x", "ab", 2, "c", 1, "h");
    buf_t b = enc("/x", "a", 1, "bc", 2, "h");
    buf_t c = enc("/x", "a:b", 3, "c", 1, "h");
    buf_t d = enc("/x", "a", 1, "b:c", 3, "h");
    buf_t e = enc("/x", "a\0b", 3, "c", 1, "h");
    buf_t f = enc("/x", "a", 1, "b\0c", 3, "h");

    (void)p;
    CHECK(!same(&a, &b));
    CHECK(!same(&c, &d));
    CHECK(!same(&e, &f));
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
    buf_t a = enc("/a", "u", 1, "p", 1, "h");
    buf_t b = enc("/b", "u", 1, "p", 1, "h");
    buf_t c = enc("/a", "u", 1, "p", 1, "h2");

    (void)p;
    CHECK(!same(&a, &b));
    CHECK(!same(&a, &c));
}

static authn_hmac_secret_t *pepper(apr_pool_t *p, unsigned char fill)
{
    authn_hmac_secret_t *s = NULL;

    CHECK(authn_hmac_secret_random(&s, 32, p) == APR_SUCCESS);
    memset(s->data, fill, s->len);
    return s;
}

static void test_mac_matches_hmac_of_encoding(apr_pool_t *p)
{
    authn_hmac_secret_t *pep = pepper(p, 7);
    authn_hmac_mac_t *m;
    unsigned char k1[32], k2[32], want[32];
    size_t wl = 0;
    buf_t b = enc("/scope", "alice", 5, "secret", 6, "$2y$12$x");

    CHECK(authn_hmac_mac_create(&m, pep, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_compute(m, "/scope", 6, "alice", 5, "secret", 6,
                                 "$2y$12$x", 8, k1) == APR_SUCCESS);
    CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, pep->data, pep->len,
                    b.buf, b.len, want, sizeof(want), &wl) != NULL);
    CHECK(wl == 32 && memcmp(k1, want, 32) == 0);
    /* The same input gives the same key; one changed byte a different one. */
    CHECK(authn_hmac_mac_compute(m, "/scope", 6, "alice", 5, "secret", 6,
                                 "$2y$12$x", 8, k2) == APR_SUCCESS);
    CHECK(memcmp(k1, k2, 32) == 0);
    CHECK(authn_hmac_mac_compute(m, "/scope", 6, "alice", 5, "secreT", 6,
                                 "$2y$12$x", 8, k2) == APR_SUCCESS);
    CHECK(memcmp(k1, k2, 32) != 0);
}

/* Peppers longer than SHA-256's block are hashed first (RFC 2104). */
static void test_mac_with_long_pepper(apr_pool_t *p)
{
    authn_hmac_secret_t *pep = NULL;
    authn_hmac_mac_t *m;
    unsigned char k[32], want[32];
    size_t wl = 0, i;
    buf_t b = enc("/s", "u", 1, "pw", 2, "h");

    CHECK(authn_hmac_secret_random(&pep, 200, p) == APR_SUCCESS);
    for (i = 0; i < pep->len; i++)
        pep->data[i] = (unsigned char)i;
    CHECK(authn_hmac_mac_create(&m, pep, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_compute(m, "/s", 2, "u", 1, "pw", 2, "h", 1, k) ==
          APR_SUCCESS);
    CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, pep->data, pep->len,
                    b.buf, b.len, want, sizeof(want), &wl) != NULL);
    CHECK(wl == 32 && memcmp(k, want, 32) == 0);
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
    /* NB: no message may quote the file's contents. */
    CHECK(err && !strstr(err, "kkkk"));
    CHECK(system(apr_pstrcat(p, "rm -rf ", dir, NULL)) == 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_encoding_layout, p);
    RUN(test_split_points_differ, p);
    RUN(test_encoding_injective, p);
    RUN(test_scope_and_hash_matter, p);
    RUN(test_mac_matches_hmac_of_encoding, p);
    RUN(test_mac_with_long_pepper, p);
    RUN(test_mac_depends_on_pepper, p);
    RUN(test_secret_file_checks, p);
    return unit_end();
}
