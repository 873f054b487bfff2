/* Unit tests of src/redis/pool.c, without httpd and without a Redis: a
 * listening unix socket stands for the server (the pool sends nothing on
 * connect without a password or a database), and a source of the test's
 * own says where it is. What the pool promises: at most its size kept
 * idle, however many are taken; a broken connection closed, with the idle
 * ones, and told to the source; a connection the server closed, or one
 * made before an outage or to an older address, never handed out again;
 * the connections open counted in the shared health. */
#include "redis/redis.h"
#include "core/util.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The server: a listening socket, and the accepted ends of the
 * connections made to it. */
typedef struct {
    char path[108];
    int listen;
    int ends[16];
    int nends;
} server_t;

/* The test's address source: the server's path, of generation gen (0:
 * none known), and the failures told. */
typedef struct {
    const char *path;
    uint64_t gen;
    int suspects;
} source_t;

static int source_addr(void *baton, uint64_t *gen,
                       authn_hmac_redis_addr_t *addrs, int *naddr,
                       char peer[AUTHN_HMAC_REDIS_HOST_MAX], const char **why)
{
    source_t *s = baton;
    struct sockaddr_un *un = (struct sockaddr_un *)&addrs[0].sa;

    if (!s->gen) {
        *why = "the test's source knows none";
        return -1;
    }
    if (*gen == s->gen)
        return 0;
    memset(&addrs[0], 0, sizeof(addrs[0]));
    un->sun_family = AF_UNIX;
    snprintf(un->sun_path, sizeof(un->sun_path), "%s", s->path);
    addrs[0].len = sizeof(*un);
    *naddr = 1;
    peer[0] = '\0';
    *gen = s->gen;
    return 1;
}

static void source_suspect(void *baton)
{
    ((source_t *)baton)->suspects++;
}

static void server_start(server_t *sv, source_t *src)
{
    struct sockaddr_un un;

    memset(sv, 0, sizeof(*sv));
    snprintf(sv->path, sizeof(sv->path), "/tmp/test_redis_pool.%d",
             (int)getpid());
    (void)unlink(sv->path);
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    snprintf(un.sun_path, sizeof(un.sun_path), "%s", sv->path);
    sv->listen = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(sv->listen >= 0 &&
          bind(sv->listen, (struct sockaddr *)&un, sizeof(un)) == 0 &&
          listen(sv->listen, 16) == 0);
    fcntl(sv->listen, F_SETFL, O_NONBLOCK);
    src->path = sv->path;
    src->gen = 1;
    src->suspects = 0;
}

/* Accepts what came since: how many connections were made. */
static int server_accept(server_t *sv)
{
    int n = 0, fd;

    while (sv->nends < 16 && (fd = accept(sv->listen, NULL, NULL)) >= 0) {
        sv->ends[sv->nends++] = fd;
        n++;
    }
    return n;
}

/* The server goes away: the connections made to it closed, and no more
 * taken. */
static void server_stop(server_t *sv)
{
    (void)server_accept(sv);
    while (sv->nends > 0)
        close(sv->ends[--sv->nends]);
    close(sv->listen);
    (void)unlink(sv->path);
}

static authn_hmac_redis_pool_t *
pool_of(int size, source_t *src, authn_hmac_redis_health_t *h, apr_pool_t *p)
{
    static authn_hmac_redis_conf_t conf;
    authn_hmac_redis_source_t s = {source_addr, source_suspect, NULL};
    authn_hmac_redis_pool_t *rp = NULL;

    memset(&conf, 0, sizeof(conf));
    conf.timeout_ms = 1000;
    conf.prefix = "authn_hmac:";
    CHECK(authn_hmac_redis_pool_create(&rp, &conf, size, h, p) == APR_SUCCESS);
    s.baton = src;
    authn_hmac_redis_pool_use(rp, s);
    return rp;
}

/* A connection from rp before a second from now: its outcome, *why. */
static authn_hmac_redis_rc acquire(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t **c,
                                   const char **why, apr_pool_t *p)
{
    *why = "";
    return authn_hmac_redis_pool_acquire(
        rp, c, authn_hmac_monotonic() + apr_time_from_sec(1), why, p);
}

/* A test's world: the shared health, the source, the server, the pool. */
typedef struct {
    authn_hmac_redis_health_t h;
    source_t src;
    server_t sv;
    authn_hmac_redis_pool_t *rp;
} world_t;

static world_t *world(int size, apr_pool_t *p)
{
    static world_t w;

    memset(&w, 0, sizeof(w));
    server_start(&w.sv, &w.src);
    w.rp = pool_of(size, &w.src, &w.h, p);
    return &w;
}

/* Takes n connections into c; each must be had. */
static void take(world_t *w, authn_hmac_redis_conn_t **c, int n, apr_pool_t *p)
{
    const char *why;
    int i;

    for (i = 0; i < n; i++)
        CHECK(acquire(w->rp, &c[i], &why, p) == AUTHN_HMAC_REDIS_OK && c[i]);
}

/* Gives n connections of c back, whole. */
static void give(world_t *w, authn_hmac_redis_conn_t **c, int n)
{
    int i;

    for (i = 0; i < n; i++)
        authn_hmac_redis_pool_release(w->rp, c[i], 0);
}

/* A pool of 2: three taken at once are three connections; given back, two
 * are kept and the third closed; taken again, the two kept are used. */
