/* Unit tests: single flight and the verification queue on the request
 * path (src/request/engine.c, src/request/pace.c): concurrent misses of
 * one credential, in forked processes, make one verification; a runner
 * that died or is late is not waited for; at most max_verifications run
 * at once, backlog more wait, fairly between clients, and no longer than
 * their patience. With the fake verifier of engine_unit.h. */
#include "request/engine.h"
#include "core/cred.h"
#include "shm/flight.h"
#include "shm/queue.h"
#include "shm/table.h"
#include "testing/testing.h"
#include "core/util.h"
#include "unit.h"
#include "engine_unit.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks n processes that wait at a barrier, then each check one
 * credential; returns how many got each outcome. */
static const char *burst_hash = "H-right";
static const char **burst_clients; /* NULL: all from client_addr */
static int burst_late = -1;        /* this one starts 100 ms after the others */

static void burst(const authn_hmac_engine_t *e0, int n, const char **passwords,
                  int *outcomes)
{
    int go[2], res[2], i;
    pid_t pid[16];

    CHECK(pipe(go) == 0 && pipe(res) == 0);
    for (i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            authn_hmac_engine_t e = *e0;
            apr_pool_t *cp;
            unsigned char o;
            char b;

            cp = in_child(&e);
            if (burst_clients)
                client_addr = burst_clients[i];
            (void)!read(go[0], &b, 1);
            if (i == burst_late)
                usleep(200000);
            o = (unsigned char)check(&e, 300, "alice", passwords[i], burst_hash,
                                     cp);
            (void)!write(res[1], &o, 1);
            _exit(0);
        }
    }
    for (i = 0; i < n; i++)
        (void)!write(go[1], "x", 1);
    for (i = 0; i < n; i++) {
        unsigned char o = 0;

        CHECK(read(res[0], &o, 1) == 1);
        outcomes[o]++;
        waitpid(pid[i], NULL, 0);
    }
    close(go[0]);
    close(go[1]);
    close(res[0]);
    close(res[1]);
}

/* Eight processes miss the same credential at once: one verification, and
 * every answer right; mixed with wrong passwords, one per credential. */
static void test_single_flight(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *same[8] = {"right", "right", "right", "right",
                           "right", "right", "right", "right"};
    const char *mixed[8] = {"right", "wrong", "right", "wrong",
                            "right", "wrong", "right", "wrong"};
    int out[16] = {0};

    slow_ms = 200;
    burst(&e, 8, same, out);
    CHECK(*calls == 1);
    CHECK(out[AUTHN_HMAC_VERIFIED] == 1 && out[AUTHN_HMAC_COALESCED] == 7);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_COALESCED) == 7);

    e = engine(p, 1 << 20);
    memset(out, 0, sizeof(out));
    negative_ttl_us = 0; /* the waiters learn the refusal from the flight */
    burst(&e, 8, mixed, out);
    CHECK(*calls == 2);
    CHECK(out[AUTHN_HMAC_VERIFIED] + out[AUTHN_HMAC_COALESCED] == 4);
    CHECK(out[AUTHN_HMAC_DENIED] == 4);

    /* A failure that is not a mismatch (found by review) is no answer for
     * the waiters: each verifies by itself, and nothing is remembered. */
    e = engine(p, 1 << 20);
    memset(out, 0, sizeof(out));
    negative_ttl_us = apr_time_from_sec(30);
    burst_hash = "H-enomem";
    burst(&e, 4, same, out);
    burst_hash = "H-right";
    CHECK(*calls == 4 && out[AUTHN_HMAC_DENIED] == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_COALESCED) == 0);
    CHECK(check(&e, 300, "alice", "right", "H-enomem", p) == AUTHN_HMAC_DENIED);
    CHECK(*calls == 5);
    negative_ttl_us = 0;
    slow_ms = 0;
}

/* A waiter that had not looked when its run ended, and a new run of the
 * same credential began (a keep-alive client sends its next request at
 * once), takes the result of its run: it does not wait for the next one,
 * nor for every later one until its deadline (CI: waiters that kept
 * missing the end of their run under load waited 7 s, then all went to
 * the queue at once and were answered 503). */
