/* testing/testing.h: TEST ONLY. What the unit tests and the fuzzers use
 * and the shipped library does not have: these functions are in
 * libauthnhmac_test.la (the user-file layer and the cache, src/shm/table.c,
 * built with AUTHN_HMAC_TESTING, and src/testing/), which only tests and
 * fuzzers link, never the module. Each seam is declared beside what it
 * seams (shm/table_testing.h, sources/watch_testing.h); this header
 * gathers them. */
#ifndef AUTHN_HMAC_TESTING_H
#define AUTHN_HMAC_TESTING_H

#include "core/cred.h"
#include "sources/htpasswd.h"
#include "sources/index.h"
#include "sources/watch_testing.h" /* the watcher's seams */
#include "shm/table_testing.h"     /* the cache's: authn_hmac_table_tear */

/* --------------------------------------------------- a credential's keys */

/* authn_hmac_cred_mac of the credential's digest (authn_hmac_cred_digest). */
apr_status_t authn_hmac_mac_compute(const authn_hmac_mac_t *mac,
                                    const char *scope, size_t scope_len,
                                    const char *user, size_t user_len,
                                    const char *password, size_t password_len,
                                    const char *hash, size_t hash_len,
                                    unsigned char key[AUTHN_HMAC_KEY_LEN]);

/* authn_hmac_cred_negative of the credential's digest. */
void authn_hmac_negative_key(const authn_hmac_mac_t *mac, const char *scope,
                             size_t scope_len, const char *user,
                             size_t user_len, const char *password,
                             size_t password_len, const char *hash,
                             size_t hash_len,
                             unsigned char nkey[AUTHN_HMAC_KEY_LEN]);

/* ------------------------------------------ the whole-buffer parser */

typedef struct authn_hmac_htpasswd authn_hmac_htpasswd_t;

/* Parses an htpasswd file held in buf (modified in place; it must live as
 * long as p, and have one writable byte past len). Blank lines and '#'
 * comments are skipped silently; for a user listed twice the first line
 * wins, as in mod_authn_file. */
apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_log_fn bad,
                                       void *baton, apr_pool_t *p);

/* An index of the whole of buf at once: begin, feed and end
 * (sources/index.h). */
apr_status_t authn_hmac_index_build(void *area, size_t cap, char *buf,
                                    size_t len, const void *meta,
                                    size_t meta_len,
                                    const authn_hmac_mac_t *mac,
                                    authn_hmac_log_fn bad, void *baton,
                                    size_t *used, apr_pool_t *p);

/* The stored hash for user, or NULL. O(1) in the number of users. */
const char *authn_hmac_htpasswd_get(const authn_hmac_htpasswd_t *idx,
                                    const char *user, size_t *hash_len);

unsigned authn_hmac_htpasswd_count(const authn_hmac_htpasswd_t *idx);

/* A hash of the file's typical cost (one of its own, at the median bcrypt
 * cost; never a locked one), the template of the dummy hash that unknown
 * and locked users are checked against; NULL in a file without one. */
const char *authn_hmac_htpasswd_typical(const authn_hmac_htpasswd_t *idx,
                                        size_t *len);
unsigned authn_hmac_htpasswd_bad_lines(const authn_hmac_htpasswd_t *idx);

/* ------------------------------------------------------------ a view */

/* authn_hmac_userfile_lookup_id without a MAC: the hash alone. */
apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len, authn_hmac_log_fn bad,
                                        void *baton, apr_pool_t *p);

/* A lookup as a request that ends in a deny makes it (see
 * authn_hmac_check_user): a deny from an unsettled reading is asked again
 * of the quiet file, a second at most; mac NULL: no id or digest. */
apr_status_t authn_hmac_userfile_lookup_settled(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char *id, unsigned char *digest, apr_pool_t *p);

/* How many times this process has read the file. */
unsigned authn_hmac_userfile_reads(authn_hmac_userfile_t *uf);

/* How many times a request waited for the file to be quiet
 * (authn_hmac_userfile_settle). */
unsigned authn_hmac_userfile_settles(authn_hmac_userfile_t *uf);

/* How many versions this process built and shared, and took from another. */
void authn_hmac_userfile_shared(authn_hmac_userfile_t *uf, unsigned *built,
                                unsigned *adopted);

/* The reaper's pass over one view (see reaper.c). */
void authn_hmac_reap(authn_hmac_userfile_t *uf);

/* Where a thread of the user-file layer stops (PAUSE_POINT(n), n 1 to 5:
 * a lookup that read the epoch; that holds a generation; a build that has
 * begun a shared version; that read the file; the reaper that holds a
 * generation), or a lookup in the cache that missed (6):
 * authn_hmac_test_pause (shm/table_testing.h) calls the hook, if a test
 * set one. */
extern void (*authn_hmac_test_pause_hook)(int n);

#endif /* AUTHN_HMAC_TESTING_H */
