/* libFuzzer target: the htpasswd parser and index lookups. */
#include "sources/htpasswd.h"
#include "testing/testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ignore(void *baton, int level, const char *msg)
{
    unsigned lineno;
    int at = 0;

    (void)baton;
    (void)level;
    if (sscanf(msg, AUTHN_HMAC_INDEX_LINE "%n", &lineno, &at) != 1 || !at ||
        !msg[at])
        abort(); /* every bad line must say which and why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static apr_pool_t *root;
    apr_pool_t *p;
    authn_hmac_htpasswd_t *idx = NULL;
    char *buf;
    size_t hl = 0;
    const char *h;

    if (!root) {
        apr_initialize();
        apr_pool_create(&root, NULL);
    }
    apr_pool_create(&p, root);
    /* Exactly the bytes plus the one spare byte the parser may write. */
    buf = malloc(size + 1);
    memcpy(buf, data, size);
    if (authn_hmac_htpasswd_parse(&idx, buf, size, ignore, NULL, p) !=
        APR_SUCCESS)
        abort();
    h = authn_hmac_htpasswd_get(idx, "alice", &hl);
    if (h && strlen(h) != hl)
        abort();
    (void)authn_hmac_htpasswd_get(idx, "", &hl);
    if (authn_hmac_htpasswd_count(idx) > size)
        abort();
    free(buf);
    apr_pool_destroy(p);
    return 0;
}
