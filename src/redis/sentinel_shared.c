/* sentinel_shared.c: the Redis primary as every process of the server
 * sees it, in the shared segment (sentinel.h's authn_hmac_sentinel_shared_t):
 * published by the one discovery that holds the claim (sentinel.c), read
 * by all without a lock (a sequence count, odd while it is written), and
 * handed to the pools as their address source. */
#include "sentinel_int.h"
#include "redis/sentinel.h"
#include "core/util.h"

#include <arpa/inet.h>
#include <string.h>

#include <bsd/string.h>

/* ------------------------------------------------------ the shared part */

uint64_t authn_hmac_sentinel_read(const authn_hmac_sentinel_shared_t *sh,
                                  char ip[AUTHN_HMAC_SENTINEL_IP_MAX],
                                  char host[AUTHN_HMAC_SENTINEL_HOST_MAX],
                                  int *port)
{
    int tries;

    for (tries = 0; tries < 1000; tries++) {
        uint64_t s1 = __atomic_load_n(&sh->seq, __ATOMIC_ACQUIRE), s2, gen;
        uint64_t pub;

        if (s1 & 1)
            continue; /* being written */
        gen = __atomic_load_n(&sh->gen, __ATOMIC_RELAXED);
        pub = __atomic_load_n(&sh->pub_epoch, __ATOMIC_RELAXED);
        memcpy(ip, sh->ip, AUTHN_HMAC_SENTINEL_IP_MAX);
        memcpy(host, sh->host, AUTHN_HMAC_SENTINEL_HOST_MAX);
        *port = (int)__atomic_load_n(&sh->port, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        s2 = __atomic_load_n(&sh->seq, __ATOMIC_RELAXED);
        if (s1 != s2)
            continue;
        ip[AUTHN_HMAC_SENTINEL_IP_MAX - 1] = '\0';
        host[AUTHN_HMAC_SENTINEL_HOST_MAX - 1] = '\0';
        /* NB: learnt under settings a restart changed since: none. */
        if (pub != __atomic_load_n(&sh->epoch, __ATOMIC_ACQUIRE))
            return 0;
        return gen;
    }
    return 0; /* a writer that died mid-way: the next one repairs it */
}

int authn_hmac_sentinel_due(const authn_hmac_sentinel_shared_t *sh,
                            apr_time_t now, apr_interval_time_t min_gap,
                            apr_interval_time_t period)
{
    int64_t checked = __atomic_load_n(&sh->checked, __ATOMIC_RELAXED);

    if (checked && now - checked < min_gap)
        return 0;
    if (!__atomic_load_n(&sh->gen, __ATOMIC_RELAXED) ||
        __atomic_load_n(&sh->failing, __ATOMIC_RELAXED) ||
        __atomic_load_n(&sh->pub_epoch, __ATOMIC_RELAXED) !=
            __atomic_load_n(&sh->epoch, __ATOMIC_RELAXED))
        return 1;
    /* NB: a failure seen after the last look, even of a command sent to
     * the old primary before it: one look too many, bounded by min_gap. */
    if (__atomic_load_n(&sh->suspect, __ATOMIC_RELAXED) > checked)
        return 1;
    return now - checked >= period;
}

int64_t authn_hmac_sentinel_claim(authn_hmac_sentinel_shared_t *sh,
                                  apr_time_t now, apr_interval_time_t hold)
{
    int64_t c = __atomic_load_n(&sh->claim, __ATOMIC_ACQUIRE);

    /* NB: a claim past its end is a process that died asking (or hung):
     * taken over. */
    if (c != 0 && c > now)
        return 0;
    return __atomic_compare_exchange_n(&sh->claim, &c, now + hold, 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)
               ? now + hold
               : 0;
}

int authn_hmac_sentinel_finish(authn_hmac_sentinel_shared_t *sh, int64_t claim,
                               const char *ip, const char *host, int port,
                               apr_time_t now)
{
    int changed = 0, switched;

    /* NB: only the claim's holder writes. Its deadlines keep a discovery
     * well within the claim, but a name slow to resolve may not: one that
     * outlived its claim, taken over since, writes nothing. The claim is
     * renewed for the write, so that it is not taken over in the middle
     * of it. */
    if (!__atomic_compare_exchange_n(&sh->claim, &claim,
                                     now + apr_time_from_sec(1), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return -1;
    /* NB: an odd count is a writer that died within its write (killed
     * after the fields, before closing it): rewritten, even if the same,
     * else no process could read the primary again. */
    if (ip && ((__atomic_load_n(&sh->seq, __ATOMIC_RELAXED) & 1) ||
               !__atomic_load_n(&sh->gen, __ATOMIC_RELAXED) ||
               __atomic_load_n(&sh->pub_epoch, __ATOMIC_RELAXED) !=
                   __atomic_load_n(&sh->epoch, __ATOMIC_RELAXED) ||
               strcmp(sh->ip, ip) != 0 || strcmp(sh->host, host) != 0 ||
               sh->port != port)) {
        uint64_t s = __atomic_load_n(&sh->seq, __ATOMIC_RELAXED) & ~1ULL;

        /* NB: another server than the last one known (of any epoch). */
        switched = sh->ip[0] && (strcmp(sh->ip, ip) != 0 || sh->port != port);
        if (switched)
            __atomic_add_fetch(&sh->switches, 1, __ATOMIC_RELAXED);
        if (switched || !__atomic_load_n(&sh->since, __ATOMIC_RELAXED))
            __atomic_store_n(&sh->since, apr_time_now(), __ATOMIC_RELAXED);
        __atomic_store_n(&sh->seq, s + 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        strlcpy(sh->ip, ip, sizeof(sh->ip));
        strlcpy(sh->host, host, sizeof(sh->host));
        __atomic_store_n(&sh->port, port, __ATOMIC_RELAXED);
        __atomic_store_n(&sh->pub_epoch,
                         __atomic_load_n(&sh->epoch, __ATOMIC_ACQUIRE),
                         __ATOMIC_RELAXED);
        __atomic_add_fetch(&sh->gen, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&sh->seq, s + 2, __ATOMIC_RELEASE);
        changed = 1;
    }
    __atomic_add_fetch(&sh->discoveries, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->failing, ip ? 0 : 1, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->checked, now, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->claim, 0, __ATOMIC_RELEASE);
    return changed;
}

void authn_hmac_sentinel_suspect(authn_hmac_sentinel_shared_t *sh,
                                 apr_time_t now)
{
    __atomic_store_n(&sh->suspect, now, __ATOMIC_RELAXED);
}

void authn_hmac_sentinel_restart(authn_hmac_sentinel_shared_t *sh,
                                 apr_time_t now)
{
    /* NB: the primary learnt under the old settings is forgotten (found by
     * review: new children used it, with the new password, until a
     * discovery under the new ones found another): a new epoch, and a new
     * generation so that readers look again and find it of the old one.
     * Nothing is written under the readers' count: an old child's thread
     * may be writing there (a review of this: two writers tore it). */
    __atomic_add_fetch(&sh->epoch, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&sh->gen, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&sh->failing, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->checked, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->suspect, now, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->claim, 0, __ATOMIC_RELEASE);
}

/* ------------------------------------------------ as the pool's source */

/* The address ip (text) and port as a socket address, parsed without DNS:
 * never on a request's time. 0 if ip is no address. */
static int numeric_addr(const char *ip, int port, authn_hmac_redis_addr_t *addr)
{
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr->sa;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr->sa;
    int v6 = strchr(ip, ':') != NULL;

    memset(addr, 0, sizeof(*addr));
    if (inet_pton(v6 ? AF_INET6 : AF_INET, ip,
                  v6 ? (void *)&a6->sin6_addr : (void *)&a4->sin_addr) != 1)
        return 0;
    if (v6) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
    }
    else {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
    }
    addr->len = v6 ? sizeof(*a6) : sizeof(*a4);
    return 1;
}

int authn_hmac_sentinel_addr(authn_hmac_sentinel_t *s, uint64_t *gen,
                             authn_hmac_redis_addr_t *addr,
                             char peer[AUTHN_HMAC_SENTINEL_HOST_MAX])
{
    char ip[AUTHN_HMAC_SENTINEL_IP_MAX], host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    uint64_t g = __atomic_load_n(&s->sh->gen, __ATOMIC_RELAXED);
    int port = 0;

    if (g == *gen)
        return g ? 0 : -1;
    if (!(g = authn_hmac_sentinel_read(s->sh, ip, host, &port)))
        return -1;
    if (!numeric_addr(ip, port, addr))
        return -1;
    strlcpy(peer,
            s->redis->tls && s->sc->primary_name ? s->sc->primary_name : host,
            AUTHN_HMAC_SENTINEL_HOST_MAX);
    *gen = g;
    return 1;
}

static int source_addr(void *baton, uint64_t *gen,
                       authn_hmac_redis_addr_t *addrs, int *naddr,
                       char peer[AUTHN_HMAC_REDIS_HOST_MAX], const char **why)
{
    int r = authn_hmac_sentinel_addr(baton, gen, &addrs[0], peer);

    if (r == 1)
        *naddr = 1;
    else if (r < 0)
        *why = "no primary known yet (none that the Sentinels named has "
               "been confirmed by its ROLE: the discovery's warning says why)";
    return r;
}

/* A failure of the primary (no connection, a timeout, a refusal such as
 * READONLY or LOADING) asks for a new look. */
static void source_suspect(void *baton)
{
    authn_hmac_sentinel_t *s = baton;

    authn_hmac_sentinel_suspect(s->sh, authn_hmac_monotonic());
}

authn_hmac_redis_source_t authn_hmac_sentinel_source(authn_hmac_sentinel_t *s)
{
    authn_hmac_redis_source_t src = {source_addr, source_suspect, NULL};

    src.baton = s;
    return src;
}
