/* libFuzzer target: Redis replies as the module reads them. The bytes are
 * fed to hiredis's reader (arrays bounded) as if they came from the server,
 * and the first reply is taken as the answer to GET of a user's entry; the
 * same bytes are also read as a value. Whatever the bytes, nothing may
 * verify: only the pepper makes a tag, and the fuzzer does not have it. */
#include "authn_hmac.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static apr_pool_t *root;
    static authn_hmac_mac_t *mac;
    static unsigned char uid[AUTHN_HMAC_KEY_LEN];
    authn_hmac_entries_t es;
    authn_hmac_value_state st;
    redisReader *rd = redisReaderCreate();
    void *get = NULL;

    if (!root) {
        authn_hmac_secret_t *pep = NULL;

        apr_initialize();
        apr_pool_create(&root, NULL);
        if (authn_hmac_secret_random(&pep, 32, root) != APR_SUCCESS ||
            authn_hmac_mac_create(&mac, pep, root) != APR_SUCCESS)
            abort();
        authn_hmac_user_id(mac, "/s", 2, "alice", 5, uid);
    }
    if (!authn_hmac_redis_limit_reader(rd))
        abort();
    redisReaderFeed(rd, (const char *)data, size);
    if (redisReaderGetReply(rd, &get) == REDIS_OK && get) {
        if (authn_hmac_redis_interpret(get, mac, uid, &es, &st) ==
                AUTHN_HMAC_REDIS_OK &&
            (st == AUTHN_HMAC_VALUE_VALID || es.n != 0))
            abort();
        freeReplyObject(get);
    }
    if (authn_hmac_value_decode(mac, uid, (const char *)data, size, &es) == 1 ||
        es.n != 0)
        abort();
    redisReaderFree(rd);
    return 0;
}
