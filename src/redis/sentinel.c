/* sentinel.c: the Redis primary, found through Redis Sentinel: the
 * discovery and its thread.
 *
 * The Sentinels are asked, in order, each under a deadline of the Redis
 * timeout, for the primary's address (SENTINEL get-master-addr-by-name),
 * and the address named is confirmed with ROLE (it must say master) before
 * it is used: a Sentinel that lags behind a failover names a dead primary,
 * or a demoted one that came back as a replica (which must not be written
 * to). Replies are capped as every reply is (conn.c): the Sentinels and
 * the primary are asked over conn.c's connections, one per question.
 *
 * One discovery serves every process of the server: the answer lives in
 * the shared segment, with a generation, and the connection pools read it
 * (through authn_hmac_sentinel_source, which the pool does not name)
 * without a lock (a sequence count, odd while it is written). Each process
 * has a thread that looks, ten times a second, whether a discovery is due
 * (no primary yet, a failure of the primary, or every PERIOD), and asks
 * the Sentinels only if it wins the claim: one process at a time, and not
 * more often than MIN_GAP. Requests never wait for a discovery: while
 * there is no primary to use, they fail over to shared memory and bcrypt
 * as for any Redis failure.
 *
 * What the processes share of it (the published primary, the claim, and
 * the pool's source that reads them) is in sentinel_shared.c; the
 * directives, the commands and the replies in sentinel_proto.c.
 *
 * NB: the Sentinels are trusted to name where the primary is, not what it
 * holds: every value still needs its tag (made with the pepper), so a
 * rogue Sentinel that names a rogue Redis can deny service, never grant. */
#include "conn.h"
#include "sentinel_int.h"
#include "redis/sentinel.h"
#include "core/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <apr_strings.h>
#include <hiredis/hiredis.h>

#define POLL_MS      100
#define MIN_GAP      apr_time_from_msec(500) /* between two discoveries */
#define PERIOD       apr_time_from_sec(5)    /* a look while all is well */
#define MAX_RESOLVED 4

/* ------------------------------------------------------- the discovery */

/* How long a name may take to resolve: the timeout, and at least a
 * second (a resolver's answer that is not cached takes more than a LAN's
 * Redis timeout); a stop ends the wait at once (the cancel descriptor). */
#define RESOLVE_MIN apr_time_from_sec(1)

/* Up to max addresses of host:port; numeric only for a primary named by
 * address. 0 and *why if none. */
static int resolve_n(const authn_hmac_sentinel_conf_t *sc, const char *host,
                     int port, authn_hmac_redis_addr_t *out, int max,
                     const char **why, apr_pool_t *p)
{
    apr_interval_time_t t = apr_time_from_msec(sc->conn.timeout_ms);

    return authn_hmac_redis_resolve(
        host, port, out, max,
        authn_hmac_monotonic() + (t > RESOLVE_MIN ? t : RESOLVE_MIN), why, p);
}

static int resolve(const authn_hmac_sentinel_conf_t *sc, const char *host,
                   int port, authn_hmac_redis_addr_t *out, const char **why,
                   apr_pool_t *p)
{
    return resolve_n(sc, host, port, out, MAX_RESOLVED, why, p);
}

/* How much of an error's text goes to the log: its printable start, up
 * to 80 bytes. */
static int printable(const char *str)
{
    int n = 0;

    while (n < 80 && str[n] >= ' ' && str[n] <= '~')
        n++;
    return n;
}

/* An address as 16 bytes (IPv4 as IPv4-mapped IPv6) and its port; 0 for
 * another family. */
static int addr_key(const authn_hmac_redis_addr_t *a, unsigned char out[16],
                    unsigned *port)
{
    const struct sockaddr *sa = (const struct sockaddr *)&a->sa;

    memset(out, 0, 16);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)&a->sa;

        out[10] = out[11] = 0xff;
        memcpy(out + 12, &v4->sin_addr, 4);
        *port = ntohs(v4->sin_port);
        return 1;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&a->sa;

        memcpy(out, &v6->sin6_addr, 16);
        *port = ntohs(v6->sin6_port);
        return 1;
    }
    return 0;
}

