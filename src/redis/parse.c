/* parse.c: the Redis directives' values: the server's address and the
 * auth file's user and password. */
#include "redis/redis.h"
#include "core/secret.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <apr_lib.h>
#include <apr_strings.h>

/* What to say of a URL (redis://host:6379/0, rediss://..., unix:/path),
 * the form most Redis clients take: what to write instead, from its host
 * and port or its socket path. NB: nothing of a URL with a user or a
 * password ('@') is repeated: the password goes in AuthHMACRedisAuthFile. */
static const char *url_problem(const char *arg, apr_pool_t *p)
{
    const char *rest = strstr(arg, "://"), *db;
    size_t n, dbn;

    if (strchr(arg, '@'))
        return "a URL is not accepted; its user and password go in "
               "AuthHMACRedisAuthFile";
    rest = rest ? rest + 3 : arg + 5; /* unix:/path */
    n = strcspn(rest, *rest == '/' ? "?" : "/?");
    if (n == 0 || n > 200 || (!strstr(arg, "://") && *rest != '/'))
        return "a URL is not accepted";
    db = *rest != '/' && rest[n] == '/' ? rest + n + 1 : "";
    dbn = strspn(db, "0123456789");
    return apr_psprintf(
        p, "a URL is not accepted: write %.*s%s%.*s%s", (int)n, rest,
        dbn ? ", and AuthHMACRedisDatabase " : "", (int)dbn, db,
        strncasecmp(arg, "rediss:", 7) == 0 ? ", and AuthHMACRedisTLS on" : "");
}

const char *authn_hmac_redis_parse_server(const char *arg,
                                          authn_hmac_redis_conf_t *conf,
                                          apr_pool_t *p)
{
    const char *colon, *host_end, *c;
    char *end;
    long port = AUTHN_HMAC_REDIS_PORT;

    if (!arg || !*arg)
        return "empty";
    if (strstr(arg, "://") || strncasecmp(arg, "unix:", 5) == 0)
        return url_problem(arg, p);
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
