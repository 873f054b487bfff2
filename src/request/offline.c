/* offline.c: a source's outage, as the server sees it. While a source the
 * module does not own (SQL, a wrapped provider) fails, the credentials it
 * confirmed within the section's offline grace are still served (the
 * sources' paths decide which); here they are counted, and the outage is
 * told once when it starts and once when it ends, for the whole server:
 * its start time is a gauge of the shared segment (offline_since_seconds),
 * set by the first grant served offline and cleared by the first answer
 * of a source after it. Rests on the segment's counters (shm/table.h). */
#include "request/annex.h"
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

/* The source's record, or NULL; with claim, a record for it: a free one,
 * else an idle one (no error since its source answered), else the one
 * whose errors began first. Under the writers' mutex. */
static authn_hmac_outage_t *outage_of(authn_hmac_outage_t *o, uint64_t source,
                                      int claim)
{
    authn_hmac_outage_t *pick = NULL;
    int i;

    for (i = 0; i < AUTHN_HMAC_OUTAGES; i++)
        if (__atomic_load_n(&o[i].source, __ATOMIC_ACQUIRE) == source)
            return &o[i];
    if (!claim)
        return NULL;
    for (i = 0; i < AUTHN_HMAC_OUTAGES; i++) {
        if (o[i].source == 0 || o[i].since == 0)
            return &o[i];
        if (!pick || o[i].since < pick->since)
            pick = &o[i];
    }
    return pick;
}

int authn_hmac_outage_error(const authn_hmac_engine_t *e, uint64_t source,
                            uint64_t user, apr_time_t now)
{
    authn_hmac_outage_t *o;
    int out;

    if (!authn_hmac_table_lock(e->table))
        return 0;
    o = outage_of(authn_hmac_annex_outages(e->table), source, 1);
    if (o->source != source || o->since == 0) {
        /* NB: since first: a reader without the mutex (answer) sees a
         * record with errors, or none. */
        __atomic_store_n(&o->since, now ? now : 1, __ATOMIC_RELEASE);
        __atomic_store_n(&o->source, source, __ATOMIC_RELEASE);
        o->first = user;
        o->others = 0;
    }
    else if (o->first != user)
        o->others = 1;
    out = o->others != 0;
    authn_hmac_table_unlock(e->table);
    return out;
}

void authn_hmac_outage_answer(const authn_hmac_engine_t *e, uint64_t source)
{
    authn_hmac_outage_t *o =
        outage_of(authn_hmac_annex_outages(e->table), source, 0);

    if (!o || __atomic_load_n(&o->since, __ATOMIC_ACQUIRE) == 0 ||
        !authn_hmac_table_lock(e->table))
        return;
    if (o->source == source) {
        __atomic_store_n(&o->since, 0, __ATOMIC_RELEASE);
        o->first = 0;
        o->others = 0;
    }
    authn_hmac_table_unlock(e->table);
}
