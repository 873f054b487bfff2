/* Unit tests: the request path (src/request/engine.c), without httpd, with a
 * fake verifier that counts its calls and can be made slow. */
#include "request/engine.h"
#include "core/cred.h"
#include "shm/flight.h"
#include "shm/queue.h"
#include "core/secret.h"
#include "shm/table.h"
#include "testing/testing.h"
#include "core/util.h"
#include "unit.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <apr_strings.h>

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

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

static apr_status_t fake_verify(const char *password, const char *hash)
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

static authn_hmac_engine_t engine(apr_pool_t *p, size_t budget)
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
static apr_pool_t *in_child(authn_hmac_engine_t *e)
{
    apr_pool_t *cp;

    apr_pool_create(&cp, NULL);
    apr_global_mutex_child_init(&table_mutex, NULL, cp);
    e->table = authn_hmac_table_attach(table_base, table_mutex, cp);
    return cp;
}

static const char *client_addr = "192.0.2.1";

static authn_hmac_cred_t cred(const char *user, const char *password,
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

static authn_hmac_outcome check(const authn_hmac_engine_t *e, int ttl_sec,
                                const char *user, const char *password,
                                const char *hash, apr_pool_t *p)
{
    authn_hmac_policy_t pol;
    authn_hmac_cred_t c = cred(user, password, hash);

    pol.ttl = apr_time_from_sec(ttl_sec);
    pol.max_age = max_age_us;
    pol.negative_ttl = negative_ttl_us;
    pol.hide_unknown = hide_unknown;
    return authn_hmac_check(e, &pol, &c, NULL, p);
}

/* A user id given with the credential (as the htpasswd index keeps it)
 * finds what the engine's own made; it only says where to look: a wrong
 * one finds nothing and grants nothing. */
static void test_given_user_id(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {apr_time_from_sec(300), max_age_us, 0, 0};
    authn_hmac_cred_t c = cred("alice", "right", "H-right");
    unsigned char id[AUTHN_HMAC_KEY_LEN], other[AUTHN_HMAC_KEY_LEN];

    authn_hmac_user_id(e.mac, c.scope, c.scope_len, "alice", 5, id);
    authn_hmac_user_id(e.mac, c.scope, c.scope_len, "bob", 3, other);
    *calls = 0;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    c.uid = id;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    c.uid = other;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    c.password = "wrong";
    c.password_len = 5;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    c.uid = id;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 4);
}

/* A wrapped provider (AuthHMACProvider): asked in place of the verifier;
 * its grant is cached, its refusal goes to the negative cache, its error
 * is an error with nothing learned (the next request asks again). */
static int asked;
static apr_status_t answer;

static apr_status_t ask(void *ctx, const char *password)
{
    (void)ctx;
    asked++;
    return answer == APR_SUCCESS && strcmp(password, "right") != 0
               ? APR_EMISMATCH
               : answer;
}

static void test_wrapped_provider(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {apr_time_from_sec(300), max_age_us,
                               apr_time_from_sec(30), 0};
    authn_hmac_cred_t c = cred("wendy", "right", "ldap");

    c.ask = ask;
    *calls = 0;
    answer = APR_EGENERAL; /* the directory is down */
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(asked == 2);
    answer = APR_SUCCESS;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    CHECK(asked == 3);
    c.password = "stale";
    c.password_len = 5;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_NEGATIVE_HIT);
    CHECK(asked == 4);
    CHECK(*calls == 0); /* the verifier on the hash never ran */
}

/* A wrapped provider's user id is of a wider scope than its credential's
 * (the provider on its server, shared by its sections): a rotation finds
 * the entry kept under the previous pepper by that id too, and asks the
 * provider nothing (the review found every cached directory user asked
 * again after the flip). */
static void test_wrapped_provider_rotation(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20), rot = e;
    authn_hmac_policy_t pol = {apr_time_from_sec(300), max_age_us,
                               apr_time_from_sec(30), 0};
    authn_hmac_cred_t c = cred("wendy", "right", "ldap");
    authn_hmac_secret_t *pb = NULL;
    authn_hmac_mac_t *mb = NULL;
    uint64_t prev =
        authn_hmac_table_counter(e.table, AUTHN_HMAC_C_PREVIOUS_HITS);

    CHECK(authn_hmac_secret_random(&pb, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mb, pb, p) == APR_SUCCESS);
    c.ask = ask;
    c.scope = "ldap 0 Location /wiki";
    c.scope_len = strlen(c.scope);
    c.uid_scope = "ldap 0";
    c.uid_scope_len = strlen(c.uid_scope);
    answer = APR_SUCCESS;
    asked = 0;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(asked == 1);
    rot.mac = mb;
    rot.mac_prev = e.mac;
    CHECK(authn_hmac_check(&rot, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    CHECK(asked == 1);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_PREVIOUS_HITS) ==
          prev + 1);
    /* Stored again under the current pepper: B alone finds it. */
    rot.mac_prev = NULL;
    CHECK(authn_hmac_check(&rot, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    /* Another section of the provider: its own credential, asked. */
    c.scope = "ldap 0 Location /other";
    c.scope_len = strlen(c.scope);
    rot.mac_prev = e.mac;
    CHECK(authn_hmac_check(&rot, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(asked == 2);
}

/* A pepper rotation: an entry made under the pepper that is now the
 * previous one is a hit without a verification, counted, and stored again
 * under the current one (the next hit is the current pepper's); its time
 * of verification goes with it (max_age still counts from it). An entry
 * made with a pepper that is neither current nor previous is nothing, and
 * an unknown user finds nothing under either. */
static void test_previous_pepper(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20), rot = e, rogue = e;
    authn_hmac_secret_t *pb = NULL, *pc = NULL;
    authn_hmac_mac_t *mb = NULL, *mc = NULL;

    CHECK(authn_hmac_secret_random(&pb, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_secret_random(&pc, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mb, pb, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mc, pc, p) == APR_SUCCESS);
    /* Under A: verified, cached. */
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    /* Current B, previous A: a hit, stored again under B. */
    rot.mac = mb;
    rot.mac_prev = e.mac;
    CHECK(check(&rot, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_PREVIOUS_HITS) == 1);
    /* B alone (the old file gone): B's own entry. */
    rot.mac_prev = NULL;
    CHECK(check(&rot, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_PREVIOUS_HITS) == 1);
    /* A wrong password, and an unknown user, under either: refused, by a
     * verification, never from the previous pepper's entries. */
    rot.mac_prev = e.mac;
    CHECK(check(&rot, 300, "alice", "wrong", "H-right", p) ==
          AUTHN_HMAC_DENIED);
    CHECK(check(&rot, 300, "mallory", "right", NULL, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 2); /* hide_unknown off: no dummy */
    /* A pepper that is neither: C, with B as its previous, finds B's
     * entry; C alone, or C with A's, verifies. */
    rogue.mac = mc;
    rogue.mac_prev = NULL;
    CHECK(check(&rogue, 300, "bob", "secret", "H-secret", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 3);
    CHECK(check(&rot, 300, "bob", "secret", "H-secret", p) ==
          AUTHN_HMAC_VERIFIED); /* B, previous A: C's entry is nothing */
    CHECK(*calls == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_PREVIOUS_HITS) == 1);
    /* The time of verification goes with the entry: past max_age, the
     * previous pepper's entry is nothing. */
    {
        apr_interval_time_t keep = max_age_us;

        CHECK(check(&e, 300, "carol", "pw", "H-pw", p) == AUTHN_HMAC_VERIFIED);
        CHECK(*calls == 5);
        sleep(2);
        max_age_us = apr_time_from_sec(1);
        CHECK(check(&rot, 300, "carol", "pw", "H-pw", p) ==
              AUTHN_HMAC_VERIFIED);
        CHECK(*calls == 6);
        max_age_us = keep;
    }
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_PREVIOUS_HITS) == 1);
}

/* The credential's digest, given as the index keeps it, finds what the
 * engine's own made; the digest of another hash (the user's hash before a
 * change) names another credential: the right password for the new hash
 * is verified again, and the negative cache keeps them apart too. */
static void test_given_digest(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {apr_time_from_sec(300), max_age_us,
                               apr_time_from_sec(30), 0};
    authn_hmac_cred_t c = cred("alice", "right", "H-right");
    unsigned char d[AUTHN_HMAC_DIGEST_LEN], old[AUTHN_HMAC_DIGEST_LEN];

    authn_hmac_cred_digest(c.scope, c.scope_len, "alice", 5, "H-right", 7, d);
    authn_hmac_cred_digest(c.scope, c.scope_len, "alice", 5, "H-old", 5, old);
    *calls = 0;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    c.digest = d;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    c.digest = old;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    c.password = "wrong";
    c.password_len = 5;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_NEGATIVE_HIT);
    c.digest = d;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 4);
}

