/* Unit tests: the throttle on guessing (src/shm/throttle.c). */
#include "core/secret.h"
#include "shm/throttle.h"
#include "shm/table_int.h" /* the number of records */
#include "shared_table.h"
#include "unit.h"

#include <string.h>

#define SEC(n) apr_time_from_sec(n)
#define T0     SEC(1000000)

static const authn_hmac_mac_t *mac;

static void ids_of(const char *client, const char *user,
                   authn_hmac_throttle_ids_t *ids)
{
    unsigned char uid[AUTHN_HMAC_KEY_LEN];

    authn_hmac_user_id(mac, "/scope", 6, user, strlen(user), uid);
    authn_hmac_throttle_ids(mac, client, uid, ids);
}

/* A guess from enter to leave, as the engine makes it: a wrong password
 * with fingerprint fp. */
static int fail(authn_hmac_table_t *t, const authn_hmac_throttle_conf_t *c,
                const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                apr_time_t now, int *fresh)
{
    int entered;

    *fresh = 0;
    if (authn_hmac_throttle_enter(t, c, ids, now, &entered) || !entered)
        return -1; /* refused */
    return authn_hmac_throttle_leave(t, c, ids, fp, 1, now, fresh);
}

static authn_hmac_throttle_conf_t conf(int max, int max_client)
{
    authn_hmac_throttle_conf_t c = {max, max_client, SEC(600), SEC(300)};

    return c;
}

/* max distinct wrong passwords ban the pair for the ban time, not a
 * moment before; the ban starts once; it ends on time. */
static void test_pair_limit(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(5, 0);
    authn_hmac_throttle_ids_t ids;
    int i, fresh;

    ids_of("192.0.2.1", "alice", &ids);
    for (i = 1; i < 5; i++) {
        CHECK(fail(t, &c, &ids, (uint64_t)i * 1000, T0 + SEC(i), &fresh) == 0);
        CHECK(fresh);
        CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(i)) == 0);
    }
    CHECK(fail(t, &c, &ids, 5000, T0 + SEC(5), &fresh) == AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(6)) ==
          AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(5 + 299)) ==
          AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(5 + 300)) == 0);
    /* The client limit is off: the client alone is never banned. */
    shared_done();
}

/* A repeat of one of the last wrong passwords is no new guess (a stale
 * client does not lock its user out), however often it comes. */
static void test_repeat_is_not_a_guess(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(3, 3);
    authn_hmac_throttle_ids_t ids;
    int i, fresh;

    ids_of("192.0.2.1", "bob", &ids);
    for (i = 0; i < 100; i++) {
        CHECK(fail(t, &c, &ids, i % 2 ? 42 : 43, T0 + SEC(i), &fresh) == 0);
        CHECK(fresh == (i < 2));
    }
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(100)) == 0);
    shared_done();
}

/* Guesses older than the window no longer count. */
static void test_window(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(3, 0);
    authn_hmac_throttle_ids_t ids;
    int fresh;

    ids_of("192.0.2.1", "carol", &ids);
    CHECK(fail(t, &c, &ids, 1, T0, &fresh) == 0);
    CHECK(fail(t, &c, &ids, 2, T0 + SEC(1), &fresh) == 0);
    /* The window from the first guess is over: counting starts again. */
    CHECK(fail(t, &c, &ids, 3, T0 + SEC(600), &fresh) == 0);
    CHECK(fail(t, &c, &ids, 4, T0 + SEC(601), &fresh) == 0);
    CHECK(fail(t, &c, &ids, 5, T0 + SEC(602), &fresh) == AUTHN_HMAC_BAN_PAIR);
    shared_done();
}

/* Another client, and the same client's other users, are not banned by a
 * pair's ban; an IPv6 client is its /64. */
static void test_others_unaffected(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(2, 0);
    authn_hmac_throttle_ids_t ids, other_client, other_user, same64, other64;
    int fresh;

    ids_of("2001:db8:1:2::1", "dave", &ids);
    ids_of("2001:db8:1:2:ffff::9", "dave", &same64);
    ids_of("2001:db8:1:3::1", "dave", &other64);
    ids_of("192.0.2.7", "dave", &other_client);
    ids_of("2001:db8:1:2::1", "erin", &other_user);
    CHECK(memcmp(ids.pair, same64.pair, sizeof(ids.pair)) == 0);
    CHECK(fail(t, &c, &ids, 1, T0, &fresh) == 0);
    CHECK(fail(t, &c, &same64, 2, T0, &fresh) == AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0) == AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &other64, T0) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c, &other_client, T0) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c, &other_user, T0) == 0);
    shared_done();
}

