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

/* The same, for a pool that outlives the code that made it (httpd's
 * process pool outlives the module, which is unloaded first): no cleanup
 * is registered; the page, locked and out of core dumps, ends with the
 * process. */
apr_status_t authn_hmac_secret_random_retained(authn_hmac_secret_t **out,
                                               size_t len, apr_pool_t *p);

/* A new zeroed secret of len bytes, on page boundaries. */
apr_status_t authn_hmac_secret_alloc(authn_hmac_secret_t **out, size_t len,
                                     apr_pool_t *p);

/* Locks the secret's pages again: a child of fork() does not inherit the
 * parent's locks (it does keep their exclusion from core dumps). */
void authn_hmac_secret_relock(const authn_hmac_secret_t *secret);

/* Wipes and unmaps the secret now (a child that does not need it). */
void authn_hmac_secret_wipe(authn_hmac_secret_t *secret);

/* --------------------------------------------------------- credential MAC */

#define AUTHN_HMAC_KEY_LEN 32 /* HMAC-SHA256 output */
/* The version of the encodings below (in the input of every MAC): a cache
 * written by another version never matches. The labels of the subkeys
 * name their purpose, and keep "v2". */
#define AUTHN_HMAC_ENCODING_VERSION 3
/* The version of the Redis values (their first character): 4 keeps each
 * credential's times (verified, last used); 3 kept (stored, expires). A
 * value of another version is a plain miss, neither forged nor logged:
 * the servers of a farm are upgraded one at a time. */
#define AUTHN_HMAC_VALUE_VERSION 4

/* HKDF-SHA256 info labels of the three subkeys of the pepper. */
#define AUTHN_HMAC_LABEL_ENTRY    "authn_hmac v2 entry"    /* credential MAC */
#define AUTHN_HMAC_LABEL_USER     "authn_hmac v2 user"     /* user id */
#define AUTHN_HMAC_LABEL_VALUE    "authn_hmac v2 value"    /* Redis value tag */
#define AUTHN_HMAC_LABEL_NEGATIVE "authn_hmac v2 negative" /* refused creds */
#define AUTHN_HMAC_LABEL_DUMMY    "authn_hmac v2 dummy"    /* dummy hashes */

/* Receives the encoding piece by piece. */
typedef void (*authn_hmac_sink_fn)(void *baton, const void *data, size_t len);

/* Length-prefixed encoding of (version, scope, user, stored hash): a 4-byte
 * big-endian version, then each field as a 4-byte big-endian length
 * followed by its bytes. Returns the number of bytes sent to sink. */
size_t authn_hmac_encode(authn_hmac_sink_fn sink, void *baton,
                         const char *scope, size_t scope_len, const char *user,
                         size_t user_len, const char *hash, size_t hash_len);

#define AUTHN_HMAC_DIGEST_LEN 32 /* SHA-256 output */

/* digest = SHA-256(encode(scope, user, hash)): what a credential's MACs
 * cover besides its password. No secret: the index of the file keeps it. */
void authn_hmac_cred_digest(const char *scope, size_t scope_len,
                            const char *user, size_t user_len, const char *hash,
                            size_t hash_len,
                            unsigned char digest[AUTHN_HMAC_DIGEST_LEN]);

/* HKDF-SHA256 (RFC 5869): out_len (at most 255 * 32) bytes. */
void authn_hmac_hkdf(const unsigned char *salt, size_t salt_len,
                     const unsigned char *ikm, size_t ikm_len,
                     const unsigned char *info, size_t info_len,
                     unsigned char *out, size_t out_len);

/* A subkey of the pepper: HKDF-SHA256 with salt "mod_authn_hmac" and the
 * label as info. */
void authn_hmac_subkey(const authn_hmac_secret_t *pepper, const char *label,
                       unsigned char out[AUTHN_HMAC_KEY_LEN]);

/* The keyed HMAC states of the three subkeys, in a locked page excluded
 * from core dumps. */
typedef struct authn_hmac_mac authn_hmac_mac_t;

/* Derives the subkeys; wiped with the pool. */
apr_status_t authn_hmac_mac_create(authn_hmac_mac_t **out,
                                   const authn_hmac_secret_t *pepper,
                                   apr_pool_t *p);

/* Locks the states' page again (in each child). */
void authn_hmac_mac_relock(const authn_hmac_mac_t *mac);

/* key = HMAC-SHA256(entry subkey, digest | password): the digest has a
 * fixed length, so no two credentials share an input. Thread-safe. */
void authn_hmac_cred_mac(const authn_hmac_mac_t *mac,
                         const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                         const char *password, size_t password_len,
                         unsigned char key[AUTHN_HMAC_KEY_LEN]);

/* nkey = HMAC-SHA256(negative subkey, digest | password): names a refused
 * credential in the negative region. Thread-safe. */
void authn_hmac_cred_negative(const authn_hmac_mac_t *mac,
                              const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                              const char *password, size_t password_len,
                              unsigned char nkey[AUTHN_HMAC_KEY_LEN]);

/* authn_hmac_cred_mac of the credential's digest. */
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

/* The hash an unknown user, or a locked line, is checked against, so that
 * either costs what a known user's wrong password costs: tmpl's scheme and
 * cost (its text up to its last '$', or "{SHA}"), then characters of that
 * scheme's alphabet drawn from HMAC(dummy subkey, that prefix), the same in
 * every process and server that shares the pepper. Its last character is
 * one that scheme never writes there (a bcrypt, MD5-crypt, SHA-crypt or
 * {SHA} digest ends in padding bits that are always 0), so no password can
 * ever match it, not even tmpl's own. Returns its length, or 0 if tmpl is
 * empty, too long or all prefix. */