static void test_waiter_behind_a_new_run(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_cred_t c = cred("alice", "right", "H-right");
    unsigned char key[AUTHN_HMAC_KEY_LEN];
    authn_hmac_flight_t run1, waiter, run2, late;
    apr_time_t now = authn_hmac_monotonic();
    apr_interval_time_t stale = apr_time_from_sec(60);

    authn_hmac_mac_compute(e.mac, c.scope, c.scope_len, c.user, c.user_len,
                           c.password, c.password_len, c.hash, c.hash_len, key);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &run1) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &waiter) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    authn_hmac_flight_end(e.table, &run1, key, 1, now);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &run2) ==
          AUTHN_HMAC_FLIGHT_RUN);
    CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &late) ==
          AUTHN_HMAC_FLIGHT_WAIT);
    CHECK(late.slot == run2.slot && late.run == run2.run);
    /* The first run's waiter: its result at once. */
    CHECK(authn_hmac_flight_wait(e.table, &waiter, key,
                                 authn_hmac_monotonic() +
                                     apr_time_from_sec(5)) == 1);
    /* The second run refuses; its waiter learns that, not the grant. */
    authn_hmac_flight_end(e.table, &run2, key, 0, now);
    CHECK(authn_hmac_flight_wait(e.table, &late, key,
                                 authn_hmac_monotonic() +
                                     apr_time_from_sec(5)) == 0);

    /* Every place taken but the one that ended: the new run takes it, and
     * a waiter of the run that ended there no longer waits (-1: it
     * verifies by itself), in no time. */
    {
        authn_hmac_flight_t other, old, next;
        unsigned char k2[AUTHN_HMAC_KEY_LEN];
        apr_time_t t0;
        int i;

        e = engine(p, 1 << 20);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &run1) ==
              AUTHN_HMAC_FLIGHT_RUN);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &old) ==
              AUTHN_HMAC_FLIGHT_WAIT);
        for (i = 1; i < 64; i++) {
            memcpy(k2, key, sizeof(k2));
            k2[0] ^= (unsigned char)i;
            CHECK(authn_hmac_flight_begin(e.table, k2, now, stale, &other) ==
                  AUTHN_HMAC_FLIGHT_RUN);
        }
        authn_hmac_flight_end(e.table, &run1, key, 1, now);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &next) ==
              AUTHN_HMAC_FLIGHT_RUN);
        CHECK(next.slot == run1.slot && next.run > run1.run);
        t0 = authn_hmac_monotonic();
        CHECK(authn_hmac_flight_wait(e.table, &old, key,
                                     t0 + apr_time_from_sec(5)) == -1);
        CHECK(authn_hmac_monotonic() - t0 < apr_time_from_sec(1));
        /* The old run's end does not end the new one. */
        authn_hmac_flight_end(e.table, &run1, key, 0, now);
        CHECK(authn_hmac_flight_begin(e.table, key, now, stale, &late) ==
              AUTHN_HMAC_FLIGHT_WAIT);
    }
}

/* A request that missed the cache while another verified the same
 * credential, and came to the flight after that run ended: a second look
 * finds what the run stored (one verification; CI: an LDAP burst of 64
 * made two binds). The hook runs the other request at the miss. */
static authn_hmac_engine_t *racer_engine;
static const char *racer_password;
static apr_pool_t *racer_pool;
static authn_hmac_outcome racer_got;

static void racer(int n)
{
    if (n != 6 || !racer_password)
        return;
    {
        const char *password = racer_password;

        racer_password = NULL;
        racer_got =
            check(racer_engine, 30, "alice", password, "H-right", racer_pool);
    }
}

static void test_a_run_that_ended_after_the_look(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    static const char *const passwords[] = {"right", "wrong"};
    int i;

    negative_ttl_us = apr_time_from_sec(30);
    for (i = 0; i < 2; i++) {
        const char *password = passwords[i];

        racer_engine = &e;
        racer_pool = p;
        racer_password = password;
        authn_hmac_test_pause_hook = racer;
        *calls = 0;
        CHECK(check(&e, 30, "alice", password, "H-right", p) ==
              (i ? AUTHN_HMAC_DENIED : AUTHN_HMAC_COALESCED));
        authn_hmac_test_pause_hook = NULL;
        CHECK(racer_password == NULL);
        CHECK(racer_got == (i ? AUTHN_HMAC_DENIED : AUTHN_HMAC_VERIFIED));
        CHECK(*calls == 1);
        CHECK(check(&e, 30, "alice", password, "H-right", p) ==
              (i ? AUTHN_HMAC_NEGATIVE_HIT : AUTHN_HMAC_HIT));
        CHECK(*calls == 1);
    }
    negative_ttl_us = 0;
}

/* A runner that died is taken over at once; one that is late (past twice
 * the usual verification time) is not waited for. */
