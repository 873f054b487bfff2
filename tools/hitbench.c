/* hitbench: the cost of a cache hit, in process, without httpd.
 *
 * Times the pieces of the hit path (the credential MAC from the digest the
 * index keeps; the digest, MAC and user id worked out as if nothing were
 * kept; the shared-memory lookup; the htpasswd file's check and index
 * lookup) and the whole path as the module runs it (the file's lookup,
 * then authn_hmac_check), with 1 and 2 threads, and prints
 * nanoseconds per hit: the median of 25 rounds timed one by one.
 * `tools/hitbench [iterations [row]]` after a build (build/tools/hitbench); a
 * row by its name ("whole hit path") alone. */
#include "request/engine.h"
#include "core/cred.h"
#include "sources/htpasswd.h"
#include "core/secret.h"
#include "shm/table.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USERS  1000
#define ROUNDS 25 /* timed one by one */

static authn_hmac_mac_t *mac;
static authn_hmac_table_t *table;
static authn_hmac_userfile_t *uf;
static authn_hmac_engine_t engine;
static const char *scope = "/etc/apache2/wiki.htpasswd";
static const char *hash =
    "$2y$12$abcdefghijklmnopqrstuuJ2pV3Hb4Vu5mYb8M3ZB5a7z4Fqkz3Qu";
static long iterations = 2000000;
static volatile int sink;
static char names_[USERS][16];

typedef enum { MAC, UNKEPT, LOOKUP, USERFILE, PATH } what_t;

/* A hit never verifies: were one to miss, it is counted as no hit. */
/* A credential's key from its fields, as the engine makes it: the digest,
 * then its MAC. */
static void mac_compute(const char *user, size_t user_len,
                        unsigned char key[AUTHN_HMAC_KEY_LEN])
{
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];

    authn_hmac_cred_digest(scope, strlen(scope), user, user_len, hash,
                           strlen(hash), d);
    authn_hmac_cred_mac(mac, d, "correct horse battery", 21, key);
}

static apr_status_t no_bcrypt(const char *password, const char *h)
{
    (void)password;
    (void)h;
    return APR_EMISMATCH;
}

static void user_name(char *u, long i)
{
    snprintf(u, 16, "user%04ld", i % USERS);
}

static const char *name_of(long i)
{
    return names_[i % USERS];
}

/* One thread's work: each round's ns per hit. */
typedef struct {
    what_t what;
    double ns[ROUNDS];
} job_t;

/* What the module keeps of each user: the credential key, the user's id
 * and the digest. */
typedef struct {
    unsigned char key[USERS][AUTHN_HMAC_KEY_LEN];
    unsigned char uid[USERS][AUTHN_HMAC_KEY_LEN];
    unsigned char dig[USERS][AUTHN_HMAC_DIGEST_LEN];
} kept_t;

static void keep(kept_t *kept)
{
    char name[16];
    long i;

    for (i = 0; i < USERS; i++) {
        user_name(name, i);
        mac_compute(name, strlen(name), kept->key[i]);
        authn_hmac_user_id(mac, scope, strlen(scope), name, strlen(name),
                           kept->uid[i]);
        authn_hmac_cred_digest(scope, strlen(scope), name, strlen(name), hash,
                               strlen(hash), kept->dig[i]);
    }
}