#define AUTHN_HMAC_DUMMY_MAX 256
size_t authn_hmac_dummy_hash(const authn_hmac_mac_t *mac, const char *tmpl,
                             size_t len, char out[AUTHN_HMAC_DUMMY_MAX]);

/* id = HMAC-SHA256(user subkey, version, scope, user), length-prefixed. */
void authn_hmac_user_id(const authn_hmac_mac_t *mac, const char *scope,
                        size_t scope_len, const char *user, size_t user_len,
                        unsigned char id[AUTHN_HMAC_KEY_LEN]);

/* tag = HMAC-SHA256(value subkey, uid | body). */
void authn_hmac_value_tag(const authn_hmac_mac_t *mac,
                          const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                          const void *body, size_t len,
                          unsigned char tag[AUTHN_HMAC_KEY_LEN]);

/* A user's cached credentials, as Redis holds them: at most PER_USER. */
#define AUTHN_HMAC_PER_USER 2

typedef struct {
    unsigned char mac[AUTHN_HMAC_KEY_LEN]; /* credential MAC */
    int64_t verified;                      /* apr_time_t */
    int64_t used;                          /* apr_time_t: last use */
} authn_hmac_entry_t;

typedef struct {
    int n;
    authn_hmac_entry_t e[AUTHN_HMAC_PER_USER];
} authn_hmac_entries_t;

/* "4" (":" hex(mac) hex64(verified) hex64(used)){1,2} ":" hex(tag), where
 * the tag covers the user id and everything before it. */
#define AUTHN_HMAC_VALUE_MAX                                                   \
    (2 + AUTHN_HMAC_PER_USER * (1 + 2 * AUTHN_HMAC_KEY_LEN + 32) + 1 +         \
     2 * AUTHN_HMAC_KEY_LEN + 1)

/* Writes es as a tagged value (NUL-terminated); returns its length, or 0
 * if es holds no entry or too many. */
size_t authn_hmac_value_encode(const authn_hmac_mac_t *mac,
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               const authn_hmac_entries_t *es,
                               char out[AUTHN_HMAC_VALUE_MAX]);

/* 1 and es filled if v is a value made for uid with this pepper; -1 if it
 * is a value of another AUTHN_HMAC_VALUE_VERSION (its first character),
 * which is a plain miss; else 0 (forged, truncated, replayed under another
 * user or another pepper). es is empty unless 1. */
int authn_hmac_value_decode(const authn_hmac_mac_t *mac,
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len,
                            authn_hmac_entries_t *es);

/* 1 if es holds key, live for a section of idle timeout ttl and max age
 * max_age at now: verified less than max_age ago and used less than ttl
 * ago (times up to a few seconds ahead of now are another server's clock,
 * and taken as now); *verified and *used (at most now) then say when. */
int authn_hmac_entries_find(const authn_hmac_entries_t *es,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl,
                            apr_interval_time_t max_age, apr_time_t *verified,
                            apr_time_t *used);

/* Makes key, verified and last used at those times (or later, if es has
 * later ones for it), the first entry of es, keeping the most recently
 * used other one, up to PER_USER in all. used is the caller's now: times
 * in es more than the clock skew allowed ahead of it are dropped. */
void authn_hmac_entries_add(authn_hmac_entries_t *es,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            apr_time_t verified, apr_time_t used);

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

/* Whether a line's hash locks its user out: empty ("carol:"), or starting
 * with '!' or '*' ("dave:!", as in /etc/shadow), which no scheme writes. */
int authn_hmac_hash_locked(const char *hash, size_t len);

/* A hash of the file's typical cost (one of its own, at the median bcrypt
 * cost; never a locked one), the template of the dummy hash that unknown
 * and locked users are checked against; NULL in a file without one. */
const char *authn_hmac_htpasswd_typical(const authn_hmac_htpasswd_t *idx,
                                        size_t *len);
unsigned authn_hmac_htpasswd_bad_lines(const authn_hmac_htpasswd_t *idx);

/* A per-process view of one htpasswd file, rebuilt when the file changes. */
typedef struct authn_hmac_userfile authn_hmac_userfile_t;

/* Made at configuration time; path must be absolute. */
authn_hmac_userfile_t *authn_hmac_userfile_make(const char *path,
                                                apr_pool_t *p);

/* Bytes that several views may hold between them (their files' sizes). */
typedef struct {
    uint64_t used, max;
} authn_hmac_budget_t;

/* Before child_init: read a file of at most max_bytes (1 GiB by default),
 * and, with budget, only while all the views sharing it hold at most
 * budget->max bytes. A file over either is refused with APR_ENOSPC. */
void authn_hmac_userfile_limit(authn_hmac_userfile_t *uf, apr_off_t max_bytes,
                               authn_hmac_budget_t *budget);

/* Once per child process, before any lookup. */
apr_status_t authn_hmac_userfile_child_init(authn_hmac_userfile_t *uf,
                                            apr_pool_t *pchild);

/* After child_init, for a view that lives as long as the process: lookups
 * then skip the stat() while inotify reports nothing about the file, its
 * directory or any directory above it. Only where that sees every change:
 * a path without symbolic links, on a local file system (ext2/3/4, xfs,
 * btrfs, tmpfs); otherwise, or when any watch cannot be made or is lost,
 * every lookup stat()s the file. Returns whether the file is watched. */
int authn_hmac_userfile_watch(authn_hmac_userfile_t *uf);

