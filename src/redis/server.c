/* server.c: a fixed Redis server as an address source for the pool
 * (pool.c): its name resolved once, when the child starts, never while a
 * request waits. (The other source is Sentinel discovery: sentinel.c.) */
#include "socket.h"

#include <string.h>
#include <sys/un.h>

#include <apr_strings.h>
#include <bsd/string.h>

typedef struct {
    authn_hmac_redis_addr_t addr[AUTHN_HMAC_REDIS_ADDRS];
    int naddr;
    const char *unresolved; /* why the name gave no address, or NULL */
} server_t;

static int server_addr(void *baton, uint64_t *gen,
                       authn_hmac_redis_addr_t *addrs, int *naddr,
                       char peer[AUTHN_HMAC_REDIS_HOST_MAX], const char **why)
{
    const server_t *sv = baton;

    if (!sv->naddr) {
        *why = sv->unresolved;
        return -1;
    }
    if (*gen == 1)
        return 0;
    memcpy(addrs, sv->addr, sizeof(sv->addr));
    *naddr = sv->naddr;
    peer[0] = '\0'; /* the TLS context's name */
    *gen = 1;
    return 1;
}

authn_hmac_redis_source_t
authn_hmac_redis_server(const authn_hmac_redis_conf_t *conf, apr_pool_t *p)
{
    authn_hmac_redis_source_t src = {server_addr, NULL, NULL};
    server_t *sv = apr_pcalloc(p, sizeof(*sv));

    src.baton = sv;
    if (conf->socket) {
        struct sockaddr_un *un = (struct sockaddr_un *)&sv->addr[0].sa;

        un->sun_family = AF_UNIX;
        strlcpy(un->sun_path, conf->socket, sizeof(un->sun_path));
        sv->addr[0].len = (socklen_t)sizeof(*un);
        sv->naddr = 1;
        return src;
    }
    sv->naddr =
        authn_hmac_redis_resolve(conf->host, conf->port, sv->addr,
                                 AUTHN_HMAC_REDIS_ADDRS, 0, &sv->unresolved, p);
    return src;
}
