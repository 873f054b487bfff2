/* Unit tests of the index's and the watcher's inner workings, through
 * the test build's seams (testing/testing.h): a lookup across rebuilds
 * and drains, each CPU's epoll instance, a racy change, a fork while the
 * instances are made. A test stands where another thread would, or stops
 * a lookup where a thread can be preempted. Writers at work and shared
 * views are test_watch_writers'. */
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sources/userfile.h"
#include "testing/testing.h"
#include "core/util.h"
#include "watch_unit.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/vfs.h>

#include <apr_strings.h>

/* epoll_create1 as the watcher calls it (this program's own stands in for
 * the C library's): when asked, a fork from within its nth call, where
 * another thread of httpd's could fork while the instances are being
 * made. The child says whether the first instance is still open in it (it
 * must not be: it reports the parent's queue). */
static int fork_in_call, epoll_calls, first_epoll = -1, leaked = -1;

int epoll_create1(int flags)
{
    int ep = (int)syscall(SYS_epoll_create1, flags), status = -1;
    pid_t pid;

    if (!fork_in_call)
        return ep;
    if (++epoll_calls == 1)
        first_epoll = ep;
    else if (epoll_calls == fork_in_call) {
        if ((pid = fork()) == 0)
            _exit(fcntl(first_epoll, F_GETFD) != -1 ? 3 : 0);
        leaked = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)
                     ? WEXITSTATUS(status) == 3
                     : -1;
    }
    return ep;
}

/* A lookup that read the epoch, and was preempted while a rebuild went by,
 * then reads the rebuild's generation: the next rebuild must wait for it
 * before it frees that generation (it once freed it under the lookup,
 * which had counted itself under the parity that rebuild does not look
 * at). */
static void test_lookup_across_two_rebuilds(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    const char *path;
    authn_hmac_userfile_t *uf;
    looker_t r = {NULL, NULL, 0, 0}, t2 = {NULL, "CCCCCCCC", 0, 0};
    pthread_t rt, tt;

    path = users_file(dir, "alice:AAAA\n", p);
    uf = child_view(path, p);
    CHECK(alice_is(uf, "AAAA", p));
    r.uf = t2.uf = uf;
    pausing = 1;
    pause_at[1] = 1;
    pthread_create(&rt, NULL, look_alice, &r);
    wait_stopped(1); /* r read the epoch, and is not counted yet */
    write_text(path, "alice:BBBBBB\n");
    CHECK(alice_is(uf, "BBBBBB", p)); /* rebuild 1 */
    resume(2);
    wait_stopped(2); /* r counted and holds rebuild 1's generation */
    write_text(path, "alice:CCCCCCCC\n");
    pthread_create(&tt, NULL, look_alice, &t2); /* rebuild 2 */
    usleep(300 * 1000);
    CHECK(!__atomic_load_n(&t2.done, __ATOMIC_SEQ_CST));
    resume(0);
    pthread_join(rt, NULL);
    pthread_join(tt, NULL);
    pausing = 0;
    CHECK(r.ok && t2.ok);
    remove_users_file(dir, path);
}

/* A lookup made while another thread drains the queue is not answered
 * from the count the drain has not moved on yet: the queue it took may
 * have held a change (here a rename) that a generation found fresh at
 * that count predates. This test drains by hand, as that thread would. */