static void test_more_than_its_size(apr_pool_t *p)
{
    world_t *w = world(2, p);
    authn_hmac_redis_conn_t *c[3], *again[3];

    take(w, c, 3, p);
    CHECK(server_accept(&w->sv) == 3);
    CHECK(w->h.conns == 3);
    give(w, c, 3);
    CHECK(w->h.conns == 2);
    take(w, again, 2, p);
    /* The two kept (the third was closed). */
    CHECK(again[0] != again[1] && (again[0] == c[0] || again[0] == c[1]) &&
          (again[1] == c[0] || again[1] == c[1]));
    CHECK(server_accept(&w->sv) == 0 && w->h.conns == 2);
    /* One more than those kept: a new one. */
    take(w, again + 2, 1, p);
    CHECK(server_accept(&w->sv) == 1 && w->h.conns == 3);
    give(w, again, 3);
    CHECK(w->h.conns == 2 && w->src.suspects == 0);
    /* The pool's own pool cleared: every connection closed, and counted. */
    apr_pool_clear(p);
    CHECK(w->h.conns == 0);
    server_stop(&w->sv);
}

/* A broken connection is closed, and so are the idle ones (the server went
 * away, most likely), and the source is told. */
static void test_a_broken_one(apr_pool_t *p)
{
    world_t *w = world(4, p);
    authn_hmac_redis_conn_t *c[3];

    take(w, c, 3, p);
    give(w, c, 2);
    CHECK(w->h.conns == 3);
    authn_hmac_redis_pool_release(w->rp, c[2], 1);
    CHECK(w->h.conns == 0 && w->src.suspects == 1);
    CHECK(server_accept(&w->sv) == 3);
    /* Nothing idle is left: the next one is new. */
    take(w, c, 1, p);
    CHECK(server_accept(&w->sv) == 1 && w->h.conns == 1);
    give(w, c, 1);
    apr_pool_clear(p);
    server_stop(&w->sv);
}

/* The server closed the idle connections (a restart): none is handed out;
 * a new one is made. Then it is gone for good: no connection, the failure
 * told to the source, and nothing counted. */
static void test_the_server_went_away(apr_pool_t *p)
{
    world_t *w = world(2, p);
    authn_hmac_redis_conn_t *c[2];
    const char *why;

    take(w, c, 2, p);
    give(w, c, 2);
    CHECK(server_accept(&w->sv) == 2);
    while (w->sv.nends > 0)
        close(w->sv.ends[--w->sv.nends]);
    take(w, c, 1, p);
    CHECK(server_accept(&w->sv) == 1 && w->h.conns == 1);
    give(w, c, 1);
    server_stop(&w->sv);
    c[0] = NULL;
    CHECK(acquire(w->rp, &c[0], &why, p) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(c[0] == NULL && *why && w->h.conns == 0 && w->src.suspects == 1);
    apr_pool_clear(p);
}

/* An outage seen by any process (the health's epoch moved on) makes the
 * idle connections stale; a new address (the source's generation) too,
 * and a connection to the old one given back is not kept. */
static void test_stale_ones(apr_pool_t *p)
{
    world_t *w = world(2, p);
    authn_hmac_redis_conn_t *c[2];

    take(w, c, 1, p);
    give(w, c, 1);
    w->h.epoch++;
    take(w, c + 1, 1, p);
    CHECK(server_accept(&w->sv) == 2 && w->h.conns == 1);
    give(w, c + 1, 1);
    /* A new generation: the idle one is dropped when the pool looks. */
    w->src.gen = 2;
    take(w, c, 1, p);
    CHECK(server_accept(&w->sv) == 1 && w->h.conns == 1);
    /* Taken before a third: given back after, it is closed. */
    w->src.gen = 3;
    take(w, c + 1, 1, p);
    CHECK(server_accept(&w->sv) == 1 && w->h.conns == 2);
    give(w, c, 1);
    CHECK(w->h.conns == 1);
    give(w, c + 1, 1);
    CHECK(w->h.conns == 1 && w->src.suspects == 0);
    apr_pool_clear(p);
    server_stop(&w->sv);
}

/* No address known: no connection, the source's reason, the failure told;
 * a pool given no source says so. */
static void test_no_address(apr_pool_t *p)
{
    static authn_hmac_redis_health_t h;
    static authn_hmac_redis_conf_t conf;
    authn_hmac_redis_conn_t *c = NULL;
    authn_hmac_redis_pool_t *rp;
    const char *why;
    source_t src = {"/nonexistent", 0, 0};

    memset(&h, 0, sizeof(h));
    rp = pool_of(2, &src, &h, p);
    CHECK(acquire(rp, &c, &why, p) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(!c && !strcmp(why, "the test's source knows none"));
    CHECK(src.suspects == 1 && h.conns == 0);
    memset(&conf, 0, sizeof(conf));
    CHECK(authn_hmac_redis_pool_create(&rp, &conf, 2, &h, p) == APR_SUCCESS);
    CHECK(acquire(rp, &c, &why, p) == AUTHN_HMAC_REDIS_ERROR);
    CHECK(!c && !strcmp(why, "no Redis server set"));
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_more_than_its_size, p);
    RUN(test_a_broken_one, p);
    RUN(test_the_server_went_away, p);
    RUN(test_stale_ones, p);
    RUN(test_no_address, p);
    return unit_end();
}
