/* queue.c: the server's verification queue.
 *
 * AUTHN_HMAC_QUEUE_SLOTS places in the shared segment (table.c lays it
 * out), and the queue's words in its header: how many places are free,
 * waiting and running, the head of the line, the last ticket, the reaper's
 * cursor. Places are taken and given back under the writers' mutex; a
 * waiter looks at its turn without it. A place's process is known by its
 * pid and start time: the places of processes that died are reaped, a few
 * at a time.
 */
#include "shm/queue.h"
#include "table_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A place in the verification queue; written under the writers' mutex. */
typedef struct {
    uint32_t state;
    uint32_t young_ms; /* for this long after taken, kill() alone tells */
    int64_t pid;       /* of the request's process */
    uint64_t start;    /* and when that process started: pids are reused */
    uint64_t ticket;   /* order of arrival */
    uint64_t client;   /* a hash of the client's address */
    int64_t taken;     /* monotonic */
} place_t;

typedef char
    place_is_as_laid_out[sizeof(place_t) == AUTHN_HMAC_PLACE_BYTES ? 1 : -1];

/* The queue as a process sees it in its mapping of the segment. */
typedef struct {
    apr_global_mutex_t *mutex;
    authn_hmac_queue_hdr_t *hdr;
    place_t *place;
    uint64_t *verifying_max;
} queue_t;

static queue_t queue_of(authn_hmac_table_t *t)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    queue_t q = {s->mutex, s->queue, s->places, s->verifying_max};

    return q;
}

/* NB: the queue's mutex is the writers' mutex, which refreshes also try and
 * stores take: nothing done under it grows with the places taken, and no
 * more than REAP_CHECKS processes are asked whether they live per hold (a
 * kill() and, for an old place, a read of /proc: 2.6 µs each). */
#define REAP_EVERY  10000 /* µs: the least time between two reaps */
#define REAP_CHECKS 16    /* other processes' places looked at per reap */

/* The first waiting place's ticket, found again; under the mutex. */
static void queue_find_head(queue_t *q)
{
    uint64_t head = 0;
    int i;

    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS; i++) {
        const place_t *pl = &q->place[i];

        if (pl->state == PLACE_WAITING && (!head || pl->ticket < head))
            head = pl->ticket;
    }
    __atomic_store_n(&q->hdr->head, head, __ATOMIC_RELAXED);
}

/* Moves a place to another state, and keeps the header's count of each
 * (the status page and the queue read those, never the places) and the
 * head of the line; under the mutex. */
static void place_set(queue_t *q, place_t *pl, uint32_t state)
{
    uint64_t *n = q->hdr->places, head = q->hdr->head;
    uint32_t was = pl->state;

    __atomic_store_n(&n[was], n[was] - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&n[state], n[state] + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->state, state, __ATOMIC_RELAXED);
    /* NB: tickets only grow, so a newcomer heads the line only when no one
     * waits; the head found again only when it leaves the line (once a
     * turn: 256 words read, no call). */
    if (state == PLACE_WAITING && (!head || pl->ticket < head))
        __atomic_store_n(&q->hdr->head, pl->ticket, __ATOMIC_RELAXED);
    else if (was == PLACE_WAITING && state != PLACE_WAITING &&
             pl->ticket == head)
        queue_find_head(q);
}

/* When process pid started (clock ticks since boot, from /proc), or 0. */
static uint64_t proc_start(int64_t pid)
{
    char path[64], buf[512];
    unsigned long long start = 0;
    const char *c;
    char *end = NULL;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* NB: after the command's closing parenthesis (the command may hold
     * spaces and parentheses): field 3 on; the start time is field 22. */
    if (!(c = strrchr(buf, ')')))
        return 0;
    for (field = 2; *c && field < 22; c++)
        if (*c == ' ')
            field++;
    start = strtoull(c, &end, 10);
    return end != c ? (uint64_t)start : 0;
}