/* A user whose line locks it out (not an error of the file's: APR_EACCES
 * is one). */
#define AUTHN_HMAC_LOCKED (APR_OS_START_USERERR + 1)

/* Looks user up, first rebuilding the index if the file's dev, inode, size,
 * mtime or ctime changed. Returns APR_SUCCESS and a copy of the hash in p;
 * APR_NOTFOUND for an unknown user, and AUTHN_HMAC_LOCKED for a locked one
 * (authn_hmac_hash_locked), each with a copy of the file's typical hash
 * (NULL in a file without one); or the error that kept the file from being read
 * (the index is then dropped: nothing stale can be used). */
apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len,
                                        authn_hmac_badline_fn bad, void *baton,
                                        apr_pool_t *p);

/* As authn_hmac_userfile_lookup; on APR_SUCCESS, id is also the user's id
 * for scope under mac (authn_hmac_user_id) and digest the digest of scope,
 * user and hash (authn_hmac_cred_digest), worked out on the user's first
 * lookup in this reading of the file and kept with its entry: a hit then
 * makes one short MAC. What was kept for another MAC or scope is not
 * used. */
apr_status_t authn_hmac_userfile_lookup_id(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_badline_fn bad,
    void *baton, apr_pool_t *p);

/* How many times this process has read the file (for tests). */
unsigned authn_hmac_userfile_reads(authn_hmac_userfile_t *uf);

/* -------------------------------------------------- shared-memory table */

/* Every counter, in one list: X(ID, kind, name, help), kind C for a count
 * that only grows (since the last start), U for one that counts
 * microseconds and is shown in seconds (Prometheus wants base units), G for
 * a value that may be read as a gauge (a high-water mark). The enum and
 * every output of the status page (text, JSON, Prometheus, mod_status) come
 * from it; the status page adds the gauges of gauges[] in util.c. */
#define AUTHN_HMAC_COUNTERS(X)                                                 \
    X(HITS, C, "hits", "credentials found in shared memory")                   \
    X(MISSES, C, "misses", "credentials not in shared memory")                 \
    X(VERIFICATIONS, C, "verifications", "runs of the password hash (bcrypt)") \
    X(VERIFY_USEC, U, "verify_seconds",                                        \
      "seconds spent in runs of the password hash (bcrypt) for users in the "  \
      "file")                                                                  \
    X(DENIED, C, "denied", "wrong passwords of known users")                   \
    X(UNKNOWN_USER, C, "unknown_user", "users not in the htpasswd file")       \
    X(ERRORS, C, "errors", "htpasswd files that could not be read")            \
    X(STORES, C, "stores", "entries written to shared memory")                 \
    X(EVICTIONS, C, "evictions", "live entries pushed out of a full set")      \
    X(REDIS_HITS, C, "redis_hits", "credentials found in Redis")               \
    X(REDIS_MISSES, C, "redis_misses", "credentials not in Redis")             \
    X(REDIS_ERRORS, C, "redis_errors", "Redis operations that failed")         \
    X(REDIS_TIMEOUTS, C, "redis_timeouts", "Redis operations out of time")     \
    X(REDIS_SKIPPED, C, "redis_skipped",                                       \
      "Redis lookups skipped while the breaker was open")                      \
    X(REDIS_FORGED, C, "redis_forged",                                         \
      "Redis values whose tag did not verify")                                 \
    X(NEGATIVE_HITS, C, "negative_hits",                                       \
      "wrong passwords denied from the negative cache, without bcrypt")        \
    X(DUMMY_VERIFICATIONS, C, "dummy_verifications",                           \
      "verifications run for unknown users, so that they cost what known "     \
      "users cost")                                                            \
    X(COALESCED, C, "coalesced",                                               \
      "misses answered by another request's verification of the same "         \
      "credential")                                                            \
    X(QUEUED, C, "queued", "verifications that waited for a turn")             \
    X(BUSY, C, "busy",                                                         \
      "misses refused with 503: the verification queue was full")              \
    X(VERIFYING_MAX, G, "verifying_max",                                       \
      "the most verifications that ran at once (a high-water mark)")           \
    X(REFRESHES, C, "refreshes", "hits that extended an entry's idle timeout")

enum authn_hmac_counter {
#define AUTHN_HMAC_COUNTER_ENUM(id, kind, name, help) AUTHN_HMAC_C_##id,
    AUTHN_HMAC_COUNTERS(AUTHN_HMAC_COUNTER_ENUM)
#undef AUTHN_HMAC_COUNTER_ENUM
        AUTHN_HMAC_C_COUNT
};

/* The name and help text of each counter, in enum order. */
typedef struct {
    const char *name;
    const char *help;
    int gauge; /* 0: a count that only grows */
    int usec;  /* counts microseconds, shown in seconds */
} authn_hmac_counter_info_t;

extern const authn_hmac_counter_info_t authn_hmac_counter_info[];

/* Histograms of durations, for Prometheus: X(ID, name, help). Each has
 * AUTHN_HMAC_BUCKETS buckets of authn_hmac_bucket_bounds (microseconds, the
 * last one +Inf), kept in the shared segment as atomic counts of the
 * observations that fell in each (not cumulative: the page sums them, so
 * that the +Inf bucket and the count always agree) and a sum. */
#define AUTHN_HMAC_HISTOGRAMS(X)                                               \
    X(VERIFY, "verify_duration_seconds",                                       \
      "duration of a run of the password hash (bcrypt) for a user in the "     \
      "file")                                                                  \
    X(REDIS, "redis_duration_seconds",                                         \
      "duration of a Redis operation: a connection from the pool, the "        \
      "command and its whole reply")

