/* unit.h: the smallest test harness that says what failed and where. */
#ifndef AUTHN_HMAC_UNIT_H
#define AUTHN_HMAC_UNIT_H

#include <stdio.h>
#include <stdlib.h>

#include <apr_general.h>
#include <apr_pools.h>

static int unit_failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            unit_failures++;                                                   \
        }                                                                      \
    } while (0)

#define RUN(fn, pool)                                                          \
    do {                                                                       \
        int before_ = unit_failures;                                           \
        fn(pool);                                                              \
        printf("%s %s\n", unit_failures == before_ ? "ok  " : "FAIL", #fn);    \
        apr_pool_clear(pool);                                                  \
    } while (0)

static apr_pool_t *unit_start(void)
{
    apr_pool_t *p;

    if (apr_initialize() != APR_SUCCESS || apr_pool_create(&p, NULL))
        abort();
    return p;
}

static int unit_end(void)
{
    if (unit_failures)
        fprintf(stderr, "%d check(s) failed\n", unit_failures);
    apr_terminate();
    return unit_failures ? 1 : 0;
}

#endif
