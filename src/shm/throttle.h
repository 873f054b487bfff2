/* shm/throttle.h: the throttle on guessing (src/shm/throttle.c): a
 * client that sent too many distinct wrong passwords for one user, or for
 * all users together, is refused for a while without a verification. Its
 * state lives in the shared segment (table.h), for every child of the
 * server; a farm's is in Redis too (redis.h). */
#ifndef AUTHN_HMAC_THROTTLE_H
#define AUTHN_HMAC_THROTTLE_H

#include "core/cred.h"
#include "shm/table.h"

/* The limits (AuthHMACMaxFailures, AuthHMACMaxClientFailures,
 * AuthHMACFailureWindow, AuthHMACBanTime). A limit of 0 is off. */
typedef struct {
    int max_failures;        /* for one user from one client */
    int max_client_failures; /* from one client, for all users together */
    apr_interval_time_t window;
    apr_interval_time_t ban;
} authn_hmac_throttle_conf_t;

/* Whether either limit is on. */
int authn_hmac_throttle_on(const authn_hmac_throttle_conf_t *conf);

/* Who is counted: the (client, user) pair and the client, as MACs under
 * the pepper (no address or name is kept). A client is its IPv4 address,
 * or the /64 of its IPv6 address; uid is the user's id (cred.h). */
typedef struct {
    unsigned char pair[AUTHN_HMAC_KEY_LEN];
    unsigned char client[AUTHN_HMAC_KEY_LEN];
} authn_hmac_throttle_ids_t;

void authn_hmac_throttle_ids(const authn_hmac_mac_t *mac, const char *client,
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                             authn_hmac_throttle_ids_t *ids);

/* The bytes that make a client: 4 of an IPv4 address, the first 8 of an
 * IPv6 one; else the text itself (at most 16 bytes of it). Returns n. */
size_t authn_hmac_client_bytes(const char *client, unsigned char out[16]);

/* Which bans: the pair's, the client's; and a client's ban sealed (its
 * logged-in users refused too: see authn_hmac_throttle_refused). */
enum {
    AUTHN_HMAC_BAN_PAIR = 1,
    AUTHN_HMAC_BAN_CLIENT = 2,
    AUTHN_HMAC_BAN_SEALED = 4
};

/* Whether any ban may be in force at now: one word, read without a lock
 * (the hit path asks it first). */
int authn_hmac_throttle_any(authn_hmac_table_t *t, apr_time_t now);

/* The bans in force for ids at now (wall clock), and the limits one more
 * guess under way could reach: a mask of the above. Takes no lock. */
int authn_hmac_throttle_banned(authn_hmac_table_t *t,
                               const authn_hmac_throttle_conf_t *conf,
                               const authn_hmac_throttle_ids_t *ids,
                               apr_time_t now);

/* Before a verification: the limits that refuse it (a mask of the above:
 * a ban in force, or a count at its limit with the guesses under way);
 * else 0, and the guess takes its place (*entered = 1), which leave()
 * gives back. */
int authn_hmac_throttle_enter(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids,
                              apr_time_t now, int *entered);

/* After it: failed, a wrong password, fp its fingerprint (a word of the
 * credential's MAC), is a new guess unless the pair sent it already in
 * the window (its last 20 wrong passwords are kept: a stale client, or a
 * user retrying old typos, is not guessing). A new guess counts for the
 * pair and the client, within the window from the first; a count that
 * reaches its limit starts a ban. Returns the bans this call started;
 * *fresh whether it counted. */
int authn_hmac_throttle_leave(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                              int failed, apr_time_t now, int *fresh);

/* A wrong password counted without a place (leave()'s count alone): a
 * guess whose count was held until its answer stood. */
int authn_hmac_throttle_count(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                              apr_time_t now, int *fresh);

/* A guess refused without a verification because its client is banned
 * for all users: counted for its pair as a wrong password (fp, as above)
 * unless a repeat. oracle: its user is one of the client's logged-in
 * users (an entry marked for it), whom the ban still serves: a wrong
 * password for such a user is an answer the cache gave, and counts for
 * the client too; at AuthHMACMaxFailures of them (10 without it) the ban
 * is sealed, and refuses those users as well till it ends; before the
 * ban (the client full with guesses under way), such a refusal is one of
 * the client's guesses. Returns the bans that started (the pair's, the
 * client's). */
int authn_hmac_throttle_refused(authn_hmac_table_t *t,
                                const authn_hmac_throttle_conf_t *conf,
                                const authn_hmac_throttle_ids_t *ids,
                                uint64_t fp, int oracle, apr_time_t now);

/* A ban learnt from the farm (which: AUTHN_HMAC_BAN_PAIR or _CLIENT),
 * kept here until until, never past now + conf->ban. Returns which if no
 * ban of it was in force here, else 0. */
int authn_hmac_throttle_ban(authn_hmac_table_t *t,
                            const authn_hmac_throttle_conf_t *conf,
                            const authn_hmac_throttle_ids_t *ids, int which,
                            apr_time_t now, apr_time_t until);

/* ------------------------------------------------ the book of bans */

/* The bans in force are written in a book of AUTHN_HMAC_BOOK entries, so
 * that an admin sees whom they refuse (the status page) and can lift one:
 * the client's address and the user's name, as the error log has them (a
 * ban on the client for all users has no user), nothing else. When the
 * book is full, the entry nearest its end makes room. */
/* AUTHN_HMAC_BOOK and authn_hmac_ban_t: util.h (the status page's). */

/* A ban started or taken here (which: one of the mask above) for client
 * and user, until until. */
void authn_hmac_throttle_book(authn_hmac_table_t *t,
                              const authn_hmac_throttle_ids_t *ids, int which,
                              const char *client, const char *user,
                              size_t user_len, apr_time_t until);

/* The bans in force at now, at most max of them, into out: how many. */
int authn_hmac_throttle_bans(authn_hmac_table_t *t, apr_time_t now,
                             authn_hmac_ban_t *out, int max);

/* Lifts the bans in force of client (every one: user NULL; its ban for
 * all users: user ""; else the one for user): their records forget the
 * ban and the guesses counted. Returns how many it lifted. */
int authn_hmac_throttle_lift(authn_hmac_table_t *t, const char *client,
                             const char *user, apr_time_t now);

#endif /* AUTHN_HMAC_THROTTLE_H */