static void test_runner_dies_or_is_late(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    authn_hmac_cred_t c = cred("alice", "right", "H-right");
    unsigned char key[AUTHN_HMAC_KEY_LEN];
    apr_time_t t0;
    authn_hmac_flight_t fl;
    pid_t pid;
    int status;

    authn_hmac_mac_compute(e.mac, c.scope, c.scope_len, c.user, c.user_len,
                           c.password, c.password_len, c.hash, c.hash_len, key);
    pid = fork();
    if (pid == 0) {
        (void)in_child(&e);
        _exit(authn_hmac_flight_begin(e.table, key, authn_hmac_monotonic(),
                                      apr_time_from_sec(60), &fl) !=
              AUTHN_HMAC_FLIGHT_RUN); /* and dies before it ends */
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    t0 = apr_time_now();
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(apr_time_now() - t0 < apr_time_from_msec(500));
    CHECK(*calls == 1);

    /* Late: verifications here take 20 ms; the runner takes 3 s; a waiter
     * gives up after twice 20 ms and a second, and verifies by itself. */
    e = engine(p, 1 << 20);
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFICATIONS, 1);
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFY_USEC, 20000);
    slow_ms = 3000;
    pid = fork();
    if (pid == 0) {
        apr_pool_t *cp = in_child(&e);

        _exit(check(&e, 300, "alice", "right", "H-right", cp) !=
              AUTHN_HMAC_VERIFIED);
    }
    usleep(100000);
    slow_ms = 0;
    t0 = apr_time_now();
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
    CHECK(apr_time_now() - t0 >= apr_time_from_msec(1000));
    CHECK(apr_time_now() - t0 < apr_time_from_msec(2000));
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    CHECK(*calls == 2);
}

/* At most max_verifications run at once, each in its request's own
 * thread at the request's own priority; backlog more wait their turn;
 * beyond, busy. */
static void test_queue(apr_pool_t *p)
{
    int base_nice = getpriority(PRIO_PROCESS, 0); /* (tests may run niced) */

    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *pws[8] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};
    const char *clients[8] = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4",
                              "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8"};
    int out[16] = {0};
    authn_hmac_stats_t st;

    e.max_verifications = 2;
    e.backlog = 4;
    slow_ms = 600; /* all enter meanwhile */
    burst_clients = clients;
    burst(&e, 8, pws, out);
    /* 2 run, 4 wait their turn, 2 find no place. */
    CHECK(out[AUTHN_HMAC_DENIED] == 6 && out[AUTHN_HMAC_BUSY] == 2);
    CHECK(*calls == 6);
    CHECK(*running_max == 2);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_VERIFYING_MAX) == 2);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_QUEUED) == 4);
    CHECK(authn_hmac_table_counter(e.table, AUTHN_HMAC_C_BUSY) == 2);
    /* The verifier ran at the request's own priority and class (a lower
     * one starved logins beside busy pages, and their waiters). */
    CHECK(*nice_seen == (uint64_t)base_nice);
    CHECK(*policy_seen == (uint64_t)sched_getscheduler(0));
    CHECK(getpriority(PRIO_PROCESS, 0) == base_nice);
    /* Every place was given back. */
    authn_hmac_table_stats(e.table, apr_time_now(), &st);
    CHECK(st.verifying == 0 && st.waiting == 0);
    burst_clients = NULL;
}

/* Nine requests from clients, on a queue of 2 running and 6 waiting
 * (each client's share 4), verifications of 600 ms: eight wrong passwords
 * that take every place, then, once they hold them, the right one from
 * clients[8]. */
static void late_burst(authn_hmac_engine_t *e, const char **clients, int *out)
{
    const char *pws[9] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "v8"};

    e->max_verifications = 2;
    e->backlog = 6;
    slow_ms = 600;
    burst_clients = clients;
    burst_hash = "H-v8"; /* the last one, from the other client, is right */
    burst_late = 8;      /* and comes once the first eight hold every place */
    burst(e, 9, pws, out);
    burst_hash = "H-right";
    burst_clients = NULL;
    burst_late = -1;
}

/* A process that takes the only place of the queue (of one, without a
 * backlog, from now on) and dies with it: its pid. */
static pid_t die_in_the_queue(authn_hmac_engine_t *e)
{
    authn_hmac_turn_t turn;
    int status = -1;
    pid_t pid;

    e->max_verifications = 1;
    e->backlog = 0;
    pid = fork();
    if (pid == 0) {
        authn_hmac_engine_t ce = *e;

        in_child(&ce);
        _exit(authn_hmac_queue_enter(ce.table, 7, 1, 0, 0, &turn) ==
                      AUTHN_HMAC_QUEUE_RUN
                  ? 0
                  : 1);
    }
    CHECK(pid > 0);
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return pid;
}

/* Alone, one client may use every place (a burst from behind one NAT);
 * when the queue is full, another client takes the newest waiting place of
 * the one that holds more than half; and a process that died holding a
 * place does not keep it. */
