/* engine_int.h: what the files of the request path (src/request/) share,
 * and nothing else; no one outside src/request/ includes it:
 *   engine.c    the tiers in order and the one exit, over req_t;
 *   session.c   a request's Redis session (redis_req): its reads, its
 *               writes, the farm's marker and bans, the breaker's health;
 *   pace.c      how long each wait lasts, and a turn in the queue;
 *   throttle.c  the throttle's tiers and a guess's count at the exit;
 *   htpasswd.c  the htpasswd file's path, over one pass down the tiers
 *               (authn_hmac_engine_run) and its count (..._tally). */
#ifndef AUTHN_HMAC_ENGINE_INT_H
#define AUTHN_HMAC_ENGINE_INT_H

#include "core/cred.h"
#include "redis/redis.h"
#include "request/engine.h"
#include "shm/flight.h"
#include "shm/queue.h"
#include "shm/table.h"
#include "shm/throttle.h"

static inline void count(const authn_hmac_engine_t *e,
                         enum authn_hmac_counter c, uint64_t n)
{
    authn_hmac_table_count(e->table, c, n);
}

/* ------------------------------------------------- session.c */

/* One request's use of Redis: each operation (connect, AUTH and SELECT if
 * needed, the command and its whole reply) has one deadline of the timeout,
 * and the request's first failure ends its use of Redis. */
typedef struct {
    const authn_hmac_engine_t *e;
    void *baton;
    apr_pool_t *p;
    int off;                 /* a failure or the breaker: no more Redis */
    int probe;               /* this request probes a half-open breaker */
    apr_time_t started;      /* monotonic, of the current operation */
    authn_hmac_entries_t es; /* the user's entries that GET found */
} redis_req;

/* A request's session, before its first operation: off, it uses no
 * Redis (none configured, or the section does not cache). */
void authn_hmac_session_begin(redis_req *rq, const authn_hmac_engine_t *e,
                              void *baton, apr_pool_t *p, int off);

/* What a look in Redis counts and tells: a miss (the request's first look
 * at the current pepper's entry), and a value that does not verify. */
enum { LOOK_MISS = 1, LOOK_FORGED = 2 };

/* The user's entry (uid, under mac) from Redis into es: 1 with the
 * credential's (key's) times if it is there, live and its tag verifies. */
int authn_hmac_session_lookup(redis_req *rq, const authn_hmac_mac_t *mac,
                              const unsigned char *key,
                              const unsigned char *uid,
                              authn_hmac_entries_t *es, apr_time_t now,
                              const authn_hmac_policy_t *pol, int never,
                              int look, apr_time_t *verified, apr_time_t *used);

/* The credential, verified at verified, made the user's first entry. */
void authn_hmac_session_store(redis_req *rq, const unsigned char *key,
                              const unsigned char *uid, apr_time_t verified,
                              apr_time_t now, apr_interval_time_t max_age);

/* The credential's entry taken out of the user's entries that GET found
 * (es), in Redis: the rest SET again, or the key deleted if none is left.
 * Only if es held it. */
void authn_hmac_session_forget(redis_req *rq, const unsigned char *key,
                               const unsigned char *uid, apr_time_t now,
                               apr_interval_time_t max_age);

/* A hit's new last use, written in Redis too (a session of its own). */
void authn_hmac_session_refresh(const authn_hmac_engine_t *e, void *baton,
                                apr_pool_t *p, const unsigned char *key,
                                const unsigned char *uid, apr_time_t now,
                                apr_time_t verified,
                                apr_interval_time_t max_age);

/* Single flight across the farm: the claim (1 this server's, 0 another's,
 * -1 no Redis), the wait for another server's result (1 granted, 0
 * refused, -1 none, 2 a grant stored in Redis before), and the claim's
 * result for the farm's waiters (-1: none, they verify). */
int authn_hmac_session_claim(redis_req *rq, const unsigned char *key,
                             apr_interval_time_t hold, char *token);
int authn_hmac_session_wait(redis_req *rq, const unsigned char *key,
                            apr_time_t until);
void authn_hmac_session_result(redis_req *rq, const unsigned char *key,
                               const char *token, int result);

/* What SQL last said of a user (uid), in Redis: read (1 with *m; 0 none,
 * or no Redis) and written (for life). */
int authn_hmac_session_memo_get(redis_req *rq, const unsigned char *uid,
                                authn_hmac_memo_t *m);
void authn_hmac_session_memo_set(redis_req *rq, const unsigned char *uid,
                                 const authn_hmac_memo_t *m,
                                 apr_interval_time_t life);

/* The farm's bans for ids (until: when each ends, 0 none), and a new
 * guess counted there (the bans it started). */
void authn_hmac_session_banned(redis_req *rq,
                               const authn_hmac_throttle_ids_t *ids,
                               apr_time_t until[2]);
int authn_hmac_session_guessed(redis_req *rq,
                               const authn_hmac_throttle_ids_t *ids,
                               uint64_t fp);

/* ---------------------------------------------------- pace.c */

/* How long a server waits for another server's result, and a waiter for
 * the runner of its credential's flight. */
