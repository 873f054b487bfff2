/* request/annex.h: what the Redis tier keeps in the shared segment, in
 * the annex the table sets aside for the layers above it (shm/table.h):
 * the Redis health (redis/redis.h) and, with Sentinel, the primary
 * (redis/sentinel.h); then the sources' outages (request/offline.c). The table
 * names no Redis type; this lays them out (src/request/annex.c). */
#ifndef AUTHN_HMAC_ANNEX_H
#define AUTHN_HMAC_ANNEX_H

#include "redis/redis.h"
#include "redis/sentinel.h"
#include "shm/table.h"

authn_hmac_redis_health_t *authn_hmac_annex_redis_health(authn_hmac_table_t *t);

authn_hmac_sentinel_shared_t *authn_hmac_annex_sentinel(authn_hmac_table_t *t);

/* A source's errors since its last answer (src/request/offline.c), one
 * record per source, AUTHN_HMAC_OUTAGES of them; written under the
 * writers' mutex (authn_hmac_table_lock). */
typedef struct {
    uint64_t source; /* 64 bits of a MAC of its scope; 0: a free record */
    int64_t since;  /* apr_time_t: its first error; 0: none since it answered */
    uint64_t first; /* the user id (its first 64 bits) of that error */
    uint64_t others; /* 1: another user's error since */
} authn_hmac_outage_t;

#define AUTHN_HMAC_OUTAGES 8

authn_hmac_outage_t *authn_hmac_annex_outages(authn_hmac_table_t *t);

/* The Redis tier's counts in the status record, after the table's
 * (authn_hmac_table_stats, which leaves them 0). */
void authn_hmac_annex_stats(authn_hmac_table_t *t, authn_hmac_stats_t *out);

#endif /* AUTHN_HMAC_ANNEX_H */