static void test_queue_fair_share(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *clients[9] = {"10.9.9.9", "10.9.9.9", "10.9.9.9",
                              "10.9.9.9", "10.9.9.9", "10.9.9.9",
                              "10.9.9.9", "10.9.9.9", "10.1.1.1"};
    int out[16] = {0};

    late_burst(&e, clients, out);
    CHECK(out[AUTHN_HMAC_VERIFIED] == 1);
    CHECK(out[AUTHN_HMAC_DENIED] == 7 && out[AUTHN_HMAC_BUSY] == 1);
    CHECK(*calls == 8);

    /* A process takes the only place and dies with it. */
    slow_ms = 0;
    (void)die_in_the_queue(&e);
    CHECK(check(&e, 300, "alice", "right", "H-right", p) ==
          AUTHN_HMAC_VERIFIED);
}

/* A verification that waits longer than twice the time of those ahead of
 * it gives up: busy, and its place is free again. */
static void test_queue_waits_are_bounded(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *pws[2] = {"w0", "w1"};
    int out[16] = {0};
    authn_hmac_stats_t st;

    /* The usual verification: 10 ms; so a wait of about a second. */
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFICATIONS, 1);
    authn_hmac_table_count(e.table, AUTHN_HMAC_C_VERIFY_USEC, 10000);
    e.max_verifications = 1;
    e.backlog = 1;
    slow_ms = 2500;
    burst(&e, 2, pws, out);
    CHECK(out[AUTHN_HMAC_DENIED] == 1 && out[AUTHN_HMAC_BUSY] == 1);
    CHECK(*calls == 1);
    authn_hmac_table_stats(e.table, apr_time_now(), &st);
    CHECK(st.verifying == 0 && st.waiting == 0);
    CHECK(authn_hmac_retry_after(&e) >= 1);
    slow_ms = 0;
}

/* Identical concurrent guesses use one place in the queue, for a known
 * user as for an unknown one: a 503 tells no names (found by review). */
static void test_unknown_users_are_not_told_by_busy(apr_pool_t *p)
{
    const char *same[6] = {"guess", "guess", "guess",
                           "guess", "guess", "guess"};
    int out[16] = {0};
    authn_hmac_engine_t e = engine(p, 1 << 20);

    hide_unknown = 1;
    negative_ttl_us = apr_time_from_sec(30);
    e.max_verifications = 1;
    e.backlog = 2;
    slow_ms = 300;
    burst_hash = "H-right"; /* known user alice, wrong password */
    burst(&e, 6, same, out);
    e = engine(p, 1 << 20);
    e.max_verifications = 1;
    e.backlog = 2;
    memset(out, 0, sizeof(out));
    burst_hash = NULL; /* unknown user */
    burst(&e, 6, same, out);
    CHECK(out[AUTHN_HMAC_BUSY] == 0);
    burst_hash = "H-right";
    hide_unknown = 0;
    negative_ttl_us = 0;
    slow_ms = 0;
}

/* Two addresses holding half the places each cannot keep out a third
 * (found by review). */
static void test_two_clients_cannot_hold_the_queue(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    const char *clients[9] = {"10.9.9.9", "10.9.9.9", "10.9.9.9",
                              "10.9.9.9", "10.8.8.8", "10.8.8.8",
                              "10.8.8.8", "10.8.8.8", "10.1.1.1"};
    int out[16] = {0};

    late_burst(&e, clients, out);
    CHECK(out[AUTHN_HMAC_VERIFIED] == 1);
    slow_ms = 0;
}

/* A process that died holding a place, whose pid another program got
 * since, does not keep the place (found by review). The pid is handed on
 * through /proc/sys/kernel/ns_last_pid, which needs root: elsewhere, or
 * if another process took the pid first, the check is skipped. */
static void test_a_reused_pid_does_not_keep_a_place(apr_pool_t *p)
{
    authn_hmac_engine_t e = engine(p, 1 << 20);
    pid_t again;
    int i, busy = 0;

    if ((again = unit_reuse_pid(die_in_the_queue(&e))) < 0)
        return;
    for (i = 0; i < 3; i++)
        busy +=
            check(&e, 300, "alice", "right", "H-right", p) == AUTHN_HMAC_BUSY;
    CHECK(busy == 0);
    kill(again, SIGKILL);
    waitpid(again, NULL, 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    engine_unit_start();
    RUN(test_single_flight, p);
    RUN(test_runner_dies_or_is_late, p);
    RUN(test_waiter_behind_a_new_run, p);
    RUN(test_a_run_that_ended_after_the_look, p);
    RUN(test_queue, p);
    RUN(test_queue_fair_share, p);
    RUN(test_queue_waits_are_bounded, p);
    RUN(test_unknown_users_are_not_told_by_busy, p);
    RUN(test_two_clients_cannot_hold_the_queue, p);
    RUN(test_a_reused_pid_does_not_keep_a_place, p);
    return unit_end();
}
