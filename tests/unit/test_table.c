/* Unit tests: the shared-memory table. */
#include "shm/table.h"
#include "testing/testing.h"
#include "core/cred.h"
#include "core/util.h"
#include "shared_table.h"
#include "unit.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEC(n) apr_time_from_sec(n)

static void make_key(unsigned char *k, uint32_t set_word, uint32_t id)
{
    memset(k, 0, AUTHN_HMAC_KEY_LEN);
    memcpy(k, &set_word, sizeof(set_word)); /* steers the set (low word) */
    memcpy(k + 28, &id, sizeof(id));        /* differs only at the end */
}

/* Each key below is its own user, in the set its first word steers to. */
static uint64_t nsets = 1;

static const unsigned char *U(const unsigned char *k)
{
    static unsigned char u[32];
    uint32_t set_word, id;
    uint64_t w;

    memcpy(&set_word, k, sizeof(set_word));
    memcpy(&id, k + 28, sizeof(id));
    w = set_word % nsets + nsets * ((uint64_t)id + 1 + ((uint64_t)k[8] << 32));
    memset(u, 0, sizeof(u));
    memcpy(u, &w, sizeof(w));
    return u;
}

static authn_hmac_table_t *table(apr_pool_t *p, size_t budget, void **base)
{
    size_t size = authn_hmac_table_size(budget);
    void *m = apr_pcalloc(p, size + 64);

    m = (void *)(((uintptr_t)m + 63) & ~(uintptr_t)63);
    CHECK(authn_hmac_table_format(m, size, SEC(1)) == APR_SUCCESS);
    if (base)
        *base = m;
    {
        authn_hmac_table_t *t = authn_hmac_table_attach(m, NULL, p);
        authn_hmac_stats_t st;

        authn_hmac_table_stats(t, SEC(1), &st);
        nsets = st.slots / 8 ? st.slots / 8 : 1;
        return t;
    }
}

static uint64_t counter(authn_hmac_table_t *t, enum authn_hmac_counter c)
{
    authn_hmac_stats_t s;

    authn_hmac_table_stats(t, SEC(1), &s);
    return s.counter[c];
}

/* A lookup by the entry's life from its verification (its max age) alone,
 * under an idle timeout too long to matter. */
static int live_at(authn_hmac_table_t *t, const unsigned char *k,
                   const unsigned char *u, apr_time_t now,
                   apr_interval_time_t max_age)
{
    return authn_hmac_table_lookup(t, k, u, now, SEC(604800), max_age, NULL,
                                   NULL);
}

static void test_ttl(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 64 * 1024, NULL);
    unsigned char k[32];
    apr_time_t now = SEC(1000);

    make_key(k, 5, 1);
    CHECK(!live_at(t, k, U(k), now, SEC(300)));
    CHECK(authn_hmac_table_store(t, k, U(k), now, now, SEC(10)) == APR_SUCCESS);
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(9), SEC(10), SEC(300),
                                  NULL, NULL));
    CHECK(!authn_hmac_table_lookup(t, k, U(k), now + SEC(10), SEC(10), SEC(300),
                                   NULL, NULL));
    /* A section with a longer idle timeout still has it; one with a
     * shorter max age sees it end sooner. */
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(10), SEC(11), SEC(300),
                                  NULL, NULL));
    CHECK(live_at(t, k, U(k), now + SEC(1), SEC(2)));
    CHECK(!live_at(t, k, U(k), now + SEC(3), SEC(2)));
    /* An entry verified "in the future" (clock stepped back) is not
     * trusted. */
    CHECK(!live_at(t, k, U(k), now - SEC(1), SEC(300)));
}

/* A hit as the engine makes it: the lookup, then the refresh it may call
 * for. 1 if it hit. */
static int hit(authn_hmac_table_t *t, const unsigned char *k, apr_time_t now,
               apr_interval_time_t ttl, apr_interval_time_t max_age)
{
    apr_time_t vt = 0, ut = 0;

    if (!authn_hmac_table_lookup(t, k, U(k), now, ttl, max_age, &vt, &ut))
        return 0;
    authn_hmac_table_refresh(t, k, U(k), now, ttl, max_age, &ut);
    return 1;
}

/* The TTL is an idle timeout: a hit once half of it has passed since the
 * entry's last use was written writes it again; the max age bounds the
 * entry from its verification. */
