/* request/engine.h: the request path: shared memory, Redis, the
 * verifier (src/request/engine.c, and the files beside it that
 * src/request/engine_int.h names). */
#ifndef AUTHN_HMAC_ENGINE_H
#define AUTHN_HMAC_ENGINE_H

#include "core/cred.h"
#include "sources/htpasswd.h"
#include "shm/queue.h" /* the bounds of max_verifications, backlog */
#include "redis/redis.h"
#include "shm/table.h"
#include "shm/throttle.h"

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
    AUTHN_HMAC_COALESCED, /* granted by a concurrent request's verification */
    AUTHN_HMAC_THROTTLED, /* refused unverified: the client guessed too much */
    AUTHN_HMAC_OFFLINE_HIT, /* granted while the source failed: a credential it
                               confirmed within the offline grace */
    AUTHN_HMAC_PASS /* the cache tiers did not answer (a policy's cached_only:
                       internal to the request path, never a final outcome) */
} authn_hmac_outcome;

/* "hit", "redis-hit", "verified", "denied", "negative-hit", "unknown-user",
 * "busy", "error", "coalesced", "throttled", "offline-hit". */
const char *authn_hmac_outcome_name(authn_hmac_outcome o);

/* Checks password against hash (C strings): APR_SUCCESS if it matches.
 * apr_password_validate in the module; a fake one in tests. */
typedef apr_status_t (*authn_hmac_verify_fn)(const char *password,
                                             const char *hash);

/* The tiers and tools of one process. */
typedef struct {
    const authn_hmac_mac_t *mac;
    /* The previous pepper's (AuthHMACPepperFile's second file), or NULL:
     * it only checks, and what it finds is stored again under mac. */
    const authn_hmac_mac_t *mac_prev;
    authn_hmac_table_t *table;
    authn_hmac_redis_pool_t *redis; /* NULL: no Redis */
    const authn_hmac_redis_conf_t *redis_conf;
    const char *redis_name; /* as configured, for messages */
    authn_hmac_verify_fn verify;
    authn_hmac_log_fn log; /* its messages (util.h); may be NULL */
    int max_verifications; /* at once, in the server; 0: no queue */
    int backlog;           /* more that may wait for a turn */
    authn_hmac_throttle_conf_t throttle; /* zeroes: no throttle */
} authn_hmac_engine_t;

/* What a section asks for. */
typedef struct {
    apr_interval_time_t ttl;          /* idle timeout; 0: no caching */
    apr_interval_time_t max_age;      /* life from verification; > 0 */
    apr_interval_time_t negative_ttl; /* 0: no negative cache */
    int hide_unknown; /* unknown users cost a verification, as known ones */
    /* A source the module does not own (SQL, a wrapped provider): a grant
     * is confirmed with it at most once per recheck for the whole farm (0:
     * at every request), and while it fails, a credential it confirmed
     * less than offline_grace ago is still served (0: not). */
    apr_interval_time_t recheck;
    apr_interval_time_t offline_grace;
    /* The request path's own (src/request/sql.c), 0 from a section: only
     * the cache tiers run (ban, shared memory, negative, Redis), and
     * AUTHN_HMAC_PASS if none answers: no verification, nothing stored. */
    int cached_only;
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
    /* The user's id (authn_hmac_user_id of uid_scope, or of scope if
     * uid_scope is NULL, and user under the engine's MAC) and the
     * credential's digest (authn_hmac_cred_digest of scope, user and hash)
     * if the caller has them, else NULL: they are worked out. uid_scope:
     * a wider scope than scope's, where a user's id is shared (a wrapped
     * provider's sections on one server); the previous pepper's id is made
     * of it too. */
    const unsigned char *uid;
    const unsigned char *digest;
    const char *uid_scope;
    size_t uid_scope_len;
    /* A wrapped provider (AuthHMACProvider), or NULL: asked for the
     * password in place of the verifier on the hash (which then only names
     * the provider, for the key): APR_SUCCESS granted, APR_EMISMATCH
     * refused; APR_INCOMPLETE granted and APR_NOTFOUND refused, but not
     * to be kept (nothing learned: not cached, not given to waiters); any
     * other status an error (nothing learned, the outcome
     * AUTHN_HMAC_ERROR). In the verification's turn of the queue, with
     * single flight, as a verification. */
    apr_status_t (*ask)(void *ctx, const char *password);
    void *ask_ctx;
    /* The source matches a name whatever its case and outer spaces (SQL,
     * a wrapped provider such as LDAP): the throttle counts the name in
     * lower case (ASCII) without them, so that variants of one account
     * share one count. */
    int fold;
    /* Where the throttle's count of a wrong password is held for the
     * caller (the writer rule: a reading of a file being written may have
     * missed the user), else NULL: counted at once. */
    struct authn_hmac_held *hold;
} authn_hmac_cred_t;