static void test_lookup_during_drain(apr_pool_t *p)
{
    const char *bases[] = {"/tmp", "/dev/shm"};
    const char *dir = NULL, *path;
    authn_hmac_userfile_t *uf;
    lookup_t late;
    pthread_t t;
    size_t i;

    for (i = 0; i < 2 && !dir; i++) {
        struct statfs fs;
        char *d = apr_pstrcat(p, bases[i], "/authn_hmac_unit.XXXXXX", NULL);

        if (statfs(bases[i], &fs) == 0 &&
            ((unsigned long)fs.f_type == 0xEF53UL ||
             (unsigned long)fs.f_type == 0x01021994UL) &&
            mkdtemp(d))
            dir = d;
    }
    if (!dir) {
        printf("  skipped: no file system inotify fully sees\n");
        return;
    }
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_text(path, "alice:AAAA\n");
    uf = child_view(path, p);
    CHECK(authn_hmac_userfile_watch(uf) == 1);
    usleep(1100 * 1000);
    CHECK(alice_is(uf, "AAAA", p));
    CHECK(alice_is(uf, "AAAA", p));
    /* A drain begins (something was queued) and takes the queue... */
    authn_hmac_test_drain_begin();
    authn_hmac_test_drain_take();
    /* ...meanwhile a lookup finds the file unchanged... */
    CHECK(alice_is(uf, "AAAA", p));
    /* ...the file is replaced, and the drain takes that too... */
    write_text(apr_pstrcat(p, dir, "/new", NULL), "alice:BBBB\n");
    CHECK(rename(apr_pstrcat(p, dir, "/new", NULL), path) == 0);
    authn_hmac_test_drain_take();
    /* ...and a lookup made since must see the new file. */
    late.uf = uf;
    late.ok = 0;
    CHECK(pthread_create(&t, NULL, late_lookup, &late) == 0);
    usleep(100 * 1000);
    authn_hmac_test_drain_end();
    CHECK(pthread_join(t, NULL) == 0 && late.ok);
    CHECK(alice_is(uf, "BBBB", p));
    remove_users_file(dir, path);
}

/* The CPUs this test may run on (a container may allow only some). */
static cpu_set_t allowed;

/* Runs the calling thread on one CPU (of those allowed, in turn). */
static void run_on(int i)
{
    int n = CPU_COUNT(&allowed), c;
    cpu_set_t set;

    CHECK(n > 0);
    i = n > 0 ? i % n : 0;
    for (c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed) && i-- == 0)
            break;
    CPU_ZERO(&set);
    CPU_SET(c < CPU_SETSIZE ? c : 0, &set);
    CHECK(sched_setaffinity(0, sizeof(set), &set) == 0);
}

/* Each change is seen by the very next lookup without a stat(), from
 * whichever CPU it is made: through the epoll instance of that CPU while
 * another CPU's instance, or a drain from it, took the event in; or,
 * through FIONREAD, with the instances closed as if they could not be made
 * (POLLS_FIONREAD), or each held by another lookup (POLLS_BUSY).
 * Each change is settled (read again once past the racy second) before
 * the next, so that the lookup after it is on the path without stat(). */
enum { POLLS_FIONREAD, POLLS_EPOLL, POLLS_BUSY };

