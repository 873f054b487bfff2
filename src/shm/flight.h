/* shm/flight.h: single flight in the server (src/shm/flight.c):
 * concurrent misses of one credential run one verification, in any
 * process; its state lives in the shared segment (table.h). */
#ifndef AUTHN_HMAC_FLIGHT_H
#define AUTHN_HMAC_FLIGHT_H

#include "core/cred.h"
#include "shm/table.h"

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

/* A run of a flight: its place, and its start (which tells it from a later
 * run of the same credential in that place). */
typedef struct {
    int slot;
    apr_time_t run;
} authn_hmac_flight_t;

authn_hmac_flight_rc authn_hmac_flight_begin(
    authn_hmac_table_t *t, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_interval_time_t stale_after, authn_hmac_flight_t *fl);

/* result: 1 granted, 0 refused (a mismatch), -1 no result (another
 * failure: the waiters verify by themselves). */
void authn_hmac_flight_end(authn_hmac_table_t *t, const authn_hmac_flight_t *fl,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           int result, apr_time_t now);

/* Waits for the runner of key: 1 if it granted, 0 if it refused, -1 if no
 * answer came (the deadline, the runner died, the run was taken over): the
 * waiter then verifies by itself. Takes no lock. */
int authn_hmac_flight_wait(authn_hmac_table_t *t, const authn_hmac_flight_t *fl,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           apr_time_t deadline);

#endif /* AUTHN_HMAC_FLIGHT_H */