static void test_idle_timeout_refresh(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 64 * 1024, NULL);
    unsigned char k[32], j[32];
    apr_time_t now = SEC(1000), vt = 0, ut = 0, stale;
    int i;

    make_key(k, 5, 1);
    CHECK(authn_hmac_table_store(t, k, U(k), now, now, SEC(10)) == APR_SUCCESS);
    /* Less than half the TTL since its use: a plain read, nothing
     * written. */
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(4), SEC(10), SEC(60),
                                  &vt, &ut) &&
          vt == now && ut == now);
    CHECK(!authn_hmac_table_refresh(t, k, U(k), now + SEC(4), SEC(10), SEC(60),
                                    &ut) &&
          ut == now);
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 0);
    /* Half or more: its last use is now, in place. */
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(6), SEC(10), SEC(60),
                                  &vt, &ut));
    stale = ut;
    CHECK(authn_hmac_table_refresh(t, k, U(k), now + SEC(6), SEC(10), SEC(60),
                                   &ut) &&
          ut == now + SEC(6));
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 1);
    CHECK(counter(t, AUTHN_HMAC_C_STORES) == 1);
    /* A concurrent hit that read the entry before the refresh finds, under
     * the mutex, nothing left to do: one write. */
    CHECK(!authn_hmac_table_refresh(t, k, U(k), now + SEC(6), SEC(10), SEC(60),
                                    &stale));
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 1);
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(15), SEC(10), SEC(60),
                                  &vt, &ut) &&
          vt == now && ut == now + SEC(6));
    /* A section with a shorter TTL applies it to the same last use: 5 s
     * idle is too long for a TTL of 5 s, not for one of 9 s. Neither
     * fights the other over the entry. */
    CHECK(!authn_hmac_table_lookup(t, k, U(k), now + SEC(11), SEC(5), SEC(60),
                                   NULL, NULL));
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(11), SEC(9), SEC(60),
                                  NULL, NULL));
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(11), SEC(10), SEC(60),
                                  NULL, NULL));

    /* A hit every second: written once per half TTL at most (at 11, 16,
     * ..., 56 s), found until its max age (60 s from its verification),
     * then a miss however busy. */
    for (i = 7; i < 60; i++)
        CHECK(hit(t, k, now + SEC(i), SEC(10), SEC(60)));
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 11);
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) <= 1 + 60 / 5);
    CHECK(!hit(t, k, now + SEC(60), SEC(10), SEC(60)));
    CHECK(counter(t, AUTHN_HMAC_C_STORES) == 1);

    /* Two sections, 10 s and 4 s, hit in turns every second: the entry
     * serves both, each writing it at most once per half its TTL. */
    make_key(j, 5, 3);
    authn_hmac_table_store(t, j, U(j), now, now, SEC(10));
    for (i = 1; i < 40; i++)
        CHECK(hit(t, j, now + SEC(i), i % 2 ? SEC(4) : SEC(10), SEC(60)));
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) - 11 <= 1 + 40 / 2);

    /* Idle for a whole TTL: gone, though well within its max age. */
    make_key(j, 5, 2);
    authn_hmac_table_store(t, j, U(j), now, now, SEC(10));
    CHECK(hit(t, j, now + SEC(4), SEC(10), SEC(60)));
    CHECK(hit(t, j, now + SEC(9), SEC(10), SEC(60))); /* used at 9 s */
    CHECK(hit(t, j, now + SEC(18), SEC(10), SEC(60)));
    CHECK(!hit(t, j, now + SEC(28), SEC(10), SEC(60)));
}

static void test_full_key_compare(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 64 * 1024, NULL);
    unsigned char a[32], b[32];
    apr_time_t now = SEC(1000);

    make_key(a, 7, 1);
    make_key(b, 7, 2); /* same set, same first 28 bytes */
    authn_hmac_table_store(t, a, U(a), now, now, SEC(60));
    CHECK(live_at(t, a, U(a), now, SEC(60)));
    CHECK(!live_at(t, b, U(b), now, SEC(60)));
    b[28] = a[28];
    b[31] ^= 0x80;
    CHECK(!live_at(t, b, U(b), now, SEC(60)));
}