static void test_each_cpu_sees_each_change(apr_pool_t *p, int polls)
{
    char dir[] = "/dev/shm/authn_hmac_unit.XXXXXX";
    const char *path;
    char want[16];
    authn_hmac_userfile_t *uf;
    int i, r;
    pid_t pid;

    path = users_file(dir, "alice:A\n", p);
    if ((pid = unit_fork()) == 0) {
        uf = child_view(path, p);
        CHECK(authn_hmac_userfile_watch(uf) == 1);
        CHECK(authn_hmac_test_polls(0) >= 1 && authn_hmac_test_poll_fd(0) >= 0);
        for (i = 0; i < authn_hmac_test_polls(0) && polls != POLLS_EPOLL; i++)
            authn_hmac_test_poll_set(i, polls == POLLS_BUSY
                                            ? AUTHN_HMAC_TEST_POLL_HOLD
                                            : AUTHN_HMAC_TEST_POLL_CLOSE);
        if (polls == POLLS_FIONREAD)
            authn_hmac_test_poll_set(0, AUTHN_HMAC_TEST_POLLS_OFF);
        for (r = 0; r < 4; r++) {
            usleep(1100 * 1000);
            run_on(r + 1);
            CHECK(alice_is(uf, r ? want : "A", p));
            run_on(r);
            CHECK(alice_is(uf, r ? want : "A", p));
            /* Settled: the answer came from the count, without stat(). */
            CHECK(uf->current && !uf->current->racy &&
                  uf->current->checked == authn_hmac_watch_events());
            snprintf(want, sizeof(want), "B%d", r);
            write_text(path, apr_pstrcat(p, "alice:", want, "\n", NULL));
            run_on(r + 1);
            CHECK(alice_is(uf, want, p));
        }
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    remove_users_file(dir, path);
}

/* A file read within a second of a change (racy) and changed again within
 * the same timestamp tick, to the same size, looks the same to stat() on
 * kernels and file systems without fine-grained timestamps. The next
 * lookup must still answer from the new file. The test gives the
 * generation the new file's stat(), as such a kernel would show it.
 * Unwatched, a racy generation is read again by every lookup until its
 * second is over; watched, only after an event. */
enum { UNWATCHED, WATCHED };

static void test_racy_change(apr_pool_t *p, int watch)
{
    char dir[] = "/dev/shm/authn_hmac_unit.XXXXXX";
    const char *path;
    authn_hmac_userfile_t *uf;
    apr_finfo_t st;
    unsigned reads;
    pid_t pid;

    path = users_file(dir, "alice:AAAA\n", p);
    if ((pid = unit_fork()) == 0) {
        uf = child_view(path, p);
        CHECK(!watch || authn_hmac_userfile_watch(uf) == 1);
        CHECK(alice_is(uf, "AAAA", p));
        CHECK(uf->current && uf->current->racy);
        reads = uf->reads;
        CHECK(alice_is(uf, "AAAA", p));
        /* Watched and nothing happened since: no need to read it. */
        CHECK(uf->reads == reads + (watch ? 0 : 1));
        write_text(path, "alice:BBBB\n");
        CHECK(apr_stat(&st, path, USERFILE_WANTED, p) == APR_SUCCESS);
        uf->current->st = st;
        CHECK(alice_is(uf, "BBBB", p));
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    remove_users_file(dir, path);
}

/* A fork while another thread makes the epoll instances (before npolls is
 * set) leaves none of them open in the child. */
static void test_fork_while_instances_are_made(apr_pool_t *p)
{
    char dir[] = "/dev/shm/authn_hmac_unit.XXXXXX";
    const char *path;
    authn_hmac_userfile_t *uf;
    pid_t pid;

    path = users_file(dir, "alice:A\n", p);
    if ((pid = unit_fork()) == 0) {
        uf = child_view(path, p);
        fork_in_call = 2;
        CHECK(authn_hmac_userfile_watch(uf) == 1);
        fork_in_call = 0;
        if (authn_hmac_test_polls(0) < 2)
            printf("     (one CPU online: no window to fork in)\n");
        else
            CHECK(leaked == 0);
        CHECK(alice_is(uf, "A", p));
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    remove_users_file(dir, path);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    CHECK(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
    /* Before any watch, every slot says "no instance" (-1, never fd 0). */
    for (int i = 0; i < authn_hmac_test_polls(1); i++)
        CHECK(authn_hmac_test_poll_fd(i) == -1 &&
              authn_hmac_test_poll_busy(i) == 0);
    authn_hmac_test_pause_hook = pause_point;

    RUN(test_lookup_during_drain, p);
    RUN(test_lookup_across_two_rebuilds, p);
    RUN_WITH(test_each_cpu_sees_each_change, POLLS_EPOLL, p);
    RUN_WITH(test_each_cpu_sees_each_change, POLLS_FIONREAD, p);
    RUN_WITH(test_each_cpu_sees_each_change, POLLS_BUSY, p);
    RUN_WITH(test_racy_change, UNWATCHED, p);
    RUN_WITH(test_racy_change, WATCHED, p);
    RUN(test_fork_while_instances_are_made, p);
    return unit_end();
}