/* Spraying: one client's guesses over many users reach the client's limit,
 * which bans it for every user. */
static void test_client_limit(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(5, 20);
    authn_hmac_throttle_ids_t ids;
    char user[16];
    int i, fresh, started = 0;

    for (i = 0; i < 20; i++) {
        snprintf(user, sizeof(user), "user%d", i);
        ids_of("198.51.100.4", user, &ids);
        started = fail(t, &c, &ids, 7, T0, &fresh);
        CHECK(started == (i == 19 ? AUTHN_HMAC_BAN_CLIENT : 0));
    }
    ids_of("198.51.100.4", "someone else", &ids);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0) == AUTHN_HMAC_BAN_CLIENT);
    ids_of("198.51.100.5", "user0", &ids);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0) == 0);
    shared_done();
}

/* A ban learnt from the farm is kept here for what remains of it, never
 * past the ban time from now, and said new only once. */
static void test_farm_ban(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(5, 20);
    authn_hmac_throttle_ids_t ids, other;

    ids_of("192.0.2.9", "frank", &ids);
    CHECK(authn_hmac_throttle_ban(t, &c, &ids, AUTHN_HMAC_BAN_PAIR, T0,
                                  T0 + SEC(100)) == AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_ban(t, &c, &ids, AUTHN_HMAC_BAN_PAIR, T0,
                                  T0 + SEC(100)) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(99)) ==
          AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(100)) == 0);
    /* A farm that says a year is held to the ban time (300 s). */
    ids_of("192.0.2.10", "frank", &other);
    CHECK(authn_hmac_throttle_ban(t, &c, &other, AUTHN_HMAC_BAN_CLIENT, T0,
                                  T0 + SEC(86400 * 365)) ==
          AUTHN_HMAC_BAN_CLIENT);
    CHECK(authn_hmac_throttle_banned(t, &c, &other, T0 + SEC(299)) ==
          AUTHN_HMAC_BAN_CLIENT);
    CHECK(authn_hmac_throttle_banned(t, &c, &other, T0 + SEC(300)) == 0);
    /* One already over is no ban. */
    CHECK(authn_hmac_throttle_ban(t, &c, &other, AUTHN_HMAC_BAN_PAIR,
                                  T0 + SEC(400), T0 + SEC(400)) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c, &other, T0 + SEC(400)) == 0);
    shared_done();
}

/* A user retrying old typos: any wrong password the pair sent in the
 * window is no new guess, however many others came between (six
 * different ones in three rounds count six, not eighteen; the limit of
 * ten is never reached). */
static void test_repeat_after_others(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(10, 30);
    authn_hmac_throttle_ids_t ids;
    int round, i, fresh, counted = 0;

    ids_of("192.0.2.11", "ivy", &ids);
    for (round = 0; round < 3; round++)
        for (i = 0; i < 6; i++) {
            CHECK(fail(t, &c, &ids, (uint64_t)(i + 1) * 7919,
                       T0 + SEC(round * 6 + i), &fresh) == 0);
            counted += fresh;
        }
    CHECK(counted == 6);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(20)) == 0);
    /* Twenty remembered: a limit of 20 is reached by 20 distinct ones
     * only, whatever repeats come between. */
    c = conf(20, 0);
    ids_of("192.0.2.12", "ivy", &ids);
    for (i = 0; i < 19; i++) {
        CHECK(fail(t, &c, &ids, (uint64_t)(i + 1) * 104729, T0 + SEC(i),
                   &fresh) == 0);
        CHECK(fail(t, &c, &ids, 104729, T0 + SEC(i), &fresh) == 0);
    }
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(30)) == 0);
    CHECK(fail(t, &c, &ids, 999983, T0 + SEC(31), &fresh) ==
          AUTHN_HMAC_BAN_PAIR);
    shared_done();
}

/* A guess refused because the client is banned for all users counts for
 * its pair (a repeat does not), and bans the pair at its limit. */