static void test_eviction(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 1, NULL); /* one set of 8 */
    unsigned char k[32];
    apr_time_t now = SEC(1000);
    authn_hmac_stats_t st;
    uint32_t i;

    authn_hmac_table_stats(t, now, &st);
    CHECK(st.slots == 8);
    for (i = 0; i < 8; i++) {
        make_key(k, 0, i);
        authn_hmac_table_store(t, k, U(k), now + SEC(i), now + SEC(i),
                               SEC(100));
    }
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 0);
    /* Full: the least recently used goes, though verified last. */
    make_key(k, 0, 1);
    CHECK(hit(t, k, now + SEC(60), SEC(100), SEC(300))); /* used at 60 */
    make_key(k, 0, 100);
    authn_hmac_table_store(t, k, U(k), now + SEC(20), now + SEC(70), SEC(100));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 1);
    make_key(k, 0, 0);
    CHECK(!live_at(t, k, U(k), now + SEC(70), SEC(300)));
    make_key(k, 0, 1);
    CHECK(live_at(t, k, U(k), now + SEC(70), SEC(300)));
    /* The least recently used goes; one idle longer than the storing
     * section's TTL is not counted as an eviction: at 102 s, entry 2
     * (used at 2 s) has been idle 100 s. */
    make_key(k, 0, 200);
    authn_hmac_table_store(t, k, U(k), now + SEC(102), now + SEC(102),
                           SEC(100));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 1);
    make_key(k, 0, 2);
    CHECK(!live_at(t, k, U(k), now + SEC(102), SEC(300)));
    make_key(k, 0, 3);
    CHECK(live_at(t, k, U(k), now + SEC(102), SEC(300)));
    authn_hmac_table_stats(t, now + SEC(102), &st);
    CHECK(st.entries == 8); /* slots in use */
    /* Storing a key again updates it in place, never moving its times
     * back. */
    make_key(k, 0, 3);
    authn_hmac_table_store(t, k, U(k), now + SEC(103), now + SEC(200),
                           SEC(100));
    authn_hmac_table_store(t, k, U(k), now + SEC(3), now + SEC(3), SEC(100));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 1);
    CHECK(authn_hmac_table_lookup(t, k, U(k), now + SEC(250), SEC(51), SEC(300),
                                  NULL, NULL));
    CHECK(!authn_hmac_table_lookup(t, k, U(k), now + SEC(250), SEC(50),
                                   SEC(300), NULL, NULL));
    CHECK(!authn_hmac_table_lookup(t, k, U(k), now + SEC(250), SEC(51),
                                   SEC(147), NULL, NULL));
}

static void test_zero_budget(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 0, NULL);
    unsigned char k[32];

    make_key(k, 1, 1);
    CHECK(authn_hmac_table_store(t, k, U(k), SEC(1), SEC(1), SEC(100)) ==
          APR_SUCCESS);
    CHECK(!live_at(t, k, U(k), SEC(2), SEC(100)));
    authn_hmac_table_count(t, AUTHN_HMAC_C_HITS, 3);
    CHECK(counter(t, AUTHN_HMAC_C_HITS) == 3);
}

#define WRITERS    4
#define PER_WRITER 2000

/* Several processes write at once through the global mutex while another
 * reads: every stored key is then found, and the reader never saw a key
 * that no one stored. */
static void test_concurrent_writers(apr_pool_t *p)
{
    size_t size = authn_hmac_table_size(4u << 20);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    apr_global_mutex_t *mutex = NULL;
    authn_hmac_table_t *t;
    pid_t pids[WRITERS + 1];
    apr_time_t now = apr_time_now();
    int i, status, ok = 1;
    uint32_t n, found = 0;
    unsigned char k[32];

    CHECK(m != MAP_FAILED);
    CHECK(authn_hmac_table_format(m, size, now) == APR_SUCCESS);
    {
        authn_hmac_stats_t st;

        authn_hmac_table_stats(authn_hmac_table_attach(m, NULL, p), now, &st);
        nsets = st.slots / 8;
    }
    CHECK(apr_global_mutex_create(&mutex, NULL, APR_LOCK_DEFAULT, p) ==
          APR_SUCCESS);
    for (i = 0; i <= WRITERS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            apr_pool_t *cp;
            int bad = 0;

            apr_pool_create(&cp, NULL);
            apr_global_mutex_child_init(&mutex, NULL, cp);
            t = authn_hmac_table_attach(m, mutex, cp);
            for (n = 0; n < PER_WRITER; n++) {
                if (i < WRITERS) {
                    make_key(k, n * 7919u + (uint32_t)i * 104729u,
                             (uint32_t)i << 16 | n);
                    k[8] = (unsigned char)i; /* writers never share a key */
                    if (authn_hmac_table_store(t, k, U(k), now, now, SEC(60)))
                        bad = 1;
                }
                else {
                    make_key(k, n * 7919u, 0xffff0000u | n);
                    k[8] = 0xee; /* never stored */
                    if (live_at(t, k, U(k), now, SEC(60)))
                        bad = 1;
                }
            }
            _exit(bad);
        }
    }
    for (i = 0; i <= WRITERS; i++) {
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(ok);
    t = authn_hmac_table_attach(m, mutex, p);
    for (i = 0; i < WRITERS; i++)
        for (n = 0; n < PER_WRITER; n++) {
            make_key(k, n * 7919u + (uint32_t)i * 104729u,
                     (uint32_t)i << 16 | n);
            k[8] = (unsigned char)i;
            found += (uint32_t)live_at(t, k, U(k), now, SEC(60));
        }
    CHECK(counter(t, AUTHN_HMAC_C_STORES) == WRITERS * PER_WRITER);
    CHECK(found + counter(t, AUTHN_HMAC_C_EVICTIONS) == WRITERS * PER_WRITER);
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 0);
    apr_global_mutex_destroy(mutex);
    munmap(m, size);
}