static void test_outcomes(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);

    CHECK(check(&e, 300, "zed", "x", NULL, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(check(&e, 300, "nohash", "x", "", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 0);
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 1);
    CHECK(check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    CHECK(check(&e, 300, "alice", "wrong", "H-right", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "alice", "wrong", "H-right", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 3); /* no negative cache yet */
    /* Another user with the same password, another scope: not the hit. */
    CHECK(check(&e, 300, "bob", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    /* The stored hash is in the key: a new hash is verified again at once,
     * and the old password no longer matches it. */
    CHECK(check(&e, 300, "alice", "right", "H-new", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "alice", "new", "H-new", p) == AUTHN_HMAC_VERIFIED);
    /* TTL 0: no caching, the verifier every time. */
    *calls = 0;
    CHECK(check(&e, 0, "carol", "c", "H-c", p) == AUTHN_HMAC_VERIFIED);
    CHECK(check(&e, 0, "carol", "c", "H-c", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 2);
    CHECK(!strcmp(authn_hmac_outcome_name(AUTHN_HMAC_REDIS_HIT), "redis-hit"));
    CHECK(!strcmp(authn_hmac_outcome_name(AUTHN_HMAC_UNKNOWN_USER),
                  "unknown-user"));
    CHECK(!strcmp(authn_hmac_outcome_name(AUTHN_HMAC_COALESCED), "coalesced"));
    CHECK(!strcmp(authn_hmac_outcome_name((authn_hmac_outcome)99), "error"));
}

/* Rewrites alice's cached entry as if verified `age` ago and last used
 * `idle` ago: the engine reads the real clock. NB: torn first, since a
 * store of the same credential never moves its times back. */
static void age_entry(const authn_hmac_engine_t *e, const char *password,
                      apr_interval_time_t age, apr_interval_time_t idle)
{
    authn_hmac_cred_t c = cred("alice", password, "H-right");
    unsigned char key[AUTHN_HMAC_KEY_LEN], uid[AUTHN_HMAC_KEY_LEN];
    apr_time_t now = apr_time_now();

    authn_hmac_mac_compute(e->mac, c.scope, c.scope_len, c.user, c.user_len,
                           c.password, c.password_len, c.hash, c.hash_len, key);
    authn_hmac_user_id(e->mac, c.scope, c.scope_len, c.user, c.user_len, uid);
    authn_hmac_table_tear(e->table, key, uid);
    CHECK(authn_hmac_table_store(e->table, key, uid, now - age, now - idle,
                                 apr_time_from_sec(300)) == APR_SUCCESS);
}

static uint64_t counted(const authn_hmac_engine_t *e, enum authn_hmac_counter c)
{
    return authn_hmac_table_counter(e->table, c);
}

/* AuthHMACCacheTTL is an idle timeout: a hit once half of it has passed
 * since the entry's last use was written writes it again (one write, not
 * one per hit); the max age bounds the entry from its verification, after
 * which the credential is verified again. Sections of other TTLs share the
 * entry, each with its own idle timeout. Negative entries keep their fixed
 * life. */
static void test_idle_timeout_and_max_age(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    int i;

    max_age_us = apr_time_from_sec(60);
    CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    CHECK(counted(&e, AUTHN_HMAC_C_STORES) == 1);
    /* Fresh: hits write nothing. */
    for (i = 0; i < 100; i++)
        CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(counted(&e, AUTHN_HMAC_C_REFRESHES) == 0);
    /* Last used 20 s ago (more than half of 30): the first hit writes its
     * use, the next ones find it fresh. */
    age_entry(&e, "right", apr_time_from_sec(20), apr_time_from_sec(20));
    for (i = 0; i < 100; i++)
        CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(counted(&e, AUTHN_HMAC_C_REFRESHES) == 1);
    CHECK(counted(&e, AUTHN_HMAC_C_STORES) == 2); /* age_entry's */
    CHECK(*calls == 1);
    /* Near its max age: refreshed once, and still bounded by it. */
    age_entry(&e, "right", apr_time_from_sec(55), apr_time_from_sec(28));
    for (i = 0; i < 100; i++)
        CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(counted(&e, AUTHN_HMAC_C_REFRESHES) == 2);
    /* Past its max age: verified again, however recently used. */
    age_entry(&e, "right", apr_time_from_sec(59) + apr_time_from_msec(999), 0);
    usleep(2000);
    CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 2);
    CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    /* Idle for its whole TTL: verified again. */
    age_entry(&e, "right", apr_time_from_sec(35),
              apr_time_from_sec(30) - apr_time_from_msec(1));
    usleep(2000);
    CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 3);
    /* Sections of 30 s and 10 s share the entry: a hit of either is a hit
     * of the other, a refresh under 30 s included (it once set an expiry
     * 30 s out, which the 10 s section refused and verified again). */
    age_entry(&e, "right", apr_time_from_sec(16), apr_time_from_sec(16));
    for (i = 0; i < 12; i++)
        CHECK(check(&e, i % 2 ? 10 : 30, "alice", "right", "H-right", p) ==
              AUTHN_HMAC_HIT);
    CHECK(*calls == 3);
    CHECK(counted(&e, AUTHN_HMAC_C_REFRESHES) == 3);
    /* Each with its own idle timeout: idle 12 s is live for 30 s, not for
     * 10 s, whose verification then serves both. */
    age_entry(&e, "right", apr_time_from_sec(20), apr_time_from_sec(12));
    CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(check(&e, 10, "alice", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 4);
    CHECK(check(&e, 10, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(check(&e, 30, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    /* A refused password keeps its fixed negative life: no refresh. */
    negative_ttl_us = apr_time_from_sec(30);
    CHECK(check(&e, 30, "alice", "wrong", "H-right", p) == AUTHN_HMAC_DENIED);
    for (i = 0; i < 10; i++)
        CHECK(check(&e, 30, "alice", "wrong", "H-right", p) ==
              AUTHN_HMAC_NEGATIVE_HIT);
    CHECK(counted(&e, AUTHN_HMAC_C_REFRESHES) == 3);
    negative_ttl_us = 0;
    max_age_us = APR_INT64_C(28800000000);
}

/* The common hit takes no lock: it completes while another process holds
 * the writers' mutex. (A refresh would skip its write.) */
static void test_hit_takes_no_lock(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    int status;
    pid_t pid;

    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(apr_global_mutex_lock(table_mutex) == APR_SUCCESS);
    pid = fork();
    if (pid == 0) {
        apr_pool_t *cp = in_child(&e);

        alarm(5); /* blocked on the mutex: killed, and the test fails */
        _exit(check(&e, 300, "alice", "right", "H-right", cp) !=
              AUTHN_HMAC_HIT);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    apr_global_mutex_unlock(table_mutex);
}

#define PROCS 4

/* Several processes check credentials at once through one table, with a
 * slow verifier: every answer is right, and afterwards all are hits. */
static void test_forked_processes(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    pid_t pid[PROCS];
    int i, status, ok = 1;

    slow_ms = 20;
    for (i = 0; i < PROCS; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            apr_pool_t *cp = in_child(&e);
            int bad = 0, n;

            for (n = 0; n < 5; n++) {
                char user[16];

                snprintf(user, sizeof(user), "u%d", n);
                bad |=
                    check(&e, 300, user, "pw", "H-pw", cp) == AUTHN_HMAC_DENIED;
                bad |= check(&e, 300, user, "nope", "H-pw", cp) !=
                       AUTHN_HMAC_DENIED;
            }
            _exit(bad);
        }
    }
    for (i = 0; i < PROCS; i++) {
        CHECK(waitpid(pid[i], &status, 0) == pid[i]);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(ok);
    slow_ms = 0;
    for (i = 0; i < 5; i++) {
        char user[16];

        snprintf(user, sizeof(user), "u%d", i);
        CHECK(check(&e, 300, user, "pw", "H-pw", p) == AUTHN_HMAC_HIT);
    }
}

/* A repeated wrong password is refused without the verifier; the right
 * password is not affected; a new stored hash starts afresh. */
static void test_negative_cache(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    int i;

    negative_ttl_us = apr_time_from_sec(30);
    CHECK(check(&e, 300, "alice", "wrong", "H-right", p) == AUTHN_HMAC_DENIED);
    for (i = 0; i < 1000; i++)
        CHECK(check(&e, 300, "alice", "wrong", "H-right", p) ==
              AUTHN_HMAC_NEGATIVE_HIT);
    CHECK(*calls == 1);
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    /* The password set to what was refused: it works at once. */
    CHECK(check(&e, 300, "alice", "wrong", "H-wrong", p) ==
          AUTHN_HMAC_VERIFIED);
    /* A flood of distinct wrong passwords never evicts a verified one. */
    for (i = 0; i < 5000; i++) {
        char pw[32];

        snprintf(pw, sizeof(pw), "flood %d", i);
        CHECK(check(&e, 300, "alice", pw, "H-right", p) == AUTHN_HMAC_DENIED);
    }
    CHECK(check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    /* Off: every wrong password is verified. */
    negative_ttl_us = 0;
    *calls = 0;
    CHECK(check(&e, 300, "bob", "nope", "H-b", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "bob", "nope", "H-b", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 2);
}

/* Forks n processes that wait at a barrier, then each check one
 * credential; returns how many got each outcome. */
static const char *burst_hash = "H-right";
static const char **burst_clients; /* NULL: all from client_addr */
static int burst_late = -1;        /* this one starts 100 ms after the others */

static void burst(const authn_hmac_engine_t *e0, int n, const char **passwords,
                  int *outcomes)
{
    int go[2], res[2], i;
    pid_t pid[16];

    CHECK(pipe(go) == 0 && pipe(res) == 0);
    for (i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            authn_hmac_engine_t e = *e0;
            apr_pool_t *cp;
            unsigned char o;
            char b;

            cp = in_child(&e);
            if (burst_clients)
                client_addr = burst_clients[i];
            (void)!read(go[0], &b, 1);
            if (i == burst_late)
                usleep(200000);
            o = (unsigned char)check(&e, 300, "alice", passwords[i], burst_hash,
                                     cp);
            (void)!write(res[1], &o, 1);
            _exit(0);
        }
    }
    for (i = 0; i < n; i++)
        (void)!write(go[1], "x", 1);
    for (i = 0; i < n; i++) {
        unsigned char o = 0;

        CHECK(read(res[0], &o, 1) == 1);
        outcomes[o]++;
        waitpid(pid[i], NULL, 0);
    }
    close(go[0]);
    close(go[1]);
    close(res[0]);
    close(res[1]);
}

/* Eight processes miss the same credential at once: one verification, and
 * every answer right; mixed with wrong passwords, one per credential. */
static void test_single_flight(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *same[8] = {"right", "right", "right", "right",
                           "right", "right", "right", "right"};
    const char *mixed[8] = {"right", "wrong", "right", "wrong",
                            "right", "wrong", "right", "wrong"};
    int out[16] = {0};

    slow_ms = 200;
    burst(&e, 8, same, out);
    CHECK(*calls == 1);
    CHECK(out[AUTHN_HMAC_VERIFIED] == 1 && out[AUTHN_HMAC_COALESCED] == 7);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_COALESCED) == 7);

    e = engine(p, 1 << 20);
    memset(out, 0, sizeof(out));
    negative_ttl_us = 0; /* the waiters learn the refusal from the flight */
    burst(&e, 8, mixed, out);
    CHECK(*calls == 2);
    CHECK(out[AUTHN_HMAC_VERIFIED] + out[AUTHN_HMAC_COALESCED] == 4);
    CHECK(out[AUTHN_HMAC_DENIED] == 4);

    /* A failure that is not a mismatch (found by review) is no answer for
     * the waiters: each verifies by itself, and nothing is remembered. */
    e = engine(p, 1 << 20);
    memset(out, 0, sizeof(out));
    negative_ttl_us = apr_time_from_sec(30);
    burst_hash = "H-enomem";
    burst(&e, 4, same, out);
    burst_hash = "H-right";
    CHECK(*calls == 4 && out[AUTHN_HMAC_DENIED] == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_COALESCED) == 0);
    CHECK(check(&e, 300, "alice", "right", "H-enomem", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 5);
    negative_ttl_us = 0;
    slow_ms = 0;
}

/* A waiter that had not looked when its run ended, and a new run of the
 * same credential began (a keep-alive client sends its next request at
 * once), takes the result of its run: it does not wait for the next one,
 * nor for every later one until its deadline (CI: waiters that kept
 * missing the end of their run under load waited 7 s, then all went to
 * the queue at once and were answered 503). */
static void test_waiter_behind_a_new_run(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_cred_t c = cred("alice", "right", "H-right");
    unsigned char key[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run1, waiter, run2, late;
    apr_time_t now = authn_hmac_monotonic();
    apr_interval_time_t stale = apr_time_from_sec(60);

    authn_hmac_mac_compute(e.mac, c.scope, c.scope_len, c.user, c.user_len,
                           c.password, c.password_len, c.hash, c.hash_len, key);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &run1) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &waiter) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    authn_hmac_flight_end(e.table, &run1, key, 1, now);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &run2) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &late) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(late.slot == run2.slot && late.run == run2.run);
    /* The first run's waiter: its result at once. */
    CHECK(authn_hmac_flight_wait(e.table, &waiter, key,
                                 authn_hmac_monotonic() +
                                     apr_time_from_sec(5)) == 1);
    /* The second run refuses; its waiter learns that, not the grant. */
    authn_hmac_flight_end(e.table, &run2, key, 0, now);
    CHECK(authn_hmac_flight_wait(e.table, &late, key,
                                 authn_hmac_monotonic() +
                                     apr_time_from_sec(5)) == 0);

    /* Every place taken but the one that ended: the new run takes it, and
     * a waiter of the run that ended there no longer waits (-1: it
     * verifies by itself), in no time. */
    {
        authn_hmac_flight_t other, old, next;
        unsigned char k2[AUTHN_HMAC_KEY_LEN];
        apr_time_t t0;
        int i;

        e = engine(p, 1 << 20);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &run1) ==
              AUTHN_HMAC_FLIGHT_RUN);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &old) ==
              AUTHN_HMAC_FLIGHT_WAIT);
        for (i = 1; i < 64; i++) {
            memcpy(k2, key, sizeof(k2));
            k2[0] ^= (unsigned char)i;
            CHECK(authn_hmac_flight_begin(e.table, k2, now, stale, &other) ==
                  AUTHN_HMAC_FLIGHT_RUN);
        }
        authn_hmac_flight_end(e.table, &run1, key, 1, now);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &next) ==
              AUTHN_HMAC_FLIGHT_RUN);
        CHECK(next.slot == run1.slot && next.run > run1.run);
        t0 = authn_hmac_monotonic();
        CHECK(authn_hmac_flight_wait(e.table, &old, key,
                                     t0 + apr_time_from_sec(5)) == -1);
        CHECK(authn_hmac_monotonic() - t0 < apr_time_from_sec(1));
        /* The old run's end does not end the new one. */
        authn_hmac_flight_end(e.table, &run1, key, 0, now);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &late) ==
              AUTHN_HMAC_FLIGHT_WAIT);
    }
}

