/* redis.c: the Redis tier. A blocking hiredis client with connect and
 * command timeouts, the interpretation of its replies, and the shared health
 * state behind the once-per-outage log and the circuit breaker.
 *
 * Redis holds, under prefix + hex(MAC), the time the credential was verified
 * (decimal microseconds), with the entry's TTL as its expiry. No user name,
 * password or stored hash goes there. */
#include "authn_hmac.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <apr_lib.h>
#include <apr_strings.h>
#include <bsd/string.h>
#include <hiredis/hiredis.h>

#define BREAKER_AFTER     3       /* consecutive failures */
#define BREAKER_MAX_SHIFT 3       /* backoff 2, 4, 8, 16 s */
#define CLOCK_SKEW_USEC   5000000 /* between the servers of a farm */

struct authn_hmac_redis_conn {
    redisContext *ctx;
    const authn_hmac_redis_conf_t *conf;
    uint64_t epoch; /* the shared outage count when it was made */
};

const char *authn_hmac_redis_parse_server(const char *arg,
                                          authn_hmac_redis_conf_t *conf,
                                          apr_pool_t *p)
{
    const char *colon, *host_end, *c;
    char *end;
    long port = AUTHN_HMAC_REDIS_PORT;

    if (!arg || !*arg)
        return "empty";
    if (*arg == '/') {
        if (strlen(arg) > 100)
            return "socket path too long";
        conf->socket = apr_pstrdup(p, arg);
        conf->host = NULL;
        return NULL;
    }
    if (*arg == '[') {
        host_end = strchr(arg, ']');
        if (!host_end || host_end == arg + 1)
            return "bad [address]";
        colon = host_end[1] == ':' ? host_end + 1 : NULL;
        if (!colon && host_end[1])
            return "junk after ]";
        conf->host = apr_pstrmemdup(p, arg + 1, (size_t)(host_end - arg - 1));
    }
    else {
        colon = strchr(arg, ':');
        if (colon && strchr(colon + 1, ':'))
            return "an IPv6 address needs [brackets]";
        host_end = colon ? colon : arg + strlen(arg);
        if (host_end == arg)
            return "empty host";
        conf->host = apr_pstrmemdup(p, arg, (size_t)(host_end - arg));
    }
    for (c = conf->host; *c; c++)
        if (!apr_isalnum(*c) && !strchr(".-_:", *c))
            return "bad character in host";
    if (colon) {
        if (!apr_isdigit(colon[1]))
            return "bad port";
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (errno || *end || port < 1 || port > 65535)
            return "bad port";
    }
    conf->port = (int)port;
    conf->socket = NULL;
    return NULL;
}

const char *authn_hmac_redis_parse_auth(authn_hmac_secret_t *secret,
                                        authn_hmac_redis_conf_t *conf)
{
    char *s = (char *)secret->data, *sp;
    size_t len = secret->len;

    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r'))
        s[--len] = '\0';
    if (len == 0)
        return "it is empty";
    if (memchr(s, '\n', len) || memchr(s, '\r', len) || memchr(s, '\0', len))
        return "it must hold one line";
    /* NB: the page is zeroed past len, so every piece is NUL-terminated. */
    sp = memchr(s, ' ', len);
    if (sp) {
        *sp = '\0';
        if (sp == s || sp + 1 == s + len)
            return "a user name or password is empty";
        conf->user = s;
        conf->password = sp + 1;
        conf->password_len = (size_t)(s + len - (sp + 1));
    }
    else {
        conf->user = NULL;
        conf->password = s;
        conf->password_len = len;
    }
    return NULL;
}

/* ---------------------------------------------------- bounded replies */

/* The module's commands never get an array back; hiredis would allocate an
 * array's element vector before reading it, so a hostile or broken server
 * could make a child allocate gigabytes with "*2000000000". Found by
 * fuzz_redis_reply. */
#define MAX_ARRAY_ELEMENTS 16

