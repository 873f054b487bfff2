/* Unit tests: the request path's caches and outcomes (src/request/engine.c
 * and src/request/throttle.c's marks aside): shared memory, the negative
 * region, the previous pepper, a wrapped provider, an unknown user's dummy,
 * without httpd, with the fake verifier of engine_unit.h. Single flight and
 * the queue: test_engine_flight.c; the throttle: test_engine_throttle.c;
 * the htpasswd file's path: test_engine_file.c. */
#include "request/engine.h"
#include "core/cred.h"
#include "core/secret.h"
#include "shm/table.h"
#include "testing/testing.h"
#include "core/util.h"
#include "unit.h"
#include "engine_unit.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A user id given with the credential (as the htpasswd index keeps it)
 * finds what the engine's own made; it only says where to look: a wrong
 * one finds nothing and grants nothing. */
static void test_given_user_id(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {
        apr_time_from_sec(300), max_age_us, 0, 0, 0, 0, 0};
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
    /* The shipped recheck (60 s), no offline grace: errors are errors. */
    authn_hmac_policy_t pol = {apr_time_from_sec(300),
                               max_age_us,
                               apr_time_from_sec(30),
                               0,
                               apr_time_from_sec(60),
                               0,
                               0};
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
    authn_hmac_policy_t pol = {apr_time_from_sec(300),
                               max_age_us,
                               apr_time_from_sec(30),
                               0,
                               apr_time_from_sec(60),
                               0,
                               0};
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

/* Rewrites wendy's entry (a wrapped provider's, scope "ldap") as if
 * confirmed `age` ago and last used `idle` ago. */
static void age_wrapped(const authn_hmac_engine_t *e, const char *password,
                        apr_interval_time_t age, apr_interval_time_t idle)
{
    authn_hmac_cred_t c = cred("wendy", password, "ldap");
    unsigned char key[AUTHN_HMAC_KEY_LEN], uid[AUTHN_HMAC_KEY_LEN];
    apr_time_t now = apr_time_now();

    authn_hmac_mac_compute(e->mac, c.scope, c.scope_len, c.user, c.user_len,
                           c.password, c.password_len, c.hash, c.hash_len, key);
    authn_hmac_user_id(e->mac, c.scope, c.scope_len, c.user, c.user_len, uid);
    authn_hmac_table_tear(e->table, key, uid);
    CHECK(authn_hmac_table_store(e->table, key, uid, now - age, now - idle,
                                 apr_time_from_sec(300)) == APR_SUCCESS);
}

/* A wrapped provider's grant is a hit until its recheck (60 s here), not
 * its max age: then the provider is asked again (a recheck, counted), and
 * its refusal ends the grant at once; recheck 0 asks at every request.
 * Within the max age, an entry past the recheck is asked once. */
static void test_wrapped_recheck(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {apr_time_from_sec(300),
                               apr_time_from_sec(600),
                               apr_time_from_sec(30),
                               0,
                               apr_time_from_sec(60),
                               0,
                               0};
    authn_hmac_cred_t c = cred("wendy", "right", "ldap");

    c.ask = ask;
    answer = APR_SUCCESS;
    asked = 0;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    CHECK(asked == 1);
    CHECK(counted(&e, AUTHN_HMAC_C_RECHECKS) == 0);
    /* Confirmed 59 s ago: a hit. 61 s: asked, counted as a recheck. */
    age_wrapped(&e, "right", apr_time_from_sec(59), apr_time_from_sec(1));
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    age_wrapped(&e, "right", apr_time_from_sec(61), apr_time_from_sec(1));
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(asked == 2);
    CHECK(counted(&e, AUTHN_HMAC_C_RECHECKS) == 1);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_HIT);
    CHECK(asked == 2);
    /* The user removed: refused at the recheck, and from then on. */
    age_wrapped(&e, "right", apr_time_from_sec(61), apr_time_from_sec(1));
    answer = APR_EMISMATCH;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(counted(&e, AUTHN_HMAC_C_RECHECKS) == 2);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_NEGATIVE_HIT);
    CHECK(asked == 3);
    /* Recheck 0: every request asks (the negative cache off here). */
    pol.recheck = 0;
    pol.negative_ttl = 0;
    answer = APR_SUCCESS;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(asked == 5);
    /* The max age still bounds a recheck longer than it. */
    pol.recheck = apr_time_from_sec(3600);
    age_wrapped(&e, "right", apr_time_from_sec(601), apr_time_from_sec(1));
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(asked == 6);
}