/* This process's start time, once. */
static uint64_t own_start(void)
{
    static int64_t pid;
    static uint64_t start;

    if (__atomic_load_n(&pid, __ATOMIC_ACQUIRE) != (int64_t)getpid()) {
        __atomic_store_n(&start, proc_start((int64_t)getpid()),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&pid, (int64_t)getpid(), __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&start, __ATOMIC_RELAXED);
}

/* Whether the process that took the place still runs: its pid, and once
 * the place is older than its wait limit (where /proc tells) the same start
 * time, not another process given its pid. NB: a pid reused within the
 * wait limit keeps the place until then, never longer. */
static int place_alive(const place_t *pl, apr_time_t now)
{
    return authn_hmac_alive(pl->pid) &&
           (now - pl->taken < (apr_time_t)pl->young_ms * 1000 || !pl->start ||
            proc_start(pl->pid) == pl->start);
}

/* Whether a reap is due at now, claimed for the caller: of the processes
 * that look at once, one reaps. */
static int reap_due(queue_t *q, apr_time_t now)
{
    int64_t last = __atomic_load_n(&q->hdr->reaped, __ATOMIC_RELAXED);

    return (now - last >= REAP_EVERY || now < last) &&
           __atomic_compare_exchange_n(&q->hdr->reaped, &last, now, 0,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Frees the places of processes that died, looking at REAP_CHECKS places
 * of other processes from where the last reap stopped (so every place is
 * looked at in turn); under the mutex. Returns how many it freed. */
static int queue_reap(queue_t *q, apr_time_t now)
{
    uint64_t at = q->hdr->cursor % AUTHN_HMAC_QUEUE_SLOTS;
    int i, checks = 0, freed = 0;

    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS && checks < REAP_CHECKS; i++) {
        place_t *pl = &q->place[at];

        at = (at + 1) % AUTHN_HMAC_QUEUE_SLOTS;
        if (pl->state == PLACE_FREE ||
            (pl->pid == (int64_t)getpid() && pl->start == own_start()))
            continue; /* this process's own */
        checks++;
        if (!place_alive(pl, now)) {
            place_set(q, pl, PLACE_FREE);
            freed++;
        }
    }
    __atomic_store_n(&q->hdr->cursor, at, __ATOMIC_RELAXED);
    return freed;
}

static void queue_take(queue_t *q, int i, uint32_t state, uint64_t client,
                       apr_time_t now, apr_interval_time_t patience,
                       authn_hmac_turn_t *turn)
{
    place_t *pl = &q->place[i];
    apr_interval_time_t ms = patience > 0 ? patience / 1000 : 0;

    if (pl->state != PLACE_FREE)
        place_set(q, pl, PLACE_FREE); /* a newcomer takes it over */
    turn->place = i;
    turn->ticket = ++q->hdr->ticket;
    __atomic_store_n(&pl->pid, (int64_t)getpid(), __ATOMIC_RELAXED);
    __atomic_store_n(&pl->start, own_start(), __ATOMIC_RELAXED);
    __atomic_store_n(&pl->client, client, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->ticket, turn->ticket, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->taken, now, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->young_ms, ms < UINT32_MAX ? (uint32_t)ms : UINT32_MAX,
                     __ATOMIC_RELAXED);
    place_set(q, pl, state);
}

/* Notes a place that starts to run, and the most that ran at once. */
static void queue_ran(queue_t *q)
{
    uint64_t *max = q->verifying_max;
    uint64_t running = q->hdr->places[PLACE_RUNNING];

    if (running > __atomic_load_n(max, __ATOMIC_RELAXED))
        __atomic_store_n(max, running, __ATOMIC_RELAXED);
}

/* The places each client holds, counted once: an open-addressed table of
 * twice the places. */
#define HOLDERS ((size_t)2 * AUTHN_HMAC_QUEUE_SLOTS)

typedef struct {
    uint64_t client[HOLDERS];
    int n[HOLDERS];
} holders_t;

static int *holds(holders_t *h, uint64_t client)
{
    size_t i = (size_t)(client ^ client >> 29) % HOLDERS;

    while (h->n[i] && h->client[i] != client)
        i = (i + 1) % HOLDERS;
    h->client[i] = client;
    return &h->n[i];
}

/* With every place taken, for a newcomer of client: the newest waiting
 * place of the client that holds the most, if that is more than client's
 * own + 1; else -1. Two passes over the places (it was a count of each
 * waiting place's client's places: 65,000 reads with 256 taken). */
static int queue_victim(const queue_t *q, uint64_t client)
{
    holders_t h;
    int i, victim = -1, most, taken = 0;

    memset(h.n, 0, sizeof(h.n));
    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS; i++)
        if (q->place[i].state != PLACE_FREE) {
            ++*holds(&h, q->place[i].client);
            taken++;
        }
    most = *holds(&h, client) + 1;
    /* NB: no other client can hold more than most when the places left
     * are that few (one client alone: none to take). */
    if (taken - (most - 1) <= most)
        return -1;
    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS; i++) {
        const place_t *pl = &q->place[i];
        int n;

        if (pl->state != PLACE_WAITING)
            continue;
        n = *holds(&h, pl->client);
        if (n > most || (n == most && victim >= 0 &&
                         pl->ticket > q->place[victim].ticket)) {
            most = n;
            victim = i;
        }
    }
    return victim;
}

