/*
 * authn_hmac.h: the core of mod_authn_hmac, free of httpd headers.
 *
 * The module (mod_authn_hmac.c), the unit tests and the tools link this core.
 * Everything here depends only on APR, OpenSSL and libbsd.
 */
#ifndef AUTHN_HMAC_H
#define AUTHN_HMAC_H

#include <stddef.h>
#include <stdint.h>

#include <apr_global_mutex.h>
#include <apr_pools.h>
#include <apr_thread_mutex.h>
#include <apr_time.h>

/* ---------------------------------------------------------------- secrets */

#define AUTHN_HMAC_PEPPER_MIN 32   /* bytes */
#define AUTHN_HMAC_SECRET_MAX 1024 /* bytes */

/* A secret held in its own locked, never-dumped page; wiped when its pool
 * is cleared. */
typedef struct {
    unsigned char *data;
    size_t len;
} authn_hmac_secret_t;

/* Reads a secret file that must belong to the current user (or root), must
 * not be accessible by group or others, and must hold min..max bytes.
 * On failure returns a message (in p) naming the problem, else NULL. */
const char *authn_hmac_secret_read(authn_hmac_secret_t **out, const char *path,
                                   size_t min, size_t max, apr_pool_t *p);

/* Fills a new secret with len random bytes. */
apr_status_t authn_hmac_secret_random(authn_hmac_secret_t **out, size_t len,
                                      apr_pool_t *p);

/* --------------------------------------------------------- credential MAC */

#define AUTHN_HMAC_KEY_LEN          32 /* HMAC-SHA256 output */
#define AUTHN_HMAC_ENCODING_VERSION 1

/* Receives the encoding piece by piece. */
typedef void (*authn_hmac_sink_fn)(void *baton, const void *data, size_t len);

/* Length-prefixed encoding of (version, scope, user, password, stored hash):
 * a 4-byte big-endian version, then each field as a 4-byte big-endian length
 * followed by its bytes. Returns the number of bytes sent to sink. */
size_t authn_hmac_encode(authn_hmac_sink_fn sink, void *baton,
                         const char *scope, size_t scope_len, const char *user,
                         size_t user_len, const char *password,
                         size_t password_len, const char *hash,
                         size_t hash_len);

typedef struct authn_hmac_mac authn_hmac_mac_t;

/* Prepares HMAC-SHA256 keyed with the pepper; freed with the pool. */
apr_status_t authn_hmac_mac_create(authn_hmac_mac_t **out,
                                   const authn_hmac_secret_t *pepper,
                                   apr_pool_t *p);

/* key = HMAC-SHA256(pepper, encode(...)). Thread-safe. */
apr_status_t authn_hmac_mac_compute(const authn_hmac_mac_t *mac,
                                    const char *scope, size_t scope_len,
                                    const char *user, size_t user_len,
                                    const char *password, size_t password_len,
                                    const char *hash, size_t hash_len,
                                    unsigned char key[AUTHN_HMAC_KEY_LEN]);

/* -------------------------------------------------------- htpasswd index */

typedef struct authn_hmac_htpasswd authn_hmac_htpasswd_t;

/* Called once per malformed line; never given the line itself. */
typedef void (*authn_hmac_badline_fn)(void *baton, unsigned lineno,
                                      const char *why);

/* Parses an htpasswd file held in buf (modified in place; it must live as
 * long as p, and have one writable byte past len). Blank lines and '#' comments
 * are skipped silently; for a user listed twice the first line wins, as in
 * mod_authn_file. */
apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_badline_fn bad,
                                       void *baton, apr_pool_t *p);

/* The stored hash for user, or NULL. O(1) in the number of users. */
const char *authn_hmac_htpasswd_get(const authn_hmac_htpasswd_t *idx,
                                    const char *user, size_t *hash_len);

unsigned authn_hmac_htpasswd_count(const authn_hmac_htpasswd_t *idx);
unsigned authn_hmac_htpasswd_bad_lines(const authn_hmac_htpasswd_t *idx);