/* One hit of user n by what is timed: what it adds to the hits. */
static int hit(what_t what, long n, const kept_t *kept,
               const authn_hmac_policy_t *pol, apr_time_t now, apr_pool_t *p)
{
    unsigned char k[AUTHN_HMAC_KEY_LEN], u[AUTHN_HMAC_KEY_LEN],
        d[AUTHN_HMAC_DIGEST_LEN];
    const char *nm = name_of(n);
    size_t nl = strlen(nm);

    switch (what) {
    case MAC:
        authn_hmac_cred_mac(mac, kept->dig[n], "correct horse battery", 21, k);
        return k[0];
    case UNKEPT:
        mac_compute(nm, nl, k);
        authn_hmac_user_id(mac, scope, strlen(scope), nm, nl, u);
        return k[0] + u[0];
    case LOOKUP:
        return authn_hmac_table_lookup(table, kept->key[n], kept->uid[n], now,
                                       apr_time_from_sec(300),
                                       apr_time_from_sec(28800), NULL, NULL);
    case USERFILE: {
        const char *h = NULL;
        authn_hmac_reading_t rd;
        size_t hl = 0;

        /* As the module looks up: the user's id and the digest come with
         * the hash. */
        return authn_hmac_userfile_lookup_id(uf, nm, mac, scope, strlen(scope),
                                             &h, &hl, u, d, NULL, NULL, p,
                                             &rd) == APR_SUCCESS;
    }
    case PATH: { /* as the module runs it: the lookup, then the tiers */
        authn_hmac_cred_t c;
        apr_status_t rv;

        memset(&c, 0, sizeof(c));
        c.scope = scope;
        c.scope_len = strlen(scope);
        c.user = nm;
        c.user_len = nl;
        c.password = "correct horse battery";
        c.password_len = 21;
        return authn_hmac_check_user(&engine, pol, uf, &c, NULL, NULL, p,
                                     &rv) == AUTHN_HMAC_HIT;
    }
    }
    return 0;
}

static void *run(void *arg)
{
    job_t *job = arg;
    apr_time_t t0 = 0;
    kept_t kept;
    apr_time_t now = apr_time_now();
    long i;
    int hits = 0;
    apr_pool_t *p;
    authn_hmac_policy_t pol = {apr_time_from_sec(300),
                               apr_time_from_sec(28800),
                               apr_time_from_sec(30),
                               1,
                               0,
                               0,
                               0};

    apr_pool_create(&p, NULL);
    keep(&kept);
    for (i = 0; i < iterations; i++) {
        if (i % (iterations / ROUNDS) == 0) {
            apr_time_t t = apr_time_now();

            if (i)
                job->ns[i / (iterations / ROUNDS) - 1] =
                    (double)(t - t0) * 1000.0 / (double)(iterations / ROUNDS);
            t0 = t;
        }
        hits += hit(job->what, i % USERS, &kept, &pol, now, p);
        if (i % 1024 == 0)
            apr_pool_clear(p);
    }
    job->ns[ROUNDS - 1] =
        (double)(apr_time_now() - t0) * 1000.0 / (double)(iterations / ROUNDS);
    apr_pool_destroy(p);
    sink = hits;
    return NULL;
}

