/* libFuzzer target: the credential encoding and its MAC. The input is cut
 * into (scope, user, password, hash); the encoding of scope, user and hash
 * must decode back to the same fields, so that no two inputs can share it,
 * and the MAC made from its digest must be the MAC of the whole. */
#include "core/cred.h"
#include "core/secret.h"
#include "testing/testing.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *buf;
    size_t len, cap;
} out_t;

static void sink(void *baton, const void *data, size_t len)
{
    out_t *o = baton;

    if (o->len + len > o->cap)
        abort();
    memcpy(o->buf + o->len, data, len);
    o->len += len;
}

static uint32_t get_u32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
           b[3];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static apr_pool_t *root;

/* NB: APR may keep pool memory in mmap()ed blocks that LeakSanitizer does
 * not scan; free the MAC's OpenSSL state before it looks. */
static void done(void)
{
    apr_pool_destroy(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static authn_hmac_mac_t *mac;
    const char *f[4];
    size_t fl[4], cut[3], i, pos = 0, n;
    unsigned char key[AUTHN_HMAC_KEY_LEN], key2[AUTHN_HMAC_KEY_LEN];
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];
    static const int encoded[3] = {0, 1, 3}; /* the password is not */
    out_t o;

    if (!root) {
        authn_hmac_secret_t *pep;

        apr_initialize();
        apr_pool_create(&root, NULL);
        authn_hmac_secret_random(&pep, 32, root);
        authn_hmac_mac_create(&mac, pep, root);
        atexit(done);
    }
    if (size < 3)
        return 0;
    /* The first three bytes choose where to cut the rest. */
    for (i = 0; i < 3; i++)
        cut[i] = size > 3 ? data[i] % (size - 3 + 1) : 0;
    data += 3;
    size -= 3;
    for (i = 0; i < 4; i++) {
        size_t end = i < 3 ? cut[i] : size;

        if (end < pos)
            end = pos;
        f[i] = (const char *)data + pos;
        fl[i] = end - pos;
        pos = end;
    }
    o.cap = size + 4 + 3 * 4;
    o.buf = malloc(o.cap);
    o.len = 0;
    n = authn_hmac_encode(sink, &o, f[0], fl[0], f[1], fl[1], f[3], fl[3]);
    if (n != o.len || n != size - fl[2] + 16)
        abort();
    /* Decode: version, then three length-prefixed fields, nothing left. */
    if (get_u32(o.buf) != AUTHN_HMAC_ENCODING_VERSION)
        abort();
    pos = 4;
    for (i = 0; i < 3; i++) {
        uint32_t l = get_u32(o.buf + pos);

        pos += 4;
        if (l != fl[encoded[i]] || memcmp(o.buf + pos, f[encoded[i]], l) != 0)
            abort();
        pos += l;
    }
    if (pos != o.len)
        abort();
    free(o.buf);
    if (authn_hmac_mac_compute(mac, f[0], fl[0], f[1], fl[1], f[2], fl[2], f[3],
                               fl[3], key) != APR_SUCCESS)
        abort();
    authn_hmac_cred_digest(f[0], fl[0], f[1], fl[1], f[3], fl[3], d);
    authn_hmac_cred_mac(mac, d, f[2], fl[2], key2);
    if (memcmp(key, key2, sizeof(key)) != 0)
        abort();
    return 0;
}
