/* Unit tests: the shared-memory table. */
#include "authn_hmac.h"
#include "unit.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC(n) apr_time_from_sec(n)

static void make_key(unsigned char *k, uint32_t set_word, uint32_t id)
{
    memset(k, 0, AUTHN_HMAC_KEY_LEN);
    memcpy(k, &set_word, sizeof(set_word)); /* steers the set (low word) */
    memcpy(k + 28, &id, sizeof(id));        /* differs only at the end */
}

static authn_hmac_table_t *table(apr_pool_t *p, size_t budget, void **base)
{
    size_t size = authn_hmac_table_size(budget);
    void *m = apr_pcalloc(p, size + 64);

    m = (void *)(((uintptr_t)m + 63) & ~(uintptr_t)63);
    CHECK(authn_hmac_table_format(m, size, SEC(1)) == APR_SUCCESS);
    if (base)
        *base = m;
    return authn_hmac_table_attach(m, NULL, p);
}

static uint64_t counter(authn_hmac_table_t *t, enum authn_hmac_counter c)
{
    authn_hmac_stats_t s;

    authn_hmac_table_stats(t, SEC(1), &s);
    return s.counter[c];
}

static void test_ttl(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 64 * 1024, NULL);
    unsigned char k[32];
    apr_time_t now = SEC(1000);

    make_key(k, 5, 1);
    CHECK(!authn_hmac_table_lookup(t, k, now, SEC(300)));
    CHECK(authn_hmac_table_store(t, k, now, now, now + SEC(10)) == APR_SUCCESS);
    CHECK(authn_hmac_table_lookup(t, k, now + SEC(9), SEC(300)));
    CHECK(!authn_hmac_table_lookup(t, k, now + SEC(10), SEC(300)));
    /* A section with a shorter TTL sees the entry expire sooner. */
    CHECK(authn_hmac_table_lookup(t, k, now + SEC(1), SEC(2)));
    CHECK(!authn_hmac_table_lookup(t, k, now + SEC(3), SEC(2)));
    /* An entry stored "in the future" (clock stepped back) is not trusted. */
    CHECK(!authn_hmac_table_lookup(t, k, now - SEC(1), SEC(300)));
}

static void test_full_key_compare(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 64 * 1024, NULL);
    unsigned char a[32], b[32];
    apr_time_t now = SEC(1000);

    make_key(a, 7, 1);
    make_key(b, 7, 2); /* same set, same first 28 bytes */
    authn_hmac_table_store(t, a, now, now, now + SEC(60));
    CHECK(authn_hmac_table_lookup(t, a, now, SEC(60)));
    CHECK(!authn_hmac_table_lookup(t, b, now, SEC(60)));
    b[28] = a[28];
    b[31] ^= 0x80;
    CHECK(!authn_hmac_table_lookup(t, b, now, SEC(60)));
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
        authn_hmac_table_store(t, k, now + SEC(i), now + SEC(i),
                               now + SEC(100 + i));
    }
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 0);
    /* Full: the oldest goes. */
    make_key(k, 0, 100);
    authn_hmac_table_store(t, k, now + SEC(20), now + SEC(20), now + SEC(120));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 1);
    make_key(k, 0, 0);
    CHECK(!authn_hmac_table_lookup(t, k, now + SEC(20), SEC(300)));
    make_key(k, 0, 1);
    CHECK(authn_hmac_table_lookup(t, k, now + SEC(20), SEC(300)));
    /* Expired entries go first, and their loss is not an eviction: at
     * now+102 the entries stored at 1 and 2 (expiring 101, 102) are dead,
     * though entry 1 is the oldest live one before them. */
    make_key(k, 0, 200);
    authn_hmac_table_store(t, k, now + SEC(102), now + SEC(102),
                           now + SEC(300));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 1);
    make_key(k, 0, 3);
    CHECK(authn_hmac_table_lookup(t, k, now + SEC(102), SEC(300)));
    authn_hmac_table_stats(t, now + SEC(102), &st);
    CHECK(st.entries == 7);
    /* Storing a key again refreshes it in place. */
    make_key(k, 0, 3);
    authn_hmac_table_store(t, k, now + SEC(103), now + SEC(103),
                           now + SEC(400));
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 1);
    CHECK(authn_hmac_table_lookup(t, k, now + SEC(200), SEC(300)));
}

static void test_zero_budget(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p, 0, NULL);
    unsigned char k[32];

    make_key(k, 1, 1);
    CHECK(authn_hmac_table_store(t, k, SEC(1), SEC(1), SEC(100)) ==
          APR_SUCCESS);
    CHECK(!authn_hmac_table_lookup(t, k, SEC(2), SEC(100)));
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
                    if (authn_hmac_table_store(t, k, now, now, now + SEC(60)))
                        bad = 1;
                }
                else {
                    make_key(k, n * 7919u, 0xffff0000u | n);
                    k[8] = 0xee; /* never stored */
                    if (authn_hmac_table_lookup(t, k, now, SEC(60)))
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
            found += (uint32_t)authn_hmac_table_lookup(t, k, now, SEC(60));
        }
    CHECK(counter(t, AUTHN_HMAC_C_STORES) == WRITERS * PER_WRITER);
    CHECK(found + counter(t, AUTHN_HMAC_C_EVICTIONS) == WRITERS * PER_WRITER);
    CHECK(counter(t, AUTHN_HMAC_C_EVICTIONS) == 0);
    apr_global_mutex_destroy(mutex);
    munmap(m, size);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_ttl, p);
    RUN(test_full_key_compare, p);
    RUN(test_eviction, p);
    RUN(test_zero_budget, p);
    RUN(test_concurrent_writers, p);
    return unit_end();
}
