/* offline.c: a source's outage, as the server sees it. While a source the
 * module does not own (SQL, a wrapped provider) fails, the credentials it
 * confirmed within the section's offline grace are still served (the
 * sources' paths decide which); here they are counted, and the outage is
 * told once when it starts and once when it ends, for the whole server:
 * its start time is a gauge of the shared segment (offline_since_seconds),
 * set by the first grant served offline and cleared by the first answer
 * of a source after it. Rests on the segment's counters (shm/table.h). */
#include "request/engine.h"

void authn_hmac_offline_served(const authn_hmac_engine_t *e, const char *why,
                               void *baton)
{
    uint64_t now = (uint64_t)apr_time_sec(apr_time_now());

    authn_hmac_table_count(e->table, AUTHN_HMAC_C_OFFLINE_HITS, 1);
    if (authn_hmac_table_counter(e->table, AUTHN_HMAC_C_OFFLINE_SINCE) == 0 &&
        authn_hmac_table_gauge_swap(e->table, AUTHN_HMAC_C_OFFLINE_SINCE, 0,
                                    now ? now : 1))
        authn_hmac_logf(e->log, baton, AUTHN_HMAC_LOG_WARNING,
                        "AHMAC0041: a source of users fails (%s): serving the "
                        "credentials it confirmed within AuthHMACOfflineGrace, "
                        "and no others (offline_hits counts them; logged "
                        "once, until a source answers again)",
                        why ? why : "no reason given");
}

void authn_hmac_offline_answered(const authn_hmac_engine_t *e, void *baton)
{
    uint64_t since =
        authn_hmac_table_counter(e->table, AUTHN_HMAC_C_OFFLINE_SINCE);
    uint64_t now;

    if (since == 0 || !authn_hmac_table_gauge_swap(
                          e->table, AUTHN_HMAC_C_OFFLINE_SINCE, since, 0))
        return;
    now = (uint64_t)apr_time_sec(apr_time_now());
    authn_hmac_logf(
        e->log, baton, AUTHN_HMAC_LOG_NOTICE,
        "AHMAC0042: a source of users answers again, after an "
        "outage of %" APR_UINT64_T_FMT " s (offline_hits: %" APR_UINT64_T_FMT
        " in all)",
        now > since ? now - since : 0,
        authn_hmac_table_counter(e->table, AUTHN_HMAC_C_OFFLINE_HITS));
}