/* A request that missed the cache while another verified the same
 * credential, and came to the flight after that run ended: a second look
 * finds what the run stored (one verification; CI: an LDAP burst of 64
 * made two binds). The hook runs the other request at the miss. */
static authn_hmac_engine_t *racer_engine;
static const char *racer_password;
static apr_pool_t *racer_pool;
static authn_hmac_outcome racer_got;

static void racer(int n)
{
    if (n != 6 || !racer_password)
        return;
    {
        const char *password = racer_password;

        racer_password = NULL;
        racer_got =
            check(racer_engine, 30, "alice", password, "H-right", racer_pool);
    }
}

static void test_a_run_that_ended_after_the_look(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    static const char *const passwords[] = {"right", "wrong"};
    int i;

    negative_ttl_us = apr_time_from_sec(30);
    for (i = 0; i < 2; i++) {
        const char *password = passwords[i];

        racer_engine = &e;
        racer_pool = p;
        racer_password = password;
        authn_hmac_test_pause_hook = racer;
        *calls = 0;
        CHECK(check(&e, 30, "alice", password, "H-right", p) ==
              (i ? AUTHN_HMAC_DENIED : AUTHN_HMAC_COALESCED));
        authn_hmac_test_pause_hook = NULL;
        CHECK(racer_password == NULL);
        CHECK(racer_got == (i ? AUTHN_HMAC_DENIED : AUTHN_HMAC_VERIFIED));
        CHECK(*calls == 1);
        CHECK(check(&e, 30, "alice", password, "H-right", p) ==
              (i ? AUTHN_HMAC_NEGATIVE_HIT : AUTHN_HMAC_HIT));
        CHECK(*calls == 1);
    }
    negative_ttl_us = 0;
}