authn_hmac_queue_rc authn_hmac_queue_enter(authn_hmac_table_t *t,
                                           uint64_t client, int cap,
                                           int backlog,
                                           apr_interval_time_t patience,
                                           authn_hmac_turn_t *turn)
{
    queue_t view = queue_of(t), *q = &view;
    const uint64_t *n = q->hdr->places;
    int i, free_at = -1, victim;
    uint64_t running, waiting, room;
    authn_hmac_queue_rc rc = AUTHN_HMAC_QUEUE_BUSY;
    apr_time_t now = authn_hmac_monotonic();

    if (cap + backlog > AUTHN_HMAC_QUEUE_SLOTS)
        backlog = AUTHN_HMAC_QUEUE_SLOTS - cap;
    room = (uint64_t)cap + (uint64_t)backlog;
    turn->place = -1;
    turn->ticket = 0;
    if (!q->mutex)
        return AUTHN_HMAC_QUEUE_RUN; /* nothing shared: no cap */
    if (apr_global_mutex_lock(q->mutex) != APR_SUCCESS)
        return AUTHN_HMAC_QUEUE_BUSY;
    /* NB: reaped when the queue looks full (a dead process's place must
     * not make a newcomer busy), else once in a while: not on each entry. */
    if (n[PLACE_RUNNING] + n[PLACE_WAITING] >= room || reap_due(q, now))
        queue_reap(q, now);
    running = n[PLACE_RUNNING];
    waiting = n[PLACE_WAITING];
    if (running + waiting < room)
        for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS && free_at < 0; i++)
            if (q->place[i].state == PLACE_FREE)
                free_at = i;
    /* NB: none waiting, else a newcomer would pass them. */
    if (free_at >= 0 && waiting == 0 && running < (uint64_t)cap) {
        queue_take(q, free_at, PLACE_RUNNING, client, now, patience, turn);
        queue_ran(q);
        rc = AUTHN_HMAC_QUEUE_RUN;
    }
    else if (free_at >= 0) {
        queue_take(q, free_at, PLACE_WAITING, client, now, patience, turn);
        rc = AUTHN_HMAC_QUEUE_WAIT;
    }
    /* Full: a newcomer takes the newest waiting place of the client that
     * holds the most places, if that is at least two more than its own
     * client holds; that request is then busy. No address (nor two) can
     * hold the queue against the others; alone, one may use all of it (a
     * burst of logins from behind one NAT). */
    else if ((victim = queue_victim(q, client)) >= 0) {
        queue_take(q, victim, PLACE_WAITING, client, now, patience, turn);
        rc = AUTHN_HMAC_QUEUE_WAIT;
    }
    apr_global_mutex_unlock(q->mutex);
    return rc;
}

