/* core/util.h: the bottom layer of the core: the monotonic clock,
 * parsers for directive values, the counters and histograms with their
 * status outputs.
 *
 * The core (src/, a folder per layer, headers beside their code) is free of
 * httpd headers: the module (mod_authn_hmac.c), the unit tests and the
 * tools link it. It depends only on APR, OpenSSL, libbsd and hiredis. */
#ifndef AUTHN_HMAC_UTIL_H
#define AUTHN_HMAC_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <apr_pools.h>
#include <apr_time.h>

/* The clock of every deadline and of the breaker: CLOCK_MONOTONIC, in
 * microseconds. */
apr_time_t authn_hmac_monotonic(void);

/* Whether a message logged at most once per interval (in this process)
 * may go now (monotonic), claimed for the caller: *last holds when it
 * last went, 0 never; of the threads that ask at once, one gets 1. */
int authn_hmac_log_due(apr_time_t *last, apr_time_t now,
                       apr_interval_time_t interval);

/* XXH64 of len bytes: tells two readings of a file apart (not a MAC). */
uint64_t authn_hmac_fingerprint(const void *data, size_t len);

/* ------------------------------------------------------------- parsing */

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

/* ---------------------------------------------------- counters, status */

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
    X(UNKNOWN_USER, C, "unknown_user", "users their source does not know")     \
    X(ERRORS, C, "errors",                                                     \
      "logins answered 500 because their source of users failed (an "          \
      "htpasswd or DBM file unreadable, an SQL lookup that failed, an error "  \
      "of the wrapped provider)")                                              \
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
    X(FARM_LATE, C, "farm_late",                                               \
      "misses verified here though another server had just verified the same " \
      "credential: its refusal ended before they came (a wrong password is "   \
      "not shared outside its burst)")                                         \
    X(FARM_TIMEOUTS, C, "farm_timeouts",                                       \
      "misses verified here after waiting in vain for another server's "       \
      "verification of the same credential")                                   \
    X(QUEUED, C, "queued", "verifications that waited for a turn")             \
    X(BUSY, C, "busy",                                                         \
      "misses refused with 503: the verification queue was full")              \
    X(BUSY_LAST, G, "busy_last_time_seconds",                                  \
      "when a miss was last refused with 503 (busy), in seconds since the "    \
      "Unix epoch; 0: never")                                                  \
    X(VERIFYING_MAX, G, "verifying_max",                                       \
      "the most verifications that ran at once (a high-water mark)")           \
    X(REFRESHES, C, "refreshes", "hits that extended an entry's idle timeout") \
    X(THROTTLED, C, "throttled",                                               \
      "misses refused without a verification: the client had guessed too "     \
      "many wrong passwords")                                                  \
    X(BANS, C, "bans",                                                         \
      "bans started on a client, for one user or for all, or taken from "      \
      "the farm's Redis (the throttle)")                                       \
    X(PREVIOUS_HITS, C, "previous_hits",                                       \
      "credentials found under the previous pepper (AuthHMACPepperFile's "     \
      "second file) and stored again under the current one")                   \
    X(INDEX_PRIVATE, C, "index_private",                                       \
      "times a process could not share an htpasswd file's index and kept "     \
      "its own")                                                               \
    X(RECHECKS, C, "rechecks",                                                 \
      "grants confirmed again with their source (an SQL query, a wrapped "     \
      "provider) once AuthHMACRecheck had passed")                             \
    X(OFFLINE_HITS, C, "offline_hits",                                         \
      "grants served while their source failed, to credentials it had "        \
      "confirmed within AuthHMACOfflineGrace")                                 \
    X(OFFLINE_SINCE, G, "offline_since_seconds",                               \
      "when the outage of a source that grants are served through began, in "  \
      "seconds since the Unix epoch; 0: none")

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

extern const char *const authn_hmac_histogram_name[AUTHN_HMAC_H_COUNT];
extern const char *const authn_hmac_histogram_help[AUTHN_HMAC_H_COUNT];

typedef struct {
    uint64_t bucket[AUTHN_HMAC_BUCKETS]; /* observations in each, apart */
    uint64_t sum_usec;
} authn_hmac_histogram_t;

/* A ban in force (throttle.h's book), as the status page lists it. */
#define AUTHN_HMAC_BOOK 32

typedef struct {
    char client[64];
    char user[144];   /* "": all users (a longer name is cut) */
    apr_time_t until; /* the ban's end */
    char key[67];     /* its key in the farm's Redis: "b:" hex(id) */
} authn_hmac_ban_t;

typedef struct {
    uint64_t counter[AUTHN_HMAC_C_COUNT];
    int pepper_random;              /* no pepper file: a random pepper */
    int redis;                      /* Redis is configured */
    int sentinel;                   /* through Sentinel */
    uint64_t redis_up;              /* 1 while Redis answers */
    apr_time_t redis_up_since;      /* since when; 0: not now */
    uint64_t redis_breaker;         /* 1 while the breaker skips Redis */
    char redis_reason[160];         /* the breaker's, while it is open */
    char redis_primary[320];        /* host:port; "": none known */
    int checked;                    /* the page probed Redis (?check) */
    uint64_t redis_check;           /* 1 if Redis answered the probe */
    char redis_check_reason[160];   /* why not */
    apr_time_t redis_primary_since; /* when Sentinel named it; 0: none */
    uint64_t sentinel_discoveries;  /* discoveries that ended */
    uint64_t sentinel_switches;     /* primaries named in place of another */
    uint64_t redis_conns;           /* open connections, all processes */
    uint64_t redis_tls_handshakes;  /* TLS connections made */
    uint64_t redis_tls_resumed;     /* of which resumed a session */
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
    apr_time_t now;                         /* when the page was made */
    int nbans;                              /* bans in force */
    authn_hmac_ban_t bans[AUTHN_HMAC_BOOK]; /* the first nbans */
} authn_hmac_stats_t;

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

/* Whether a status query string asks for a probe of Redis: "check", as a
 * key ("prometheus&check"). */
int authn_hmac_status_check(const char *args);

/* Renders the counters and gauges in that format, and for Prometheus the
 * histograms. */
const char *authn_hmac_status_format(const authn_hmac_stats_t *s,
                                     authn_hmac_format_t f, apr_pool_t *p);

/* ----------------------------------------------------------------- logs */

/* Log levels of the core's messages: syslog's, as httpd's APLOG_*. */
#define AUTHN_HMAC_LOG_WARNING 4
#define AUTHN_HMAC_LOG_NOTICE  5
#define AUTHN_HMAC_LOG_DEBUG   7

/* What the core tells operators, at a level above: the engine's, the
 * Sentinel thread's, a user file's malformed lines and sharing. The core
 * never puts a password, a hash or a line of a file in msg. */
typedef void (*authn_hmac_log_fn)(void *baton, int level, const char *msg);

/* The longest message, with its NUL: what httpd writes of a line of its
 * error log at most (MAX_STRING_LEN). */
#define AUTHN_HMAC_LOG_MAX 8192

/* Formats a message (apr_snprintf's formats, %pm too) and gives it to log;
 * nothing without log. */
void authn_hmac_logf(authn_hmac_log_fn log, void *baton, int level,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void authn_hmac_vlogf(authn_hmac_log_fn log, void *baton, int level,
                      const char *fmt, va_list ap);

#endif /* AUTHN_HMAC_UTIL_H */