static redisReplyObjectFunctions limited_fns;
static void *(*default_create_array)(const redisReadTask *, int);
static pthread_once_t limited_once = PTHREAD_ONCE_INIT;

static void *limited_create_array(const redisReadTask *task, int elements)
{
    if (elements > MAX_ARRAY_ELEMENTS)
        return NULL; /* the reader reports an error: a failed command */
    return default_create_array(task, elements);
}

/* Copies hiredis's default reply functions, with arrays bounded. */
static void limited_init(void)
{
    redisReader *r = redisReaderCreate();

    if (r && r->fn) {
        limited_fns = *r->fn;
        default_create_array = r->fn->createArray;
        limited_fns.createArray = limited_create_array;
    }
    if (r)
        redisReaderFree(r);
}

int authn_hmac_redis_limit_reader(redisReader *r)
{
    pthread_once(&limited_once, limited_init);
    if (!r || !default_create_array)
        return 0;
    r->fn = &limited_fns;
    return 1;
}

/* Classifies a context error; a read or write that ran out of time shows as
 * EAGAIN in hiredis. */
static authn_hmac_redis_rc ctx_error(redisContext *ctx, const char **why,
                                     const char *doing, apr_pool_t *p)
{
    int timeout = ctx && ctx->err == REDIS_ERR_IO &&
                  (errno == EAGAIN || errno == EWOULDBLOCK ||
                   errno == EINPROGRESS || errno == ETIMEDOUT);

    if (ctx && !timeout && strstr(ctx->errstr, "timed out"))
        timeout = 1;
    *why = apr_psprintf(p, "%s: %s", doing,
                        timeout ? "timed out"
                        : ctx   ? ctx->errstr
                                : "out of memory");
    return timeout ? AUTHN_HMAC_REDIS_TIMEOUT : AUTHN_HMAC_REDIS_ERROR;
}

/* An error reply's first word (e.g. WRONGPASS, NOAUTH, ERR) and text; Redis
 * does not echo secrets in them. */
static const char *reply_error(const redisReply *r, apr_pool_t *p)
{
    if (!r)
        return "no reply";
    if (r->type == REDIS_REPLY_ERROR)
        return apr_pstrndup(p, r->str, r->len > 120 ? 120 : r->len);
    return apr_psprintf(p, "unexpected reply type %d", r->type);
}