static int by_ns(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The median over the rounds of each thread of the ns per hit: a machine
 * shared with others stalls some rounds, not the cost. */
static double measure(what_t what, int threads)
{
    pthread_t t[2];
    job_t jobs[2];
    double all[2 * ROUNDS];
    int i;

    for (i = 0; i < threads; i++) {
        jobs[i].what = what;
        pthread_create(&t[i], NULL, run, &jobs[i]);
    }
    for (i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        memcpy(all + i * ROUNDS, jobs[i].ns, sizeof(jobs[i].ns));
    }
    qsort(all, (size_t)(threads * ROUNDS), sizeof(double), by_ns);
    return all[threads * ROUNDS / 2];
}

/* The users' file, as the module reads it, at path (a mkstemp template):
 * 0, or -1 if it could not be written. */
static int write_users(char *path)
{
    FILE *f;
    int fd;
    long i;

    if ((fd = mkstemp(path)) < 0 || !(f = fdopen(fd, "w")))
        return -1;
    for (i = 0; i < USERS; i++)
        fprintf(f, "%s:%s\n", names_[i], hash);
    fclose(f);
    return 0;
}

/* The view of the users' file, as a child of the server has it: 0, or -1
 * if it could not be made. */
static int open_view(const char *path, apr_pool_t *p)
{
    uf = authn_hmac_userfile_make(path, p);
    /* HITBENCH_SHARED=<dir>: the index shared as a server's children share
     * it, its versions in <dir> (best on tmpfs). */
    if (getenv("HITBENCH_SHARED")) {
        authn_hmac_share_t *sh;
        const char *why = "";

        if (authn_hmac_share_create(&sh, getenv("HITBENCH_SHARED"), 1,
                                    (uid_t)-1, 0, &why, p) != APR_SUCCESS) {
            fprintf(stderr, "hitbench: %s %s\n", getenv("HITBENCH_SHARED"),
                    why);
            return -1;
        }
        authn_hmac_userfile_share(uf, sh, 0, mac, NULL, NULL, NULL);
        fprintf(stderr, "hitbench: the index is shared\n");
    }
    if (authn_hmac_userfile_child_init(uf, p) != APR_SUCCESS)
        return -1;
    /* HITBENCH_STAT=1: as a file that is not watched (NFS, a symlink). */
    if (getenv("HITBENCH_STAT"))
        fprintf(stderr, "hitbench: not watched: lookups stat() the file\n");
    else if (!authn_hmac_userfile_watch(uf))
        fprintf(stderr, "hitbench: %s is not watched: lookups stat() it\n",
                path);
    return 0;
}

/* The engine, and every user's credential in the cache (each lookup a
 * hit). */
static void set_up_engine(apr_time_t now)
{
    char name[16];
    long i;

    engine.mac = mac;
    engine.table = table;
    engine.verify = no_bcrypt;
    /* NB: the throttle on, as the module's defaults have it (no ban: the
     * hit path reads one word). */
    engine.throttle.max_failures = 10;
    engine.throttle.max_client_failures = 30;
    engine.throttle.window = apr_time_from_sec(600);
    engine.throttle.ban = apr_time_from_sec(600);
    for (i = 0; i < USERS; i++) {
        unsigned char k[AUTHN_HMAC_KEY_LEN], u[AUTHN_HMAC_KEY_LEN];

        user_name(name, i);
        mac_compute(name, strlen(name), k);
        authn_hmac_user_id(mac, scope, strlen(scope), name, strlen(name), u);
        authn_hmac_table_store(table, k, u, now, now, apr_time_from_sec(300));
    }
}

int main(int argc, char **argv)
{
    static const char *names[] = {"credential MAC", "MAC, id, not kept",
                                  "shm lookup", "htpasswd check+id",
                                  "whole hit path"};
    char path[] = "/tmp/hitbench.XXXXXX";
    authn_hmac_secret_t *pepper = NULL;
    apr_pool_t *p;
    size_t size = authn_hmac_table_size(4u << 20);
    void *base;
    apr_time_t now;
    const char *only = NULL;
    int w;
    long i;

    if (argc > 1)
        iterations = atol(argv[1]);
    if (iterations < ROUNDS * 1024)
        iterations = ROUNDS * 1024;
    iterations -= iterations % ROUNDS;
    if (argc > 2)
        only = argv[2];
    apr_initialize();
    apr_pool_create(&p, NULL);
    if (authn_hmac_secret_random(&pepper, 32, p) != APR_SUCCESS ||
        authn_hmac_mac_create(&mac, pepper, p) != APR_SUCCESS)
        return 1;
    base = apr_pcalloc(p, size);
    now = apr_time_now();
    authn_hmac_table_format(base, size, now);
    table = authn_hmac_table_attach(base, NULL, p);
    for (i = 0; i < USERS; i++)
        user_name(names_[i], i);
    if (write_users(path) != 0)
        return 1;
    /* NB: as a file in use is, not one changed within the last second,
     * whose index is checked with stat() until that second is over. */
    sleep(2);
    if (open_view(path, p) != 0)
        return 1;
    set_up_engine(now);
    printf("%-20s %12s %12s\n", "ns per hit", "1 thread", "2 threads");
    for (w = MAC; w <= PATH; w++)
        if (!only || strcmp(only, names[w]) == 0)
            printf("%-20s %12.0f %12.0f\n", names[w], measure((what_t)w, 1),
                   measure((what_t)w, 2));
    unlink(path);
    apr_terminate();
    return 0;
}
