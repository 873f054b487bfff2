/* sentinel_proto.c: speaking to the Sentinels: the directives that name
 * them (sentinel.h), one command on a connection of its own (conn.c's,
 * closed after: the discovery, sentinel.c, asks one question per
 * connection), and what their replies and a primary's ROLE say, checked
 * before anything of them is used. */
#include "conn.h"
#include "sentinel_int.h"
#include "redis/sentinel.h"
#include "core/util.h"

#include <string.h>

#include <apr_lib.h>
#include <hiredis/hiredis.h>

#define SENTINEL_PORT 26379

/* ------------------------------------------------------- configuration */

const char *authn_hmac_sentinel_parse(const char *arg,
                                      authn_hmac_sentinel_conf_t *sc,
                                      apr_pool_t *p)
{
    authn_hmac_redis_conf_t c;
    const char *err, *colon;

    memset(&c, 0, sizeof(c));
    if (*arg == '/')
        return "a Sentinel is host:port, not a socket";
    /* NB: before the address's own checks, which would read a:1,b:2 as an
     * IPv6 address without brackets. */
    if (strchr(arg, ','))
        return "separate Sentinels with spaces, not commas";
    if ((err = authn_hmac_redis_parse_server(arg, &c, p)) != NULL)
        return err;
    if (sc->n >= AUTHN_HMAC_SENTINEL_MAX)
        return "too many Sentinels (at most 8)";
    /* NB: a port left out is Sentinel's, not Redis's. */
    colon = *arg == '[' ? strstr(arg, "]:") : strchr(arg, ':');
    sc->host[sc->n] = c.host;
    sc->port[sc->n] = colon ? c.port : SENTINEL_PORT;
    sc->n++;
    return NULL;
}

const char *authn_hmac_sentinel_check_master(const char *name)
{
    const char *c;

    if (!*name || strlen(name) > 64)
        return "empty or too long";
    for (c = name; *c; c++)
        if (!apr_isalnum(*c) && !strchr(".-_", *c))
            return "bad character";
    return NULL;
}

/* ---------------------------------------------------------- the replies */

static int is_string(const redisReply *r)
{
    return r &&
           (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->str;
}

int authn_hmac_sentinel_addr_reply(const redisReply *r,
                                   char host[AUTHN_HMAC_SENTINEL_HOST_MAX],
                                   int *port)
{
    const redisReply *h, *pt;
    size_t i;
    long v = 0;

    if (r && r->type == REDIS_REPLY_NIL)
        return 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return -1;
    h = r->element[0];
    pt = r->element[1];
    if (!is_string(h) || !is_string(pt) || h->len == 0 ||
        h->len >= AUTHN_HMAC_SENTINEL_HOST_MAX || pt->len == 0 || pt->len > 5)
        return -1;
    /* NB: the name goes into logs and DNS: the characters of a host name
     * or an address only. */
    for (i = 0; i < h->len; i++)
        if (!apr_isalnum(h->str[i]) && !strchr(".-_:", h->str[i]))
            return -1;
    for (i = 0; i < pt->len; i++) {
        if (!apr_isdigit(pt->str[i]))
            return -1;
        v = v * 10 + (pt->str[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    memcpy(host, h->str, h->len);
    host[h->len] = '\0';
    *port = (int)v;
    return 1;
}

int authn_hmac_sentinel_role_reply(const redisReply *r)
{
    const redisReply *e;

    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return -1;
    e = r->element[0];
    if (!is_string(e))
        return -1;
    if (e->len == 6 && memcmp(e->str, "master", 6) == 0)
        return 1;
    if ((e->len == 5 && memcmp(e->str, "slave", 5) == 0) ||
        (e->len == 7 && memcmp(e->str, "replica", 7) == 0) ||
        (e->len == 8 && memcmp(e->str, "sentinel", 8) == 0))
        return 0;
    return -1;
}

/* ---------------------------------------------------------- a command */

/* Runs one command on a new connection to addrs, closed after. */
authn_hmac_redis_rc
authn_hmac_sentinel_ask(const authn_hmac_redis_conf_t *conf,
                        const authn_hmac_redis_addr_t *addrs, int n,
                        const char *peer, int argc, const char **argv,
                        redisReply **reply, const char **why, apr_pool_t *p)
{
    apr_time_t deadline =
        authn_hmac_monotonic() + apr_time_from_msec(conf->timeout_ms);
    authn_hmac_redis_conn_t *c = NULL;
    size_t lens[4];
    int i, resumed;
    authn_hmac_redis_rc rc;

    for (i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    rc = authn_hmac_redis_connect(conf, addrs, n, peer, deadline, &c, &resumed,
                                  why, p);
    if (rc != AUTHN_HMAC_REDIS_OK)
        return rc;
    /* NB: a primary's ROLE lists its replicas: longer than the replies the
     * requests read, still bounded. */
    if (strcmp(argv[0], "ROLE") == 0)
        authn_hmac_redis_conn_long_replies(c);
    rc = authn_hmac_redis_command(c, argc, argv, lens, deadline, reply, why, p);
    authn_hmac_redis_close(c);
    return rc;
}
