/* redis/redis.h: the Redis tier (src/redis/), from the bottom: the
 * socket and its transports, plain (socket.c) or TLS (tls.c); the
 * connection (conn.c); where the server is, an address source (a fixed
 * server: server.c; Sentinel discovery: sentinel.c, redis/sentinel.h);
 * the pool (pool.c), which takes its address from a source; the tagged
 * values and the commands (parse.c, commands.c); the breaker and the
 * health the processes share (breaker.c). */
#ifndef AUTHN_HMAC_REDIS_H
#define AUTHN_HMAC_REDIS_H

#include "core/cred.h"
#include "core/secret.h"
#include "core/util.h"

#include <sys/socket.h>

#define AUTHN_HMAC_REDIS_PORT     6379
#define AUTHN_HMAC_REDIS_HOST_MAX 128 /* a server's name, with NUL */
#define AUTHN_HMAC_REDIS_ADDRS    4   /* addresses tried per name */

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
    const char *auth_from; /* the directive that named the password's file */
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

/* --------------------------------------------------- values and entries */

/* The version of the Redis values (their first character): 4 keeps each
 * credential's times (verified, last used); 3 kept (stored, expires). A
 * value of another version is a plain miss, neither forged nor logged:
 * the servers of a farm are upgraded one at a time. */
#define AUTHN_HMAC_VALUE_VERSION 4

/* A user's cached credentials, as Redis holds them. */
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

/* ------------------------------------------------------------------- TLS */

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

/* ------------------------------------------------- where the server is */

/* A socket address, resolved before any request waits on it. */
typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
} authn_hmac_redis_addr_t;

/* Where a pool's connections go; the pool does not know which source it
 * has: a fixed server (below) or the primary the Sentinels name
 * (authn_hmac_sentinel_source). */
typedef struct {
    /* The address, if its generation is not *gen: then 1, with *gen, up
     * to AUTHN_HMAC_REDIS_ADDRS addrs (*naddr of them) and peer (the name
     * a TLS certificate must carry; "": the context's own) updated. 0 if
     * *gen is the newest; -1 if none is known (*why says why). */
    int (*addr)(void *baton, uint64_t *gen, authn_hmac_redis_addr_t *addrs,
                int *naddr, char peer[AUTHN_HMAC_REDIS_HOST_MAX],
                const char **why);
    /* A failure of that server was seen (NULL: nothing to do). */
    void (*suspect)(void *baton);
    void *baton;
} authn_hmac_redis_source_t;

/* The server conf names (host and port, or socket), resolved now: once,
 * when the child starts. */
authn_hmac_redis_source_t
authn_hmac_redis_server(const authn_hmac_redis_conf_t *conf, apr_pool_t *p);

/* ------------------------------------------------------------ the health */

#define AUTHN_HMAC_REDIS_REASON_MAX 160

/* Redis health shared by every process, so that an outage is logged once
 * and the breaker holds for all (breaker.c). Lives in the shared segment's
 * annex (request/annex.h: authn_hmac_annex_redis_health). */
typedef struct authn_hmac_redis_health {
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
    int64_t up_since;        /* wall clock: answering since; 0: not now */
    /* reason's lock word: even, the count of its writes (as reason_done);
     * odd, a writer inside: (when it began, monotonic) << 1 | 1. */
    uint64_t reason_seq;
    uint64_t reason_done;
    char reason[AUTHN_HMAC_REDIS_REASON_MAX]; /* while the breaker is open */
} authn_hmac_redis_health_t;

/* What the status page tells of the tier: whether Redis answers (since
 * when, wall clock) and, while the breaker is open, the last failure's
 * reason ("" when none). Read without a lock. */
int authn_hmac_redis_health_read(const authn_hmac_redis_health_t *h,
                                 apr_time_t *up_since,
                                 char reason[AUTHN_HMAC_REDIS_REASON_MAX]);

/* The tier's counts in the status record: whether the breaker is open,
 * the connections open and the TLS handshakes (the rest of out, the
 * table's, is left alone). Read without a lock. */
void authn_hmac_redis_health_stats(const authn_hmac_redis_health_t *h,
                                   authn_hmac_stats_t *out);

/* ---------------------------------------------------------------- the pool */

