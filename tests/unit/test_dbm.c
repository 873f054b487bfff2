/* Unit tests: users in a DBM file (src/sources/dbm.c, the file's reading
 * and its memo) and the request path from it (src/request/dbm.c), without
 * httpd, with the fake verifier of engine_unit.h, on sdbm files (always in
 * apr-util) that the tests write with apr_dbm. The file's opens are
 * counted by an apr_dbm_open_ex of this program's, in front of apr-util's:
 * the memo answers without one. */
#include "request/dbm.h"
#include "request/engine.h"
#include "shm/table.h"
#include "sources/dbm.h"
#include "unit.h"
#include "engine_unit.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <apr_dbm.h>
#include <apr_strings.h>

static int opens; /* of a DBM file, by anyone in this process */

apr_status_t apr_dbm_open_ex(apr_dbm_t **dbm, const char *type,
                             const char *name, apr_int32_t mode,
                             apr_fileperms_t perm, apr_pool_t *p)
{
    static apr_status_t (*real)(apr_dbm_t **, const char *, const char *,
                                apr_int32_t, apr_fileperms_t, apr_pool_t *);

    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "apr_dbm_open_ex");
    if (!real)
        abort();
    opens++;
    return real(dbm, type, name, mode, perm, p);
}

/* Writes the records (user, value pairs, up to a NULL user) into the sdbm
 * file at path, made if needed. */
static void store(const char *path, const char *const *records, apr_pool_t *p)
{
    apr_dbm_t *db = NULL;
    apr_datum_t k, v;

    CHECK(apr_dbm_open_ex(&db, "sdbm", path, APR_DBM_RWCREATE, APR_OS_DEFAULT,
                          p) == APR_SUCCESS);
    for (; db && records[0]; records += 2) {
        k.dptr = apr_pstrdup(p, records[0]);
        k.dsize = strlen(records[0]);
        v.dptr = apr_pstrdup(p, records[1]);
        v.dsize = strlen(records[1]);
        CHECK(apr_dbm_store(db, k, v) == APR_SUCCESS);
    }
    if (db)
        apr_dbm_close(db);
}

/* A directory of the test's own, and a DBM file's path in it. */
static const char *dbm_path(const char **dir, apr_pool_t *p)
{
    char *d = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX");

    CHECK(mkdtemp(d) != NULL);
    *dir = d;
    return apr_pstrcat(p, d, "/users", NULL);
}

/* A DBM file of records in a directory of its own, and its state. */
static authn_hmac_dbm_t *dbm_file(const char *const *records, const char **dir,
                                  const char **path, apr_pool_t *p)
{
    *path = dbm_path(dir, p);
    store(*path, records, p);
    return authn_hmac_dbm_make(*path, p);
}

static void drop(const char *dir, const char *path, apr_pool_t *p)
{
    unlink(apr_pstrcat(p, path, ".dir", NULL));
    unlink(apr_pstrcat(p, path, ".pag", NULL));
    rmdir(dir);
}

/* Checks user's password through the DBM file d, with hidden unknown
 * users; rv as the path gives it. */
static authn_hmac_outcome from_dbm(const authn_hmac_engine_t *e,
                                   authn_hmac_dbm_t *d, const char *user,
                                   const char *password, apr_status_t *rv,
                                   apr_pool_t *p)
{
    authn_hmac_policy_t pol = {
        apr_time_from_sec(300), max_age_us, 0, 1, 0, 0, 0};
    authn_hmac_cred_t c = cred(user, password, NULL);

    *rv = APR_EGENERAL;
    return authn_hmac_check_dbm(e, &pol, d, "sdbm", &c, NULL, p, rv);
}

static void test_type_check(apr_pool_t *p)
{
    const char *why;

    CHECK(authn_hmac_dbm_type_check("sdbm", p) == NULL);
    CHECK(authn_hmac_dbm_type_check("default", p) == NULL);
    why = authn_hmac_dbm_type_check("nosuchdbm", p);
    CHECK(why != NULL && strstr(why, "'nosuchdbm'") != NULL);
    CHECK(authn_hmac_dbm_type_check("", p) != NULL);
}

/* A file that is not there: an error, with the reason in rv, and no
 * verification. */
static void test_missing_file(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_dbm_t *d = authn_hmac_dbm_make("/nonexistent/users", p);
    apr_status_t rv;

    CHECK(from_dbm(&e, d, "alice", "right", &rv, p) == AUTHN_HMAC_ERROR);
    CHECK(rv != APR_SUCCESS && APR_STATUS_IS_ENOENT(rv));
    CHECK(*calls == 0);
}

/* A value "hash:extra" (htdbm's comment) is its hash up to the first ':';
 * a user absent is unknown, checked against a dummy made from the file's
 * first record while the process knows no other hash. */