/* A runner that died is taken over at once; one that is late (past twice
 * the usual verification time) is not waited for. */
static void test_runner_dies_or_is_late(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_cred_t c = cred("alice", "right", "H-right");
    unsigned char key[AUTHN_HMAC_KEY_LEN];
    apr_time_t t0;
    authn_hmac_flight_t fl;
    pid_t pid;
    int status;

    authn_hmac_mac_compute(e.mac, c.scope, c.scope_len, c.user, c.user_len,
                           c.password, c.password_len, c.hash, c.hash_len, key);
    pid = fork();
    if (pid == 0) {
        (void)in_child(&e);
        _exit(authn_hmac_flight_begin(e.table, key, authn_hmac_monotonic(),
                                      apr_time_from_sec(60), &fl) !=
              AUTHN_HMAC_FLIGHT_RUN); /* and dies before it ends */
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    t0 = apr_time_now();
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(apr_time_now() - t0 < apr_time_from_msec(500));
    CHECK(*calls == 1);

    /* Late: verifications here take 20 ms; the runner takes 3 s; a waiter
     * gives up after twice 20 ms and a second, and verifies by itself. */
    e = engine(p, 1 << 20);
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFICATIONS, 1);
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFY_USEC, 20000);
    slow_ms = 3000;
    pid = fork();
    if (pid == 0) {
        apr_pool_t *cp = in_child(&e);

        _exit(check(&e, 300, "alice", "right", "H-right", cp) !=
              AUTHN_HMAC_VERIFIED);
    }
    usleep(100000);
    slow_ms = 0;
    t0 = apr_time_now();
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(apr_time_now() - t0 >= apr_time_from_msec(1000));
    CHECK(apr_time_now() - t0 < apr_time_from_msec(2000));
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    CHECK(*calls == 2);
}

/* An unknown user, and a locked line, cost one verification, as a known
 * user with a wrong password does, through the same negative cache; never a
 * grant, and never against a user's own hash: the password of the typical
 * hash is refused and remembered as any other (it was an oracle: its
 * repeats cost a verification each, any other password's none). */
static uint64_t verify_observations(authn_hmac_engine_t *e)
{
    authn_hmac_stats_t st;
    uint64_t n = 0;
    unsigned b;

    authn_hmac_table_stats(e->table, apr_time_now(), &st);
    for (b = 0; b < AUTHN_HMAC_BUCKETS; b++)
        n += st.hist[AUTHN_HMAC_H_VERIFY].bucket[b];
    return n;
}

