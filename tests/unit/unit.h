/* unit.h: the smallest test harness that says what failed and where. */
#ifndef AUTHN_HMAC_UNIT_H
#define AUTHN_HMAC_UNIT_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <apr_general.h>
#include <apr_pools.h>

static int unit_failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            unit_failures++;                                                   \
        }                                                                      \
    } while (0)

/* After a test: its line, and its pool cleared. */
static inline void unit_ran(const char *name, int before, apr_pool_t *pool)
{
    printf("%s %s\n", unit_failures == before ? "ok  " : "FAIL", name);
    apr_pool_clear(pool);
}

#define RUN(fn, pool)                                                          \
    do {                                                                       \
        int before_ = unit_failures;                                           \
        fn(pool);                                                              \
        unit_ran(#fn, before_, pool);                                          \
    } while (0)

/* One case of a test of several: fn(pool, arg), told as fn(arg). */
#define RUN_WITH(fn, arg, pool)                                                \
    do {                                                                       \
        int before_ = unit_failures;                                           \
        fn(pool, arg);                                                         \
        unit_ran(#fn "(" #arg ")", before_, pool);                             \
    } while (0)

/* A child whose checks count apart: fork() with stdout flushed (the child
 * would print the parent's pending lines again), the child's failures
 * from 0. The child ends with _exit(unit_failures ? 1 : 0). */
static inline pid_t unit_fork(void)
{
    pid_t pid;

    fflush(stdout);
    if ((pid = fork()) == 0)
        unit_failures = 0;
    return pid;
}

/* Waits for a child of unit_fork(): whether every check of its passed. */
static inline int unit_child_passed(pid_t pid)
{
    int status = -1;

    return pid > 0 && waitpid(pid, &status, 0) == pid && status == 0;
}

/* A process running `sleep 5` under pid, which a process that has died
 * had: the pid is handed on through /proc/sys/kernel/ns_last_pid, which
 * needs root. -1, with a line saying why the test is skipped, where that
 * cannot be done or another process took the pid first. The caller kills
 * and reaps it. */
static inline pid_t unit_reuse_pid(pid_t pid)
{
    pid_t again;
    FILE *f;
    int ok;

    usleep(50000); /* start times are in clock ticks (10 ms) */
    if (!(f = fopen("/proc/sys/kernel/ns_last_pid", "w"))) {
        printf("     (skipped: cannot set the next pid)\n");
        return -1;
    }
    ok = fprintf(f, "%d", (int)pid - 1) >= 0;
    if (fclose(f) != 0 || !ok) {
        printf("     (skipped: cannot set the next pid)\n");
        return -1;
    }
    again = fork();
    if (again == 0) {
        execl("/bin/sleep", "sleep", "5", (char *)NULL);
        _exit(2);
    }
    if (again != pid) {
        printf("     (skipped: the pid went to another process)\n");
        if (again > 0) {
            kill(again, SIGKILL);
            waitpid(again, NULL, 0);
        }
        return -1;
    }
    usleep(100000); /* it runs sleep now */
    return again;
}

static apr_pool_t *unit_start(void)
{
    apr_pool_t *p;

    if (apr_initialize() != APR_SUCCESS || apr_pool_create(&p, NULL))
        abort();
    return p;
}

static int unit_end(void)
{
    if (unit_failures)
        fprintf(stderr, "%d check(s) failed\n", unit_failures);
    apr_terminate();
    return unit_failures ? 1 : 0;
}

#endif