/* Idle connections of one process, for its threads. A connection is taken
 * per operation and given back, or closed if it failed. It has no server
 * until authn_hmac_redis_pool_use gives it a source. */
typedef struct authn_hmac_redis_pool authn_hmac_redis_pool_t;

apr_status_t authn_hmac_redis_pool_create(authn_hmac_redis_pool_t **out,
                                          const authn_hmac_redis_conf_t *conf,
                                          int max_idle,
                                          authn_hmac_redis_health_t *health,
                                          apr_pool_t *p);

/* The pool finds its server through src from now on. */
void authn_hmac_redis_pool_use(authn_hmac_redis_pool_t *rp,
                               authn_hmac_redis_source_t src);

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

/* ---------------------------------------------------------- a connection */

void authn_hmac_redis_close(authn_hmac_redis_conn_t *c);

/* Lets c read the longer replies of ROLE (a primary lists each of its
 * replicas): up to a few kilobytes and a few hundred elements, for the
 * discovery's connections only (sentinel.c). */
void authn_hmac_redis_conn_long_replies(authn_hmac_redis_conn_t *c);

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

/* DEL of uid's entry (a credential its source refused, the user's last). */
authn_hmac_redis_rc
authn_hmac_redis_del(authn_hmac_redis_conn_t *c,
                     const authn_hmac_redis_conf_t *conf,
                     const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                     apr_time_t deadline, const char **why, apr_pool_t *p);

/* What SQL last said of a user (core/cred.h's memo), for the farm, under
 * prefix + "m:" + hex(uid): "m1:" state hex(digest) hex64(confirmed) ":"
 * hex(tag), the tag over uid and all before it (src/redis/memo.c). */
#define AUTHN_HMAC_MEMO_VALUE_MAX                                              \
    (4 + 1 + 2 * AUTHN_HMAC_DIGEST_LEN + 16 + 1 + 2 * AUTHN_HMAC_KEY_LEN + 1)
/* Writes m as uid's tagged value; its length, or 0 for no state. */
size_t authn_hmac_memo_encode(const authn_hmac_mac_t *mac,
                              const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                              const authn_hmac_memo_t *m,
                              char out[AUTHN_HMAC_MEMO_VALUE_MAX]);
/* 1 and m filled if v is a memo made for uid with this pepper; else 0
 * (altered, another key's, another pepper's) and m empty. */
int authn_hmac_memo_decode(const authn_hmac_mac_t *mac,
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           const char *v, size_t len, authn_hmac_memo_t *m);
/* GET of uid's memo: *found 1 (m filled), 0 none, -1 a value that does not
 * verify (m empty). */
authn_hmac_redis_rc authn_hmac_redis_memo_get(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    apr_time_t deadline, authn_hmac_memo_t *m, int *found, const char **why,
    apr_pool_t *p);
/* SET of uid's memo to m, tagged, PX life (at least a second). */
authn_hmac_redis_rc authn_hmac_redis_memo_set(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char uid[AUTHN_HMAC_KEY_LEN],
    const authn_hmac_memo_t *m, apr_interval_time_t life, apr_time_t deadline,
    const char **why, apr_pool_t *p);
/* The status page's check of the server (authn_hmac_redis_check): a GET
 * of the prefix's "check" key, which nothing writes, answered as the
 * requests' GETs must be (a Redis still loading refuses it, as it refuses
 * theirs): AUTHN_HMAC_REDIS_OK for a value or none. */
authn_hmac_redis_rc authn_hmac_redis_probe(authn_hmac_redis_conn_t *c,
                                           const authn_hmac_redis_conf_t *conf,
                                           apr_time_t deadline,
                                           const char **why, apr_pool_t *p);

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

/* The throttle across a farm (throttle.h): the bans in force for a
 * (client, user) pair and a client, by their ids (MGET of two keys).
 * until[0] (the pair's) and until[1] (the client's): when a ban whose tag
 * verifies for its key ends (0: none); *forged has 1 (the pair's), 2 (the
 * client's) for a value there that does not verify, which is no ban. */
authn_hmac_redis_rc authn_hmac_redis_throttle_banned(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char pair[AUTHN_HMAC_KEY_LEN],
    const unsigned char client[AUTHN_HMAC_KEY_LEN], apr_time_t deadline,
    apr_time_t until[2], int *forged, const char **why, apr_pool_t *p);