/* Whether the place is still this turn's (not taken by a newcomer, not
 * reaped). */
static int queue_mine(const queue_t *q, const authn_hmac_turn_t *turn)
{
    const place_t *pl = &q->place[turn->place];

    return __atomic_load_n(&pl->ticket, __ATOMIC_RELAXED) == turn->ticket &&
           __atomic_load_n(&pl->state, __ATOMIC_RELAXED) != PLACE_FREE;
}

/* Whether the waiting place may run now: a free turn, and it heads the
 * line (no one waiting came before it). */
static int queue_turn(const queue_t *q, const authn_hmac_turn_t *turn, int cap)
{
    return __atomic_load_n(&q->hdr->head, __ATOMIC_RELAXED) == turn->ticket &&
           __atomic_load_n(&q->hdr->places[PLACE_RUNNING], __ATOMIC_RELAXED) <
               (uint64_t)cap;
}

/* How long a waiter sleeps between looks: 5 ms among the first few of the
 * line, 100 ms further back (tickets count those that left, too: a place
 * may look slower than it needs, never wait longer than it may). NB: 192
 * waiters that all looked every 5 ms woke 38,000 times a second, at the
 * priority of requests. */
#define NEAR_HEAD 8

static long queue_nap(const queue_t *q, const authn_hmac_turn_t *turn)
{
    uint64_t head = __atomic_load_n(&q->hdr->head, __ATOMIC_RELAXED);

    return turn->ticket - head < NEAR_HEAD ? 5000000L : 100000000L;
}

int authn_hmac_queue_wait(authn_hmac_table_t *t, authn_hmac_turn_t *turn,
                          int cap, apr_time_t deadline)
{
    queue_t view = queue_of(t), *q = &view;
    int hurry = 0;

    for (;;) {
        apr_time_t now = authn_hmac_monotonic();
        int ran = 0, mine, reap;
        struct timespec nap = {0, hurry ? 5000000L : queue_nap(q, turn)};

        /* NB: a look without the mutex first; the mutex decides. A reap
         * is done by one waiter of those that look, every REAP_EVERY. */
        if (!queue_mine(q, turn))
            return 0; /* a newcomer within its share took it */
        reap = reap_due(q, now);
        if (queue_turn(q, turn, cap) || reap) {
            if (apr_global_mutex_lock(q->mutex) != APR_SUCCESS)
                break;
            /* NB: more dead may follow those just freed: this waiter
             * looks often until a reap frees none. */
            if (reap)
                hurry = queue_reap(q, now) > 0;
            mine = queue_mine(q, turn);
            if (mine && queue_turn(q, turn, cap)) {
                place_set(q, &q->place[turn->place], PLACE_RUNNING);
                queue_ran(q);
                ran = 1;
            }
            apr_global_mutex_unlock(q->mutex);
            if (ran)
                return 1;
            if (!mine)
                return 0;
        }
        if (now >= deadline)
            break;
        nanosleep(&nap, NULL);
    }
    authn_hmac_queue_leave(t, turn);
    return 0;
}

void authn_hmac_queue_leave(authn_hmac_table_t *t, authn_hmac_turn_t *turn)
{
    queue_t view = queue_of(t), *q = &view;

    if (turn->place < 0 || !q->mutex ||
        apr_global_mutex_lock(q->mutex) != APR_SUCCESS)
        return;
    if (queue_mine(q, turn))
        place_set(q, &q->place[turn->place], PLACE_FREE);
    turn->place = -1;
    apr_global_mutex_unlock(q->mutex);
}