static void test_users(apr_pool_t *p)
{
    static const char *const users[] = {"alice", "H-right:Alice Smith:x", "bob",
                                        "H-bob42:", NULL};
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *dir, *path;
    authn_hmac_dbm_t *d = dbm_file(users, &dir, &path, p);
    apr_status_t rv;

    CHECK(from_dbm(&e, d, "ghost", "guess", &rv, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(rv == APR_SUCCESS && *calls == 1);
    /* The first record's scheme (H-, 7 characters), never its hash. */
    CHECK(strlen(hash_seen) == 7 && strcmp(hash_seen, "H-right") != 0 &&
          strcmp(hash_seen, "H-bob42") != 0);
    CHECK(from_dbm(&e, d, "alice", "right", &rv, p) == AUTHN_HMAC_VERIFIED);
    CHECK(rv == APR_SUCCESS && strcmp(hash_seen, "H-right") == 0);
    CHECK(from_dbm(&e, d, "alice", "right", &rv, p) == AUTHN_HMAC_HIT);
    CHECK(from_dbm(&e, d, "alice", "Alice Smith", &rv, p) == AUTHN_HMAC_DENIED);
    CHECK(from_dbm(&e, d, "bob", "bob42", &rv, p) == AUTHN_HMAC_VERIFIED);
    CHECK(from_dbm(&e, d, "carol", "right", &rv, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(rv == APR_SUCCESS);
    CHECK(*calls == 5);
    drop(dir, path, p);
}

/* The memo: while the file is unchanged (and was quiet for a second when
 * read), a user's answer, found or not, costs no open; a change is read
 * at the next request. */
static void test_memo(apr_pool_t *p)
{
    static const char *const before[] = {"alice", "H-right", NULL};
    static const char *const after[] = {"alice", "H-new", NULL};
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *dir, *path;
    authn_hmac_dbm_t *d = dbm_file(before, &dir, &path, p);
    apr_status_t rv;

    sleep(2); /* quiet: changed over a second before it is read */
    opens = 0;
    CHECK(from_dbm(&e, d, "alice", "right", &rv, p) == AUTHN_HMAC_VERIFIED);
    CHECK(opens == 1);
    CHECK(from_dbm(&e, d, "alice", "right", &rv, p) == AUTHN_HMAC_HIT);
    CHECK(from_dbm(&e, d, "alice", "wrong", &rv, p) == AUTHN_HMAC_DENIED);
    CHECK(opens == 1);
    CHECK(from_dbm(&e, d, "ghost", "guess", &rv, p) == AUTHN_HMAC_UNKNOWN_USER);
    CHECK(opens == 2);
    CHECK(from_dbm(&e, d, "ghost", "guess2", &rv, p) ==
          AUTHN_HMAC_UNKNOWN_USER);
    CHECK(opens == 2 && rv == APR_SUCCESS);
    /* alice's password changed: read again, the old one refused. */
    store(path, after, p);
    opens = 0;
    CHECK(from_dbm(&e, d, "alice", "right", &rv, p) == AUTHN_HMAC_DENIED);
    CHECK(opens == 1);
    CHECK(from_dbm(&e, d, "alice", "new", &rv, p) == AUTHN_HMAC_VERIFIED);
    /* Not quiet yet: not remembered, read each time. */
    CHECK(opens == 2);
    sleep(2);
    CHECK(from_dbm(&e, d, "alice", "new", &rv, p) == AUTHN_HMAC_HIT);
    CHECK(from_dbm(&e, d, "alice", "new", &rv, p) == AUTHN_HMAC_HIT);
    CHECK(opens == 3);
    drop(dir, path, p);
}

/* The file's reading alone (sources/dbm.h): the hash, none, and another
 * user's only when asked for. */
static void test_lookup(apr_pool_t *p)
{
    static const char *const users[] = {"alice", "H-right:extra", NULL};
    const char *dir, *path = dbm_path(&dir, p);
    authn_hmac_dbmfile_t *f = authn_hmac_dbmfile_make(path, p);
    const char *hash = "x", *other = "x";

    store(path, users, p);
    CHECK(authn_hmac_dbmfile_lookup(f, "sdbm", "alice", 5, 1, &hash, &other,
                                    p) == APR_SUCCESS);
    CHECK(hash && strcmp(hash, "H-right") == 0 && other == NULL);
    CHECK(authn_hmac_dbmfile_lookup(f, "sdbm", "zed", 3, 0, &hash, &other, p) ==
          APR_SUCCESS);
    CHECK(hash == NULL && other == NULL);
    CHECK(authn_hmac_dbmfile_lookup(f, "sdbm", "zed2", 4, 1, &hash, &other,
                                    p) == APR_SUCCESS);
    CHECK(hash == NULL && other && strcmp(other, "H-right") == 0);
    CHECK(authn_hmac_dbmfile_lookup(f, "SDBM", "alice", 5, 0, &hash, &other,
                                    p) == APR_SUCCESS);
    CHECK(hash && strcmp(hash, "H-right") == 0);
    drop(dir, path, p);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    engine_unit_start();
    RUN(test_type_check, p);
    RUN(test_missing_file, p);
    RUN(test_lookup, p);
    RUN(test_users, p);
    RUN(test_memo, p);
    return unit_end();
}