/* A ban's value, for the ban key of id until until (µs): "B:" hex(until)
 * ":" hex(tag), the tag made with the pepper over the rest and id. encode
 * returns its length; decode (exposed for tests and fuzzing) 1 with
 * *until if its tag verifies for id, else 0. */
#define AUTHN_HMAC_BAN_LEN ((size_t)2 + 16 + 1 + (size_t)2 * AUTHN_HMAC_KEY_LEN)
size_t authn_hmac_ban_encode(const authn_hmac_mac_t *mac,
                             const unsigned char id[AUTHN_HMAC_KEY_LEN],
                             apr_time_t until,
                             char out[AUTHN_HMAC_BAN_LEN + 1]);
int authn_hmac_ban_decode(const authn_hmac_mac_t *mac,
                          const unsigned char id[AUTHN_HMAC_KEY_LEN],
                          const char *v, size_t len, apr_time_t *until);

/* A new wrong guess of the pair, fp its fingerprint, counted for the
 * farm (two EVALs): a guess the farm saw within the window is not counted
 * again; the pair's and the client's counts are read, their tags checked
 * (one that does not verify is no count: *forged), raised and written
 * back tagged, each for what remains of its window, compare-and-set: only
 * if both are still what was read, else read again and raised again (at
 * most 4 tries in all, within deadline; after the last, the guess is not
 * counted in the farm: OK, with *why saying so). One that reaches its
 * limit (0: none) starts a ban until now + ban, tagged, unless one is in
 * force, and starts again. A Redis can so hide guesses, never add one.
 * *started has the bans this started: 1 the pair's, 2 the client's. */
authn_hmac_redis_rc authn_hmac_redis_throttle_fail(
    authn_hmac_redis_conn_t *c, const authn_hmac_redis_conf_t *conf,
    const authn_hmac_mac_t *mac, const unsigned char pair[AUTHN_HMAC_KEY_LEN],
    const unsigned char client[AUTHN_HMAC_KEY_LEN], uint64_t fp,
    int max_failures, int max_client_failures, apr_interval_time_t window,
    apr_interval_time_t ban, apr_time_t now, apr_time_t deadline, int *started,
    int *forged, const char **why, apr_pool_t *p);

/* A count's value (exposed for tests and fuzzing): 1 with the window's
 * start, the count and its last guess's fingerprint if its tag verifies
 * for id, else 0. */
int authn_hmac_count_decode(const authn_hmac_mac_t *mac,
                            const unsigned char id[AUTHN_HMAC_KEY_LEN],
                            const char *v, size_t len, apr_time_t *start,
                            uint32_t *n, uint64_t *fp);

/* Makes a hiredis reader refuse arrays of more than a few elements (they
 * would be allocated before being read). Returns 0 if it could not. */
struct redisReader;
int authn_hmac_redis_limit_reader(struct redisReader *r);

/* ------------------------------------------------------------ the breaker */

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
 * breaker closed returns 0. why (as logged) is the breaker's reason while
 * it is open. */
int authn_hmac_redis_failed(authn_hmac_redis_health_t *h, apr_time_t started,
                            apr_time_t now, int probe, const char *why);

/* Records the success of an operation begun at `started` (probe: the
 * half-open probe, which closes the breaker); returns 1 if it ended an
 * outage, with the outage's length. Times are monotonic. */
int authn_hmac_redis_succeeded(authn_hmac_redis_health_t *h, apr_time_t started,
                               apr_time_t now, int probe,
                               apr_interval_time_t *outage);

/* Another server (a new primary): the breaker opened for the old one
 * does not hold for it; closed, with no reason, and no failures counted. */
void authn_hmac_redis_breaker_reset(authn_hmac_redis_health_t *h);

/* 1 the first time a forged value is seen (log it once). */
int authn_hmac_redis_forged_first(authn_hmac_redis_health_t *h);

/* The tier starts afresh (a restart changed its settings): no failures
 * counted, the breaker closed, no outage recorded (the next one is logged
 * with its own reason), and the connections made before are stale. */
void authn_hmac_redis_health_restart(authn_hmac_redis_health_t *h);

#endif /* AUTHN_HMAC_REDIS_H */
