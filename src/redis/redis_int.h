/* redis_int.h: what the files of src/redis/ share, and no one else uses. */
#ifndef AUTHN_HMAC_REDIS_INT_H
#define AUTHN_HMAC_REDIS_INT_H

#include "authn_hmac.h"

/* An error reply's text, e.g. "WRONGPASS invalid username-password pair",
 * up to any quoted argument (conn.c). */
struct redisReply;
const char *authn_hmac_redis_reply_error(const struct redisReply *r,
                                         apr_pool_t *p);

#endif /* AUTHN_HMAC_REDIS_INT_H */