/* A per-process view of one htpasswd file, rebuilt when the file changes. */
typedef struct authn_hmac_userfile authn_hmac_userfile_t;

/* Made at configuration time; path must be absolute. */
authn_hmac_userfile_t *authn_hmac_userfile_make(const char *path,
                                                apr_pool_t *p);

/* Once per child process, before any lookup. */
apr_status_t authn_hmac_userfile_child_init(authn_hmac_userfile_t *uf,
                                            apr_pool_t *pchild);

/* Looks user up, first rebuilding the index if the file's dev, inode, size,
 * mtime or ctime changed. Returns APR_SUCCESS and a copy of the hash in p,
 * APR_NOTFOUND for an unknown user, or the error that kept the file from
 * being read (the index is then dropped: nothing stale can be used). */
apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len,
                                        authn_hmac_badline_fn bad, void *baton,
                                        apr_pool_t *p);

/* -------------------------------------------------- shared-memory table */

enum authn_hmac_counter {
    AUTHN_HMAC_C_HITS,
    AUTHN_HMAC_C_MISSES,
    AUTHN_HMAC_C_VERIFICATIONS,
    AUTHN_HMAC_C_VERIFY_USEC,
    AUTHN_HMAC_C_DENIED,
    AUTHN_HMAC_C_UNKNOWN_USER,
    AUTHN_HMAC_C_ERRORS,
    AUTHN_HMAC_C_STORES,
    AUTHN_HMAC_C_EVICTIONS,
    AUTHN_HMAC_C_COUNT
};

typedef struct {
    uint64_t counter[AUTHN_HMAC_C_COUNT];
    uint64_t entries; /* live (unexpired) entries */
    uint64_t slots;   /* capacity in entries */
    uint64_t bytes;   /* size of the shared segment */
    apr_time_t started;
} authn_hmac_stats_t;

typedef struct authn_hmac_table authn_hmac_table_t;

/* Bytes of shared memory to request for a cache budget of `budget` bytes
 * (0 = counters only, no cache). */
size_t authn_hmac_table_size(size_t budget);

/* Formats a fresh segment of `size` bytes (from authn_hmac_table_size). */
apr_status_t authn_hmac_table_format(void *base, size_t size, apr_time_t now);

/* A process-local handle on a formatted segment. mutex serializes writers
 * (readers never lock); it may be NULL only in single-process tests. */
authn_hmac_table_t *
authn_hmac_table_attach(void *base, apr_global_mutex_t *mutex, apr_pool_t *p);

/* 1 if key is present, unexpired at now and stored less than ttl ago. */
int authn_hmac_table_lookup(authn_hmac_table_t *t,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl);

/* Stores key until `expires`. When its set is full, an expired entry is
 * replaced first, then the oldest. */
apr_status_t authn_hmac_table_store(authn_hmac_table_t *t,
                                    const unsigned char key[AUTHN_HMAC_KEY_LEN],
                                    apr_time_t now, apr_time_t expires);

void authn_hmac_table_count(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t delta);

void authn_hmac_table_stats(authn_hmac_table_t *t, apr_time_t now,
                            authn_hmac_stats_t *out);

/* ------------------------------------------------------------- utilities */

/* "4M", "512K", "1G", "65536" -> bytes. Returns NULL or what is wrong. */
const char *authn_hmac_parse_size(const char *arg, uint64_t *out);

/* "300", "300s", "5m", "2h", "1d" -> seconds. Returns NULL or what is
 * wrong. */
const char *authn_hmac_parse_seconds(const char *arg, uint64_t *out);

/* Whether a status query string asks for JSON ("json", "json=1", "a&json"). */
int authn_hmac_status_wants_json(const char *args);

/* Renders counters as plain text or JSON. */
const char *authn_hmac_status_format(const authn_hmac_stats_t *s, int json,
                                     apr_time_t now, apr_pool_t *p);

#endif /* AUTHN_HMAC_H */