enum authn_hmac_histogram {
#define AUTHN_HMAC_HISTOGRAM_ENUM(id, name, help) AUTHN_HMAC_H_##id,
    AUTHN_HMAC_HISTOGRAMS(AUTHN_HMAC_HISTOGRAM_ENUM)
#undef AUTHN_HMAC_HISTOGRAM_ENUM
        AUTHN_HMAC_H_COUNT
};

#define AUTHN_HMAC_BUCKETS 14

/* The upper bounds, in microseconds, of each histogram's buckets, in
 * increasing order; the last is UINT64_MAX (+Inf). */
extern const uint64_t authn_hmac_bucket_bounds[AUTHN_HMAC_H_COUNT]
                                              [AUTHN_HMAC_BUCKETS];

/* The bucket a duration of usec microseconds falls in: the first whose
 * bound is at least usec (Prometheus's "le"). */
unsigned authn_hmac_bucket(enum authn_hmac_histogram h, uint64_t usec);

extern const char *const authn_hmac_histogram_name[AUTHN_HMAC_H_COUNT];
extern const char *const authn_hmac_histogram_help[AUTHN_HMAC_H_COUNT];

typedef struct {
    uint64_t bucket[AUTHN_HMAC_BUCKETS]; /* observations in each, apart */
    uint64_t sum_usec;
} authn_hmac_histogram_t;

typedef struct {
    uint64_t counter[AUTHN_HMAC_C_COUNT];
    int redis;                     /* Redis is configured */
    uint64_t redis_breaker;        /* 1 while the breaker skips Redis */
    uint64_t redis_conns;          /* open connections, all processes */
    uint64_t redis_tls_handshakes; /* TLS connections made */
    uint64_t redis_tls_resumed;    /* of which resumed a session */
    uint64_t entries;          /* slots holding an entry (live or expired) */
    uint64_t slots;            /* capacity in entries */
    uint64_t negative_entries; /* slots of the negative region in use */
    uint64_t negative_slots;
    uint64_t verifying;         /* verifications running now, all processes */
    uint64_t waiting;           /* verifications waiting for a turn */
    uint64_t max_verifications; /* the cap (AuthHMACMaxVerifications) */
    uint64_t bytes;             /* size of the shared segment */
    apr_time_t started;
    authn_hmac_histogram_t hist[AUTHN_HMAC_H_COUNT];
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

/* An entry keeps two times: when its credential was verified, and when it
 * was last used (refreshed at most once per half TTL). Each section applies
 * its own idle timeout and max age to those, so that sections with other
 * TTLs over the same file share one entry instead of fighting over it.
 *
 * 1 if key (of the user uid) is present and live at now for a section of
 * idle timeout ttl and max age max_age: verified (not "in the future": a
 * clock stepped back) less than max_age ago, and used less than ttl ago.
 * Its times go to *verified and *used (each may be NULL). Takes no lock. */
int authn_hmac_table_lookup(authn_hmac_table_t *t,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl,
                            apr_interval_time_t max_age, apr_time_t *verified,
                            apr_time_t *used);

/* After a hit at now on key, last used at *used: if half of ttl or more
 * has passed since, makes now its last use by compare-and-swap (no lock:
 * it never waits for the writers' mutex, nor is it skipped while another
 * process holds it), and returns 1 with *used = now (counted as a
 * refresh); of concurrent hits, one does. Else returns 0, having written
 * nothing: an entry is written at most once per half TTL of the section
 * that asks. */
int authn_hmac_table_refresh(authn_hmac_table_t *t,
                             const unsigned char key[AUTHN_HMAC_KEY_LEN],
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                             apr_time_t now, apr_interval_time_t ttl,
                             apr_interval_time_t max_age, apr_time_t *used);

/* Stores key of the user uid, verified at `verified` and last used at
 * `used` (no earlier than verified; the same key keeps the later of each).
 * A user holds at most AUTHN_HMAC_PER_USER entries: past that its least
 * recently used is replaced, never another user's. Otherwise a free slot
 * of the set is taken, else the least recently used; that is counted as an
 * eviction if it was used less than ttl (the storing section's) ago. */
apr_status_t authn_hmac_table_store(authn_hmac_table_t *t,
                                    const unsigned char key[AUTHN_HMAC_KEY_LEN],
                                    const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                    apr_time_t verified, apr_time_t used,
                                    apr_interval_time_t ttl);

/* The negative region: nkey (a MAC of its own, authn_hmac_negative_key) of
 * a credential the verifier refused, until `expires`. Lookups take no lock;
 * the region holds at most AUTHN_HMAC_PER_USER entries per user, and never
 * touches the positive region. */
int authn_hmac_negative_lookup(authn_hmac_table_t *t,
                               const unsigned char nkey[AUTHN_HMAC_KEY_LEN],
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               apr_time_t now);

apr_status_t
authn_hmac_negative_store(authn_hmac_table_t *t,
                          const unsigned char nkey[AUTHN_HMAC_KEY_LEN],
                          const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                          apr_time_t now, apr_time_t expires);

/* Single flight: concurrent misses of one credential (its MAC, which
 * covers scope, user, password and stored hash) run one verification, in
 * any process. begin() says whether to RUN it (then end() must follow),
 * to WAIT for the one that runs, or NONE (no room: verify alone). A runner
 * that died, or has run stale_after or longer, is taken over. Times are
 * monotonic. */
typedef enum {
    AUTHN_HMAC_FLIGHT_RUN,
    AUTHN_HMAC_FLIGHT_WAIT,
    AUTHN_HMAC_FLIGHT_NONE
} authn_hmac_flight_rc;

authn_hmac_flight_rc authn_hmac_flight_begin(
    authn_hmac_table_t *t, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_interval_time_t stale_after, int *slot);

/* result: 1 granted, 0 refused (a mismatch), -1 no result (another
 * failure: the waiters verify by themselves). */
void authn_hmac_flight_end(authn_hmac_table_t *t, int slot,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           int result, apr_time_t now);

/* Waits for the runner of key: 1 if it granted, 0 if it refused, -1 if no
 * answer came (the deadline, the runner died, the flight was reused): the
 * waiter then verifies by itself. Takes no lock. */
int authn_hmac_flight_wait(authn_hmac_table_t *t, int slot,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           apr_time_t deadline);

/* The verification queue: at most cap verifications run at once in the
 * server, and at most backlog more wait for a turn, in order of arrival.
 * When every place is taken, a client (a hash of its address) holding
 * fewer than half of them takes the newest waiting place of one holding
 * more, whose wait then ends (busy). enter() says RUN (a place is taken:
 * leave() must follow), WAIT (wait() for the turn), or BUSY (no place). */
#define AUTHN_HMAC_QUEUE_SLOTS 256
#define AUTHN_HMAC_MAX_CAP     64

typedef enum {
    AUTHN_HMAC_QUEUE_RUN,
    AUTHN_HMAC_QUEUE_WAIT,
    AUTHN_HMAC_QUEUE_BUSY
} authn_hmac_queue_rc;

/* A place in the queue, and the ticket that proves it is still ours. */
typedef struct {
    int place; /* -1: none */
    uint64_t ticket;
} authn_hmac_turn_t;

/* patience: how long the place may wait (the wait limit). A place's
 * process is known alive by kill() until then, and by its start time in
 * /proc after (a pid reused within that time keeps the place till then).
 * Dead processes' places are freed when the queue looks full, else every
 * few ms, a few at a time: nothing under the mutex grows with the places. */
authn_hmac_queue_rc authn_hmac_queue_enter(authn_hmac_table_t *t,
                                           uint64_t client, int cap,
                                           int backlog,
                                           apr_interval_time_t patience,
                                           authn_hmac_turn_t *turn);

/* 1 when the place's turn came (it now runs: leave() must follow); 0 at
 * the deadline (monotonic), the place given up, or when it was taken. */
int authn_hmac_queue_wait(authn_hmac_table_t *t, authn_hmac_turn_t *turn,
                          int cap, apr_time_t deadline);

void authn_hmac_queue_leave(authn_hmac_table_t *t, authn_hmac_turn_t *turn);

/* For tests: leaves key's slot as a writer that died halfway through
 * writing it would (its sequence odd, its contents torn). */
void authn_hmac_table_tear(authn_hmac_table_t *t,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN]);