/* Runs one command given as argv and checks for a status reply of OK. */
static authn_hmac_redis_rc run_ok(redisContext *ctx, int argc,
                                  const char **argv, const size_t *lens,
                                  const char *doing, const char **why,
                                  apr_pool_t *p)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, lens);
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;

    if (!r)
        return ctx_error(ctx, why, doing, p);
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        *why = apr_psprintf(p, "%s refused: %s", doing, reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

authn_hmac_redis_rc
authn_hmac_redis_connect(const authn_hmac_redis_conf_t *conf,
                         authn_hmac_redis_conn_t **out, const char **why,
                         apr_pool_t *p)
{
    struct timeval tv;
    redisContext *ctx;
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;

    tv.tv_sec = conf->timeout_ms / 1000;
    tv.tv_usec = (suseconds_t)(conf->timeout_ms % 1000) * 1000;
    ctx = conf->socket ? redisConnectUnixWithTimeout(conf->socket, tv)
                       : redisConnectWithTimeout(conf->host, conf->port, tv);
    if (!ctx || ctx->err) {
        rc = ctx_error(ctx, why, "connect", p);
        goto done;
    }
    if (!authn_hmac_redis_limit_reader(ctx->reader)) {
        *why = "connect: cannot set up the reply reader";
        rc = AUTHN_HMAC_REDIS_ERROR;
        goto done;
    }
    if (redisSetTimeout(ctx, tv) != REDIS_OK) {
        rc = ctx_error(ctx, why, "set timeout", p);
        goto done;
    }
    if (conf->password) {
        const char *argv[3] = {"AUTH", conf->user, conf->password};
        size_t lens[3] = {4, conf->user ? strlen(conf->user) : 0,
                          conf->password_len};

        if (conf->user)
            rc = run_ok(ctx, 3, argv, lens, "AUTH", why, p);
        else {
            argv[1] = conf->password;
            lens[1] = conf->password_len;
            rc = run_ok(ctx, 2, argv, lens, "AUTH", why, p);
        }
        if (rc != AUTHN_HMAC_REDIS_OK)
            goto done;
    }
    if (conf->db) {
        const char *db = apr_itoa(p, conf->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};

        rc = run_ok(ctx, 2, argv, lens, "SELECT", why, p);
        if (rc != AUTHN_HMAC_REDIS_OK)
            goto done;
    }
    /* NB: malloc, not p: connections outlive requests and are remade
     * after every failure; a pool would grow with each one. */
    *out = calloc(1, sizeof(**out));
    if (!*out) {
        *why = "connect: out of memory";
        rc = AUTHN_HMAC_REDIS_ERROR;
        goto done;
    }
    (*out)->ctx = ctx;
    (*out)->conf = conf;
    ctx = NULL;
done:
    if (ctx)
        redisFree(ctx);
    return rc;
}

void authn_hmac_redis_close(authn_hmac_redis_conn_t *c)
{
    if (c) {
        redisFree(c->ctx);
        free(c);
    }
}

/* ------------------------------------------------------ connection pool */

struct authn_hmac_redis_pool {
    const authn_hmac_redis_conf_t *conf;
    apr_thread_mutex_t *lock;
    authn_hmac_redis_conn_t **idle;
    int nidle, max;
    authn_hmac_redis_health_t *health; /* shared by all processes */
};

/* Closes a connection and counts it gone. */
static void pool_close(authn_hmac_redis_pool_t *rp, authn_hmac_redis_conn_t *c)
{
    authn_hmac_redis_close(c);
    __atomic_sub_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
}

static apr_status_t pool_cleanup(void *data)
{
    authn_hmac_redis_pool_t *rp = data;

    while (rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
    return APR_SUCCESS;
}

apr_status_t authn_hmac_redis_pool_create(authn_hmac_redis_pool_t **out,
                                          const authn_hmac_redis_conf_t *conf,
                                          int max_idle,
                                          authn_hmac_redis_health_t *health,
                                          apr_pool_t *p)
{
    authn_hmac_redis_pool_t *rp = apr_pcalloc(p, sizeof(*rp));
    apr_status_t rv;

    rp->conf = conf;
    rp->max = max_idle > 0 ? max_idle : 1;
    rp->idle =
        apr_pcalloc(p, sizeof(authn_hmac_redis_conn_t *) * (size_t)rp->max);
    rp->health = health;
    rv = apr_thread_mutex_create(&rp->lock, APR_THREAD_MUTEX_DEFAULT, p);
    if (rv != APR_SUCCESS)
        return rv;
    apr_pool_cleanup_register(p, rp, pool_cleanup, apr_pool_cleanup_null);
    *out = rp;
    return APR_SUCCESS;
}

authn_hmac_redis_rc authn_hmac_redis_pool_acquire(authn_hmac_redis_pool_t *rp,
                                                  authn_hmac_redis_conn_t **c,
                                                  const char **why,
                                                  apr_pool_t *p)
{
    uint64_t epoch = __atomic_load_n(&rp->health->epoch, __ATOMIC_RELAXED);
    authn_hmac_redis_rc rc;

    *c = NULL;
    apr_thread_mutex_lock(rp->lock);
    /* NB: a connection made before the last outage began (seen by any
     * process) is presumed dead: this process may have skipped Redis the
     * whole time, with the breaker open, and never noticed. */
    while (!*c && rp->nidle > 0) {
        *c = rp->idle[--rp->nidle];
        if ((*c)->epoch != epoch) {
            pool_close(rp, *c);
            *c = NULL;
        }
    }
    apr_thread_mutex_unlock(rp->lock);
    if (*c)
        return AUTHN_HMAC_REDIS_OK;
    rc = authn_hmac_redis_connect(rp->conf, c, why, p);
    if (rc == AUTHN_HMAC_REDIS_OK && *c) {
        (*c)->epoch = epoch;
        __atomic_add_fetch(&rp->health->conns, 1, __ATOMIC_RELAXED);
    }
    return rc;
}

void authn_hmac_redis_pool_release(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t *c, int broken)
{
    apr_thread_mutex_lock(rp->lock);
    if (!broken && rp->nidle < rp->max) {
        rp->idle[rp->nidle++] = c;
        c = NULL;
    }
    /* NB: one broken connection means the server went away or restarted:
     * the idle ones are most likely dead too. Drop them, so that recovery
     * is not delayed by one failure per stale connection. */
    while (broken && rp->nidle > 0)
        pool_close(rp, rp->idle[--rp->nidle]);
    apr_thread_mutex_unlock(rp->lock);
    if (c)
        pool_close(rp, c);
}

/* prefix + lowercase hex of the key. */
static const char *redis_key(const authn_hmac_redis_conf_t *conf,
                             const unsigned char *key, apr_pool_t *p)
{
    static const char hex[] = "0123456789abcdef";
    size_t pl = strlen(conf->prefix), i;
    char *k = apr_palloc(p, pl + (size_t)2 * AUTHN_HMAC_KEY_LEN + 1);

    memcpy(k, conf->prefix, pl);
    for (i = 0; i < AUTHN_HMAC_KEY_LEN; i++) {
        k[pl + 2 * i] = hex[key[i] >> 4];
        k[pl + 2 * i + 1] = hex[key[i] & 15];
    }
    k[pl + (size_t)2 * AUTHN_HMAC_KEY_LEN] = '\0';
    return k;
}

/* Parses a stored time: 1 to 19 digits, nothing else. */
static int parse_time(const char *s, size_t len, apr_time_t *out)
{
    apr_time_t v = 0;
    size_t i;

    if (len == 0 || len > 18)
        return 0;
    for (i = 0; i < len; i++) {
        if (!apr_isdigit(s[i]))
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

authn_hmac_redis_rc
authn_hmac_redis_interpret(const redisReply *get, const redisReply *pttl,
                           apr_time_t now, apr_interval_time_t ttl, int *found,
                           apr_time_t *stored, apr_time_t *expires)
{
    apr_time_t when, end;

    *found = 0;
    if (!get || !pttl)
        return AUTHN_HMAC_REDIS_ERROR;
    if (get->type == REDIS_REPLY_NIL)
        return AUTHN_HMAC_REDIS_OK; /* a miss */
    if (get->type != REDIS_REPLY_STRING || pttl->type != REDIS_REPLY_INTEGER)
        return AUTHN_HMAC_REDIS_ERROR;
    if (!parse_time(get->str, get->len, &when))
        return AUTHN_HMAC_REDIS_ERROR;
    if (pttl->integer == -2)
        return AUTHN_HMAC_REDIS_OK; /* expired between the two commands */
    if (pttl->integer <= 0 || pttl->integer > (long long)1 << 40)
        return AUTHN_HMAC_REDIS_ERROR; /* never trust an entry without end */
    if (when > now + CLOCK_SKEW_USEC || now - when >= ttl)
        return AUTHN_HMAC_REDIS_OK; /* too old for this section, or odd */
    if (when > now)
        when = now; /* another server's clock, a little ahead */
    end = now + (apr_time_t)pttl->integer * 1000;
    if (end > when + ttl)
        end = when + ttl;
    *found = 1;
    *stored = when;
    *expires = end;
    return AUTHN_HMAC_REDIS_OK;
}

authn_hmac_redis_rc authn_hmac_redis_get(
    authn_hmac_redis_conn_t *c, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_interval_time_t ttl, int *found, apr_time_t *stored,
    apr_time_t *expires, const char **why, apr_pool_t *p)
{
    const char *k = redis_key(c->conf, key, p);
    redisReply *get = NULL, *pttl = NULL;
    authn_hmac_redis_rc rc;

    /* Both commands in one round trip. */
    if (redisAppendCommand(c->ctx, "GET %s", k) != REDIS_OK ||
        redisAppendCommand(c->ctx, "PTTL %s", k) != REDIS_OK ||
        redisGetReply(c->ctx, (void **)&get) != REDIS_OK ||
        redisGetReply(c->ctx, (void **)&pttl) != REDIS_OK) {
        rc = ctx_error(c->ctx, why, "GET", p);
        goto done;
    }
    rc =
        authn_hmac_redis_interpret(get, pttl, now, ttl, found, stored, expires);
    if (rc != AUTHN_HMAC_REDIS_OK)
        *why = apr_psprintf(
            p, "GET: unexpected answer (%s)",
            reply_error(get && get->type == REDIS_REPLY_ERROR ? get : pttl, p));
done:
    if (get)
        freeReplyObject(get);
    if (pttl)
        freeReplyObject(pttl);
    return rc;
}

authn_hmac_redis_rc
authn_hmac_redis_set(authn_hmac_redis_conn_t *c,
                     const unsigned char key[AUTHN_HMAC_KEY_LEN],
                     apr_time_t now, apr_time_t stored, apr_time_t expires,
                     const char **why, apr_pool_t *p)
{
    long long ms = (expires - now) / 1000;
    redisReply *r;
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;

    if (ms <= 0)
        return AUTHN_HMAC_REDIS_OK;
    r = redisCommand(c->ctx, "SET %s %lld PX %lld", redis_key(c->conf, key, p),
                     (long long)stored, ms);
    if (!r)
        return ctx_error(c->ctx, why, "SET", p);
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        *why = apr_psprintf(p, "SET refused: %s", reply_error(r, p));
        rc = AUTHN_HMAC_REDIS_ERROR;
    }
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------- shared health */

int authn_hmac_redis_allowed(authn_hmac_redis_health_t *h, apr_time_t now)
{
    return __atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED) <= now;
}

int authn_hmac_redis_failed(authn_hmac_redis_health_t *h, apr_time_t now)
{
    int64_t zero = 0;
    int64_t until = __atomic_load_n(&h->breaker_until, __ATOMIC_RELAXED);
    uint64_t n = __atomic_add_fetch(&h->failures, 1, __ATOMIC_RELAXED);

    /* NB: a burst of failures from requests that were all in flight opens
     * the breaker once, not once each: only the one that swaps the closed
     * state for an open one moves the backoff on. */
    if (n >= BREAKER_AFTER && until <= now) {
        uint64_t opens = __atomic_load_n(&h->opens, __ATOMIC_RELAXED);
        unsigned shift =
            opens < BREAKER_MAX_SHIFT ? (unsigned)opens : BREAKER_MAX_SHIFT;
        int64_t next = now + apr_time_from_sec((apr_time_t)2 << shift);

        if (__atomic_compare_exchange_n(&h->breaker_until, &until, next, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            __atomic_add_fetch(&h->opens, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
        }
    }
    if (!__atomic_compare_exchange_n(&h->down_since, &zero, now, 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    __atomic_add_fetch(&h->epoch, 1, __ATOMIC_RELAXED);
    return 1;
}

int authn_hmac_redis_succeeded(authn_hmac_redis_health_t *h, apr_time_t started,
                               apr_time_t now, apr_interval_time_t *outage)
{
    int64_t since = __atomic_load_n(&h->down_since, __ATOMIC_RELAXED);

    __atomic_store_n(&h->failures, 0, __ATOMIC_RELAXED);
    /* NB: an answer to a command sent before the outage began proves
     * nothing about now. */
    if (since == 0 || started <= since)
        return 0;
    __atomic_store_n(&h->opens, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->breaker_until, 0, __ATOMIC_RELAXED);
    if (!__atomic_compare_exchange_n(&h->down_since, &since, 0, 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    *outage = now - since;
    return 1;
}