static void test_unknown_users_cost_a_verification(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);

    hide_unknown = 1;
    negative_ttl_us = apr_time_from_sec(30);
    CHECK(check(&e, 300, "ghost", "guess", NULL, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 1);
    CHECK(strcmp(hash_seen, "H-typical") != 0 && strlen(hash_seen) == 9);
    CHECK(check(&e, 300, "ghost", "guess", NULL, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 1); /* the negative cache, as for a known user */
    CHECK(check(&e, 300, "ghost", "typical", NULL, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(check(&e, 300, "ghost", "typical", NULL, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 2); /* refused and remembered as any other */
    /* Locked lines: "carol:" and "dave:!H-guess" (the hash after '!' would
     * match): the same path, denied. */
    CHECK(check(&e, 300, "carol", "guess", "", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "carol", "guess", "", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "dave", "guess", "!H-guess", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "dave", "guess", "!H-guess", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_DUMMY_VERIFICATIONS) ==
          4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_VERIFICATIONS) == 0);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_UNKNOWN_USER) == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_DENIED) == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_STORES) == 0);
    hide_unknown = 0;
    CHECK(check(&e, 300, "ghost2", "x", NULL, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(check(&e, 300, "erin", "x", "*", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 4);
    /* Dummies stay out of the verification histogram, as out of
     * verifications; a known user's run goes in. */
    CHECK(verify_observations(&e) == 0);
    CHECK(check(&e, 300, "bob", "wrong", "H-right", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 5 && verify_observations(&e) == 1);
    negative_ttl_us = 0;
}

/* The throttle: a client's distinct wrong passwords for a user stop
 * costing verifications at the limit (throttled, counted, the ban logged
 * once); the banned pair is refused before the caches (else its guesses
 * would be checked at the cache's speed), another user of the client is
 * served, another client is not affected, a repeat of a wrong password is
 * no new guess, and an unknown or a locked user (behind the dummy) takes
 * the same path. */
static void test_throttle(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *was = client_addr;
    int i;

    e.throttle.max_failures = 3;
    e.throttle.max_client_failures = 0;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    hide_unknown = 1;
    client_addr = "192.0.2.10";
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(check(&e, 300, "bob", "bobs", "H-bobs", p) == AUTHN_HMAC_VERIFIED);
    *calls = 0;
    CHECK(check(&e, 300, "alice", "guess1", "H-right", p) == AUTHN_HMAC_DENIED);
    for (i = 0; i < 5; i++) /* a stale client: the same wrong password */
        CHECK(check(&e, 300, "alice", "guess1", "H-right", p) ==
              AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "alice", "guess2", "H-right", p) == AUTHN_HMAC_DENIED);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 0);
    CHECK(check(&e, 300, "alice", "guess3", "H-right", p) == AUTHN_HMAC_DENIED);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 1);
    CHECK(*calls == 8);
    CHECK(check(&e, 300, "alice", "guess4", "H-right", p) ==
          AUTHN_HMAC_THROTTLED);
    CHECK(check(&e, 300, "alice", "other", "H-other", p) ==
          AUTHN_HMAC_THROTTLED); /* an uncached right password, too */
    CHECK(*calls == 8);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_THROTTLED) == 2);
    /* The banned pair: refused before the caches, its cached credential
     * too (no guess is checked against it); the client's other user is
     * served from the cache. */
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_THROTTLED);
    CHECK(check(&e, 300, "bob", "bobs", "H-bobs", p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 8);
    /* Another client: its own count, and the cache. */
    client_addr = "192.0.2.11";
    CHECK(check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    CHECK(check(&e, 300, "alice", "other", "H-other", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 9);
    /* An unknown user and a locked one, behind the dummy: the same way. */
    client_addr = "192.0.2.12";
    for (i = 0; i < 3; i++) {
        char pw[16];

        snprintf(pw, sizeof(pw), "g%d", i);
        CHECK(check(&e, 300, "ghost", pw, NULL, p) == AUTHN_HMAC_UNKNOWN_USER);
        CHECK(check(&e, 300, "carol", pw, "", p) == AUTHN_HMAC_DENIED);
    }
    CHECK(*calls == 15);
    CHECK(check(&e, 300, "ghost", "g9", NULL, p) == AUTHN_HMAC_THROTTLED);
    CHECK(check(&e, 300, "carol", "g9", "", p) == AUTHN_HMAC_THROTTLED);
    CHECK(*calls == 15);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 3);
    hide_unknown = 0;
    client_addr = was;
}

/* A client at its limit with a guess under way (no ban yet: it starts
 * when that guess fails) is refused before the caches too: else, for as
 * long as that guess waits and runs, its other guesses would be checked
 * against the cached credential, uncounted (found by review). */
static void test_throttle_full_client_is_no_oracle(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *was = client_addr;
    unsigned char uid[AUTHN_HMAC_KEY_LEN];
    authn_hmac_throttle_ids_t ids;
    authn_hmac_outcome wrong = AUTHN_HMAC_ERROR, right;
    int i, entered;

    e.throttle.max_failures = 3;
    e.throttle.max_client_failures = 0;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    client_addr = "192.0.2.50"; /* alice, at home */
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    client_addr = "192.0.2.60"; /* the attacker */
    CHECK(check(&e, 300, "alice", "g1", "H-right", p) == AUTHN_HMAC_DENIED);
    CHECK(check(&e, 300, "alice", "g2", "H-right", p) == AUTHN_HMAC_DENIED);
    authn_hmac_user_id(e.mac, "/etc/apache2/users", 18, "alice", 5, uid);
    authn_hmac_throttle_ids(e.mac, client_addr, uid, &ids);
    CHECK(authn_hmac_throttle_enter(e.table, &e.throttle, &ids, apr_time_now(),
                                    &entered) == 0 &&
          entered); /* g3, under way */
    *calls = 0;
    for (i = 0; i < 1000; i++) {
        char pw[16];

        snprintf(pw, sizeof(pw), "x%d", i);
        wrong = check(&e, 300, "alice", pw, "H-right", p);
    }
    right = check(&e, 300, "alice", "right", "H-right", p);
    CHECK(*calls == 0);
    CHECK(wrong == AUTHN_HMAC_THROTTLED && right == AUTHN_HMAC_THROTTLED);
    /* alice at home: served. */
    client_addr = "192.0.2.50";
    CHECK(check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_HIT);
    client_addr = was;
}

/* An office behind one address: its logged-in users keep being served
 * through a ban of the address for all users (a sprayer there); anything
 * else from there is refused without a verification, a cached credential
 * of a user who logged in elsewhere too (no oracle for the sprayer), and
 * counted for its user+client pair; another address is served. */
static void test_throttle_client_ban_keeps_logged_in_users(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *was = client_addr;
    char user[16], pw[16];
    int i;

    e.throttle.max_failures = 10;
    e.throttle.max_client_failures = 30;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    client_addr = "192.0.2.80"; /* bob, at home */
    CHECK(check(&e, 300, "bob", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    client_addr = "198.51.100.1"; /* the office */
    for (i = 0; i < 4; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        CHECK(check(&e, 300, user, "right", "H-right", p) ==
              AUTHN_HMAC_VERIFIED);
    }
    /* Someone at the office sprays one password over 40 names. */
    for (i = 0; i < 40; i++) {
        snprintf(user, sizeof(user), "s%d", i);
        (void)check(&e, 300, user, "Summer2026", "H-right", p);
    }
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 1);
    *calls = 0;
    for (i = 0; i < 4; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        CHECK(check(&e, 300, user, "right", "H-right", p) == AUTHN_HMAC_HIT);
    }
    /* bob's right password, cached from home: not from the office. */
    CHECK(check(&e, 300, "bob", "right", "H-right", p) == AUTHN_HMAC_THROTTLED);
    /* A new login there, and a wrong password of a logged-in user. */
    CHECK(check(&e, 300, "newcomer", "right", "H-right", p) ==
          AUTHN_HMAC_THROTTLED);
    CHECK(check(&e, 300, "u0", "wrong", "H-right", p) == AUTHN_HMAC_THROTTLED);
    CHECK(*calls == 0);
    /* Each refused guess counts for its pair (his right password above
     * was one): ten of them ban bob there; a repeat does not count. */
    for (i = 0; i < 12; i++) {
        snprintf(pw, sizeof(pw), "b%d", i < 8 ? i : 7);
        CHECK(check(&e, 300, "bob", pw, "H-right", p) == AUTHN_HMAC_THROTTLED);
    }
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 1);
    CHECK(check(&e, 300, "bob", "b9", "H-right", p) == AUTHN_HMAC_THROTTLED);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 2);
    /* Elsewhere: bob, and a new user, served. */
    client_addr = "192.0.2.80";
    CHECK(check(&e, 300, "bob", "right", "H-right", p) == AUTHN_HMAC_HIT);
    client_addr = "192.0.2.81";
    CHECK(check(&e, 300, "carl", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 1);
    client_addr = was;
}

/* A source that folds names (SQL, LDAP): "Alice", "alice " and "ALICE"
 * are one account's, and share one count (and one wrong password sent
 * under two of them is one guess); a file that does not fold counts them
 * apart. */
static void test_throttle_folded_names_share_a_count(apr_pool_t *p)
{
    static const char *const names[] = {"Alice", "alice ", " ALICE", "aLiCe"};
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {apr_time_from_sec(300), max_age_us, 0, 0};
    const char *was = client_addr;
    authn_hmac_cred_t c;
    char pw[16];
    int i;

    e.throttle.max_failures = 3;
    e.throttle.max_client_failures = 0;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    client_addr = "192.0.2.90";
    *calls = 0;
    for (i = 0; i < 4; i++) {
        c = cred(names[i], "same typo", "H-right");
        c.fold = 1;
        CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    }
    for (i = 0; i < 2; i++) {
        snprintf(pw, sizeof(pw), "typo %d", i);
        c = cred(names[i], pw, "H-right");
        c.fold = 1;
        CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    }
    c = cred(names[3], "typo 9", "H-right");
    c.fold = 1;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_THROTTLED);
    CHECK(*calls == 6);
    /* Not folded (a file): each name its own count. */
    for (i = 0; i < 4; i++) {
        c = cred(names[i], "typo 9", "H-right");
        CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    }
    client_addr = was;
}

