/* annex.c: the layout of the shared segment's annex (shm/table.h), which
 * the table sets aside without knowing what it holds: the Redis health,
 * then the Sentinel's primary, each from a cache line, then the sources'
 * outages (offline.c). NB: a change here is a change of the segment's
 * layout (TABLE_MAGIC, shm/table.c). */
#include "request/annex.h"

typedef struct {
    authn_hmac_redis_health_t redis;
    char pad0[64 - sizeof(authn_hmac_redis_health_t) % 64];
    authn_hmac_sentinel_shared_t sentinel;
    char pad1[64 - sizeof(authn_hmac_sentinel_shared_t) % 64];
    authn_hmac_outage_t outage[AUTHN_HMAC_OUTAGES];
} annex_t;

typedef char
    annex_fits[sizeof(annex_t) <= AUTHN_HMAC_TABLE_ANNEX_BYTES ? 1 : -1];

static annex_t *annex(authn_hmac_table_t *t)
{
    return authn_hmac_table_annex(t);
}

authn_hmac_redis_health_t *authn_hmac_annex_redis_health(authn_hmac_table_t *t)
{
    return &annex(t)->redis;
}

authn_hmac_sentinel_shared_t *authn_hmac_annex_sentinel(authn_hmac_table_t *t)
{
    return &annex(t)->sentinel;
}

authn_hmac_outage_t *authn_hmac_annex_outages(authn_hmac_table_t *t)
{
    return annex(t)->outage;
}

void authn_hmac_annex_stats(authn_hmac_table_t *t, authn_hmac_stats_t *out)
{
    authn_hmac_redis_health_stats(&annex(t)->redis, out);
}