void authn_hmac_table_count(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t delta);

uint64_t authn_hmac_table_counter(authn_hmac_table_t *t,
                                  enum authn_hmac_counter c);

/* Adds a duration of usec microseconds to histogram h. Takes no lock. */
void authn_hmac_table_observe(authn_hmac_table_t *t,
                              enum authn_hmac_histogram h, uint64_t usec);

/* Redis health shared by every process, so that an outage is logged once
 * and the breaker holds for all. Lives in the shared segment. */
typedef struct {
    uint64_t failures;       /* within the window that began at window */
    int64_t window;          /* monotonic */
    uint64_t opens;          /* consecutive breaker openings: the backoff */
    int64_t breaker_until;   /* monotonic; 0: closed; else skip Redis before */
    int64_t down_since;      /* monotonic; 0 while healthy */
    int64_t conns;           /* open connections */
    uint64_t epoch;          /* outages so far: older connections are stale */
    uint64_t forged_warned;  /* a forged value was logged */
    int64_t last_failure;    /* monotonic: when the last incident was seen */
    uint64_t tls_handshakes; /* TLS connections made */
    uint64_t tls_resumed;    /* of which resumed a session */
} authn_hmac_redis_health_t;

authn_hmac_redis_health_t *authn_hmac_table_redis_health(authn_hmac_table_t *t);

/* Counters and sizes, in O(1). */
void authn_hmac_table_stats(authn_hmac_table_t *t, apr_time_t now,
                            authn_hmac_stats_t *out);

/* ------------------------------------------------------------------ Redis */

#define AUTHN_HMAC_REDIS_PORT 6379

/* A TLS client context (src/redis/tls.c), shared by a configuration's
 * connections. */
typedef struct authn_hmac_redis_tls authn_hmac_redis_tls_t;

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
    authn_hmac_redis_tls_t *tls; /* NULL: plain TCP */
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
    AUTHN_HMAC_REDIS_TIMEOUT, /* the deadline passed */
    AUTHN_HMAC_REDIS_ERROR    /* refused, closed, wrong secret, garbage... */
} authn_hmac_redis_rc;

/* The clock of every deadline and of the breaker: CLOCK_MONOTONIC, in
 * microseconds. */
apr_time_t authn_hmac_monotonic(void);

/* Waits for fd to be ready for ev (poll's) until deadline (monotonic): 1
 * when ready, 0 at the deadline, -1 on error. */
int authn_hmac_redis_wait_fd(int fd, short ev, apr_time_t deadline);

/* ------------------------------------------------------------- Redis TLS */