/* One user sending endless distinct credentials that all verify holds at
 * most AUTHN_HMAC_PER_USER entries, its newest, and never evicts another
 * user's entry, even from a table of one set. */
static void test_per_user_bound(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 1, NULL); /* one set of 8 */
    unsigned char other[32], k[32], uid[32];
    apr_time_t now = SEC(1000);
    authn_hmac_stats_t st;
    uint32_t i;

    make_key(other, 0, 999999);
    authn_hmac_table_store(t, other, U(other), now, now, SEC(300));
    memset(uid, 0x5a, sizeof(uid)); /* the one account */
    for (i = 0; i < 2000; i++) {
        make_key(k, 0, i);
        authn_hmac_table_store(t, k, uid, now + i, now + i, SEC(300));
    }
    CHECK(live_at(t, other, U(other), now + 2000, SEC(300)));
    make_key(k, 0, 1999);
    CHECK(live_at(t, k, uid, now + 2000, SEC(300)));
    make_key(k, 0, 1998);
    CHECK(live_at(t, k, uid, now + 2000, SEC(300)));
    make_key(k, 0, 1997);
    CHECK(!live_at(t, k, uid, now + 2000, SEC(300)));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 0);
    authn_hmac_table_stats(t, now, &st);
    CHECK(st.entries == 1 + AUTHN_HMAC_PER_USER);
}

/* A writer that died between the two sequence stores leaves its slot odd;
 * the next writer takes that slot and makes it even again. */
static void test_torn_slot_repair(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 1, NULL); /* one set of 8 */
    unsigned char k[32];
    apr_time_t now = SEC(1000);
    uint32_t i;

    for (i = 0; i < 8; i++) {
        make_key(k, 0, i);
        authn_hmac_table_store(t, k, U(k), now, now, SEC(300));
    }
    make_key(k, 0, 3);
    authn_hmac_table_tear(t, k, U(k));
    CHECK(!live_at(t, k, U(k), now, SEC(300)));
    /* The set is full but for the torn slot: a new entry takes it, with no
     * eviction, and every other entry stays. */
    make_key(k, 0, 100);
    authn_hmac_table_store(t, k, U(k), now + 1, now + 1, SEC(300));
    CHECK(live_at(t, k, U(k), now + 2, SEC(300)));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 0);
    for (i = 0; i < 8; i++) {
        make_key(k, 0, i);
        CHECK(live_at(t, k, U(k), now + 2, SEC(300)) == (i != 3));
    }
    /* And the torn credential can be stored again, and found. */
    make_key(k, 0, 3);
    authn_hmac_table_tear(t, k, U(k)); /* no-op: no longer present */
    authn_hmac_table_store(t, k, U(k), now + 3, now + 3, SEC(300));
    CHECK(live_at(t, k, U(k), now + 4, SEC(300)));
}

/* The status costs O(1): it reads the header only. The slots' pages are
 * made unreadable; a scan would crash this test. */