/* AuthHMACCacheTTL 0 (no caching) is throttled too: a section that caches
 * nothing is no way around the limit. */
static void test_throttle_without_a_cache(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *was = client_addr;
    int i;

    e.throttle.max_failures = 3;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    client_addr = "192.0.2.70";
    *calls = 0;
    for (i = 0; i < 3; i++) {
        char pw[16];

        snprintf(pw, sizeof(pw), "n%d", i);
        CHECK(check(&e, 0, "alice", pw, "H-right", p) == AUTHN_HMAC_DENIED);
    }
    CHECK(check(&e, 0, "alice", "n9", "H-right", p) == AUTHN_HMAC_THROTTLED);
    CHECK(check(&e, 0, "alice", "right", "H-right", p) == AUTHN_HMAC_THROTTLED);
    CHECK(*calls == 3);
    client_addr = "192.0.2.71";
    CHECK(check(&e, 0, "alice", "right", "H-right", p) == AUTHN_HMAC_VERIFIED);
    client_addr = was;
}

/* At most max_verifications run at once, each in its request's own
 * thread at the request's own priority; backlog more wait their turn;
 * beyond, busy. */
static void test_queue(apr_pool_t *p)
{
    int base_nice = getpriority(PRIO_PROCESS, 0); /* (tests may run niced) */

    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *pws[8] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};
    const char *clients[8] = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4",
                              "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8"};
    int out[16] = {0};
    authn_hmac_stats_t st;

    e.max_verifications = 2;
    e.backlog = 4;
    slow_ms = 600; /* all enter meanwhile */
    burst_clients = clients;
    burst(&e, 8, pws, out);
    /* 2 run, 4 wait their turn, 2 find no place. */
    CHECK(out[AUTHN_HMAC_DENIED] == 6 && out[AUTHN_HMAC_BUSY] == 2);
    CHECK(*calls == 6);
    CHECK(*running_max == 2);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_VERIFYING_MAX) == 2);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_QUEUED) == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BUSY) == 2);
    /* The verifier ran at the request's own priority and class (a lower
     * one starved logins beside busy pages, and their waiters). */
    CHECK(*nice_seen == (uint64_t)base_nice);
    CHECK(*policy_seen == (uint64_t)sched_getscheduler(0));
    CHECK(getpriority(PRIO_PROCESS, 0) == base_nice);
    /* Every place was given back. */
    authn_hmac_table_stats(e.table, apr_time_now(), &st);
    CHECK(st.verifying == 0 && st.waiting == 0);
    burst_clients = NULL;
}

/* Alone, one client may use every place (a burst from behind one NAT);
 * when the queue is full, another client takes the newest waiting place of
 * the one that holds more than half; and a process that died holding a
 * place does not keep it. */
static void test_queue_fair_share(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *pws[9] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "v8"};
    const char *clients[9] = {"10.9.9.9", "10.9.9.9", "10.9.9.9",
                              "10.9.9.9", "10.9.9.9", "10.9.9.9",
                              "10.9.9.9", "10.9.9.9", "10.1.1.1"};
    int out[16] = {0};
    authn_hmac_turn_t turn;
    pid_t pid;

    e.max_verifications = 2;
    e.backlog = 6; /* 8 places */
    slow_ms = 600;
    burst_clients = clients;
    burst_hash = "H-v8"; /* the last one, from the other client, is right */
    burst_late = 8;      /* and comes once the first eight hold every place */
    burst(&e, 9, pws, out);
    burst_hash = "H-right";
    burst_clients = NULL;
    burst_late = -1;
    CHECK(out[AUTHN_HMAC_VERIFIED] == 1);
    CHECK(out[AUTHN_HMAC_DENIED] == 7 && out[AUTHN_HMAC_BUSY] == 1);
    CHECK(*calls == 8);

    /* A process takes the only place and dies with it. */
    e.max_verifications = 1;
    e.backlog = 0;
    slow_ms = 0;
    pid = fork();
    if (pid == 0) {
        authn_hmac_engine_t ce = e;

        in_child(&ce);
        _exit(authn_hmac_queue_enter(ce.table, 7, 1, 0, 0, &turn) ==
                      AUTHN_HMAC_QUEUE_RUN
                  ? 0
                  : 1);
    }
    CHECK(pid > 0);
    {
        int status = -1;

        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
}

/* A verification that waits longer than twice the time of those ahead of
 * it gives up: busy, and its place is free again. */
static void test_queue_waits_are_bounded(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *pws[2] = {"w0", "w1"};
    int out[16] = {0};
    authn_hmac_stats_t st;

    /* The usual verification: 10 ms; so a wait of about a second. */
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFICATIONS, 1);
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFY_USEC, 10000);
    e.max_verifications = 1;
    e.backlog = 1;
    slow_ms = 2500;
    burst(&e, 2, pws, out);
    CHECK(out[AUTHN_HMAC_DENIED] == 1 && out[AUTHN_HMAC_BUSY] == 1);
    CHECK(*calls == 1);
    authn_hmac_table_stats(e.table, apr_time_now(), &st);
    CHECK(st.verifying == 0 && st.waiting == 0);
    CHECK(authn_hmac_retry_after(&e) >= 1);
    slow_ms = 0;
}

/* Identical concurrent guesses use one place in the queue, for a known
 * user as for an unknown one: a 503 tells no names (found by review). */
static void test_unknown_users_are_not_told_by_busy(apr_pool_t *p)
{
    const char *same[6] = {"guess", "guess", "guess",
                           "guess", "guess", "guess"};
    int out[16] = {0};
    authn_hmac_engine_t e = engine(p, 1 << 20);

    hide_unknown = 1;
    negative_ttl_us = apr_time_from_sec(30);
    e.max_verifications = 1;
    e.backlog = 2;
    slow_ms = 300;
    burst_hash = "H-right"; /* known user alice, wrong password */
    burst(&e, 6, same, out);
    e = engine(p, 1 << 20);
    e.max_verifications = 1;
    e.backlog = 2;
    memset(out, 0, sizeof(out));
    burst_hash = NULL; /* unknown user */
    burst(&e, 6, same, out);
    CHECK(out[AUTHN_HMAC_BUSY] == 0);
    burst_hash = "H-right";
    hide_unknown = 0;
    negative_ttl_us = 0;
    slow_ms = 0;
}

/* Two addresses holding half the places each cannot keep out a third
 * (found by review). */
static void test_two_clients_cannot_hold_the_queue(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *pws[9] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "v8"};
    const char *clients[9] = {"10.9.9.9", "10.9.9.9", "10.9.9.9",
                              "10.9.9.9", "10.8.8.8", "10.8.8.8",
                              "10.8.8.8", "10.8.8.8", "10.1.1.1"};
    int out[16] = {0};

    e.max_verifications = 2;
    e.backlog = 6; /* 8 places, share 4 */
    slow_ms = 600;
    burst_clients = clients;
    burst_hash = "H-v8";
    burst_late = 8;
    burst(&e, 9, pws, out);
    burst_hash = "H-right";
    burst_clients = NULL;
    burst_late = -1;
    CHECK(out[AUTHN_HMAC_VERIFIED] == 1);
    slow_ms = 0;
}

/* A process that died holding a place, whose pid another program got
 * since, does not keep the place (found by review). The pid is handed on
 * through /proc/sys/kernel/ns_last_pid, which needs root: elsewhere, or
 * if another process took the pid first, the check is skipped. */
