/* Unit tests: single flight (src/shm/flight.c) without httpd, on a table
 * in shared memory (shared_table.h): threads of this process and forked
 * children stand for the server's threads and processes. */
#include "shm/flight.h"
#include "shm/table.h"
#include "core/util.h"
#include "shared_table.h"
#include "unit.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC(n)  apr_time_from_sec(n)
#define MSEC(n) apr_time_from_msec(n)
#define FLIGHTS 64 /* AUTHN_HMAC_FLIGHTS, per server */

/* A credential MAC: n tells one from another, in its last byte too, so
 * that the whole key is compared. */
static void key_of(unsigned char k[AUTHN_HMAC_KEY_LEN], unsigned n)
{
    memset(k, 0x5a, AUTHN_HMAC_KEY_LEN);
    memcpy(k, &n, sizeof(n));
    k[AUTHN_HMAC_KEY_LEN - 1] = (unsigned char)n;
}

/* A waiter's answer, and how long it took to come. */
static int wait_for(authn_hmac_table_t *t, const authn_hmac_flight_t *fl,
                    const unsigned char *k, apr_interval_time_t within,
                    apr_interval_time_t *took)
{
    apr_time_t t0 = authn_hmac_monotonic();
    int rc = authn_hmac_flight_wait(t, fl, k, t0 + within);

    *took = authn_hmac_monotonic() - t0;
    return rc;
}

