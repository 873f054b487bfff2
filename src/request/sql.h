/* request/sql.h: the request path from SQL, a source the module does not
 * own (src/request/sql.c): the query runs at most once per user per
 * AuthHMACRecheck for the whole farm, hits between rechecks ask no one,
 * and while the query fails the credentials it confirmed within
 * AuthHMACOfflineGrace are still served. */
#ifndef AUTHN_HMAC_SQL_H
#define AUTHN_HMAC_SQL_H

#include "request/engine.h"
#include "request/source.h"

/* The source's query (the module's: mod_dbd): 0 with *hash the user's
 * stored hash (NULL: no such user), or -1 with *why when the source did
 * not answer (no connection, the query failed: not "no row"). */
typedef int (*authn_hmac_lookup_fn)(void *ctx, const char *user,
                                    const char **hash, const char **why);

/* Checks c (scope, user, password, client, fold) against the source: from
 * what the source last said of the user (its memo, in shared memory, else
 * in Redis) while it is younger than pol->recheck, with the cache tiers
 * only; else asks lookup (once per user per interval for the farm: the
 * server's concurrent requests wait for one query, the farm's servers for
 * one claim in Redis), keeps its answer, and checks c as
 * authn_hmac_check_hash does. When the query fails, a credential the
 * source confirmed within pol->offline_grace and still cached is
 * AUTHN_HMAC_OFFLINE_HIT; else AUTHN_HMAC_ERROR with *why (as logged:
 * never a secret). The final outcome is counted. */
authn_hmac_outcome
authn_hmac_check_sql(const authn_hmac_engine_t *e,
                     const authn_hmac_policy_t *pol, authn_hmac_source_t *s,
                     authn_hmac_cred_t *c, authn_hmac_lookup_fn lookup,
                     void *ctx, void *baton, apr_pool_t *p, const char **why);

#endif /* AUTHN_HMAC_SQL_H */