/* Whether an address (addr_key's) is this host's: loopback (127/8, ::1)
 * or unspecified (0.0.0.0, ::). */
static int is_local(const unsigned char k[16])
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0,    0,
                                             0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char zero[16];
    int v4 = memcmp(k, mapped, 12) == 0;

    return (v4 && (k[12] == 127 || memcmp(k + 12, zero, 4) == 0)) ||
           (!v4 && memcmp(k, zero, 15) == 0 && (k[15] == 0 || k[15] == 1));
}

/* Whether a and b reach the same server: the same address (IPv4-mapped
 * IPv6 as IPv4) and port, or both this host's with the same port (a
 * Sentinel on this host is reached by any loopback address). */
static int same_addr(const authn_hmac_redis_addr_t *a,
                     const authn_hmac_redis_addr_t *b)
{
    unsigned char x[16], y[16];
    unsigned px = 0, py = 0;

    if (!addr_key(a, x, &px) || !addr_key(b, y, &py) || px != py)
        return 0;
    return memcmp(x, y, 16) == 0 || (is_local(x) && is_local(y));
}

/* Every address of each Sentinel (a name may stand for many: a service
 * of all the Sentinels, IPv4 and IPv6), and the last ones each name
 * resolved to in this process, for a name that does not resolve now. NB:
 * only the process's discovery thread uses it (made on its first look). */
#define SENTINEL_ADDRS 64

typedef struct {
    int n;
    authn_hmac_redis_addr_t a[SENTINEL_ADDRS];
} known_t;

static known_t *known;

/* Every address of Sentinel i, now, or else the last ones its name
 * resolved to in this process: their number, or 0 (and *why). */
static int sentinel_addrs(const authn_hmac_sentinel_conf_t *sc, int i,
                          authn_hmac_redis_addr_t *s, const char **why,
                          apr_pool_t *p)
{
    int n = resolve_n(sc, sc->host[i], sc->port[i], s, SENTINEL_ADDRS, why, p);

    if (!known)
        known = calloc(AUTHN_HMAC_SENTINEL_MAX, sizeof(*known));
    if (!known)
        return n;
    if (n > 0) {
        memcpy(known[i].a, s, sizeof(s[0]) * (size_t)n);
        known[i].n = n;
    }
    else if (known[i].n > 0) {
        n = known[i].n;
        memcpy(s, known[i].a, sizeof(s[0]) * (size_t)n);
    }
    return n;
}

/* Whether a may be the address of one of the configured Sentinels: NULL
 * if not, else why the Redis password is not sent there. NB: the primary
 * is sent AUTH with the Redis password; a Sentinel that names itself (or
 * another Sentinel) as the primary must not get it (found by review: with
 * TLS and a private CA, a Sentinel holds a certificate the primary's
 * checks accept). A Sentinel whose name does not resolve now is taken at
 * the addresses it last resolved to in this process (each name is
 * resolved when the discovery thread starts); one that never resolved may
 * be that address: the password is not sent (it failed open). */
static const char *is_a_sentinel(const authn_hmac_sentinel_conf_t *sc,
                                 const authn_hmac_redis_addr_t *a,
                                 apr_pool_t *p)
{
    int i, j, n;

    for (i = 0; i < sc->n; i++) {
        authn_hmac_redis_addr_t s[SENTINEL_ADDRS];
        const char *w = NULL;

        n = sentinel_addrs(sc, i, s, &w, p);
        if (n <= 0)
            return apr_psprintf(p,
                                "Sentinel %s:%d cannot be told apart from it "
                                "(%s): the Redis password is not sent",
                                sc->host[i], sc->port[i], w ? w : "no address");
        for (j = 0; j < n; j++)
            if (same_addr(&s[j], a))
                return "a Sentinel's address: the Redis password is not sent "
                       "there";
    }
    return NULL;
}

