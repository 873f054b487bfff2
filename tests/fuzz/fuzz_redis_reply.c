/* libFuzzer target: Redis replies as the module reads them. The bytes are
 * fed to hiredis's reader (arrays bounded) as if they came from the server,
 * and the first reply is taken as the answer to GET of a user's entry, and
 * of a farm marker; the same bytes are also read as a value and as a
 * marker. Whatever the bytes, nothing may verify (no entry, no farm
 * result): only the pepper makes a tag, and the fuzzer does not have it. */
#include "redis/redis.h"
#include "core/cred.h"
#include "core/secret.h"
#include "testing/testing.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static apr_pool_t *root;
    static authn_hmac_mac_t *mac;
    static unsigned char uid[AUTHN_HMAC_KEY_LEN], key[AUTHN_HMAC_KEY_LEN];
    const apr_time_t now = apr_time_from_sec(1700000000);
    authn_hmac_farm_state fs;
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
        authn_hmac_mac_compute(mac, "/s", 2, "alice", 5, "pw", 2, "h", 1, key);
    }
    if (!authn_hmac_redis_limit_reader(rd))
        abort();
    redisReaderFeed(rd, (const char *)data, size);
    if (redisReaderGetReply(rd, &get) == REDIS_OK && get) {
        if (authn_hmac_redis_interpret(get, mac, uid, &es, &st) ==
                AUTHN_HMAC_REDIS_OK &&
            (st == AUTHN_HMAC_VALUE_VALID || es.n != 0))
            abort();
        if (((redisReply *)get)->type == REDIS_REPLY_STRING) {
            fs = authn_hmac_flight_interpret(mac, key, ((redisReply *)get)->str,
                                             ((redisReply *)get)->len, now);
            if (fs == AUTHN_HMAC_FARM_GRANTED || fs == AUTHN_HMAC_FARM_REFUSED)
                abort();
        }
        freeReplyObject(get);
    }
    fs = authn_hmac_flight_interpret(mac, key, (const char *)data, size, now);
    if (fs == AUTHN_HMAC_FARM_GRANTED || fs == AUTHN_HMAC_FARM_REFUSED)
        abort();
    if (authn_hmac_value_decode(mac, uid, (const char *)data, size, &es) == 1 ||
        es.n != 0)
        abort();
    redisReaderFree(rd);
    return 0;
}
