/* Unit tests of the watcher and the index with writers at work, through
 * the test build's seams (testing/testing.h): a writer that holds the
 * file open, closes it during a drain, keeps writing; the reaper and a
 * rebuild; a torn reading after a change this process never saw; the
 * real-time clock stepped back. The inner workings alone are
 * test_watch's. */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sources/userfile.h"
#include "testing/testing.h"
#include "core/util.h"
#include "watch_unit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>
#include <apr_time.h>

/* The real-time clock as the index reads it (this program's own stands in
 * for APR's): stepped by a test (NTP, a VM restored), never the monotonic
 * one. */
static apr_interval_time_t clock_step;

apr_time_t apr_time_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (apr_time_t)ts.tv_sec * APR_USEC_PER_SEC + ts.tv_nsec / 1000 +
           clock_step;
}

/* A view of a new file in a new directory under /tmp, holding text,
 * watched by this process: NULL (told) where /tmp is not watched. */
static authn_hmac_userfile_t *watched_view(const char *text, char **dir,
                                           char **path, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf;

    *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX");
    *path = users_file(*dir, text, p);
    uf = authn_hmac_userfile_make(*path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    if (authn_hmac_userfile_watch(uf) != 1) {
        printf("  skipped: /tmp is not watched\n");
        return NULL;
    }
    return uf;
}

/* A writer that holds the file open (htpasswd copying its new version
 * over the old one): a lookup answers from what the file holds, at once;
 * a deny for a user the prefix written so far lacks is asked again once
 * the writer closes the file (no false deny), a second at most from the
 * change; once it closes the file, the new version is in force. */
typedef struct {
    authn_hmac_userfile_t *uf;
    const char *user;
    apr_status_t rv;
    char hash[64];
    apr_time_t took;
} asker_t;

static void *ask_user(void *arg)
{
    asker_t *k = arg;
    apr_pool_t *p;
    const char *hash = NULL;
    size_t len = 0;
    apr_time_t t0 = authn_hmac_monotonic();

    if (apr_pool_create_unmanaged(&p) != APR_SUCCESS)
        abort();
    k->rv = settled_lookup(k->uf, k->user, &hash, &len, p);
    k->took = authn_hmac_monotonic() - t0;
    snprintf(k->hash, sizeof(k->hash), "%s", hash ? hash : "");
    apr_pool_destroy(p);
    return NULL;
}

static void test_writer_holding_the_file(apr_pool_t *p)
{
    authn_hmac_reading_t rd;
    apr_time_t t0;
    authn_hmac_userfile_t *uf;
    asker_t k;
    const char *hash;
    char *dir, *path;
    pthread_t t;
    size_t len;
    int fd;

    if (!(uf = watched_view("bob:BOB0\nalice:AAAA\n", &dir, &path, p)))
        return;
    usleep(100 * 1000); /* the watch came before the writes below */
    CHECK(alice_is(uf, "AAAA", p));
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK(write(fd, "bob:BOB1\n", 9) == 9);
    CHECK(authn_hmac_userfile_lookup(uf, "bob", &hash, &len, NULL, NULL, p) ==
              APR_SUCCESS &&
          strcmp(hash, "BOB1") == 0); /* what the file holds */
    /* The lookup itself never waits: alice, missing from the prefix, is
     * not found at once, from an unsettled reading... */
    t0 = authn_hmac_monotonic();
    CHECK(authn_hmac_userfile_lookup_id(uf, "alice", NULL, NULL, 0, &hash, &len,
                                        NULL, NULL, NULL, NULL, p,
                                        &rd) == APR_NOTFOUND &&
          authn_hmac_userfile_unsettled(&rd, t0));
    CHECK(authn_hmac_monotonic() - t0 < apr_time_from_msec(500));
    /* ...and the deny is asked again at the close. */
    k.uf = uf;
    k.user = "alice";
    CHECK(pthread_create(&t, NULL, ask_user, &k) == 0);
    usleep(200 * 1000);
    CHECK(write(fd, "alice:BBBB\n", 11) == 11);
    usleep(100 * 1000);
    CHECK(close(fd) == 0);
    pthread_join(t, NULL);
    CHECK(k.rv == APR_SUCCESS && strcmp(k.hash, "BBBB") == 0);
    CHECK(alice_is(uf, "BBBB", p)); /* the close is the change */
    /* Held open past SETTLE_MAX without alice: not found, a second at
     * most from the change. */
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK(write(fd, "bob:BOB2\n", 9) == 9);
    k.user = "alice";
    ask_user(&k);
    printf("     (a deny in a held write took %d ms)\n", (int)(k.took / 1000));
    CHECK(k.rv == APR_NOTFOUND);
    CHECK(k.took < SETTLE_MAX + apr_time_from_msec(300));
    CHECK(write(fd, "alice:CCCC\n", 11) == 11);
    CHECK(alice_is(uf, "CCCC", p));
    CHECK(close(fd) == 0);
    CHECK(alice_is(uf, "CCCC", p));
    /* A change that this process never looked at (no request came), then
     * a writer at work: never an older version. */
    sleep(1);
    write_text(path, "alice:DDDD\n");
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK(write(fd, "bob:BOB2\n", 9) == 9);
    CHECK(!alice_is(uf, "CCCC", p));
    CHECK(write(fd, "alice:EEEE\n", 11) == 11);
    CHECK(close(fd) == 0);
    CHECK(alice_is(uf, "EEEE", p));
    remove_users_file(dir, path);
}

/* A lookup made after a writer closed the file, while another thread
 * drains the queue that holds the close (taken from the queue, not yet
 * taken in): the version of before must not answer because this
 * process last saw the writer at work. This test drains by hand. */
static char *left_dir; /* a directory to remove last */

static void test_writer_closed_during_drain(apr_pool_t *p)
{
    char *dir, *path;
    authn_hmac_userfile_t *uf;
    lookup_t late;
    pthread_t t;
    int fd;

    if (!(uf = watched_view("alice:AAAA\n", &dir, &path, p)))
        return;
    CHECK(alice_is(uf, "AAAA", p));
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK(write(fd, "alice:BBBB\n", 11) == 11);
    CHECK(alice_is(uf, "BBBB", p)); /* a writer at work: what is there */
    /* A drain begins, and takes the queue... */
    authn_hmac_test_drain_begin();
    /* ...where the writer's close is: the change is done. */
    CHECK(close(fd) == 0);
    authn_hmac_test_drain_take();
    late.uf = uf;
    late.ok = 0;
    CHECK(pthread_create(&t, NULL, late_lookup, &late) == 0);
    usleep(100 * 1000);
    authn_hmac_test_set_writing(uf->wd, 0); /* the drain takes the close in */
    authn_hmac_test_drain_end();
    CHECK(pthread_join(t, NULL) == 0 && late.ok);
    CHECK(alice_is(uf, "BBBB", p));
    unlink(path);
    /* NB: the directory goes once every test is done (see main). */
    left_dir = strdup(dir);
}

/* The reaper thread (see reap()) reads a shared view's generation: a
 * request that rebuilds meanwhile must not free it under the reaper (it
 * once read it under no lock and uncounted in the stripes). */
static int reaped_freed;

static apr_status_t note_freed(void *data)
{
    (void)data;
    __atomic_store_n(&reaped_freed, 1, __ATOMIC_SEQ_CST);
    return APR_SUCCESS;
}

static void *reap_paused(void *arg)
{
    pthread_mutex_lock(&pause_mu);
    paused = pthread_self();
    pthread_mutex_unlock(&pause_mu);
    authn_hmac_reap(arg);
    return NULL;
}

/* A region of one slot under dir/idx, with a random pepper's MAC. */
static authn_hmac_share_t *test_region(const char *dir, authn_hmac_mac_t **mac,
                                       apr_pool_t *p)
{
    authn_hmac_secret_t *pepper = NULL;
    authn_hmac_share_t *sh = NULL;
    const char *why = NULL;

    CHECK(authn_hmac_secret_random_retained(&pepper, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(mac, pepper, p) == APR_SUCCESS);
    CHECK(authn_hmac_share_create(&sh, apr_pstrcat(p, dir, "/idx", NULL), 1,
                                  (uid_t)-1, 0, &why, p) == APR_SUCCESS);
    return sh;
}

/* A view of path in slot 0 of sh, as a child has it. */
static authn_hmac_userfile_t *shared_view(const char *path,
                                          authn_hmac_share_t *sh,
                                          authn_hmac_mac_t *mac, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = authn_hmac_userfile_make(path, p);

    authn_hmac_userfile_share(uf, sh, 0, mac, NULL, NULL, NULL);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    return uf;
}

static void test_reaper_and_a_rebuild(apr_pool_t *p)
{
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_mac_t *mac = NULL;
    authn_hmac_share_t *sh;
    authn_hmac_userfile_t *uf, *other;
    looker_t t2 = {NULL, "BBBBBB", 0, 0};
    pthread_t rt, tt;

    path = users_file(dir, "alice:AAAA\n", p);
    sh = test_region(dir, &mac, p);
    uf = shared_view(path, sh, mac, p);
    other = shared_view(path, sh, mac, p);
    CHECK(alice_is(uf, "AAAA", p));
    CHECK(uf->current && uf->current->version != 0);
    apr_pool_cleanup_register(uf->current->pool, NULL, note_freed,
                              apr_pool_cleanup_null);
    /* Another process replaces the version: the reaper is to drop uf's. */
    write_text(path, "alice:BBBBBB\n");
    CHECK(alice_is(other, "BBBBBB", p));
    t2.uf = uf;
    pausing = 1;
    pause_at[5] = 1;
    CHECK(pthread_create(&rt, NULL, reap_paused, uf) == 0);
    wait_stopped(5); /* the reaper holds the generation */
    CHECK(pthread_create(&tt, NULL, look_alice, &t2) ==
          0); /* takes the new one */
    usleep(300 * 1000);
    CHECK(!__atomic_load_n(&reaped_freed, __ATOMIC_SEQ_CST));
    resume(0);
    pthread_join(rt, NULL);
    pthread_join(tt, NULL);
    pausing = 0;
    CHECK(t2.ok);
    CHECK(alice_is(uf, "BBBBBB", p));
    if (system(apr_pstrcat(p, "rm -rf ", dir, NULL)) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* A change this process never looked at (bob removed; no request came),
 * then another change made while a lookup reads the file for the first
 * (the reading is torn): the version this process has predates a change
 * that was complete before the lookup began, and must not answer (the
 * torn reading once kept it: a revoked password granted). The second
 * change is made where the lookup stops, once the file is read (and
 * closed, or held open a while: then its close is waited for). hold: 1
 * held, 0 closed, -1 closed and the file not watched (stat() only). */
typedef struct {
    authn_hmac_userfile_t *uf;
    apr_status_t rv;
    const char *hash;
} bob_t;

static void *look_bob(void *arg)
{
    bob_t *b = arg;
    apr_pool_t *p;
    size_t len = 0;

    pthread_mutex_lock(&pause_mu);
    paused = pthread_self();
    pthread_mutex_unlock(&pause_mu);
    if (apr_pool_create_unmanaged(&p) != APR_SUCCESS)
        abort();
    b->hash = NULL;
    b->rv =
        authn_hmac_userfile_lookup(b->uf, "bob", &b->hash, &len, NULL, NULL, p);
    b->hash = b->hash ? strdup(b->hash) : NULL;
    apr_pool_destroy(p);
    return NULL;
}

static void test_torn_reading_after_an_unseen_change(apr_pool_t *p, int share,
                                                     int hold)
{
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_mac_t *mac = NULL;
    authn_hmac_userfile_t *uf;
    const char *hash = NULL;
    size_t len = 0;
    bob_t b;
    pthread_t t;
    int fd;
    pid_t pid;

    path = users_file(dir, "bob:BOB0\nalice:AAAA\n", p);
    if ((pid = unit_fork()) == 0) {
        if (share) {
            uf = shared_view(path, test_region(dir, &mac, p), mac, p);
        }
        else {
            uf = child_view(path, p);
        }
        if (hold >= 0 && authn_hmac_userfile_watch(uf) != 1) {
            printf("     (skipped: /tmp is not watched)\n");
            _exit(0);
        }
        CHECK(authn_hmac_userfile_lookup(uf, "bob", &hash, &len, NULL, NULL,
                                         p) == APR_SUCCESS &&
              strcmp(hash, "BOB0") == 0);
        write_text(path, "alice:AAAA\n"); /* bob removed; done */
        b.uf = uf;
        pausing = 1;
        pause_at[4] = 1;
        CHECK(pthread_create(&t, NULL, look_bob, &b) == 0);
        wait_stopped(4); /* the lookup read the file */
        fd = open(path, O_WRONLY | O_APPEND);
        CHECK(fd >= 0 && write(fd, "carol:CCCC\n", 11) == 11);
        if (hold <= 0)
            CHECK(close(fd) == 0);
        resume(0);
        if (hold > 0) { /* the writer at work: its close is waited for */
            usleep(300 * 1000);
            CHECK(close(fd) == 0);
        }
        pthread_join(t, NULL);
        pausing = 0;
        CHECK(b.rv != APR_SUCCESS || !b.hash || strcmp(b.hash, "BOB0") != 0);
        CHECK(b.rv == APR_NOTFOUND);
        CHECK(authn_hmac_userfile_lookup(uf, "carol", &hash, &len, NULL, NULL,
                                         p) == APR_SUCCESS &&
              strcmp(hash, "CCCC") == 0);
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    if (system(apr_pstrcat(p, "rm -rf ", dir, NULL)) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void test_torn_reading_after_an_unseen_change_private(apr_pool_t *p)
{
    test_torn_reading_after_an_unseen_change(p, 0, 0);
}

static void test_torn_reading_after_an_unseen_change_unwatched(apr_pool_t *p)
{
    test_torn_reading_after_an_unseen_change(p, 0, -1);
}

static void test_torn_reading_after_an_unseen_change_held(apr_pool_t *p)
{
    test_torn_reading_after_an_unseen_change(p, 1, 1);
}

static void test_torn_reading_after_an_unseen_change_shared(apr_pool_t *p)
{
    test_torn_reading_after_an_unseen_change(p, 1, 0);
}

/* A writer that keeps writing (a byte every 50 ms, the user asked for
 * never there): a deny is final a second at most after the lookup began,
 * though the file never gets quiet. */
static volatile int keep_stop;
static char *endless_dir; /* a directory to remove last */

static void *keep_writing(void *arg)
{
    const char *path = arg;
    apr_time_t until = authn_hmac_monotonic() + apr_time_from_sec(3);
    int fd = open(path, O_WRONLY | O_APPEND);

    /* NB: 3 s at most: a lookup that waits for as long fails the test. */
    while (fd >= 0 && !__atomic_load_n(&keep_stop, __ATOMIC_SEQ_CST) &&
           authn_hmac_monotonic() < until) {
        if (write(fd, "#", 1) != 1)
            break;
        usleep(50 * 1000);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void
test_deny_during_endless_writes_waits_a_second_at_most(apr_pool_t *p)
{
    authn_hmac_userfile_t *uf;
    char *dir, *path;
    asker_t k;
    pthread_t t;

    if (!(uf = watched_view("alice:AAAA\n", &dir, &path, p)))
        return;
    CHECK(alice_is(uf, "AAAA", p));
    keep_stop = 0;
    CHECK(pthread_create(&t, NULL, keep_writing, path) == 0);
    usleep(100 * 1000);
    k.uf = uf;
    k.user = "carol";
    ask_user(&k);
    __atomic_store_n(&keep_stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(t, NULL);
    printf("     (waited %d ms)\n", (int)(k.took / 1000));
    CHECK(k.rv == APR_NOTFOUND);
    CHECK(k.took < SETTLE_MAX + apr_time_from_msec(500));
    unlink(path);
    /* NB: the directory goes once every test is done (see main). */
    endless_dir = strdup(dir);
}

/* A child whose watcher came after the file's last change cannot tell
 * whether a writer is at work: a deny waits, a second at most, on the
 * monotonic clock, not the real one, which may be stepped back meanwhile
 * (a wait once lasted as long as the step, under the view's lock). */
static void test_unseen_change_and_a_clock_stepped_back(apr_pool_t *p)
{
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    authn_hmac_mac_t *mac = NULL;
    authn_hmac_share_t *sh;
    authn_hmac_userfile_t *uf, *other;
    apr_time_t t0, took;
    const char *hash = NULL;
    size_t len = 0;
    pid_t pid;

    path = users_file(dir, "alice:AAAA\n", p);
    sh = test_region(dir, &mac, p);
    if ((pid = unit_fork()) == 0) {
        /* Another process has published a version. */
        other = shared_view(path, sh, mac, p);
        CHECK(alice_is(other, "AAAA", p));
        CHECK(authn_hmac_share_version(sh, 0) != 0);
        /* A child made since, with no version yet. */
        uf = shared_view(path, sh, mac, p);
        if (authn_hmac_userfile_watch(uf) != 1) {
            printf("     (skipped: /tmp is not watched)\n");
            _exit(0);
        }
        clock_step = -apr_time_from_sec(4);
        t0 = authn_hmac_monotonic();
        CHECK(alice_is(uf, "AAAA", p));
        CHECK(settled_lookup(uf, "carol", &hash, &len, p) == APR_NOTFOUND);
        took = authn_hmac_monotonic() - t0;
        clock_step = 0;
        printf("     (waited %d ms)\n", (int)(took / 1000));
        CHECK(took < SETTLE_MAX + apr_time_from_msec(500));
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    if (system(apr_pstrcat(p, "rm -rf ", dir, NULL)) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    authn_hmac_test_pause_hook = pause_point;

    /* NB: first: a test that removes its directory leaves this process's
     * watcher broken for good (a watched directory went). */
    RUN(test_deny_during_endless_writes_waits_a_second_at_most, p);
    RUN(test_writer_closed_during_drain, p);
    RUN(test_writer_holding_the_file, p);
    RUN(test_reaper_and_a_rebuild, p);
    RUN(test_torn_reading_after_an_unseen_change_private, p);
    RUN(test_torn_reading_after_an_unseen_change_shared, p);
    RUN(test_torn_reading_after_an_unseen_change_held, p);
    RUN(test_torn_reading_after_an_unseen_change_unwatched, p);
    RUN(test_unseen_change_and_a_clock_stepped_back, p);
    if (left_dir)
        rmdir(left_dir);
    free(left_dir);
    if (endless_dir)
        rmdir(endless_dir);
    free(endless_dir);
    return unit_end();
}