static void test_stats_reads_no_slot(apr_pool_t *p)
{
    size_t size = authn_hmac_table_size(4u << 20);
    long pg = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    authn_hmac_table_t *t;
    authn_hmac_stats_t st;
    unsigned char k[32];
    uint32_t i;

    CHECK(m != MAP_FAILED);
    CHECK(authn_hmac_table_format(m, size, SEC(1)) == APR_SUCCESS);
    t = authn_hmac_table_attach(m, NULL, p);
    authn_hmac_table_stats(t, SEC(1), &st);
    nsets = st.slots / 8;
    for (i = 0; i < 100; i++) {
        make_key(k, i * 7919u, i);
        authn_hmac_table_store(t, k, U(k), SEC(10), SEC(10), SEC(100));
    }
    CHECK(mprotect(m + pg, (size - (size_t)pg) / (size_t)pg * (size_t)pg,
                   PROT_NONE) == 0);
    authn_hmac_table_stats(t, SEC(20), &st);
    CHECK(st.entries == 100);
    CHECK(st.counter[AUTHN_HMAC_C_STORES] == 100);
    munmap(m, size);
}

/* A hit's refresh never waits for the writers' mutex (a flood's queue
 * takes it), and is not skipped while another process holds it: it moves
 * the last use by compare-and-swap. Of concurrent hits, one refreshes.
 * (Found by review: refreshes waited up to 47 s.) */
static void test_refresh_never_waits(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    apr_time_t now = SEC(100), verified = 0, used = 0;
    unsigned char k[32];
    int status;
    pid_t pid;

    nsets = 1;
    make_key(k, 1, 1);
    CHECK(authn_hmac_table_store(t, k, U(k), now, now, SEC(2)) == APR_SUCCESS);
    /* 1.5 s of a 2 s TTL idle: a hit refreshes. */
    now += SEC(1) + SEC(1) / 2;
    CHECK(authn_hmac_table_lookup(t, k, U(k), now, SEC(2), SEC(300), &verified,
                                  &used));
    CHECK(apr_global_mutex_lock(shared_mutex) == APR_SUCCESS);
    pid = fork();
    if (pid == 0) {
        authn_hmac_table_t *ct = shared_child();
        apr_time_t u = used;

        alarm(2); /* blocked on the mutex: killed, and the test fails */
        _exit(authn_hmac_table_refresh(ct, k, U(k), now, SEC(2), SEC(300),
                                       &u) == 1 &&
                      u == now
                  ? 0
                  : 1);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    apr_global_mutex_unlock(shared_mutex);
    /* Refreshed although the mutex was held, and only once: the next hit
     * finds it done. */
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 1);
    CHECK(authn_hmac_table_refresh(t, k, U(k), now, SEC(2), SEC(300), &used) ==
          0);
    CHECK(authn_hmac_table_lookup(t, k, U(k), now, SEC(2), SEC(300), &verified,
                                  &used) &&
          used == now);
    CHECK(authn_hmac_table_refresh(t, k, U(k), now, SEC(2), SEC(300), &used) ==
          0);
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 1);
    /* Eight processes' hits at once, a second later: one refresh. */
    now += SEC(1);
    for (int c = 0; c < 8; c++)
        if (fork() == 0) {
            authn_hmac_table_t *ct = shared_child();
            apr_time_t u = used;

            _exit(authn_hmac_table_refresh(ct, k, U(k), now, SEC(2), SEC(300),
                                           &u) == 1
                      ? 0
                      : 1);
        }
    for (int c = 0, ok = 0; c < 8; c++) {
        CHECK(wait(&status) > 0 && WIFEXITED(status));
        ok += WEXITSTATUS(status) == 0;
        if (c == 7)
            CHECK(ok == 1);
    }
    CHECK(counter(t, AUTHN_HMAC_C_REFRESHES) == 2);
    CHECK(authn_hmac_table_lookup(t, k, U(k), now, SEC(2), SEC(300), &verified,
                                  &used) &&
          used == now);
    shared_done();
}

/* A duration falls in the first bucket whose bound is at least it (le);
 * beyond the last bound, in +Inf; and the sum is exact to the
 * microsecond. */