static void test_a_reused_pid_does_not_keep_a_place(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_turn_t turn;
    pid_t pid, again;
    int i, busy = 0;

    e.max_verifications = 1;
    e.backlog = 0;
    pid = fork();
    if (pid == 0) {
        authn_hmac_engine_t ce = e;

        in_child(&ce);
        _exit(authn_hmac_queue_enter(ce.table, 7, 1, 0, 0, &turn) ==
                      AUTHN_HMAC_QUEUE_RUN
                  ? 0
                  : 1);
    }
    waitpid(pid, NULL, 0);
    if ((again = unit_reuse_pid(pid)) < 0)
        return;
    for (i = 0; i < 3; i++)
        busy +=
            check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_BUSY;
    CHECK(busy == 0);
    kill(again, SIGKILL);
    waitpid(again, NULL, 0);
}

/* The writer rule, from the htpasswd file (authn_hmac_check_user): a
 * deny from an unsettled reading (the file changed or read less than a
 * second ago) waits for the file to be quiet and is checked again only if
 * the quiet file changed the user's answer; a settled deny is not; a
 * grant never waits; and a known user's wrong password waits as an
 * unknown user does (one wait, one verification each). Counted, not
 * timed: the fake verifier's calls and the view's waits. */
static authn_hmac_outcome from_file(const authn_hmac_engine_t *e,
                                    authn_hmac_userfile_t *uf, const char *user,
                                    const char *password, apr_pool_t *p)
{
    authn_hmac_policy_t pol;
    authn_hmac_cred_t c = cred(user, password, NULL);
    authn_hmac_outcome o;
    apr_status_t rv = APR_EGENERAL;

    pol.ttl = apr_time_from_sec(300);
    pol.max_age = max_age_us;
    pol.negative_ttl = 0;
    pol.hide_unknown = 1;
    o = authn_hmac_check_user(e, &pol, uf, &c, NULL, NULL, p, &rv);
    CHECK(rv == APR_SUCCESS);
    return o;
}

