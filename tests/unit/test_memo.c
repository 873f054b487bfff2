/* Unit tests: the memo region of the shared segment (src/shm/memo.c),
 * what SQL last said of each user. */
#include "shm/memo.h"
#include "shm/table_int.h"
#include "core/cred.h"
#include "unit.h"
#include "shared_table.h"

#include <stdint.h>
#include <string.h>

#define SEC(n) apr_time_from_sec(n)
/* The time of the stores: after every memo's (none is ahead of the clock). */
#define NOW SEC(1000)

static authn_hmac_table_t *table(apr_pool_t *p)
{
    size_t size = authn_hmac_table_size(4 << 20);
    void *m = apr_pcalloc(p, size + 64);

    m = (void *)(((uintptr_t)m + 63) & ~(uintptr_t)63);
    CHECK(authn_hmac_table_format(m, size, SEC(1)) == APR_SUCCESS);
    return authn_hmac_table_attach(m, NULL, p);
}

/* A user id whose first word (the set) is set_word, told apart by id at
 * its end. */
static void make_uid(unsigned char *u, uint64_t set_word, uint32_t id)
{
    memset(u, 0, AUTHN_HMAC_KEY_LEN);
    memcpy(u, &set_word, sizeof(set_word));
    memcpy(u + 28, &id, sizeof(id));
}

static authn_hmac_memo_t memo(int state, unsigned char fill, apr_time_t when)
{
    authn_hmac_memo_t m;

    memset(&m, 0, sizeof(m));
    m.state = state;
    memset(m.digest, fill, sizeof(m.digest));
    m.confirmed = when;
    return m;
}

static int same(const authn_hmac_memo_t *a, const authn_hmac_memo_t *b)
{
    return a->state == b->state && a->confirmed == b->confirmed &&
           memcmp(a->digest, b->digest, sizeof(a->digest)) == 0;
}

/* Stored, found again as it was, for its user only; each state kept. */
static void test_store_and_lookup(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p);
    unsigned char u[AUTHN_HMAC_KEY_LEN], v[AUTHN_HMAC_KEY_LEN];
    authn_hmac_memo_t m, got;
    int state;

    make_uid(u, 7, 1);
    make_uid(v, 7, 2);
    CHECK(!authn_hmac_memo_lookup(t, u, &got) && got.state == 0);
    for (state = AUTHN_HMAC_MEMO_HASH; state <= AUTHN_HMAC_MEMO_LOCKED;
         state++) {
        m = memo(state, (unsigned char)state, SEC(100 + state));
        CHECK(authn_hmac_memo_store(t, u, &m, NOW) == APR_SUCCESS);
        CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &m));
    }
    CHECK(!authn_hmac_memo_lookup(t, v, &got));
    /* No state is no memo. */
    m = memo(0, 9, SEC(200));
    CHECK(authn_hmac_memo_store(t, v, &m, NOW) == APR_SUCCESS);
    CHECK(!authn_hmac_memo_lookup(t, v, &got));
}

/* A slower writer's older answer never replaces a newer one; a newer
 * replaces an older, and the same time again is taken (the last word). */
static void test_an_older_answer_never_replaces_a_newer(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p);
    unsigned char u[AUTHN_HMAC_KEY_LEN];
    authn_hmac_memo_t newer = memo(AUTHN_HMAC_MEMO_NONE, 0, SEC(50)),
                      older = memo(AUTHN_HMAC_MEMO_HASH, 1, SEC(49)),
                      later = memo(AUTHN_HMAC_MEMO_LOCKED, 0, SEC(51)), got;

    make_uid(u, 3, 1);
    CHECK(authn_hmac_memo_store(t, u, &newer, NOW) == APR_SUCCESS);
    CHECK(authn_hmac_memo_store(t, u, &older, NOW) == APR_SUCCESS);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &newer));
    CHECK(authn_hmac_memo_store(t, u, &later, NOW) == APR_SUCCESS);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &later));
}

/* The memo keeps when the source said it, whatever its age (the caller
 * judges freshness); a full set gives up its oldest record, and a user's
 * memo is found wherever in the set it went. */
static void test_age_and_the_oldest_record(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p);
    unsigned char u[AUTHN_HMAC_KEY_LEN];
    authn_hmac_memo_t m, got;
    uint32_t i;

    for (i = 0; i < AUTHN_HMAC_MEMO_WAYS; i++) {
        make_uid(u, 5, i);
        m = memo(AUTHN_HMAC_MEMO_HASH, (unsigned char)i, SEC(10 + i));
        CHECK(authn_hmac_memo_store(t, u, &m, NOW) == APR_SUCCESS);
    }
    make_uid(u, 5, 0);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && got.confirmed == SEC(10));
    make_uid(u, 5, 99);
    m = memo(AUTHN_HMAC_MEMO_HASH, 99, SEC(30));
    CHECK(authn_hmac_memo_store(t, u, &m, NOW) == APR_SUCCESS);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &m));
    make_uid(u, 5, 0); /* the oldest: gone */
    CHECK(!authn_hmac_memo_lookup(t, u, &got));
    for (i = 1; i < AUTHN_HMAC_MEMO_WAYS; i++) {
        make_uid(u, 5, i);
        CHECK(authn_hmac_memo_lookup(t, u, &got) &&
              got.confirmed == SEC(10 + i));
    }
}