/* The offline grace: the provider's error (its directory down: two
 * users' errors with no answer since) at a recheck grants a credential it
 * confirmed within the grace (offline-hit,
 * counted, the outage's start told), and nothing else: one confirmed
 * before the grace, one it refused, an unknown credential (a new login, a
 * changed password) get the error, and a refusal is a refusal. An answer
 * ends the outage. */
static void test_wrapped_offline(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_policy_t pol = {
        apr_time_from_sec(300), apr_time_from_sec(600),  0, 0,
        apr_time_from_sec(60),  apr_time_from_sec(3600), 0};
    authn_hmac_cred_t c = cred("wendy", "right", "ldap"),
                      other = cred("wendy", "new", "ldap"),
                      xavier = cred("xavier", "his", "ldap");

    c.ask = ask;
    other.ask = ask;
    xavier.ask = ask;
    answer = APR_SUCCESS;
    asked = 0;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    /* Confirmed 30 min ago, idle 20 min (past the idle timeout): within
     * the grace. The directory down: served, counted, the outage set. */
    age_wrapped(&e, "right", apr_time_from_sec(1800), apr_time_from_sec(1200));
    answer = APR_EGENERAL;
    /* One user's errors are no outage of the source (a directory may
     * refuse one account with an error): today's error, until another
     * user's error with no answer between. */
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(authn_hmac_check(&e, &pol, &xavier, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_OFFLINE_HIT);
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_OFFLINE_HIT);
    CHECK(asked == 6); /* each asked the provider: none waits for another */
    CHECK(counted(&e, AUTHN_HMAC_C_OFFLINE_HITS) == 2);
    CHECK(counted(&e, AUTHN_HMAC_C_OFFLINE_SINCE) != 0);
    /* A credential the provider never confirmed: today's error. */
    CHECK(authn_hmac_check(&e, &pol, &other, NULL, p) == AUTHN_HMAC_ERROR);
    /* Confirmed before the grace: today's error. */
    age_wrapped(&e, "right", apr_time_from_sec(3601), apr_time_from_sec(1));
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(counted(&e, AUTHN_HMAC_C_OFFLINE_HITS) == 2);
    /* An answer ends the outage; a refusal takes the entry out: when the
     * directory fails after it, nothing is served. */
    age_wrapped(&e, "right", apr_time_from_sec(120), apr_time_from_sec(1));
    answer = APR_EMISMATCH;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(counted(&e, AUTHN_HMAC_C_OFFLINE_SINCE) == 0);
    answer = APR_EGENERAL;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(counted(&e, AUTHN_HMAC_C_OFFLINE_HITS) == 2);
    /* A grace of 0: today's error, whatever the entry. */
    answer = APR_SUCCESS;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_VERIFIED);
    age_wrapped(&e, "right", apr_time_from_sec(61), apr_time_from_sec(1));
    pol.offline_grace = 0;
    answer = APR_EGENERAL;
    CHECK(authn_hmac_check(&e, &pol, &c, NULL, p) == AUTHN_HMAC_ERROR);
    CHECK(counted(&e, AUTHN_HMAC_C_OFFLINE_HITS) == 2);
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
    authn_hmac_policy_t pol = {
        apr_time_from_sec(300), max_age_us, apr_time_from_sec(30), 0, 0, 0, 0};
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

int main(void)
{
    apr_pool_t *p = unit_start();

    engine_unit_start();
    RUN(test_outcomes, p);
    RUN(test_given_user_id, p);
    RUN(test_given_digest, p);
    RUN(test_wrapped_provider, p);
    RUN(test_previous_pepper, p);
    RUN(test_wrapped_provider_rotation, p);
    RUN(test_wrapped_recheck, p);
    RUN(test_wrapped_offline, p);
    RUN(test_forked_processes, p);
    RUN(test_negative_cache, p);
    RUN(test_idle_timeout_and_max_age, p);
    RUN(test_hit_takes_no_lock, p);
    RUN(test_unknown_users_cost_a_verification, p);
    return unit_end();
}