/* A guess's count, held (cred's hold): counted with
 * authn_hmac_count_held() once the answer stands. */
typedef struct authn_hmac_held {
    int what;      /* 0: nothing; 1: a wrong password; 2: refused by a ban */
    int oracle;    /* 2: the user is one the ban serves (throttle.h) */
    int redis_off; /* the request's use of Redis had ended (a failure) */
    uint64_t fp;
    authn_hmac_throttle_ids_t ids;
} authn_hmac_held_t;

/* The request path: shared memory, then Redis, then the verifier; stores
 * what it verified. baton goes to the log callback. */
authn_hmac_outcome authn_hmac_check(const authn_hmac_engine_t *e,
                                    const authn_hmac_policy_t *pol,
                                    const authn_hmac_cred_t *c, void *baton,
                                    apr_pool_t *p);

/* Counts a guess whose count was held (cred's hold), as the engine would
 * have at once: here and, with Redis, in the farm. */
void authn_hmac_count_held(const authn_hmac_engine_t *e,
                           const authn_hmac_cred_t *c,
                           const authn_hmac_held_t *h, void *baton,
                           apr_pool_t *p);

/* The request path from the htpasswd file uf: looks c->user up (lines
 * not used told to bad, with baton), sets c's hash, dummy_hash, locked,
 * uid and digest from the answer, and checks the credential as
 * authn_hmac_check does. The writer rule: when that ends in anything but a
 * grant (a mismatch, an unknown or a locked user, throttled, busy) and the
 * answer's reading was unsettled (authn_hmac_reading_t), the request waits
 * for the file to be quiet (a second at most from its start:
 * authn_hmac_userfile_settle), and checks once more only if the user's
 * answer changed (another hash; or the user came or went); else the first
 * answer stands. A grant never waits; every other answer waits the same. One
 * outcome, the final one, is counted and returned. AUTHN_HMAC_ERROR with *rv
 * the error when the file cannot be read; else *rv is APR_SUCCESS. */
authn_hmac_outcome authn_hmac_check_user(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         authn_hmac_userfile_t *uf,
                                         authn_hmac_cred_t *c,
                                         authn_hmac_log_fn bad, void *baton,
                                         apr_pool_t *p, apr_status_t *rv);

/* The status page's check (?check): one PING to the Redis server that
 * requests use (with Sentinel, the primary this process has), under the
 * Redis timeout and its AUTH, SELECT and TLS, whatever the breaker says.
 * Its outcome is told to the breaker as a request's would be: a failure
 * counts (one incident), an answer ends an outage and closes an open
 * breaker, as the half-open probe's does. A refusal by the ACL (no
 * +ping) is told to no one but the caller. 1 if Redis answered; else 0,
 * with *why (as logged: never a secret). baton goes to the log callback. */
int authn_hmac_redis_check(const authn_hmac_engine_t *e, void *baton,
                           const char **why, apr_pool_t *p);

/* A source's outage, for the server (src/request/offline.c). served: a
 * grant was served while the source failed (why: its error, as logged:
 * never a secret): counted (offline_hits), and the outage's start logged
 * once (offline_since_seconds). answered: the source answered (a grant, a
 * refusal, a row or none): ends an outage in progress, logged once with
 * its length; one atomic read when there is none. */
void authn_hmac_offline_served(const authn_hmac_engine_t *e, const char *why,
                               void *baton);
void authn_hmac_offline_answered(const authn_hmac_engine_t *e, void *baton);

/* A source's errors since its last answer, by source (source: 64 bits of
 * a MAC of its scope, never 0) in the shared segment (request/annex.h).
 * error: records one for the user (64 bits of its id), and returns 1 if
 * the source has now failed for at least two distinct users with no
 * answer since its errors began: an outage of the source, not an error
 * of one account (a directory that refuses an account with an error, as
 * 389-ds answers an inactivated one): only then may a grant be served
 * offline. answer: the source answered (a grant or a refusal): clears its
 * record (one read of each record when it has none). */
int authn_hmac_outage_error(const authn_hmac_engine_t *e, uint64_t source,
                            uint64_t user, apr_time_t now);
void authn_hmac_outage_answer(const authn_hmac_engine_t *e, uint64_t source);

/* Seconds a refused (busy) client should wait before it tries again. */
int authn_hmac_retry_after(const authn_hmac_engine_t *e);

#endif /* AUTHN_HMAC_ENGINE_H */