apr_interval_time_t authn_hmac_pace_farm(const authn_hmac_engine_t *e);
apr_interval_time_t authn_hmac_pace_flight(const authn_hmac_engine_t *e);

/* A turn in the server's verification queue: 1 with a place that runs
 * (give it back with authn_hmac_queue_leave), 0 when busy. */
int authn_hmac_pace_turn(const authn_hmac_engine_t *e,
                         const authn_hmac_cred_t *c, authn_hmac_turn_t *turn);

/* -------------------------------------------------- engine.c */

/* One credential's way down the tiers, against hash. never: hash is a
 * dummy (an unknown or locked user's), which no password matches; the way
 * is a known user's, Redis calls and all, but nothing on it grants or is
 * stored as granted.
 *
 * Each tier answers (returns 1, the outcome in o) or passes on (returns
 * 0). What a tier takes on that must be given back or handed on is kept
 * here for the one exit (finish): the flight this request runs, its farm
 * claim, what it learned of the credential and when, and the keys. */
typedef struct {
    const authn_hmac_engine_t *e;
    const authn_hmac_policy_t *pol;
    const authn_hmac_cred_t *c;
    const char *hash;
    size_t hash_len;
    int never;
    int cache, negative; /* the section caches; and keeps refusals */
    void *baton;
    apr_pool_t *p;
    apr_time_t t0; /* when the request came (the caches' time) */
    unsigned char key[AUTHN_HMAC_KEY_LEN];  /* the credential MAC */
    unsigned char nkey[AUTHN_HMAC_KEY_LEN]; /* its negative MAC */
    unsigned char uid[AUTHN_HMAC_KEY_LEN];
    unsigned char pkey[AUTHN_HMAC_KEY_LEN]; /* key under the previous pepper */
    unsigned char puid[AUTHN_HMAC_KEY_LEN]; /* uid under it */
    int pkeys;                              /* made (on the first miss) */
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];
    redis_req rq; /* made by the first miss: the hit needs none of it */
    authn_hmac_flight_rc flight; /* RUN: this request's flight to end */
    authn_hmac_flight_t fl;      /* its run (RUN or WAIT) */
    apr_interval_time_t wait;    /* how long the flight's waiters wait */
    int farm;                    /* 1: this server's claim across the farm */
    char token[AUTHN_HMAC_FLIGHT_TOKEN_LEN + 1];
    /* What the request learned of the credential, for the caches, the
     * flight's waiters and the farm's: 1 granted, 0 refused (a mismatch),
     * -1 nothing; at `learned` (0: nothing to store). */
    int result;
    apr_time_t learned;
    apr_interval_time_t took; /* the verification, on the monotonic clock */
    int ran;                  /* this request ran the verifier */
    int unkept;               /* a wrapped provider's refusal, not kept */
    int ids_made;             /* the throttle's ids are made */
    unsigned char tuid[AUTHN_HMAC_KEY_LEN]; /* their user id (folded) */
    int entered;    /* this request's guess has a place */
    int client_ban; /* its client is banned for all users */
    authn_hmac_throttle_ids_t ids;
    authn_hmac_outcome o;
    /* A wrapped provider (c->ask): the section's policy is sec; pol
     * points at hit, the same but for a max age bounded by the recheck (a
     * grant confirmed longer ago is not a hit). keep: how long Redis keeps
     * an entry (the max age, or the offline grace if longer). stale: an
     * entry past its recheck was found (an ask is a recheck); offline: one
     * the source confirmed within the offline grace (an error of the
     * source grants it: offline-hit). */
    const authn_hmac_policy_t *sec;
    authn_hmac_policy_t hit;
    apr_interval_time_t keep;
    int stale, offline;
} req_t;

/* A request at the top of the tiers: nothing taken on yet. */
void authn_hmac_req_begin(req_t *q, const authn_hmac_engine_t *e,
                          const authn_hmac_policy_t *pol,
                          const authn_hmac_cred_t *c, const char *hash,
                          size_t hash_len, int never, void *baton,
                          apr_pool_t *p);

/* One pass down the tiers (an unknown or locked user's against a dummy),
 * and the count of a request's final outcome. */
authn_hmac_outcome authn_hmac_engine_run(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         const authn_hmac_cred_t *c,
                                         void *baton, apr_pool_t *p);
void authn_hmac_engine_tally(const authn_hmac_engine_t *e,
                             const authn_hmac_cred_t *c, authn_hmac_outcome o);

/* ------------------------------------------------ throttle.c */

/* The tiers of the throttle: 0. a ban in force (before the caches), 5.
 * a client at its limit (after the server's flight). */
int authn_hmac_req_from_ban(req_t *q);
int authn_hmac_req_from_throttle(req_t *q);

/* A refusal of a client banned for all users, counted as a guess. */
int authn_hmac_req_client_banned(req_t *q);

/* The client's mark on an entry, and the credential's entry marked for
 * the request's client. */
uint32_t authn_hmac_req_client_mark(req_t *q);
void authn_hmac_req_mark(req_t *q);

/* The end of a guess that took a place (failed: a wrong password it
 * verified), counted here and in the farm. */
void authn_hmac_req_guessed(req_t *q, int failed);

#endif /* AUTHN_HMAC_ENGINE_INT_H */