/* The record that holds uid (its id at offset 16), or NULL. */
static uint32_t *record_of(authn_hmac_table_t *t, const unsigned char *uid)
{
    const authn_hmac_table_parts_t *parts = authn_hmac_table_parts(t);
    unsigned char *r = parts->memo;
    uint64_t i;

    for (i = 0; i < parts->memo_slots; i++, r += AUTHN_HMAC_MEMO_BYTES)
        if (memcmp(r + 16, uid, AUTHN_HMAC_KEY_LEN) == 0)
            return (uint32_t *)(void *)r;
    return NULL;
}

/* A writer that died inside a record (its sequence left odd): a reader
 * takes it for no memo (a query, never a torn answer), and the next
 * writer overwrites it. */
static void test_a_torn_write(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p);
    unsigned char u[AUTHN_HMAC_KEY_LEN];
    authn_hmac_memo_t m = memo(AUTHN_HMAC_MEMO_HASH, 1, SEC(20)), got;
    uint32_t *seq;

    make_uid(u, 11, 1);
    CHECK(authn_hmac_memo_store(t, u, &m, NOW) == APR_SUCCESS);
    CHECK((seq = record_of(t, u)) != NULL);
    if (!seq)
        return;
    CHECK((*seq & 1) == 0);
    *seq += 1; /* inside, forever */
    CHECK(!authn_hmac_memo_lookup(t, u, &got) && got.state == 0);
    m = memo(AUTHN_HMAC_MEMO_NONE, 0, SEC(21));
    CHECK(authn_hmac_memo_store(t, u, &m, NOW) == APR_SUCCESS);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &m));
    CHECK((*record_of(t, u) & 1) == 0);
}

/* A clock stepped back (NTP, a VM restored): the memo written before the
 * step is ahead of the clock by more than the skew; the source's answers
 * after the step must replace it (else the server keeps a memo it can
 * never use: every request queries, and the offline grace is gone, for as
 * long as the step). */
static void test_a_clock_stepped_back_takes_the_new_answer(apr_pool_t *p)
{
    authn_hmac_table_t *t = table(p);
    unsigned char u[AUTHN_HMAC_KEY_LEN];
    apr_time_t now = SEC(1700000000);
    authn_hmac_memo_t before =
                          memo(AUTHN_HMAC_MEMO_HASH, 0xaa, now + SEC(3600)),
                      after = memo(AUTHN_HMAC_MEMO_NONE, 0, now), got;

    make_uid(u, 12, 1);
    CHECK(authn_hmac_memo_store(t, u, &before, now + SEC(3600)) == APR_SUCCESS);
    CHECK(authn_hmac_memo_store(t, u, &after, now) == APR_SUCCESS);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &after));
    /* but within the skew, an older answer still never replaces it */
    before = memo(AUTHN_HMAC_MEMO_HASH, 0xbb, now + SEC(2));
    CHECK(authn_hmac_memo_store(t, u, &before, now) == APR_SUCCESS);
    CHECK(authn_hmac_memo_store(t, u, &after, now) == APR_SUCCESS);
    CHECK(authn_hmac_memo_lookup(t, u, &got) && same(&got, &before));
}

/* Writers in three processes store ever newer memos of one user (the
 * digest's bytes made of the time), readers in three more check each copy
 * is whole and never older than one they saw before. */
static void test_concurrent_writers_and_readers(apr_pool_t *p)
{
    unsigned char u[AUTHN_HMAC_KEY_LEN];
    pid_t kids[6];
    int i, ok = 1;

    (void)shared_table(p);
    make_uid(u, 13, 1);
    for (i = 0; i < 6; i++) {
        if ((kids[i] = unit_fork()) == 0) {
            authn_hmac_table_t *c = shared_child();
            authn_hmac_memo_t m;
            int64_t seen = 0;
            int n;

            for (n = 0; n < 200000; n++) {
                if (i < 3) {
                    m = memo(AUTHN_HMAC_MEMO_HASH, 0,
                             1000 + (int64_t)n * 3 + i);
                    memset(m.digest, (unsigned char)m.confirmed,
                           sizeof(m.digest));
                    authn_hmac_memo_store(c, u, &m, m.confirmed);
                }
                else if (authn_hmac_memo_lookup(c, u, &m)) {
                    unsigned char want[AUTHN_HMAC_DIGEST_LEN];

                    memset(want, (unsigned char)m.confirmed, sizeof(want));
                    CHECK(memcmp(want, m.digest, sizeof(want)) == 0);
                    CHECK(m.confirmed >= seen);
                    seen = m.confirmed;
                }
            }
            _exit(unit_failures ? 1 : 0);
        }
    }
    for (i = 0; i < 6; i++)
        ok &= unit_child_passed(kids[i]);
    CHECK(ok);
    shared_done();
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_store_and_lookup, p);
    RUN(test_an_older_answer_never_replaces_a_newer, p);
    RUN(test_age_and_the_oldest_record, p);
    RUN(test_a_torn_write, p);
    RUN(test_a_clock_stepped_back_takes_the_new_answer, p);
    RUN(test_concurrent_writers_and_readers, p);
    return unit_end();
}
