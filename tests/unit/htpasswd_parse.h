/* htpasswd_parse.h: the htpasswd parser as the unit tests call it
 * (test_htpasswd, test_userfile): a copy parsed, its bad lines noted, and
 * whether a user has a hash. */
#ifndef AUTHN_HMAC_HTPASSWD_PARSE_H
#define AUTHN_HMAC_HTPASSWD_PARSE_H

#include "sources/htpasswd.h"
#include "testing/testing.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    unsigned lines[16];
    unsigned n;
} bad_t;

/* A bad line told: AUTHN_HMAC_INDEX_LINE, then what is wrong. */
static inline void note_bad(void *baton, int level, const char *msg)
{
    bad_t *b = baton;
    unsigned lineno = 0;
    int at = 0;

    CHECK(level == AUTHN_HMAC_LOG_WARNING);
    CHECK(sscanf(msg, AUTHN_HMAC_INDEX_LINE "%n", &lineno, &at) == 1 && at > 0);
    if (b->n < 16)
        b->lines[b->n] = lineno;
    b->n++;
    CHECK(at > 0 && msg[at]);
}

/* Parses a copy of s (with the spare byte the parser may write). */
static inline authn_hmac_htpasswd_t *parse(apr_pool_t *p, const char *s,
                                           size_t len, bad_t *bad)
{
    char *buf = apr_palloc(p, len + 1);
    authn_hmac_htpasswd_t *idx = NULL;

    memcpy(buf, s, len);
    memset(bad, 0, sizeof(*bad));
    CHECK(authn_hmac_htpasswd_parse(&idx, buf, len, note_bad, bad, p) ==
          APR_SUCCESS);
    return idx;
}

static inline int has(authn_hmac_htpasswd_t *idx, const char *user,
                      const char *hash)
{
    size_t len = 0;
    const char *h = authn_hmac_htpasswd_get(idx, user, &len);

    return h && len == strlen(hash) && memcmp(h, hash, len) == 0 &&
           h[len] == '\0';
}

#endif
