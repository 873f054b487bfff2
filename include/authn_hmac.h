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
    AUTHN_HMAC_C_REDIS_HITS,
    AUTHN_HMAC_C_REDIS_MISSES,
    AUTHN_HMAC_C_REDIS_ERRORS,
    AUTHN_HMAC_C_REDIS_TIMEOUTS,
    AUTHN_HMAC_C_REDIS_SKIPPED, /* while the breaker was open */
    AUTHN_HMAC_C_COUNT
};

typedef struct {
    uint64_t counter[AUTHN_HMAC_C_COUNT];
    int redis;              /* Redis is configured */
    uint64_t redis_breaker; /* 1 while the breaker skips Redis */
    uint64_t redis_conns;   /* open connections, all processes */
    uint64_t entries;       /* live (unexpired) entries */
    uint64_t slots;         /* capacity in entries */
    uint64_t bytes;         /* size of the shared segment */
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

/* Stores key, verified at `stored`, until `expires`. When its set is full,
 * an entry expired at `now` is replaced first, then the oldest. */
apr_status_t authn_hmac_table_store(authn_hmac_table_t *t,
                                    const unsigned char key[AUTHN_HMAC_KEY_LEN],
                                    apr_time_t now, apr_time_t stored,
                                    apr_time_t expires);

void authn_hmac_table_count(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t delta);

/* Redis health shared by every process, so that an outage is logged once
 * and the breaker holds for all. Lives in the shared segment. */
typedef struct {
    uint64_t failures;     /* consecutive */
    uint64_t opens;        /* consecutive breaker openings: the backoff */
    int64_t breaker_until; /* apr_time_t; skip Redis before it */
    int64_t down_since;    /* apr_time_t; 0 while healthy */
    int64_t conns;         /* open connections */
    uint64_t epoch;        /* outages so far: older connections are stale */
} authn_hmac_redis_health_t;

authn_hmac_redis_health_t *authn_hmac_table_redis_health(authn_hmac_table_t *t);

void authn_hmac_table_stats(authn_hmac_table_t *t, apr_time_t now,
                            authn_hmac_stats_t *out);

/* ------------------------------------------------------------------ Redis */

#define AUTHN_HMAC_REDIS_PORT 6379

typedef struct {
    const char *host; /* NULL for a unix socket */
    int port;
    const char *socket; /* path, or NULL */
    int timeout_ms;
    const char *prefix;
    int db;
    const char *user;     /* ACL user, or NULL */
    const char *password; /* NULL: no AUTH. NB: points into a secret page */
    size_t password_len;
} authn_hmac_redis_conf_t;

/* "host:port", "host", "[v6addr]:port" or "/path/to.sock". Returns NULL or
 * what is wrong. */
const char *authn_hmac_redis_parse_server(const char *arg,
                                          authn_hmac_redis_conf_t *conf,
                                          apr_pool_t *p);

/* Splits a Redis auth file ("password" or "username password", one line)
 * in place. Returns NULL or what is wrong. */
const char *authn_hmac_redis_parse_auth(authn_hmac_secret_t *secret,
                                        authn_hmac_redis_conf_t *conf);

typedef struct authn_hmac_redis_conn authn_hmac_redis_conn_t;

/* Outcome of one Redis operation. */
typedef enum {
    AUTHN_HMAC_REDIS_OK,
    AUTHN_HMAC_REDIS_TIMEOUT,
    AUTHN_HMAC_REDIS_ERROR /* refused, closed, wrong secret, garbage... */
} authn_hmac_redis_rc;

/* Connects, then runs AUTH and SELECT. On failure *why says what went wrong
 * (never a secret). */
authn_hmac_redis_rc
authn_hmac_redis_connect(const authn_hmac_redis_conf_t *conf,
                         authn_hmac_redis_conn_t **out, const char **why,
                         apr_pool_t *p);

void authn_hmac_redis_close(authn_hmac_redis_conn_t *c);

/* Idle connections of one process, for its threads. A connection is taken
 * per operation and given back, or closed if it failed. */
typedef struct authn_hmac_redis_pool authn_hmac_redis_pool_t;

apr_status_t authn_hmac_redis_pool_create(authn_hmac_redis_pool_t **out,
                                          const authn_hmac_redis_conf_t *conf,
                                          int max_idle,
                                          authn_hmac_redis_health_t *health,
                                          apr_pool_t *p);

/* An idle connection, or a new one (connected, AUTH and SELECT done). */
authn_hmac_redis_rc authn_hmac_redis_pool_acquire(authn_hmac_redis_pool_t *rp,
                                                  authn_hmac_redis_conn_t **c,
                                                  const char **why,
                                                  apr_pool_t *p);

void authn_hmac_redis_pool_release(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t *c, int broken);

/* Looks key up. *found is set when the entry exists, was verified less than
 * ttl before now, and has life left; *stored and *expires then bound it. */
authn_hmac_redis_rc authn_hmac_redis_get(
    authn_hmac_redis_conn_t *c, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_interval_time_t ttl, int *found, apr_time_t *stored,
    apr_time_t *expires, const char **why, apr_pool_t *p);

/* SET key stored PX (expires - now). */
authn_hmac_redis_rc
authn_hmac_redis_set(authn_hmac_redis_conn_t *c,
                     const unsigned char key[AUTHN_HMAC_KEY_LEN],
                     apr_time_t now, apr_time_t stored, apr_time_t expires,
                     const char **why, apr_pool_t *p);

/* Makes a hiredis reader refuse arrays of more than a few elements (they
 * would be allocated before being read). Returns 0 if it could not. */
struct redisReader;
int authn_hmac_redis_limit_reader(struct redisReader *r);

/* Interprets the replies to GET and PTTL (exposed for tests and fuzzing).
 * Returns AUTHN_HMAC_REDIS_ERROR for anything but a well-formed answer. */
struct redisReply;
authn_hmac_redis_rc authn_hmac_redis_interpret(const struct redisReply *get,
                                               const struct redisReply *pttl,
                                               apr_time_t now,
                                               apr_interval_time_t ttl,
                                               int *found, apr_time_t *stored,
                                               apr_time_t *expires);

/* Whether to try Redis at now (the breaker is closed or its time is up). */
int authn_hmac_redis_allowed(authn_hmac_redis_health_t *h, apr_time_t now);

/* Records a failure; returns 1 if it began an outage (log it once). */
int authn_hmac_redis_failed(authn_hmac_redis_health_t *h, apr_time_t now);

/* Records the success of an operation begun at `started`; returns 1 if it
 * ended an outage, with the outage's length. */
int authn_hmac_redis_succeeded(authn_hmac_redis_health_t *h, apr_time_t started,
                               apr_time_t now, apr_interval_time_t *outage);

/* ------------------------------------------------------------- utilities */

/* "4M", "512K", "1G", "65536" -> bytes. Returns NULL or what is wrong. */
const char *authn_hmac_parse_size(const char *arg, uint64_t *out);

/* "300", "300s", "5m", "2h", "1d" -> seconds. Returns NULL or what is
 * wrong. */
const char *authn_hmac_parse_seconds(const char *arg, uint64_t *out);

/* A plain decimal number from 0 to max. Returns NULL or what is wrong. */
const char *authn_hmac_parse_uint(const char *arg, uint64_t max, uint64_t *out);

/* Whether a status query string asks for JSON ("json", "json=1", "a&json"). */
int authn_hmac_status_wants_json(const char *args);

/* Renders counters as plain text or JSON. */
const char *authn_hmac_status_format(const authn_hmac_stats_t *s, int json,
                                     apr_time_t now, apr_pool_t *p);

#endif /* AUTHN_HMAC_H */
