/* authn_hmac/testing.h: TEST ONLY. What the unit tests and the fuzzers use
 * and the shipped library does not have: these functions are in
 * libauthnhmac_test.la (the user-file layer built with AUTHN_HMAC_TESTING,
 * and src/testing/), which only tests and fuzzers link, never the module. */
#ifndef AUTHN_HMAC_TESTING_H
#define AUTHN_HMAC_TESTING_H

#include "authn_hmac/htpasswd.h"
#include "authn_hmac/index.h"

/* ------------------------------------------ the whole-buffer parser */

typedef struct authn_hmac_htpasswd authn_hmac_htpasswd_t;

/* Parses an htpasswd file held in buf (modified in place; it must live as
 * long as p, and have one writable byte past len). Blank lines and '#'
 * comments are skipped silently; for a user listed twice the first line
 * wins, as in mod_authn_file. */
apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_badline_fn bad,
                                       void *baton, apr_pool_t *p);

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
 * generation): calls the hook, if a test set one. */
extern void (*authn_hmac_test_pause_hook)(int n);
void authn_hmac_test_pause(int n);

/* --------------------------------------------------------- the watcher */

/* A writer seen at work on wd, or done, as a drain would take it in. */
void authn_hmac_test_set_writing(int wd, int on);

/* A drain by hand: begun (the count moved on, under the watcher's lock),
 * the queue taken (as often as wanted), ended (the count moved on). */
void authn_hmac_test_drain_begin(void);
void authn_hmac_test_drain_take(void);
void authn_hmac_test_drain_end(void);

/* The epoll instances: how many (max_too: how many there can be), each
 * one's fd and busy flag; held busy, closed, or all of them dropped. */
int authn_hmac_test_polls(int max_too);
int authn_hmac_test_poll_fd(int i);
int authn_hmac_test_poll_busy(int i);
#define AUTHN_HMAC_TEST_POLL_HOLD  1
#define AUTHN_HMAC_TEST_POLL_CLOSE 2
#define AUTHN_HMAC_TEST_POLLS_OFF  3
void authn_hmac_test_poll_set(int i, int how);

#endif /* AUTHN_HMAC_TESTING_H */
