/* shm/queue.h: the server's verification queue (src/shm/queue.c); its
 * places live in the shared segment (table.h). */
#ifndef AUTHN_HMAC_QUEUE_H
#define AUTHN_HMAC_QUEUE_H

#include "shm/table.h"

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

#endif /* AUTHN_HMAC_QUEUE_H */