static void test_deny_from_an_unsettled_reading_is_checked_again(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_userfile_t *uf;
    unsigned waits;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_file(path, "alice:H-old\nbob:H-bob\n");
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    /* htpasswd -b alice new, done while the first pass verified: the
     * mismatch with the old hash is checked again with the new one. */
    rewrite_path = path;
    rewrite_text = "alice:H-new\nbob:H-bob\n";
    CHECK(from_file(&e, uf, "alice", "new", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 2 && authn_hmac_userfile_settles(uf) == 1);
    CHECK(counted(&e, AUTHN_HMAC_C_DENIED) == 0); /* the final outcome */
    CHECK(counted(&e, AUTHN_HMAC_C_VERIFICATIONS) == 2);
    /* A user added meanwhile: unknown at first, then verified. */
    rewrite_text = "alice:H-new\nbob:H-bob\ncarol:H-c\n";
    CHECK(from_file(&e, uf, "carol", "c", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 4 && authn_hmac_userfile_settles(uf) == 2);
    CHECK(counted(&e, AUTHN_HMAC_C_UNKNOWN_USER) == 0);
    /* The same unsettled reading (read less than a second ago): a wrong
     * password and an unknown user each wait once and verify once (the
     * quiet file changed neither); a grant does not wait. */
    waits = authn_hmac_userfile_settles(uf);
    CHECK(from_file(&e, uf, "bob", "wrong", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 5 && authn_hmac_userfile_settles(uf) == waits + 1);
    CHECK(from_file(&e, uf, "ghost", "wrong", p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 6 && authn_hmac_userfile_settles(uf) == waits + 2);
    CHECK(from_file(&e, uf, "bob", "bob", p) == AUTHN_HMAC_VERIFIED);
    CHECK(*calls == 7 && authn_hmac_userfile_settles(uf) == waits + 2);
    CHECK(counted(&e, AUTHN_HMAC_C_DENIED) == 1 &&
          counted(&e, AUTHN_HMAC_C_UNKNOWN_USER) == 1);
    /* Settled (read, and changed, more than a second ago): a deny stands
     * at once, the wrong password's as the unknown user's. */
    sleep(1);
    usleep(200 * 1000);
    CHECK(from_file(&e, uf, "bob", "wrong2", p) == AUTHN_HMAC_DENIED);
    CHECK(from_file(&e, uf, "ghost", "wrong2", p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 9 && authn_hmac_userfile_settles(uf) == waits + 2);
    /* A touch makes the reading unsettled again: each deny waits once. */
    CHECK(utime(path, NULL) == 0);
    CHECK(from_file(&e, uf, "bob", "wrong3", p) == AUTHN_HMAC_DENIED);
    CHECK(from_file(&e, uf, "ghost", "wrong3", p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 11 && authn_hmac_userfile_settles(uf) == waits + 4);
    unlink(path);
    rmdir(dir);
}

/* A known user's wrong password costs what an unknown user's does under an
 * unsettled reading too: the user of a last line without its newline (a
 * line maybe cut) is not found at first, then found in the quiet file: a
 * second verification that an unknown user's deny never makes. */
static void test_unsettled_tail_user_costs_as_unknown(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_userfile_t *uf;
    uint64_t known, unknown;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_file(path, "alice:H-a\nbob:H-b");
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    rewrite_path = NULL;
    *calls = 0;
    CHECK(from_file(&e, uf, "ghost", "wrong", p) == AUTHN_HMAC_UNKNOWN_USER);
    unknown = *calls;
    *calls = 0;
    CHECK(utime(path, NULL) == 0);
    CHECK(from_file(&e, uf, "bob", "wrong", p) == AUTHN_HMAC_DENIED);
    known = *calls;
    fprintf(stderr, "  unknown: %lu verification(s), known (last line): %lu\n",
            (unsigned long)unknown, (unsigned long)known);
    CHECK(known == unknown);
    unlink(path);
    rmdir(dir);
}

/* The writer rule covers every answer but a grant: a cached user missing
 * from a half-written file (htpasswd truncates, then writes) takes the
 * dummy verification's way, which a queue full of a flood's wrong
 * passwords answers busy; the quiet file holds the user, so the request
 * is checked again and hits. A busy for a known user's wrong password and
 * for an unknown user waits the same, once each, and stays busy (their
 * answer did not change). Before, a busy never waited: a 503 for the
 * cached user (the issue: 29 in 116k requests). */
static int looks_seen;

static void rewrite_on_second_look(int n)
{
    /* NB: PAUSE_POINT(2): a look that stat()ed the file (not watched
     * here); the second is the settle's first. */
    if (n == 2 && ++looks_seen == 2 && rewrite_text) {
        write_file(rewrite_path, rewrite_text);
        rewrite_text = NULL;
    }
}

static void test_busy_from_an_unsettled_reading_is_checked_again(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_userfile_t *uf;
    authn_hmac_turn_t turn;
    unsigned waits;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_file(path, "bob:H-b\nalice:H-a\n");
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    rewrite_path = path;
    rewrite_text = NULL;
    CHECK(from_file(&e, uf, "alice", "a", p) == AUTHN_HMAC_VERIFIED);
    CHECK(from_file(&e, uf, "alice", "a", p) == AUTHN_HMAC_HIT);
    CHECK(*calls == 1);
    /* The flood holds the only place. */
    e.max_verifications = 1;
    e.backlog = 0;
    CHECK(authn_hmac_queue_enter(e.table, 7, 1, 0, 0, &turn) ==
          AUTHN_HMAC_QUEUE_RUN);
    /* Half written: alice's line not yet there. The whole file comes
     * while the request waits for the file to be quiet. */
    write_file(path, "bob:H-b\n");
    rewrite_text = "bob:H-b\nalice:H-a\n";
    looks_seen = 0;
    authn_hmac_test_pause_hook = rewrite_on_second_look;
    waits = authn_hmac_userfile_settles(uf);
    CHECK(from_file(&e, uf, "alice", "a", p) == AUTHN_HMAC_HIT);
    CHECK(rewrite_text == NULL && looks_seen >= 2);
    CHECK(*calls == 1 && authn_hmac_userfile_settles(uf) == waits + 1);
    CHECK(counted(&e, AUTHN_HMAC_C_BUSY) == 1); /* the first pass's */
    authn_hmac_test_pause_hook = NULL;
    /* The same unsettled reading: a wrong password and an unknown user,
     * each busy, each wait once; neither is checked again. */
    CHECK(from_file(&e, uf, "bob", "wrong", p) == AUTHN_HMAC_BUSY);
    CHECK(authn_hmac_userfile_settles(uf) == waits + 2);
    CHECK(from_file(&e, uf, "ghost", "wrong", p) == AUTHN_HMAC_BUSY);
    CHECK(authn_hmac_userfile_settles(uf) == waits + 3);
    CHECK(*calls == 1 && counted(&e, AUTHN_HMAC_C_BUSY) == 3);
    authn_hmac_queue_leave(e.table, &turn);
    rewrite_path = NULL;
    unlink(path);
    rmdir(dir);
}

/* A right password that a half-written file missed is never counted by
 * the throttle: the first answer's count waits for the one that stands
 * (with a limit of 1, it banned alice's own right password on the
 * writer rule's second look). A wrong password in an unsettled reading
 * is still counted, once its answer stands. */
static void test_unsettled_reading_counts_no_right_password(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_userfile_t *uf;

    e.throttle.max_failures = 1;
    e.throttle.max_client_failures = 0;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_file(path, "bob:H-b\nalice:H-a\n");
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    rewrite_path = path;
    rewrite_text = NULL;
    CHECK(from_file(&e, uf, "alice", "a", p) == AUTHN_HMAC_VERIFIED);
    /* Half written: alice's line not yet there; the whole file comes
     * while the request waits for the file to be quiet. */
    write_file(path, "bob:H-b\n");
    rewrite_text = "bob:H-b\nalice:H-a\n";
    looks_seen = 0;
    authn_hmac_test_pause_hook = rewrite_on_second_look;
    CHECK(from_file(&e, uf, "alice", "a", p) == AUTHN_HMAC_HIT);
    authn_hmac_test_pause_hook = NULL;
    CHECK(rewrite_text == NULL);
    CHECK(from_file(&e, uf, "alice", "a", p) == AUTHN_HMAC_HIT);
    CHECK(counted(&e, AUTHN_HMAC_C_BANS) == 0);
    /* A wrong password from a reading still unsettled: counted once its
     * answer stands (a ban at the limit of 1). */
    CHECK(from_file(&e, uf, "bob", "wrong", p) == AUTHN_HMAC_DENIED);
    CHECK(counted(&e, AUTHN_HMAC_C_BANS) == 1);
    CHECK(from_file(&e, uf, "bob", "b", p) == AUTHN_HMAC_THROTTLED);
    rewrite_path = NULL;
    unlink(path);
    rmdir(dir);
}

/* A sprayer banned for all users at an office's address does not go on
 * testing passwords against the office's logged-in users at the cache's
 * speed: their wrong passwords answered from the cache count for the
 * client, and at AuthHMACMaxFailures of them the ban is sealed (those
 * users refused there too) till it ends (found by review: 900 tests, one
 * a hit, before). */
static void
test_throttle_client_ban_is_sealed_by_tests_of_its_users(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *was = client_addr;
    char user[16], hash[32], pw[16];
    int i, round, hits = 0;

    e.throttle.max_failures = 10;
    e.throttle.max_client_failures = 30;
    e.throttle.window = apr_time_from_sec(600);
    e.throttle.ban = apr_time_from_sec(600);
    client_addr = "198.51.100.1"; /* the office */
    for (i = 0; i < 100; i++) {   /* 100 colleagues log in; u7's "Summer7" */
        snprintf(user, sizeof(user), "u%d", i);
        snprintf(hash, sizeof(hash), "H-%s", i == 7 ? "Summer7" : "secret-pw");
        CHECK(check(&e, 300, user, i == 7 ? "Summer7" : "secret-pw", hash, p) ==
              AUTHN_HMAC_VERIFIED);
    }
    for (i = 0; i < 40; i++) { /* the sprayer gets the address banned */
        snprintf(user, sizeof(user), "s%d", i);
        (void)check(&e, 300, user, "x", "H-right", p);
    }
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BANS) == 1);
    /* The logged-in users: served. */
    CHECK(check(&e, 300, "u0", "secret-pw", "H-secret-pw", p) ==
          AUTHN_HMAC_HIT);
    *calls = 0;
    for (round = 0; round < 9; round++)
        for (i = 0; i < 100; i++) {
            snprintf(user, sizeof(user), "u%d", i);
            snprintf(pw, sizeof(pw), "Summer%d", round);
            snprintf(hash, sizeof(hash), "H-%s",
                     i == 7 ? "Summer7" : "secret-pw");
            hits += check(&e, 300, user, pw, hash, p) == AUTHN_HMAC_HIT;
        }
    CHECK(*calls == 0 && hits == 0);
    /* Sealed: the office's users refused there too; served elsewhere. */
    CHECK(check(&e, 300, "u0", "secret-pw", "H-secret-pw", p) ==
          AUTHN_HMAC_THROTTLED);
    client_addr = "192.0.2.99";
    CHECK(check(&e, 300, "u0", "secret-pw", "H-secret-pw", p) ==
          AUTHN_HMAC_HIT);
    client_addr = was;
}

int main(void)
{
    apr_pool_t *p = unit_start();

    calls = mmap(NULL, 5 * sizeof(*calls), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    policy_seen = calls + 4;
    running = calls + 1;
    running_max = calls + 2;
    nice_seen = calls + 3;
    RUN(test_outcomes, p);
    RUN(test_given_user_id, p);
    RUN(test_given_digest, p);
    RUN(test_wrapped_provider, p);
    RUN(test_previous_pepper, p);
    RUN(test_wrapped_provider_rotation, p);
    RUN(test_forked_processes, p);
    RUN(test_negative_cache, p);
    RUN(test_idle_timeout_and_max_age, p);
    RUN(test_hit_takes_no_lock, p);
    RUN(test_single_flight, p);
    RUN(test_runner_dies_or_is_late, p);
    RUN(test_waiter_behind_a_new_run, p);
    RUN(test_a_run_that_ended_after_the_look, p);
    RUN(test_unknown_users_cost_a_verification, p);
    RUN(test_throttle, p);
    RUN(test_throttle_full_client_is_no_oracle, p);
    RUN(test_throttle_without_a_cache, p);
    RUN(test_throttle_client_ban_keeps_logged_in_users, p);
    RUN(test_throttle_client_ban_is_sealed_by_tests_of_its_users, p);
    RUN(test_unsettled_reading_counts_no_right_password, p);
    RUN(test_throttle_folded_names_share_a_count, p);
    RUN(test_queue, p);
    RUN(test_queue_fair_share, p);
    RUN(test_queue_waits_are_bounded, p);
    RUN(test_unknown_users_are_not_told_by_busy, p);
    RUN(test_two_clients_cannot_hold_the_queue, p);
    RUN(test_a_reused_pid_does_not_keep_a_place, p);
    RUN(test_deny_from_an_unsettled_reading_is_checked_again, p);
    RUN(test_unsettled_tail_user_costs_as_unknown, p);
    RUN(test_busy_from_an_unsettled_reading_is_checked_again, p);
    return unit_end();
}