static void test_refused_counts_for_the_pair(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(3, 30);
    authn_hmac_throttle_ids_t ids;

    ids_of("192.0.2.13", "jack", &ids);
    CHECK(authn_hmac_throttle_refused(t, &c, &ids, 1, 0, T0) == 0);
    CHECK(authn_hmac_throttle_refused(t, &c, &ids, 1, 0, T0) == 0);
    CHECK(authn_hmac_throttle_refused(t, &c, &ids, 2, 0, T0) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0) == 0);
    CHECK(authn_hmac_throttle_refused(t, &c, &ids, 3, 0, T0) ==
          AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(1)) ==
          AUTHN_HMAC_BAN_PAIR);
    /* Banned: counted no more. */
    CHECK(authn_hmac_throttle_refused(t, &c, &ids, 4, 0, T0 + SEC(1)) == 0);
    shared_done();
}

/* More clients than records: the oldest are forgotten, and the table
 * never refuses a new one. */
static void test_full(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(1, 0);
    authn_hmac_throttle_ids_t ids;
    char client[32];
    int i, fresh;

    for (i = 0; i < 5000; i++) {
        snprintf(client, sizeof(client), "10.%d.%d.1", i / 256, i % 256);
        ids_of(client, "gina", &ids);
        CHECK(fail(t, &c, &ids, 1, T0 + SEC(1) + i, &fresh) ==
              AUTHN_HMAC_BAN_PAIR);
        CHECK(fresh);
    }
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0 + SEC(2)) ==
          AUTHN_HMAC_BAN_PAIR);
    shared_done();
}

/* No limit on: nothing is counted, nothing refused. */
static void test_off(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(0, 0);
    authn_hmac_throttle_ids_t ids;
    int i, entered;

    CHECK(!authn_hmac_throttle_on(&c));
    ids_of("192.0.2.1", "hank", &ids);
    for (i = 0; i < 50; i++)
        CHECK(authn_hmac_throttle_enter(t, &c, &ids, T0, &entered) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0) == 0);
    CHECK(!authn_hmac_throttle_any(t, T0));
    shared_done();
}

/* Guesses under way count: with a limit of 2, eight at once (entered, not
 * yet left) let two through; the ban starts when they fail, and the word
 * the hit path reads says so until it ends. */
static void test_concurrent_guesses(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(2, 0);
    authn_hmac_throttle_ids_t ids;
    int i, entered, in = 0, fresh, started = 0;

    ids_of("192.0.2.20", "ivy", &ids);
    CHECK(!authn_hmac_throttle_any(t, T0));
    for (i = 0; i < 8; i++) {
        int refused = authn_hmac_throttle_enter(t, &c, &ids, T0, &entered);

        CHECK(refused == (entered ? 0 : AUTHN_HMAC_BAN_PAIR));
        in += entered;
    }
    CHECK(in == 2);
    for (i = 0; i < in; i++)
        started |= authn_hmac_throttle_leave(t, &c, &ids, (uint64_t)i + 7, 1,
                                             T0, &fresh);
    CHECK(started == AUTHN_HMAC_BAN_PAIR);
    CHECK(authn_hmac_throttle_any(t, T0 + SEC(299)));
    CHECK(!authn_hmac_throttle_any(t, T0 + SEC(300)));
    /* A guess that was no failure (the right password) gives its place
     * back uncounted. */
    ids_of("192.0.2.21", "ivy", &ids);
    CHECK(authn_hmac_throttle_enter(t, &c, &ids, T0, &entered) == 0 && entered);
    CHECK(authn_hmac_throttle_leave(t, &c, &ids, 1, 0, T0, &fresh) == 0);
    CHECK(!fresh);
    CHECK(authn_hmac_throttle_enter(t, &c, &ids, T0, &entered) == 0 && entered);
    CHECK(authn_hmac_throttle_enter(t, &c, &ids, T0, &entered) == 0 && entered);
    CHECK(authn_hmac_throttle_enter(t, &c, &ids, T0, &entered) ==
          AUTHN_HMAC_BAN_PAIR);
    shared_done();
}

/* An IPv4 client inside IPv6 (IPv4-mapped, NAT64's 64:ff9b::/96) is that
 * IPv4 client, not one /64 for all of them. */