/* What the TLS directives say. */
typedef struct {
    const char *ca_file;            /* NULL: OpenSSL's default store */
    const char *server_name;        /* NULL: the host of the server */
    const char *cert_file;          /* a client certificate, or NULL */
    const authn_hmac_secret_t *key; /* its key (PEM), or NULL */
} authn_hmac_redis_tls_conf_t;

/* Which of them a context could not be made of. */
typedef enum {
    AUTHN_HMAC_TLS_OTHER,
    AUTHN_HMAC_TLS_NAME,
    AUTHN_HMAC_TLS_CA,
    AUTHN_HMAC_TLS_CERT,
    AUTHN_HMAC_TLS_KEY
} authn_hmac_tls_part;

/* The largest key file read (bytes). */
size_t authn_hmac_redis_tls_key_max(void);

/* The name the server's certificate must carry: name if set, else host;
 * *is_ip says whether it is an IPv4 or IPv6 address (checked against the
 * certificate's IP addresses, and not sent as SNI). NULL if neither. */
const char *authn_hmac_redis_tls_peer(const char *name, const char *host,
                                      int *is_ip);

/* Makes the client context, once per configuration in the parent: TLS 1.2
 * or later, the server's certificate verified against the CA file (else
 * OpenSSL's default store) for the name above, and the client certificate
 * and key if given (the key is then kept in OpenSSL's secure heap: the
 * caller may wipe its secret). Returns NULL, or what is wrong with *part.
 * Freed with p. */
const char *authn_hmac_redis_tls_create(authn_hmac_redis_tls_t **out,
                                        const authn_hmac_redis_tls_conf_t *tc,
                                        const char *host,
                                        authn_hmac_tls_part *part,
                                        apr_pool_t *p);

/* A TLS session over a connected non-blocking socket, its handshake done
 * before the deadline, offering this process's last session; *resumed says
 * whether the server took it. On failure *why says what went wrong (the
 * reason a certificate did not verify, as OpenSSL gives it). */
struct ssl_st;
authn_hmac_redis_rc authn_hmac_redis_tls_connect(authn_hmac_redis_tls_t *t,
                                                 int fd, apr_time_t deadline,
                                                 struct ssl_st **out,
                                                 int *resumed, const char **why,
                                                 apr_pool_t *p);

/* Writes len bytes, all of them before the deadline. */
authn_hmac_redis_rc authn_hmac_redis_tls_write(struct ssl_st *ssl, int fd,
                                               const void *buf, size_t len,
                                               apr_time_t deadline,
                                               const char *doing,
                                               const char **why, apr_pool_t *p);

/* Reads what comes (1 to len bytes, *got) before the deadline. */
authn_hmac_redis_rc authn_hmac_redis_tls_read(struct ssl_st *ssl, int fd,
                                              void *buf, size_t len,
                                              size_t *got, apr_time_t deadline,
                                              const char *doing,
                                              const char **why, apr_pool_t *p);

/* Whether an idle connection may be used: nothing to read but TLS's own
 * messages (which it takes), not closed. */
int authn_hmac_redis_tls_idle_ok(struct ssl_st *ssl);

/* Frees the session, without waiting for anything. */
void authn_hmac_redis_tls_close(struct ssl_st *ssl);

/* Idle connections of one process, for its threads. A connection is taken
 * per operation and given back, or closed if it failed. The server's name
 * is resolved here, once, when the child starts. */
typedef struct authn_hmac_redis_pool authn_hmac_redis_pool_t;

apr_status_t authn_hmac_redis_pool_create(authn_hmac_redis_pool_t **out,
                                          const authn_hmac_redis_conf_t *conf,
                                          int max_idle,
                                          authn_hmac_redis_health_t *health,
                                          apr_pool_t *p);

/* An idle connection, or a new one (connected, AUTH and SELECT done), before
 * the deadline (monotonic). On failure *why says what went wrong (never a
 * secret). */
authn_hmac_redis_rc authn_hmac_redis_pool_acquire(authn_hmac_redis_pool_t *rp,
                                                  authn_hmac_redis_conn_t **c,
                                                  apr_time_t deadline,
                                                  const char **why,
                                                  apr_pool_t *p);

void authn_hmac_redis_pool_release(authn_hmac_redis_pool_t *rp,
                                   authn_hmac_redis_conn_t *c, int broken);

/* A connection over a connected socket (for tests; connections are made by
 * the pool). It owns fd. */
authn_hmac_redis_conn_t *authn_hmac_redis_conn_wrap(int fd);

void authn_hmac_redis_close(authn_hmac_redis_conn_t *c);

/* Sends one command and reads its one reply, both before the deadline
 * (monotonic). The reply may be at most a few hundred bytes: anything
 * longer, or anything after it, is an error, and the connection must then
 * be dropped. */
struct redisReply;
authn_hmac_redis_rc authn_hmac_redis_command(authn_hmac_redis_conn_t *c,
                                             int argc, const char **argv,
                                             const size_t *lens,
                                             apr_time_t deadline,
                                             struct redisReply **reply,
                                             const char **why, apr_pool_t *p);

/* What a GET found. */
typedef enum {
    AUTHN_HMAC_VALUE_NONE,   /* no entry */
    AUTHN_HMAC_VALUE_VALID,  /* an entry whose tag verifies */
    AUTHN_HMAC_VALUE_FORGED, /* an entry whose tag does not: a miss */
    AUTHN_HMAC_VALUE_OTHER   /* of another value version: a plain miss */
} authn_hmac_value_state;

/* Interprets the reply to GET of uid's entry (exposed for tests and
 * fuzzing): AUTHN_HMAC_REDIS_ERROR for a reply of the wrong type. */