/* The primary a Sentinel named at host:port, confirmed by the primary
 * itself (its ROLE says master): 1 with ip filled, else 0 and *why. */
static int confirm(const authn_hmac_sentinel_conf_t *sc,
                   const authn_hmac_redis_conf_t *redis, const char *host,
                   int port, char ip[AUTHN_HMAC_SENTINEL_IP_MAX],
                   const char **why, apr_pool_t *p)
{
    const char *role[1] = {"ROLE"};
    authn_hmac_redis_addr_t addrs[MAX_RESOLVED];
    const struct sockaddr *sa;
    redisReply *r = NULL;
    int ok, n = resolve(sc, host, port, addrs, why, p);
    const char *sentinel = n > 0 ? is_a_sentinel(sc, &addrs[0], p) : NULL;

    if (sentinel) {
        *why = sentinel;
        n = 0;
    }
    if (n <= 0 || authn_hmac_sentinel_ask(
                      redis, addrs, 1,
                      redis->tls && sc->primary_name ? sc->primary_name : host,
                      1, role, &r, why, p) != AUTHN_HMAC_REDIS_OK) {
        *why = apr_psprintf(p, "it named %s:%d: %s", host, port, *why);
        return 0;
    }
    ok = authn_hmac_sentinel_role_reply(r);
    if (ok <= 0)
        /* NB: an ACL user without +role is refused (NOPERM): that is what
         * the admin must read, not that the primary is none. */
        *why =
            r && r->type == REDIS_REPLY_ERROR
                ? apr_psprintf(p, "it named %s:%d: ROLE refused: %s", host,
                               port, authn_hmac_redis_reply_error(r, p))
                : apr_psprintf(p, "%s:%d is not a primary (ROLE)", host, port);
    freeReplyObject(r);
    if (ok <= 0)
        return 0;
    sa = (const struct sockaddr *)&addrs[0].sa;
    if (inet_ntop(
            sa->sa_family,
            sa->sa_family == AF_INET6
                ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                : (const void *)&((const struct sockaddr_in *)sa)->sin_addr,
            ip, AUTHN_HMAC_SENTINEL_IP_MAX))
        return 1;
    *why = "an address of an unknown kind";
    return 0;
}

authn_hmac_redis_rc
authn_hmac_sentinel_discover(const authn_hmac_sentinel_conf_t *sc,
                             const authn_hmac_redis_conf_t *redis,
                             char ip[AUTHN_HMAC_SENTINEL_IP_MAX],
                             char host[AUTHN_HMAC_SENTINEL_HOST_MAX], int *port,
                             const char **why, apr_pool_t *p)
{
    const char *get[3] = {"SENTINEL", "get-master-addr-by-name", sc->master};
    const char *whys = NULL;
    int i;

    for (i = 0; i < sc->n; i++) {
        authn_hmac_redis_addr_t addrs[MAX_RESOLVED];
        redisReply *r = NULL;
        const char *w = NULL;
        int n, ok;

        n = resolve(sc, sc->host[i], sc->port[i], addrs, &w, p);
        if (n &&
            authn_hmac_sentinel_ask(&sc->conn, addrs, n, sc->host[i], 3, get,
                                    &r, &w, p) == AUTHN_HMAC_REDIS_OK) {
            ok = authn_hmac_sentinel_addr_reply(r, host, port);
            if (ok == 0)
                w = apr_psprintf(p, "it knows no master '%s'", sc->master);
            else if (ok < 0)
                w = r && r->type == REDIS_REPLY_ERROR
                        ? apr_psprintf(p, "it refused (%.*s)",
                                       printable(r->str), r->str)
                        : "an unexpected answer";
            freeReplyObject(r);
            if (ok > 0 && confirm(sc, redis, host, *port, ip, &w, p))
                return AUTHN_HMAC_REDIS_OK;
        }
        w = apr_psprintf(p, "Sentinel %s:%d: %s", sc->host[i], sc->port[i], w);
        whys = whys ? apr_pstrcat(p, whys, "; ", w, NULL) : w;
    }
    *why = whys ? whys : "no Sentinel";
    return AUTHN_HMAC_REDIS_ERROR;
}