static void test_ipv4_inside_ipv6(apr_pool_t *p)
{
    authn_hmac_throttle_ids_t v4, mapped, nat64, other;

    (void)p;
    ids_of("192.0.2.1", "joe", &v4);
    ids_of("::ffff:192.0.2.1", "joe", &mapped);
    ids_of("64:ff9b::c000:201", "joe", &nat64);
    ids_of("::ffff:192.0.2.2", "joe", &other);
    CHECK(memcmp(v4.pair, mapped.pair, sizeof(v4.pair)) == 0);
    CHECK(memcmp(v4.pair, nat64.pair, sizeof(v4.pair)) == 0);
    CHECK(memcmp(v4.client, mapped.client, sizeof(v4.client)) == 0);
    CHECK(memcmp(v4.pair, other.pair, sizeof(v4.pair)) != 0);
}

/* ids whose records start their probes where the test says (made up
 * MACs: n slots, the pair's at ph, the client's at ch). */
static void crafted(uint64_t n, uint64_t ph, uint64_t ch, uint64_t salt,
                    authn_hmac_throttle_ids_t *ids)
{
    uint64_t w[2];

    memset(ids, 0, sizeof(*ids));
    w[0] = ph + n * salt;
    w[1] = 0;
    memcpy(ids->pair, w, sizeof(w));
    w[0] = ch + n * (salt + 1000000);
    memcpy(ids->client, w, sizeof(w));
}

/* A guess whose process died between enter and leave (a crash, a SIGKILL
 * at a restart) lets go of its place in time, count or none: else an
 * address that only ever sent right passwords would be refused for good
 * (found by review). */
static void test_a_dead_guess_lets_go(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(10, 2);
    authn_hmac_throttle_ids_t a, b, x;
    int entered;

    ids_of("198.51.100.1", "u1", &a);
    ids_of("198.51.100.1", "u2", &b);
    ids_of("198.51.100.1", "u3", &x);
    CHECK(authn_hmac_throttle_enter(t, &c, &a, T0, &entered) == 0 && entered);
    CHECK(authn_hmac_throttle_enter(t, &c, &b, T0, &entered) == 0 && entered);
    /* Meanwhile the client is at its limit with those two under way. */
    CHECK(authn_hmac_throttle_enter(t, &c, &x, T0 + SEC(1), &entered) ==
          AUTHN_HMAC_BAN_CLIENT);
    /* Later, another user at the same address. */
    CHECK(authn_hmac_throttle_enter(t, &c, &x, T0 + SEC(3600), &entered) == 0);
    CHECK(entered);
    shared_done();
}

/* With every slot holding a count, a request's pair and client records
 * never share one slot (the client's find took the pair's new record: one
 * wrong password counted twice for the client, found by review). */
static void test_pair_and_client_never_share_a_slot(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    uint64_t n = authn_hmac_table_parts(t)->throttle_slots, i;
    authn_hmac_throttle_conf_t fill = conf(1000, 1000), c2 = conf(3, 2);
    authn_hmac_throttle_ids_t ids;
    int fresh;

    for (i = 0; i < n; i++) {
        crafted(n, i, (i + n / 2) % n, i + 1, &ids);
        CHECK(fail(t, &fill, &ids, 1, T0 + SEC(1), &fresh) == 0);
    }
    crafted(n, 5, 5, 7777777, &ids);
    CHECK(fail(t, &c2, &ids, 100, T0 + SEC(2), &fresh) == 0);
    CHECK(authn_hmac_throttle_banned(t, &c2, &ids, T0 + SEC(3)) == 0);
    shared_done();
}

/* A banned client's refusals (no verification: as fast as it sends)
 * never push another's live count out of the table: a record for a new
 * pair only where one is free or idle. Else an accomplice at another
 * address could have its count of nine forgotten, and guess nine more,
 * after each burst of refusals (found by review). */
