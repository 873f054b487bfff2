/* table_int.h: what the shared segment (src/shm/table.c) lends the parts that
 * keep their state in it beside the caches: single flight (src/shm/flight.c),
 * the verification queue (src/shm/queue.c) and the throttle
 * (src/shm/throttle.c). No one else uses it. */
#ifndef AUTHN_HMAC_TABLE_INT_H
#define AUTHN_HMAC_TABLE_INT_H

#include "shm/queue.h"
#include "shm/table.h"

#include <errno.h>
#include <signal.h>

/* The sizes the segment's layout is made of (each file checks its own):
 * AUTHN_HMAC_FLIGHTS verifications in flight per server, of
 * AUTHN_HMAC_FLIGHT_BYTES each (src/shm/flight.c); AUTHN_HMAC_QUEUE_SLOTS
 * places in the queue, of AUTHN_HMAC_PLACE_BYTES each (src/shm/queue.c);
 * records of the throttle, of AUTHN_HMAC_THROTTLE_BYTES each
 * (src/shm/throttle.c), as many as the segment's size makes. */
#define AUTHN_HMAC_FLIGHTS        64
#define AUTHN_HMAC_FLIGHT_BYTES   ((size_t)64)
#define AUTHN_HMAC_PLACE_BYTES    ((size_t)48)
#define AUTHN_HMAC_THROTTLE_BYTES ((size_t)128)
/* The book of bans (src/shm/throttle.c): who each ban in force refuses, for
 * the status page, after the throttle's records. */
#define AUTHN_HMAC_BOOK_BYTES ((size_t)32 * 256)
/* The memo region (src/shm/memo.c): records of AUTHN_HMAC_MEMO_BYTES in
 * sets of AUTHN_HMAC_MEMO_WAYS, 1/32 of the segment, after the book. */
#define AUTHN_HMAC_MEMO_BYTES ((size_t)128)
#define AUTHN_HMAC_MEMO_WAYS  4

/* Tries of a seqlock's reader; then a slot is a miss, a flight busy. */
#define AUTHN_HMAC_READ_TRIES 64

/* A place in the verification queue is free, waiting, or running. */
enum { PLACE_FREE, PLACE_WAITING, PLACE_RUNNING };

/* The queue's words in the segment's header: written under the writers'
 * mutex, read without it. */
typedef struct {
    uint64_t ticket;    /* the last place's */
    uint64_t places[3]; /* how many places are free, waiting, running */
    int64_t reaped;     /* monotonic: when the queue was last reaped */
    uint64_t cursor;    /* the place the next reap starts at */
    uint64_t head;      /* the first waiting place's ticket; 0: none */
} authn_hmac_queue_hdr_t;

/* Where a process finds them in its mapping of the segment. */
typedef struct {
    apr_global_mutex_t *mutex; /* the writers'; NULL: one process */
    void *flights;             /* AUTHN_HMAC_FLIGHTS flights */
    void *places;              /* AUTHN_HMAC_QUEUE_SLOTS places */
    void *throttle;            /* throttle_slots records */
    uint64_t throttle_slots;
    int64_t *throttle_until; /* no ban lasts past it (read without lock) */
    void *book;              /* AUTHN_HMAC_BOOK bans */
    void *memo;              /* memo_slots memo records */
    uint64_t memo_slots;     /* a multiple of AUTHN_HMAC_MEMO_WAYS */
    authn_hmac_queue_hdr_t *queue;
    uint64_t *verifying_max; /* the counter: most places run at once */
} authn_hmac_table_parts_t;

const authn_hmac_table_parts_t *authn_hmac_table_parts(authn_hmac_table_t *t);

/* Whether the process of pid (a flight's runner, a place's holder) runs. */
static inline int authn_hmac_alive(int64_t pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

#endif /* AUTHN_HMAC_TABLE_INT_H */