/* ----------------------------------------------------------- the thread */

/* One look, by the claim's holder. */
static void look(authn_hmac_sentinel_t *s, int64_t claim, apr_pool_t *p)
{
    char ip[AUTHN_HMAC_SENTINEL_IP_MAX], host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    char old_ip[AUTHN_HMAC_SENTINEL_IP_MAX];
    char old_host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    const char *why = "";
    int port = 0, old_port = 0;
    uint64_t was_failing = __atomic_load_n(&s->sh->failing, __ATOMIC_RELAXED);
    uint64_t old_gen =
        authn_hmac_sentinel_read(s->sh, old_ip, old_host, &old_port);
    authn_hmac_redis_rc rc =
        authn_hmac_sentinel_discover(s->sc, s->redis, ip, host, &port, &why, p);
    apr_time_t now = authn_hmac_monotonic();

    /* NB: stopped in the middle (its waits cancelled): nothing learnt, and
     * nothing to log; the claim is let go for the next generation. */
    if (__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
        (void)__atomic_compare_exchange_n(&s->sh->claim, &claim, 0, 0,
                                          __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
        return;
    }
    if (rc != AUTHN_HMAC_REDIS_OK) {
        if (authn_hmac_sentinel_finish(s->sh, claim, NULL, NULL, 0, now) == 0 &&
            !was_failing)
            authn_hmac_logf(
                s->log, s->baton, AUTHN_HMAC_LOG_WARNING,
                "AHMAC0023: no Sentinel named a primary of '%s' that says "
                "it is one (%s); using shared memory and bcrypt, and asking "
                "again",
                s->sc->master, why);
        return;
    }
    if (authn_hmac_sentinel_finish(s->sh, claim, ip, host, port, now) != 1)
        return;
    /* NB: a new primary is another server: the breaker opened for the old
     * one does not hold for it, and sharing resumes at once. */
    authn_hmac_redis_breaker_reset(s->health);
    authn_hmac_logf(
        s->log, s->baton, AUTHN_HMAC_LOG_NOTICE,
        "AHMAC0024: the primary of '%s' is %s%s:%d%s, as the Sentinels say "
        "and its ROLE confirms",
        s->sc->master, old_gen && old_host[0] ? "now " : "", host, port,
        old_gen && old_host[0]
            ? apr_psprintf(p, " (was %s:%d)", old_host, old_port)
            : "");
}

/* How long a discovery may spend resolving names: none for Sentinels
 * given by address; else each name, for each Sentinel's answer, and the
 * primary's (a review: a slow resolver made discoveries outlive their
 * claim, overlap, and throw their answers away). */
static apr_interval_time_t names_time(const authn_hmac_sentinel_conf_t *sc)
{
    unsigned char buf[sizeof(struct in6_addr)];
    apr_interval_time_t t = apr_time_from_msec(sc->conn.timeout_ms);
    int i, names = 0;

    for (i = 0; i < sc->n; i++)
        names += inet_pton(AF_INET, sc->host[i], buf) != 1 &&
                 inet_pton(AF_INET6, sc->host[i], buf) != 1;
    return names ? (t > RESOLVE_MIN ? t : RESOLVE_MIN) * sc->n * (sc->n + 2)
                 : 0;
}

static void *run(void *arg)
{
    authn_hmac_sentinel_t *s = arg;
    /* NB: a pool of its own, with its own allocator: the child's pools
     * belong to other threads. */
    apr_pool_t *p = NULL;
    apr_interval_time_t hold =
        apr_time_from_msec(s->redis->timeout_ms) * (2 * s->sc->n + 2) +
        apr_time_from_sec(2) + names_time(s->sc);

    if (apr_pool_create_unmanaged_ex(&p, NULL, NULL) != APR_SUCCESS)
        return NULL;
    authn_hmac_redis_cancel_fd(s->cancel[0]);
    /* NB: each Sentinel's addresses known from the start, in this process
     * (a name that stops resolving later is taken at them). */
    {
        authn_hmac_redis_addr_t addrs[SENTINEL_ADDRS];
        const char *w = NULL;
        int i;

        for (i = 0;
             i < s->sc->n && !__atomic_load_n(&s->stop, __ATOMIC_RELAXED); i++)
            (void)sentinel_addrs(s->sc, i, addrs, &w, p);
        apr_pool_clear(p);
    }
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        struct timespec ts;
        apr_time_t now;
        int64_t claim;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&s->wake, &s->lock, &ts);
        if (s->stop)
            break;
        now = authn_hmac_monotonic();
        /* NB: a child of a generation whose settings a restart changed
         * (finishing its requests) discovers no more. */
        if (__atomic_load_n(&s->sh->epoch, __ATOMIC_ACQUIRE) != s->epoch ||
            !authn_hmac_sentinel_due(s->sh, now, MIN_GAP, PERIOD) ||
            !(claim = authn_hmac_sentinel_claim(s->sh, now, hold)))
            continue;
        pthread_mutex_unlock(&s->lock);
        look(s, claim, p);
        apr_pool_clear(p);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    apr_pool_destroy(p);
    /* NB: the Sentinels' addresses go with the thread that kept them (the
     * module is unloaded at exit: valgrind counted them lost). */
    free(known);
    known = NULL;
    return NULL;
}

