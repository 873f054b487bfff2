/* Unit tests: the request path from a source of stored hashes other than
 * the htpasswd file (src/request/source.c), without httpd, with the fake
 * verifier of engine_unit.h: an unknown user's dummy is made from the
 * source's template (its first user's hash, its salt made plain), else
 * from another user's hash the source gives, else from a bcrypt of cost
 * 10; a locked hash is refused as a locked line is; a right and a wrong
 * password come out as the engine's outcomes. */
#include "request/source.h"
#include "core/cred.h"
#include "request/engine.h"
#include "shm/table.h"
#include "unit.h"
#include "engine_unit.h"

#include <string.h>

/* Checks user's password through the source s, as a source that found
 * hash (NULL: no such user) and gives other, under a policy that hides
 * unknown users and keeps refusals. */
static authn_hmac_outcome via(const authn_hmac_engine_t *e,
                              authn_hmac_source_t *s, const char *user,
                              const char *password, const char *hash,
                              const char *other, apr_pool_t *p)
{
    authn_hmac_policy_t pol = {
        apr_time_from_sec(300), max_age_us, apr_time_from_sec(30), 1, 0, 0, 0};
    authn_hmac_cred_t c = cred(user, password, NULL);
    authn_hmac_outcome o;

    o = authn_hmac_check_hash(e, &pol, s, &c, hash, other, NULL, p);
    /* The source's answer is what the credential carries. */
    CHECK(c.hash == hash && c.uid == NULL && c.digest == NULL);
    CHECK(c.dummy_hash != NULL && c.dummy_hash_len == strlen(c.dummy_hash));
    return o;
}

/* A right password is verified, then a hit; a wrong one denied, then a
 * negative hit; the verifier ran on the user's own hash. */