/* A run of k begun at now, and a miss of k then that waits for it. */
static void run_and_waiter(authn_hmac_table_t *t, const unsigned char *k,
                           apr_time_t now, authn_hmac_flight_t *run,
                           authn_hmac_flight_t *waiter)
{
    CHECK(authn_hmac_flight_begin(t, k, now, SEC(60), run) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(t, k, now, SEC(60), waiter) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(waiter->slot == run->slot && waiter->run == run->run);
}

/* Threads that miss one credential at once: each begins, and the one told
 * to RUN ends with the round's result only after all the others have
 * begun (so that none comes after the end and runs again). */
#define THREADS 8

typedef struct {
    authn_hmac_table_t *t;
    const unsigned char *key;
    pthread_barrier_t *start;
    int *begun;
    int result; /* the round's, which the runner ends with */
    authn_hmac_flight_rc rc;
    int got; /* a waiter's answer */
} miss_t;

static void *miss(void *arg)
{
    miss_t *m = arg;
    authn_hmac_flight_t fl;

    pthread_barrier_wait(m->start);
    m->rc = authn_hmac_flight_begin(m->t, m->key, authn_hmac_monotonic(),
                                    SEC(60), &fl);
    __atomic_add_fetch(m->begun, 1, __ATOMIC_SEQ_CST);
    if (m->rc == AUTHN_HMAC_FLIGHT_RUN) {
        while (__atomic_load_n(m->begun, __ATOMIC_SEQ_CST) < THREADS)
            usleep(1000);
        usleep(20000); /* the waiters are in their wait, or nearly */
        authn_hmac_flight_end(m->t, &fl, m->key, m->result,
                              authn_hmac_monotonic());
    }
    else if (m->rc == AUTHN_HMAC_FLIGHT_WAIT)
        m->got = authn_hmac_flight_wait(m->t, &fl, m->key,
                                        authn_hmac_monotonic() + SEC(30));
    return NULL;
}

/* One round: how many ran; every waiter got the round's result. */
static int miss_at_once(authn_hmac_table_t *t, const unsigned char *key,
                        int result)
{
    pthread_t th[THREADS];
    pthread_barrier_t start;
    miss_t m[THREADS];
    int i, begun = 0, runs = 0;

    CHECK(pthread_barrier_init(&start, NULL, THREADS) == 0);
    for (i = 0; i < THREADS; i++) {
        m[i] = (miss_t){t, key, &start, &begun, result, AUTHN_HMAC_FLIGHT_NONE,
                        -2};
        CHECK(pthread_create(&th[i], NULL, miss, &m[i]) == 0);
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        runs += m[i].rc == AUTHN_HMAC_FLIGHT_RUN;
        CHECK(m[i].rc == AUTHN_HMAC_FLIGHT_RUN ||
              (m[i].rc == AUTHN_HMAC_FLIGHT_WAIT && m[i].got == result));
    }
    pthread_barrier_destroy(&start);
    return runs;
}

/* Many threads miss one credential: one verifies, the others wait and
 * learn its result, a grant or a refusal; round after round of the same
 * credential (each a new run, and past the number of places). */
static void test_one_runs_the_others_wait(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[AUTHN_HMAC_KEY_LEN];
    int round;

    key_of(k, 1);
    for (round = 0; round < FLIGHTS + 6; round++)
        CHECK(miss_at_once(t, k, round % 2) == 1);
    shared_done();
}

/* A waiter gives up at its deadline while its runner still runs (-1: it
 * verifies by itself), not before; the result, when it comes, is still
 * there for it. */
static void test_a_wait_times_out(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run, waiter;
    apr_interval_time_t took;
    apr_time_t now = authn_hmac_monotonic();

    key_of(k, 1);
    run_and_waiter(t, k, now, &run, &waiter);
    CHECK(wait_for(t, &waiter, k, MSEC(150), &took) == -1);
    CHECK(took >= MSEC(150) && took < SEC(5));
    authn_hmac_flight_end(t, &run, k, 1, authn_hmac_monotonic());
    CHECK(wait_for(t, &waiter, k, SEC(5), &took) == 1);
    CHECK(took < SEC(1));
    shared_done();
}

/* A runner that ends without a result (a failure that is no mismatch):
 * its waiter stops waiting at once and verifies by itself, and the
 * credential's next miss runs again, in the place that was freed. */
typedef struct {
    authn_hmac_table_t *t;
    const authn_hmac_flight_t *fl;
    const unsigned char *key;
    int got;
    apr_interval_time_t took;
} waiter_t;

static void *waiter(void *arg)
{
    waiter_t *w = arg;

    w->got = wait_for(w->t, w->fl, w->key, SEC(30), &w->took);
    return NULL;
}

static void test_a_run_without_result(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run, fl, again;
    apr_time_t now = authn_hmac_monotonic();
    waiter_t w = {t, &fl, k, -2, 0};
    pthread_t th;

    key_of(k, 1);
    run_and_waiter(t, k, now, &run, &fl);
    CHECK(pthread_create(&th, NULL, waiter, &w) == 0);
    usleep(50000); /* it waits */
    authn_hmac_flight_end(t, &run, k, -1, authn_hmac_monotonic());
    pthread_join(th, NULL);
    CHECK(w.got == -1);
    CHECK(w.took < SEC(5));
    CHECK(authn_hmac_flight_begin(t, k, now, SEC(60), &again) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(again.slot == run.slot && again.run > run.run);
    shared_done();
}

/* A runner in another process that dies before it ends: while it runs its
 * waiter waits (to the deadline); once it is gone the waiter learns it
 * within a few polls, not at the deadline, and the next miss takes the
 * run over in that place. */
static void test_a_runner_dies(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run, fl, again;
    apr_interval_time_t took;
    int ready[2], go[2], status;
    pid_t pid;
    char c = 0;

    key_of(k, 1);
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid = fork();
    if (pid == 0) {
        authn_hmac_table_t *ct = shared_child();

        close(go[1]);
        if (authn_hmac_flight_begin(ct, k, authn_hmac_monotonic(), SEC(60),
                                    &run) != AUTHN_HMAC_FLIGHT_RUN)
            run.slot = -1;
        (void)!write(ready[1], &run, sizeof(run));
        (void)!read(go[0], &c, 1);
        _exit(0); /* without an end */
    }
    close(go[0]);
    CHECK(read(ready[0], &run, sizeof(run)) == (ssize_t)sizeof(run));
    CHECK(authn_hmac_flight_begin(t, k, authn_hmac_monotonic(), SEC(60), &fl) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(fl.slot == run.slot && fl.run == run.run);
    CHECK(wait_for(t, &fl, k, MSEC(150), &took) == -1);
    CHECK(took >= MSEC(150));
    CHECK(write(go[1], &c, 1) == 1);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    CHECK(wait_for(t, &fl, k, SEC(30), &took) == -1);
    CHECK(took < SEC(5));
    CHECK(authn_hmac_flight_begin(t, k, authn_hmac_monotonic(), SEC(60),
                                  &again) == AUTHN_HMAC_FLIGHT_RUN);
    CHECK(again.slot == run.slot && again.run > run.run);
    close(ready[0]);
    close(ready[1]);
    close(go[1]);
    shared_done();
}

/* A runner past its time (stale_after) is taken over: a new run in its
 * place, whose waiters wait for it; the old run's waiter no longer waits,
 * and the old run's late end is no answer to the new run's waiters. */
static void test_a_late_runner_is_taken_over(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t old, old_waiter, run, fl;
    apr_interval_time_t took;
    apr_time_t now = authn_hmac_monotonic();

    key_of(k, 1);
    CHECK(authn_hmac_flight_begin(t, k, now, SEC(1), &old) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(t, k, now + SEC(1) - 1, SEC(1),
                                  &old_waiter) == AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(authn_hmac_flight_begin(t, k, now + SEC(1), SEC(1), &run) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(run.slot == old.slot && run.run > old.run);
    CHECK(wait_for(t, &old_waiter, k, SEC(30), &took) == -1);
    CHECK(took < SEC(5));
    CHECK(authn_hmac_flight_begin(t, k, now + SEC(1), SEC(1), &fl) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(fl.slot == run.slot && fl.run == run.run);
    authn_hmac_flight_end(t, &old, k, 1, now + SEC(2));
    CHECK(wait_for(t, &fl, k, MSEC(150), &took) == -1);
    CHECK(took >= MSEC(150));
    authn_hmac_flight_end(t, &run, k, 0, now + SEC(2));
    CHECK(wait_for(t, &fl, k, SEC(30), &took) == 0);
    shared_done();
}

/* Distinct credentials, even one byte apart, run each its own flight: one
 * does not wait for the other, nor take its result. */
static void test_distinct_credentials_do_not_wait(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k1[AUTHN_HMAC_KEY_LEN], k2[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t r1, r2, w1, w2;
    apr_interval_time_t took;
    apr_time_t now = authn_hmac_monotonic();

    key_of(k1, 1);
    memcpy(k2, k1, sizeof(k2));
    k2[AUTHN_HMAC_KEY_LEN - 1] ^= 1;
    CHECK(authn_hmac_flight_begin(t, k1, now, SEC(60), &r1) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(t, k2, now, SEC(60), &r2) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(r2.slot != r1.slot);
    CHECK(authn_hmac_flight_begin(t, k1, now, SEC(60), &w1) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(authn_hmac_flight_begin(t, k2, now, SEC(60), &w2) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(w1.slot == r1.slot && w2.slot == r2.slot);
    /* The other credential's end, under this one's key: not this run. */
    authn_hmac_flight_end(t, &r1, k2, 1, now);
    authn_hmac_flight_end(t, &r2, k2, 1, now);
    CHECK(wait_for(t, &w2, k2, SEC(30), &took) == 1);
    CHECK(wait_for(t, &w1, k1, MSEC(150), &took) == -1);
    CHECK(took >= MSEC(150));
    authn_hmac_flight_end(t, &r1, k1, 0, now);
    CHECK(wait_for(t, &w1, k1, SEC(30), &took) == 0);
    shared_done();
}

/* The places: a credential that ended is run again in another place while
 * one is free, so that its waiter still finds the result; with every place
 * running, a miss verifies alone (NONE); then the place that ended longest
 * ago is reused first, and a waiter of the run that was there verifies by
 * itself, as does the run's late end change nothing. */
static void test_places_are_reused(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[FLIGHTS + 2][AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run[FLIGHTS + 2], w, again, fl;
    apr_interval_time_t took;
    apr_time_t now = authn_hmac_monotonic();
    int i;

    for (i = 0; i < FLIGHTS + 2; i++)
        key_of(k[i], (unsigned)i + 1);
    run_and_waiter(t, k[0], now, &run[0], &w);
    authn_hmac_flight_end(t, &run[0], k[0], 1, now + 1);
    CHECK(authn_hmac_flight_begin(t, k[0], now, SEC(60), &again) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(again.slot != run[0].slot);
    CHECK(wait_for(t, &w, k[0], SEC(30), &took) == 1);
    authn_hmac_flight_end(t, &again, k[0], 1, now + 2);

    /* Every place running: 0 and `again` ended, so 62 more fill them. */
    for (i = 1; i < FLIGHTS - 1; i++)
        CHECK(authn_hmac_flight_begin(t, k[i], now, SEC(60), &run[i]) ==
              AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(t, k[FLIGHTS - 1], now, SEC(60),
                                  &run[FLIGHTS - 1]) == AUTHN_HMAC_FLIGHT_RUN);
    CHECK(run[FLIGHTS - 1].slot == run[0].slot); /* ended longest ago */
    CHECK(authn_hmac_flight_begin(t, k[FLIGHTS], now, SEC(60), &run[FLIGHTS]) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(run[FLIGHTS].slot == again.slot);
    CHECK(authn_hmac_flight_begin(t, k[FLIGHTS + 1], now, SEC(60), &fl) ==
          AUTHN_HMAC_FLIGHT_NONE);
    CHECK(wait_for(t, &w, k[0], SEC(30), &took) == -1);
    CHECK(took < SEC(5));
    /* The old run's end leaves the place's new run running. */
    authn_hmac_flight_end(t, &run[0], k[0], 0, now + 3);
    CHECK(authn_hmac_flight_begin(t, k[FLIGHTS - 1], now, SEC(60), &fl) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(fl.slot == run[0].slot);
    shared_done();
}

/* A waiter takes no lock: it is answered while another process holds the
 * writers' mutex (the child would hang, and its alarm kill it). Without a
 * mutex (one process, no shared segment) there is no flight: NONE. */
static void test_a_waiter_takes_no_lock(apr_pool_t *p)
{
    authn_hmac_table_t *t = shared_table(p);
    unsigned char k[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run, fl;
    apr_time_t now = authn_hmac_monotonic();
    int status;
    pid_t pid;

    key_of(k, 1);
    run_and_waiter(t, k, now, &run, &fl);
    authn_hmac_flight_end(t, &run, k, 1, now);
    CHECK(apr_global_mutex_lock(shared_mutex) == APR_SUCCESS);
    pid = fork();
    if (pid == 0) {
        authn_hmac_table_t *ct = shared_child();

        alarm(10);
        _exit(authn_hmac_flight_wait(ct, &fl, k,
                                     authn_hmac_monotonic() + SEC(5)) != 1);
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    apr_global_mutex_unlock(shared_mutex);
    /* The same segment, attached as one process would. */
    t = authn_hmac_table_attach(shared_base, NULL, p);
    CHECK(authn_hmac_flight_begin(t, k, now, SEC(60), &run) ==
          AUTHN_HMAC_FLIGHT_NONE);
    shared_done();
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_one_runs_the_others_wait, p);
    RUN(test_a_wait_times_out, p);
    RUN(test_a_run_without_result, p);
    RUN(test_a_runner_dies, p);
    RUN(test_a_late_runner_is_taken_over, p);
    RUN(test_distinct_credentials_do_not_wait, p);
    RUN(test_places_are_reused, p);
    RUN(test_a_waiter_takes_no_lock, p);
    return unit_end();
}