static apr_status_t stop(void *data)
{
    authn_hmac_sentinel_t *s = data;

    if (!s->started)
        return APR_SUCCESS;
    pthread_mutex_lock(&s->lock);
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    /* NB: a discovery under way ends at once: its waits see the pipe
     * readable, and so does the wait for a name being resolved, whose
     * thread is left to end alone (found by review: two silent Sentinels
     * under a 4 s timeout held `apache2 -k stop` for 8 s, and httpd sent
     * SIGTERM twice). */
    if (write(s->cancel[1], "x", 1) < 0) {
        /* NB: the join then waits out the discovery's deadlines. */
    }
    pthread_join(s->thread, NULL);
    close(s->cancel[0]);
    close(s->cancel[1]);
    s->started = 0;
    return APR_SUCCESS;
}

apr_status_t authn_hmac_sentinel_start(authn_hmac_sentinel_t **out,
                                       const authn_hmac_sentinel_conf_t *sc,
                                       const authn_hmac_redis_conf_t *redis,
                                       authn_hmac_sentinel_shared_t *sh,
                                       authn_hmac_redis_health_t *health,
                                       authn_hmac_log_fn log, void *baton,
                                       apr_pool_t *p)
{
    authn_hmac_sentinel_t *s = apr_pcalloc(p, sizeof(*s));
    pthread_attr_t attr;
    int rc;

    s->sc = sc;
    s->redis = redis;
    s->sh = sh;
    s->epoch = sh ? __atomic_load_n(&sh->epoch, __ATOMIC_ACQUIRE) : 0;
    s->health = health;
    s->log = log;
    s->baton = baton;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    *out = s;
    if (!sh || !health)
        return APR_EINVAL;
    if (pipe2(s->cancel, O_CLOEXEC | O_NONBLOCK) != 0)
        return APR_FROM_OS_ERROR(errno);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)256 * 1024);
    rc = pthread_create(&s->thread, &attr, run, s);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(s->cancel[0]);
        close(s->cancel[1]);
        return rc;
    }
    s->started = 1;
    apr_pool_cleanup_register(p, s, stop, apr_pool_cleanup_null);
    return APR_SUCCESS;
}