authn_hmac_redis_rc authn_hmac_redis_interpret(
    const struct redisReply *get, const authn_hmac_mac_t *mac,
    const unsigned char uid[AUTHN_HMAC_KEY_LEN], authn_hmac_entries_t *es,
    authn_hmac_value_state *st);

/* GET of uid's entry (prefix + hex(uid)). */
authn_hmac_redis_rc authn_hmac_redis_get(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    apr_time_t deadline, authn_hmac_entries_t *es, authn_hmac_value_state *st,
    const char **why, apr_pool_t *p);

/* SET of uid's entry to es, tagged, PX until its newest verification is
 * max_age old (max_age: the storing section's; see src/redis/commands.c). */
authn_hmac_redis_rc authn_hmac_redis_set(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    const authn_hmac_entries_t *es, apr_time_t now, apr_interval_time_t max_age,
    apr_time_t deadline, const char **why, apr_pool_t *p);

/* Single flight across the servers of a farm. A credential's marker is
 * prefix + "f:" + hex(HMAC(value subkey, key | "F")): it names the exact
 * credential without telling anything of it. While a server verifies, the
 * marker is "R" and a random token of that server's claim; then it holds
 * the result, "F1" (granted) or "F0" (refused) with an expiry and a tag
 * over both that only the pepper can make, so that no one who can write
 * Redis can make a waiter grant. Only the claim's owner (the same token)
 * writes the result or deletes the marker. */
typedef enum {
    AUTHN_HMAC_FARM_NONE,    /* no marker, or one that does not verify */
    AUTHN_HMAC_FARM_RUNNING, /* another server verifies */
    AUTHN_HMAC_FARM_GRANTED,
    AUTHN_HMAC_FARM_REFUSED,
    AUTHN_HMAC_FARM_FORGED /* a result whose tag does not verify */
} authn_hmac_farm_state;

/* A claim's value: "R" and 32 hex digits of a random token. */
#define AUTHN_HMAC_FLIGHT_TOKEN_LEN 33

/* SET marker "R"+token NX PX ms, with a new token, which is written to
 * token (a string): *won is 1 if this server now runs it. */
authn_hmac_redis_rc authn_hmac_redis_flight_claim(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_interval_time_t hold, apr_time_t deadline,
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1], int *won, const char **why,
    apr_pool_t *p);

/* The runner's result (1 granted, 0 refused) for hold from now; -1 deletes
 * the marker (no result: the waiters verify by themselves). Only while the
 * marker is still token, the claim's value (one EVAL of a compare-and-set
 * script; a marker that expired, or that another server claimed since, is
 * left alone). */
authn_hmac_redis_rc authn_hmac_redis_flight_result(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    const char *token, int result, apr_time_t now, apr_interval_time_t hold,
    apr_time_t deadline, const char **why, apr_pool_t *p);

/* GET of the marker. */
authn_hmac_redis_rc authn_hmac_redis_flight_poll(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_time_t deadline, authn_hmac_farm_state *st,
    const char **why, apr_pool_t *p);

/* What a marker's value says, for the credential key at now (exposed for
 * tests and fuzzing). */
authn_hmac_farm_state
authn_hmac_flight_interpret(const authn_hmac_mac_t *mac,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, apr_time_t now);

/* Makes a hiredis reader refuse arrays of more than a few elements (they
 * would be allocated before being read). Returns 0 if it could not. */
struct redisReader;
int authn_hmac_redis_limit_reader(struct redisReader *r);

/* Whether to try Redis at now (monotonic): 0 to skip it (the breaker is
 * open), 1 to go, 2 to go as the one probe of a half-open breaker (its
 * outcome goes to failed() or succeeded()). */
int authn_hmac_redis_allowed(authn_hmac_redis_health_t *h, apr_time_t now,
                             apr_interval_time_t probe_window);

int authn_hmac_redis_breaker_open(authn_hmac_redis_health_t *h);

/* Records the failure of an operation begun at `started` (probe: of the
 * half-open probe). BREAKER_AFTER incidents within BREAKER_WINDOW open the
 * breaker, whatever succeeded between them: a Redis that answers one
 * command in two in time is as good as down. Operations that were in flight
 * together when one failed are one incident: a stall of 60 ms under a
 * 50 ms timeout is not three failures because 16 requests waited through
 * it. Returns 1 if this began an outage, that is, the breaker is open
 * and no outage was recorded (log it once); a failure that leaves the
 * breaker closed returns 0. */
int authn_hmac_redis_failed(authn_hmac_redis_health_t *h, apr_time_t started,
                            apr_time_t now, int probe);

/* Records the success of an operation begun at `started` (probe: the
 * half-open probe, which closes the breaker); returns 1 if it ended an
 * outage, with the outage's length. Times are monotonic. */
int authn_hmac_redis_succeeded(authn_hmac_redis_health_t *h, apr_time_t started,
                               apr_time_t now, int probe,
                               apr_interval_time_t *outage);

/* 1 the first time a forged value is seen (log it once). */
int authn_hmac_redis_forged_first(authn_hmac_redis_health_t *h);

/* ------------------------------------------------------------- the engine */

