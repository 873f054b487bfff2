/* Unit tests: the verification queue (src/shm/queue.c), across processes. */
#include "shm/queue.h"
#include "shm/table.h"
#include "core/util.h"
#include "shared_table.h"
#include "unit.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC(n) apr_time_from_sec(n)

static int queue_taken(authn_hmac_table_t *t)
{
    authn_hmac_stats_t st;

    authn_hmac_table_stats(t, SEC(1), &st);
    return (int)(st.verifying + st.waiting);
}

#define DEAD 200

/* The places of processes that died are freed a few at a time: an entry
 * that finds the queue full looks at 16 of them, not at all 200 (each a
 * kill() and a read of /proc under the mutex, found by review: 670 µs);
 * waiting, the others are freed within a few reaps, and the waiter's turn
 * comes. */
static void test_queue_reaps_a_few_at_a_time(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_turn_t turn;
    pid_t pids[DEAD];
    int go[2], i, ok = 1, status;

    CHECK(pipe(go) == 0);
    for (i = 0; i < DEAD; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            authn_hmac_table_t *ct = shared_child();
            char c;

            close(go[1]);
            /* Each its own client; the first runs, the others wait. */
            if (authn_hmac_queue_enter(ct, (uint64_t)i + 1, 1, DEAD - 1, 0,
                                       &turn) == AUTHN_HMAC_QUEUE_BUSY)
                _exit(1);
            (void)!read(go[0], &c, 1); /* till the parent lets go */
            _exit(0);                  /* dies holding its place */
        }
        /* NB: one at a time, so that all are in before any dies. */
        while (queue_taken(t) < i + 1 && waitpid(pids[i], NULL, WNOHANG) == 0)
            usleep(1000);
    }
    CHECK(queue_taken(t) == DEAD);
    close(go[1]);
    for (i = 0; i < DEAD; i++) {
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    close(go[0]);
    CHECK(ok);
    /* Full of the dead: this entry frees 16 of them and takes one. */
    CHECK(authn_hmac_queue_enter(t, 9999, 1, DEAD - 1, SEC(60), &turn) ==
          AUTHN_HMAC_QUEUE_WAIT);
    CHECK(queue_taken(t) == DEAD - 16 + 1);
    /* Every 10 ms a waiter reaps 16 more: the rest are gone, and the turn
     * comes, in well under the second it may wait. */
    CHECK(authn_hmac_queue_wait(t, &turn, 1, authn_hmac_monotonic() + SEC(1)) ==
          1);
    CHECK(queue_taken(t) == 1);
    authn_hmac_queue_leave(t, &turn);
    CHECK(queue_taken(t) == 0);
    shared_done();
}

/* A place is known alive by kill() alone until its wait limit, and by its
 * process's start time in /proc after: a died process's pid that another
 * program got since keeps the place until then, and no longer. The pid is
 * handed on through /proc/sys/kernel/ns_last_pid, which needs root:
 * elsewhere, or if another process took the pid first, it is skipped. */
static void test_queue_reads_proc_only_for_old_places(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    authn_hmac_turn_t turn;
    apr_time_t taken;
    pid_t pid, again;

    taken = authn_hmac_monotonic();
    pid = fork();
    if (pid == 0)
        _exit(authn_hmac_queue_enter(shared_child(), 7, 1, 0, SEC(1), &turn) ==
                      AUTHN_HMAC_QUEUE_RUN
                  ? 0
                  : 1);
    waitpid(pid, NULL, 0);
    if ((again = unit_reuse_pid(pid)) < 0) {
        shared_done();
        return;
    }
    /* Younger than its second: kill() finds a process. */
    CHECK(authn_hmac_queue_enter(t, 8, 1, 0, SEC(60), &turn) ==
          AUTHN_HMAC_QUEUE_BUSY);
    CHECK(authn_hmac_monotonic() - taken < SEC(1));
    while (authn_hmac_monotonic() - taken < SEC(1) + SEC(1) / 10)
        usleep(20000);
    /* Older: /proc tells another process. */
    CHECK(authn_hmac_queue_enter(t, 8, 1, 0, SEC(60), &turn) ==
          AUTHN_HMAC_QUEUE_RUN);
    authn_hmac_queue_leave(t, &turn);
    kill(again, SIGKILL);
    waitpid(again, NULL, 0);
    shared_done();
}

#define PLACES AUTHN_HMAC_QUEUE_SLOTS

/* Every place taken (one process: none is reaped), by client 1 (200) and
 * client 2 (56): client 1 finds no place; client 2, then a third, each
 * takes the newest waiting place of client 1, which holds the most. The
 * line keeps its order when places leave from its head or its middle. */
static void test_queue_full_share_and_order(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    static authn_hmac_turn_t turn[PLACES];
    authn_hmac_turn_t late, more;
    int i;

    for (i = 0; i < PLACES; i++)
        CHECK(authn_hmac_queue_enter(t, i < 200 ? 1 : 2, 1, PLACES - 1, SEC(60),
                                     &turn[i]) ==
              (i == 0 ? AUTHN_HMAC_QUEUE_RUN : AUTHN_HMAC_QUEUE_WAIT));
    CHECK(queue_taken(t) == PLACES);
    CHECK(authn_hmac_queue_enter(t, 1, 1, PLACES - 1, SEC(60), &more) ==
          AUTHN_HMAC_QUEUE_BUSY);
    CHECK(authn_hmac_queue_enter(t, 2, 1, PLACES - 1, SEC(60), &more) ==
          AUTHN_HMAC_QUEUE_WAIT);
    CHECK(more.place == turn[199].place);
    CHECK(authn_hmac_queue_enter(t, 3, 1, PLACES - 1, SEC(60), &late) ==
          AUTHN_HMAC_QUEUE_WAIT);
    CHECK(late.place == turn[198].place);
    /* Those places are no longer client 1's: leaving them frees nothing. */
    authn_hmac_queue_leave(t, &turn[199]);
    authn_hmac_queue_leave(t, &turn[198]);
    CHECK(queue_taken(t) == PLACES);
    /* The one running ends; of the waiting, the first runs, not another. */
    authn_hmac_queue_leave(t, &turn[0]);
    CHECK(authn_hmac_queue_wait(t, &turn[2], 1, 0) == 0); /* gives up */
    CHECK(authn_hmac_queue_wait(t, &turn[1], 1, 0) == 1);
    authn_hmac_queue_leave(t, &turn[1]);
    /* The head (2) gave up, and one from the middle leaves: 3 is next. */
    authn_hmac_queue_leave(t, &turn[100]);
    CHECK(authn_hmac_queue_wait(t, &turn[4], 1, 0) == 0);
    CHECK(authn_hmac_queue_wait(t, &turn[3], 1, 0) == 1);
    authn_hmac_queue_leave(t, &turn[3]);
    for (i = 5; i < PLACES; i++)
        if (i != 100 && i != 198 && i != 199)
            authn_hmac_queue_leave(t, &turn[i]);
    /* The newcomers, in their order of arrival. */
    CHECK(authn_hmac_queue_wait(t, &late, 1, 0) == 0);
    CHECK(authn_hmac_queue_wait(t, &more, 1, 0) == 1);
    authn_hmac_queue_leave(t, &more);
    CHECK(queue_taken(t) == 0);
    shared_done();
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_queue_reaps_a_few_at_a_time, p);
    RUN(test_queue_reads_proc_only_for_old_places, p);
    RUN(test_queue_full_share_and_order, p);
    return unit_end();
}