static void test_refusals_do_not_evict(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    uint64_t n = authn_hmac_table_parts(t)->throttle_slots, i, w[2] = {0, 0};
    authn_hmac_throttle_conf_t c = conf(10, 1000000);
    authn_hmac_throttle_ids_t ids, victim;
    int k, fresh;

    /* The victim's nine guesses, the table's oldest: its pair's record at
     * slot 7, its client's at slot 3 (one client for every pair here). */
    memset(&victim, 0, sizeof(victim));
    w[0] = 7 + n * 11;
    memcpy(victim.pair, w, sizeof(w));
    w[0] = 3 + n * 13;
    memcpy(victim.client, w, sizeof(w));
    for (k = 1; k <= 9; k++)
        CHECK(fail(t, &c, &victim, (uint64_t)k, T0 + SEC(1), &fresh) == 0);
    /* Every other slot a live count of one, newer. */
    ids = victim;
    for (i = 0; i < n; i++) {
        if (i == 7 || i == 3)
            continue;
        w[0] = i + n * 17;
        memcpy(ids.pair, w, sizeof(w));
        CHECK(fail(t, &c, &ids, 1, T0 + SEC(2), &fresh) == 0);
    }
    /* 5,000 refused guesses for new users: nothing pushed out. */
    for (i = 0; i < 5000; i++) {
        w[0] = i % n + n * (19 + i);
        memcpy(ids.pair, w, sizeof(w));
        CHECK(authn_hmac_throttle_refused(t, &c, &ids, 77, 0, T0 + SEC(3)) ==
              0);
    }
    /* The victim's count holds: its tenth guess bans. */
    CHECK(fail(t, &c, &victim, 10, T0 + SEC(4), &fresh) == AUTHN_HMAC_BAN_PAIR);
    shared_done();
}

/* A client full with a guess under way (no ban yet) whose logged-in
 * users' wrong passwords are refused: each a guess of the client's, which
 * starts its ban at the limit; then they count towards the seal (found by
 * a second review: uncounted before the ban). */
static void test_refusals_of_a_full_client_count(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_throttle_conf_t c = conf(10, 3);
    authn_hmac_throttle_ids_t ids, u;
    int i, fresh, entered;
    char name[16];

    ids_of("192.0.2.77", "a", &ids);
    CHECK(fail(t, &c, &ids, 1, T0, &fresh) == 0);
    ids_of("192.0.2.77", "b", &ids);
    CHECK(fail(t, &c, &ids, 2, T0, &fresh) == 0);
    ids_of("192.0.2.77", "c", &ids);
    CHECK(authn_hmac_throttle_enter(t, &c, &ids, T0, &entered) == 0 &&
          entered); /* the third, under way: full */
    CHECK(authn_hmac_throttle_banned(t, &c, &ids, T0) == AUTHN_HMAC_BAN_CLIENT);
    ids_of("192.0.2.77", "office", &u);
    CHECK(authn_hmac_throttle_refused(t, &c, &u, 100, 1, T0) ==
          AUTHN_HMAC_BAN_CLIENT);
    for (i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "office%d", i);
        ids_of("192.0.2.77", name, &u);
        CHECK(authn_hmac_throttle_refused(t, &c, &u, 200 + (uint64_t)i, 1,
                                          T0 + SEC(1)) == 0);
    }
    CHECK(authn_hmac_throttle_banned(t, &c, &u, T0 + SEC(2)) ==
          (AUTHN_HMAC_BAN_CLIENT | AUTHN_HMAC_BAN_SEALED));
    shared_done();
}

int main(void)
{
    apr_pool_t *p = unit_start(), *kept;
    authn_hmac_secret_t *pep = NULL;
    authn_hmac_mac_t *m = NULL;

    /* NB: a pool of its own: RUN clears p after each test. */
    apr_pool_create(&kept, NULL);
    CHECK(authn_hmac_secret_random(&pep, 32, kept) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&m, pep, kept) == APR_SUCCESS);
    mac = m;
    RUN(test_pair_limit, p);
    RUN(test_repeat_is_not_a_guess, p);
    RUN(test_window, p);
    RUN(test_others_unaffected, p);
    RUN(test_client_limit, p);
    RUN(test_farm_ban, p);
    RUN(test_repeat_after_others, p);
    RUN(test_refused_counts_for_the_pair, p);
    RUN(test_full, p);
    RUN(test_off, p);
    RUN(test_concurrent_guesses, p);
    RUN(test_ipv4_inside_ipv6, p);
    RUN(test_a_dead_guess_lets_go, p);
    RUN(test_pair_and_client_never_share_a_slot, p);
    RUN(test_refusals_do_not_evict, p);
    RUN(test_refusals_of_a_full_client_count, p);
    return unit_end();
}