static void test_histograms(apr_pool_t *p)
{
    static const struct {
        enum authn_hmac_histogram h;
        uint64_t usec;
        unsigned bucket;
    } cases[] = {
        {AUTHN_HMAC_H_VERIFY, 0, 0},
        {AUTHN_HMAC_H_VERIFY, 1000, 0},
        {AUTHN_HMAC_H_VERIFY, 1001, 1},
        {AUTHN_HMAC_H_VERIFY, 3000, 2},
        {AUTHN_HMAC_H_VERIFY, 200000, 7},
        {AUTHN_HMAC_H_VERIFY, 10000000, 12},
        {AUTHN_HMAC_H_VERIFY, 10000001, 13},
        {AUTHN_HMAC_H_REDIS, 100, 0},
        {AUTHN_HMAC_H_REDIS, 101, 1},
        {AUTHN_HMAC_H_REDIS, 1000000, 12},
        {AUTHN_HMAC_H_REDIS, 1000001, 13},
    };
    authn_hmac_table_t *t = table(p, 64u << 10, NULL);
    authn_hmac_stats_t st;
    unsigned h, b, i;

    for (h = 0; h < AUTHN_HMAC_H_COUNT; h++) {
        for (b = 1; b < AUTHN_HMAC_BUCKETS; b++)
            CHECK(authn_hmac_bucket_bounds[h][b] >
                  authn_hmac_bucket_bounds[h][b - 1]);
        CHECK(authn_hmac_bucket_bounds[h][AUTHN_HMAC_BUCKETS - 1] ==
              UINT64_MAX);
        CHECK(authn_hmac_bucket((enum authn_hmac_histogram)h, UINT64_MAX) ==
              AUTHN_HMAC_BUCKETS - 1);
    }
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECK(authn_hmac_bucket(cases[i].h, cases[i].usec) == cases[i].bucket);

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        authn_hmac_table_observe(t, cases[i].h, cases[i].usec);
    authn_hmac_table_stats(t, SEC(1), &st);
    CHECK(st.hist[AUTHN_HMAC_H_VERIFY].bucket[0] == 2);
    CHECK(st.hist[AUTHN_HMAC_H_VERIFY].bucket[1] == 1);
    CHECK(st.hist[AUTHN_HMAC_H_VERIFY].bucket[3] == 0);
    CHECK(st.hist[AUTHN_HMAC_H_VERIFY].bucket[13] == 1);
    CHECK(st.hist[AUTHN_HMAC_H_VERIFY].sum_usec ==
          1000 + 1001 + 3000 + 200000 + 10000000 + 10000001);
    CHECK(st.hist[AUTHN_HMAC_H_REDIS].bucket[0] == 1);
    CHECK(st.hist[AUTHN_HMAC_H_REDIS].bucket[13] == 1);
    CHECK(st.hist[AUTHN_HMAC_H_REDIS].sum_usec ==
          100 + 101 + 1000000 + 1000001);
    /* The counters are apart from the histograms. */
    CHECK(st.counter[AUTHN_HMAC_C_VERIFICATIONS] == 0);
}

/* Processes add to a histogram without a lock and lose nothing. */
static void test_histograms_across_processes(apr_pool_t *p)
{
    size_t size = authn_hmac_table_size(64u << 10);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    authn_hmac_table_t *t;
    authn_hmac_stats_t st;
    pid_t pids[4];
    unsigned i;
    int status, ok = 1;
    uint64_t n;

    CHECK(m != MAP_FAILED);
    CHECK(authn_hmac_table_format(m, size, SEC(1)) == APR_SUCCESS);
    for (i = 0; i < 4; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            apr_pool_t *cp;

            apr_pool_create(&cp, NULL);
            t = authn_hmac_table_attach(m, NULL, cp);
            for (n = 0; n < 50000; n++)
                authn_hmac_table_observe(t, AUTHN_HMAC_H_REDIS, 100 + n % 2);
            _exit(0);
        }
    }
    for (i = 0; i < 4; i++) {
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(ok);
    t = authn_hmac_table_attach(m, NULL, p);
    authn_hmac_table_stats(t, SEC(1), &st);
    CHECK(st.hist[AUTHN_HMAC_H_REDIS].bucket[0] == 100000);
    CHECK(st.hist[AUTHN_HMAC_H_REDIS].bucket[1] == 100000);
    CHECK(st.hist[AUTHN_HMAC_H_REDIS].sum_usec == 200000 * 100 + 100000);
    munmap(m, size);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_ttl, p);
    RUN(test_idle_timeout_refresh, p);
    RUN(test_full_key_compare, p);
    RUN(test_eviction, p);
    RUN(test_zero_budget, p);
    RUN(test_concurrent_writers, p);
    RUN(test_per_user_bound, p);
    RUN(test_torn_slot_repair, p);
    RUN(test_stats_reads_no_slot, p);
    RUN(test_refresh_never_waits, p);
    RUN(test_histograms, p);
    RUN(test_histograms_across_processes, p);
    return unit_end();
}
