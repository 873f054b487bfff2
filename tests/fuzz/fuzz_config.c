/* libFuzzer target: the parsers of directive values (sizes, durations,
 * numbers, Redis server addresses) and of the status query string. */
#include "core/util.h"
#include "redis/redis.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static apr_pool_t *root;
    apr_pool_t *p;
    authn_hmac_redis_conf_t rc;
    char *s = malloc(size + 1);
    uint64_t v;

    if (!root) {
        apr_initialize();
        apr_pool_create(&root, NULL);
    }
    apr_pool_create(&p, root);
    memcpy(s, data, size);
    s[size] = '\0';
    if (!authn_hmac_parse_size(s, &v, p) && v == 0 && s[0] != '0')
        abort();
    (void)authn_hmac_parse_seconds(s, &v, p);
    if (!authn_hmac_parse_uint(s, 65535, &v) && v > 65535)
        abort();
    memset(&rc, 0, sizeof(rc));
    if (!authn_hmac_redis_parse_server(s, &rc, p)) {
        if (rc.socket ? rc.socket[0] != '/'
                      : !rc.host || !*rc.host || rc.port < 1 || rc.port > 65535)
            abort();
    }
    (void)authn_hmac_status_query(s);
    (void)authn_hmac_status_check(s);
    free(s);
    apr_pool_destroy(p);
    return 0;
}