/* What became of a credential; the module's note says it by name. */
typedef enum {
    AUTHN_HMAC_HIT,          /* in shared memory */
    AUTHN_HMAC_REDIS_HIT,    /* in Redis, under a tag that verifies */
    AUTHN_HMAC_VERIFIED,     /* the verifier said yes; now cached */
    AUTHN_HMAC_DENIED,       /* the verifier said no */
    AUTHN_HMAC_NEGATIVE_HIT, /* the same wrong password, seen recently */
    AUTHN_HMAC_UNKNOWN_USER, /* not in the htpasswd file */
    AUTHN_HMAC_BUSY,         /* too many verifications waiting */
    AUTHN_HMAC_ERROR,
    AUTHN_HMAC_COALESCED /* granted by a concurrent request's verification */
} authn_hmac_outcome;

/* "hit", "redis-hit", "verified", "denied", "negative-hit", "unknown-user",
 * "busy", "error", "coalesced". */
const char *authn_hmac_outcome_name(authn_hmac_outcome o);

/* Log levels of the engine's messages: syslog's, as httpd's APLOG_*. */
#define AUTHN_HMAC_LOG_WARNING 4
#define AUTHN_HMAC_LOG_NOTICE  5
#define AUTHN_HMAC_LOG_DEBUG   7

/* Checks password against hash (C strings): APR_SUCCESS if it matches.
 * apr_password_validate in the module; a fake one in tests. */
typedef apr_status_t (*authn_hmac_verify_fn)(const char *password,
                                             const char *hash);

/* Receives each of the engine's messages (never a secret). */
typedef void (*authn_hmac_log_fn)(void *baton, int level, const char *msg);

/* The tiers and tools of one process. */
typedef struct {
    const authn_hmac_mac_t *mac;
    authn_hmac_table_t *table;
    authn_hmac_redis_pool_t *redis; /* NULL: no Redis */
    const authn_hmac_redis_conf_t *redis_conf;
    const char *redis_name; /* as configured, for messages */
    authn_hmac_verify_fn verify;
    authn_hmac_log_fn log; /* may be NULL */
    int max_verifications; /* at once, in the server; 0: no queue */
    int backlog;           /* more that may wait for a turn */
    int nice;              /* of the verifying threads; 0: the request's */
} authn_hmac_engine_t;

/* What a section asks for. */
typedef struct {
    apr_interval_time_t ttl;          /* idle timeout; 0: no caching */
    apr_interval_time_t max_age;      /* life from verification; > 0 */
    apr_interval_time_t negative_ttl; /* 0: no negative cache */
    int hide_unknown; /* unknown users cost a verification, as known ones */
} authn_hmac_policy_t;

/* One credential, with the user's stored hash from the htpasswd file
 * (hash NULL: no such user, or a locked one; dummy_hash is then the file's
 * typical hash, or NULL: the template of the dummy). password and the
 * hashes are C strings. */
typedef struct {
    const char *scope;
    size_t scope_len;
    const char *user;
    size_t user_len;
    const char *password;
    size_t password_len;
    const char *hash;
    size_t hash_len;
    const char *dummy_hash;
    size_t dummy_hash_len;
    int locked;         /* hash NULL: the user is in the file, locked out */
    const char *client; /* the client's address, for its share of the queue */
    /* The user's id (authn_hmac_user_id of scope and user under the
     * engine's MAC) and the credential's digest (authn_hmac_cred_digest of
     * scope, user and hash) if the caller has them, else NULL: they are
     * worked out. */
    const unsigned char *uid;
    const unsigned char *digest;
} authn_hmac_cred_t;

/* The request path: shared memory, then Redis, then the verifier; stores
 * what it verified. baton goes to the log callback. */
authn_hmac_outcome authn_hmac_check(const authn_hmac_engine_t *e,
                                    const authn_hmac_policy_t *pol,
                                    const authn_hmac_cred_t *c, void *baton,
                                    apr_pool_t *p);

/* Seconds a refused (busy) client should wait before it tries again. */
int authn_hmac_retry_after(const authn_hmac_engine_t *e);

/* ------------------------------------------------------------- utilities */

/* "4M", "512K", "1G", "65536" -> bytes. Returns NULL or what is wrong;
 * with p, a fraction's message gives the amount as a whole number in a
 * smaller unit ("1.5M": "write 1536K"). */
const char *authn_hmac_parse_size(const char *arg, uint64_t *out,
                                  apr_pool_t *p);

/* "300", "300s", "5m", "2h", "1d" -> seconds. Returns NULL or what is
 * wrong; with p, as for authn_hmac_parse_size ("1.5h": "write 90m"). */
const char *authn_hmac_parse_seconds(const char *arg, uint64_t *out,
                                     apr_pool_t *p);

/* A plain decimal number from 0 to max. Returns NULL or what is wrong. */
const char *authn_hmac_parse_uint(const char *arg, uint64_t max, uint64_t *out);

/* The outputs of the status page. */
typedef enum {
    AUTHN_HMAC_FMT_TEXT,       /* name: value */
    AUTHN_HMAC_FMT_JSON,       /* ?json */
    AUTHN_HMAC_FMT_PROMETHEUS, /* ?prometheus: text exposition 0.0.4 */
    AUTHN_HMAC_FMT_AUTO,       /* mod_status's ?auto */
    AUTHN_HMAC_FMT_HTML        /* mod_status's page: a table */
} authn_hmac_format_t;

/* The format a status query string asks for: "json", "prometheus" (as a
 * key: "json=1", "a&json"), else plain text. */
authn_hmac_format_t authn_hmac_status_query(const char *args);

/* Renders the counters and gauges in that format, and for Prometheus the
 * histograms. */
const char *authn_hmac_status_format(const authn_hmac_stats_t *s,
                                     authn_hmac_format_t f, apr_pool_t *p);

#endif /* AUTHN_HMAC_H */
