/* libFuzzer target: Redis replies as the module reads them. The bytes are
 * fed to hiredis's reader as if they came from the server; the first two
 * replies are taken as the answers to GET and PTTL. Nothing malformed may
 * be a hit, and a hit must be bounded. */
#include "authn_hmac.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_time_t now = (apr_time_t)1700000000 * APR_USEC_PER_SEC;
    apr_interval_time_t ttl = apr_time_from_sec(300);
    apr_time_t stored = 0, expires = 0;
    redisReader *rd = redisReaderCreate();
    void *get = NULL, *pttl = NULL;
    int found = 0;
    authn_hmac_redis_rc rc;

    /* As the module reads them: with arrays bounded. */
    if (!authn_hmac_redis_limit_reader(rd))
        abort();
    redisReaderFeed(rd, (const char *)data, size);
    if (redisReaderGetReply(rd, &get) == REDIS_OK && get)
        (void)redisReaderGetReply(rd, &pttl);
    rc = authn_hmac_redis_interpret(get, pttl, now, ttl, &found, &stored,
                                    &expires);
    if (found && (rc != AUTHN_HMAC_REDIS_OK || expires <= now ||
                  expires > now + ttl || stored > now || now - stored >= ttl))
        abort();
    if (get)
        freeReplyObject(get);
    if (pttl)
        freeReplyObject(pttl);
    redisReaderFree(rd);
    return 0;
}
