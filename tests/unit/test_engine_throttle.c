/* Unit tests: the throttle on the request path (src/request/throttle.c):
 * a client's wrong passwords stop costing verifications at its limit, its
 * ban refuses before the caches, a ban of a client for all users keeps
 * its logged-in users until its tests of them seal it, folded names share
 * a count, a section without a cache is throttled too. With the fake
 * verifier of engine_unit.h. */
#include "request/engine.h"
#include "core/cred.h"
#include "shm/table.h"
#include "shm/throttle.h"
#include "unit.h"
#include "engine_unit.h"

#include <stdio.h>
#include <string.h>

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

    throttle(&e, 3, 0);
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

    throttle(&e, 3, 0);
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

    throttle(&e, 10, 30);
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
    authn_hmac_policy_t pol = {
        apr_time_from_sec(300), max_age_us, 0, 0, 0, 0, 0};
    const char *was = client_addr;
    authn_hmac_cred_t c;
    char pw[16];
    int i;

    throttle(&e, 3, 0);
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

    throttle(&e, 3, 0);
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

    throttle(&e, 10, 30);
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

    engine_unit_start();
    RUN(test_throttle, p);
    RUN(test_throttle_full_client_is_no_oracle, p);
    RUN(test_throttle_without_a_cache, p);
    RUN(test_throttle_client_ban_keeps_logged_in_users, p);
    RUN(test_throttle_client_ban_is_sealed_by_tests_of_its_users, p);
    RUN(test_throttle_folded_names_share_a_count, p);
    return unit_end();
}