static void test_right_and_wrong_passwords(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_source_t *s = authn_hmac_source_make(p);

    CHECK(via(&e, s, "alice", "right", "H-right", NULL, p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(strcmp(hash_seen, "H-right") == 0);
    CHECK(via(&e, s, "alice", "right", "H-right", NULL, p) == AUTHN_HMAC_HIT);
    CHECK(via(&e, s, "alice", "wrong", "H-right", NULL, p) ==
          AUTHN_HMAC_DENIED);
    CHECK(via(&e, s, "alice", "wrong", "H-right", NULL, p) ==
          AUTHN_HMAC_NEGATIVE_HIT);
    CHECK(*calls == 2);
    /* A changed hash is another credential: the old password fails. */
    CHECK(via(&e, s, "alice", "right", "H-new", NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(via(&e, s, "alice", "new", "H-new", NULL, p) == AUTHN_HMAC_VERIFIED);
    CHECK(counted(&e, AUTHN_HMAC_C_DENIED) == 2); /* not the negative hit */
    CHECK(counted(&e, AUTHN_HMAC_C_VERIFICATIONS) == 4);
}

/* A fresh process that has found no user, and was given none: the dummy
 * is a bcrypt of cost 10, and no template is kept. */
static void test_fresh_process_dummy_is_bcrypt_cost_10(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_source_t *s = authn_hmac_source_make(p);

    CHECK(!authn_hmac_source_has_template(s));
    CHECK(via(&e, s, "ghost", "guess", NULL, NULL, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(*calls == 1);
    CHECK(strncmp(hash_seen, "$2y$10$", 7) == 0 && strlen(hash_seen) == 60);
    CHECK(!authn_hmac_source_has_template(s));
    CHECK(counted(&e, AUTHN_HMAC_C_DUMMY_VERIFICATIONS) == 1);
    CHECK(counted(&e, AUTHN_HMAC_C_UNKNOWN_USER) == 1);
}

/* An unknown user, given another user's hash (a DBM file's first record):
 * the dummy is of that hash's scheme and cost, and that hash is the
 * template from then on. */
static void test_dummy_from_other(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_source_t *s = authn_hmac_source_make(p);

    CHECK(via(&e, s, "ghost", "guess", NULL,
              "$2y$05$abcdefghijklmnopqrstuv"
              "wxyzABCDEFGHIJKLMNOPQRSTUVW0123",
              p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(strncmp(hash_seen, "$2y$05$", 7) == 0 && strlen(hash_seen) == 60);
    CHECK(authn_hmac_source_has_template(s));
    /* Kept: another other changes nothing. */
    CHECK(via(&e, s, "ghost2", "guess", NULL, "H-otherhash", p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(strncmp(hash_seen, "$2y$05$", 7) == 0 && strlen(hash_seen) == 60);
    CHECK(*calls == 2);
}

/* The template is the first user found: a later user's hash does not
 * change the dummy (an unknown user's repeat stays a negative hit), and
 * the user's own hash is never the dummy. */
static void test_template_from_the_first_user(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_source_t *s = authn_hmac_source_make(p);
    char first[AUTHN_HMAC_DUMMY_MAX];

    CHECK(via(&e, s, "alice", "right", "H-right", NULL, p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(authn_hmac_source_has_template(s));
    CHECK(via(&e, s, "ghost", "guess", NULL, NULL, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(strlen(hash_seen) == 7 && strcmp(hash_seen, "H-right") != 0);
    memcpy(first, hash_seen, sizeof(first));
    CHECK(via(&e, s, "bob", "bobs-password", "H-bobs-password", NULL, p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(via(&e, s, "ghost", "guess", NULL, NULL, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(via(&e, s, "ghost", "other", NULL, "H-something-else", p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(strcmp(hash_seen, first) == 0);
    CHECK(*calls == 4); /* the repeat was a negative hit */
    CHECK(counted(&e, AUTHN_HMAC_C_NEGATIVE_HITS) == 1);
}

/* The template's salt is made plain: sources whose first users differ
 * only by the salt make the same dummy (MD5-crypt keeps it). */
static void test_template_salt_is_plain(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_source_t *s1 = authn_hmac_source_make(p);
    authn_hmac_source_t *s2 = authn_hmac_source_make(p);
    char one[AUTHN_HMAC_DUMMY_MAX];

    CHECK(via(&e, s1, "ghost", "guess", NULL,
              "$apr1$saltAAAA$abcdefghijklmnopqrstuv",
              p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(strncmp(hash_seen, "$apr1$........$", 15) == 0);
    memcpy(one, hash_seen, sizeof(one));
    CHECK(via(&e, s2, "ghost", "guess2", NULL,
              "$apr1$saltBBBB$0123456789ABCDEFGHIJKL",
              p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(strcmp(hash_seen, one) == 0);
}

/* A locked hash ("!..." as htpasswd -L writes it, or empty): denied (not
 * unknown) against the dummy, never its own hash, whatever the password;
 * and never the template. */
static void test_locked_hash(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_source_t *s = authn_hmac_source_make(p);

    CHECK(via(&e, s, "dave", "guess", "!H-guess", NULL, p) ==
          AUTHN_HMAC_DENIED);
    CHECK(*calls == 1 && strcmp(hash_seen, "!H-guess") != 0 &&
          strcmp(hash_seen, "H-guess") != 0);
    CHECK(strncmp(hash_seen, "$2y$10$", 7) == 0); /* no template yet */
    CHECK(!authn_hmac_source_has_template(s));
    CHECK(via(&e, s, "carol", "guess", "", NULL, p) == AUTHN_HMAC_DENIED);
    CHECK(!authn_hmac_source_has_template(s));
    CHECK(counted(&e, AUTHN_HMAC_C_DUMMY_VERIFICATIONS) == 2);
    CHECK(counted(&e, AUTHN_HMAC_C_DENIED) == 2);
    CHECK(counted(&e, AUTHN_HMAC_C_UNKNOWN_USER) == 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    engine_unit_start();
    RUN(test_right_and_wrong_passwords, p);
    RUN(test_fresh_process_dummy_is_bcrypt_cost_10, p);
    RUN(test_dummy_from_other, p);
    RUN(test_template_from_the_first_user, p);
    RUN(test_template_salt_is_plain, p);
    RUN(test_locked_hash, p);
    return unit_end();
}
