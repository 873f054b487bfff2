/* engine_unit.h: what the unit tests of the request path share (the
 * tests of src/request/: test_engine*.c, test_source.c, test_dbm.c): an
 * engine over a table in shared memory, with a fake verifier that counts
 * its calls and can be made slow; a credential, a check under a policy
 * the globals below make, the counters. Include unit.h first. */
#ifndef AUTHN_HMAC_ENGINE_UNIT_H
#define AUTHN_HMAC_ENGINE_UNIT_H

#include "core/cred.h"
#include "core/secret.h"
#include "request/engine.h"
#include "shm/table.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The fake verifier: "right" matches the hash "H-right", and so on. Its
 * calls are counted in shared memory, across processes, with how many ran
 * at once and the nice value of the thread it ran in. */
static uint64_t *calls, *running, *running_max, *nice_seen, *policy_seen;
static int slow_ms;
static char hash_seen[AUTHN_HMAC_DUMMY_MAX]; /* the last one given */
static void *table_base;
static apr_global_mutex_t *table_mutex;
/* A writer at work during the verification: the next call writes
 * rewrite_text to rewrite_path (then forgets it). */
static const char *rewrite_path, *rewrite_text;

static inline void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

static inline apr_status_t fake_verify(const char *password, const char *hash)
{
    uint64_t now = __atomic_add_fetch(running, 1, __ATOMIC_RELAXED);
    uint64_t max = __atomic_load_n(running_max, __ATOMIC_RELAXED);

    while (now > max &&
           !__atomic_compare_exchange_n(running_max, &max, now, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    __atomic_store_n(
        nice_seen,
        (uint64_t)getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)),
        __ATOMIC_RELAXED);
    __atomic_store_n(policy_seen, (uint64_t)sched_getscheduler(0),
                     __ATOMIC_RELAXED);
    __atomic_add_fetch(calls, 1, __ATOMIC_RELAXED);
    snprintf(hash_seen, sizeof(hash_seen), "%s", hash);
    if (rewrite_text) {
        write_file(rewrite_path, rewrite_text);
        rewrite_text = NULL;
    }
    if (slow_ms)
        usleep((useconds_t)slow_ms * 1000);
    __atomic_sub_fetch(running, 1, __ATOMIC_RELAXED);
    if (strcmp(hash, "H-enomem") == 0)
        return APR_ENOMEM; /* a failure that is not a mismatch */
    return strncmp(hash, "H-", 2) == 0 && strcmp(hash + 2, password) == 0
               ? APR_SUCCESS
               : APR_EMISMATCH;
}

static inline authn_hmac_engine_t engine(apr_pool_t *p, size_t budget)
{
    authn_hmac_engine_t e;
    authn_hmac_secret_t *pep = NULL;
    authn_hmac_mac_t *mac = NULL;
    size_t size = authn_hmac_table_size(budget);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    apr_global_mutex_t *mutex = NULL;

    table_base = m;

    CHECK(m != MAP_FAILED);
    CHECK(authn_hmac_table_format(m, size, apr_time_now()) == APR_SUCCESS);
    CHECK(apr_global_mutex_create(&mutex, NULL, APR_LOCK_DEFAULT, p) ==
          APR_SUCCESS);
    CHECK(authn_hmac_secret_random(&pep, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mac, pep, p) == APR_SUCCESS);
    memset(&e, 0, sizeof(e));
    e.mac = mac;
    e.table = authn_hmac_table_attach(m, mutex, p);
    table_mutex = mutex;
    e.verify = fake_verify;
    *calls = *running_max = 0;
    return e;
}

/* In a forked child: its own pool, and the table attached as httpd's
 * children attach it. */
static inline apr_pool_t *in_child(authn_hmac_engine_t *e)
{
    apr_pool_t *cp;

    apr_pool_create(&cp, NULL);
    apr_global_mutex_child_init(&table_mutex, NULL, cp);
    e->table = authn_hmac_table_attach(table_base, table_mutex, cp);
    return cp;
}

static const char *client_addr = "192.0.2.1";

static inline authn_hmac_cred_t cred(const char *user, const char *password,
                                     const char *hash)
{
    authn_hmac_cred_t c;

    memset(&c, 0, sizeof(c)); /* no user id given: the engine makes it */
    c.scope = "/etc/apache2/users";
    c.scope_len = strlen(c.scope);
    c.user = user;
    c.user_len = strlen(user);
    c.password = password;
    c.password_len = strlen(password);
    c.hash = hash;
    c.hash_len = hash ? strlen(hash) : 0;
    c.dummy_hash = hash && *hash != '!' && *hash ? NULL : "H-typical";
    c.dummy_hash_len = c.dummy_hash ? 9 : 0;
    c.client = client_addr;
    return c;
}

static apr_interval_time_t negative_ttl_us;                       /* 0: off */
static apr_interval_time_t max_age_us = APR_INT64_C(28800000000); /* 8 h */
static int hide_unknown;

static inline authn_hmac_outcome check(const authn_hmac_engine_t *e,
                                       int ttl_sec, const char *user,
                                       const char *password, const char *hash,
                                       apr_pool_t *p)
{
    authn_hmac_policy_t pol;
    authn_hmac_cred_t c = cred(user, password, hash);

    memset(&pol, 0, sizeof(pol));
    pol.ttl = apr_time_from_sec(ttl_sec);
    pol.max_age = max_age_us;
    pol.negative_ttl = negative_ttl_us;
    pol.hide_unknown = hide_unknown;
    return authn_hmac_check(e, &pol, &c, NULL, p);
}

static inline uint64_t counted(const authn_hmac_engine_t *e,
                               enum authn_hmac_counter c)
{
    return authn_hmac_table_counter(e->table, c);
}

/* A throttle of max_failures wrong passwords per user and client, and
 * max_client_failures per client (0: none), within 10 minutes, whose bans
 * last 10 minutes. */
static inline void throttle(authn_hmac_engine_t *e, int max_failures,
                            int max_client_failures)
{
    e->throttle.max_failures = max_failures;
    e->throttle.max_client_failures = max_client_failures;
    e->throttle.window = apr_time_from_sec(600);
    e->throttle.ban = apr_time_from_sec(600);
}

/* The fake verifier's counts, in shared memory (forked children's calls
 * count too): made once, before the first engine(). */
static inline void engine_unit_start(void)
{
    calls = mmap(NULL, 5 * sizeof(*calls), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (calls == MAP_FAILED)
        abort();
    policy_seen = calls + 4;
    running = calls + 1;
    running_max = calls + 2;
    nice_seen = calls + 3;
}

#endif
