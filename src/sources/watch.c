/* watch.c: the process's inotify watcher (see sources/watch.h). It
 * reports events per watch, and knows nothing of what a watch is for. */
#include "sources/watch.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

/* NB: stat() is half the cost of a hit. A lookup of a watched file asks
 * the process's one inotify instance whether anything happened (FIONREAD)
 * instead: the kernel queues an event within the very system call that
 * changes a watched file or directory, so a change that is done is in the
 * queue. Any event sends every watched file back to stat() once. Watched:
 * the file's inode (a change through any name, a bind mount's included),
 * its directory's entries (replaced, removed, created), and each
 * directory above moving or going away. A full queue or a lost watch of a
 * directory sends every lookup of this process to stat() for good.
 * NB: each system call on the one inotify file takes and drops a reference
 * on it, a line that threads on two cores pass back and forth (a third of
 * a hit with two threads, hitbench). A lookup asks instead one of a few
 * epoll instances, by CPU, that watch it: the event is put on every
 * instance's ready list within the same system call that queues it, and an
 * instance reports it for as long as it is in the queue. One lookup at a
 * time per instance (the others use FIONREAD): a lookup that checks the
 * ready list while another empties it onto a list of its own, before the
 * kernel marks the instance as being scanned, finds nothing, though the
 * event is still queued and the count not moved on (ep_events_available's
 * false negative, which later kernels close with a seqcount). */
#define WATCH_DIRS  64 /* per process */
#define WATCH_POLLS 8

typedef struct {
    int fd;   /* an epoll instance on the inotify file, or -1 */
    int busy; /* a lookup is in it */
    char pad[64 - 2 * sizeof(int)];
} poll_t;
#define WATCH_FILES 64
#define WATCH_WDS   1024 /* a watch past it is never told written to */
#define FILE_MASK                                                              \
    (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF |  \
     IN_MASK_ADD)
/* NB: not IN_MODIFY: the file's own watch sees its writes, merged while
 * the queue is not read, where the directory's would alternate with them
 * and fill the queue (a 70 MB file copied in place in 4 KB writes). */
#define DIR_MASK                                                               \
    (IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM |      \
     IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD)
#define UP_MASK (IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD)

static struct {
    pthread_mutex_t lock; /* watches and drains */
    int fd;
    poll_t polls[WATCH_POLLS] __attribute__((aligned(64)));
    int npolls;      /* one per CPU online, up to WATCH_POLLS; 0: FIONREAD */
    uint64_t id;     /* this instance, or 0: none in this process */
    uint64_t ids;    /* instances made, in this process and its parents */
    int broken;      /* every lookup stat()s */
    uint64_t events; /* moved on before and after each drain: even while
                        one is under way; never 0 */
    int dirs[WATCH_DIRS], files[WATCH_FILES];
    int writing[WATCH_WDS];      /* by watch: modified, and not closed since;
                                    read without the lock */
    apr_time_t added[WATCH_WDS]; /* by watch: since when it is watched (real
                                    time), or 0 */
    int ndirs, nfiles, atfork;
} w = {PTHREAD_MUTEX_INITIALIZER,
       -1,
       {[0 ... WATCH_POLLS - 1] = {-1, 0, {0}}}, /* no instance: -1 */
       0,
       0,
       0,
       0,
       1,
       {0},
       {0},
       {0},
       {0},
       0,
       0,
       0};

/* NB: a forked child must not read its parent's queue (each would take
 * events from the other): the views it inherits stat() from then on, and
 * it makes an instance of its own for what it watches. */
static void watch_forked(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    int i;

    /* NB: an inherited epoll instance is the parent's: it reports the
     * parent's queue. Every slot, not only the first npolls: a fork while
     * another thread makes the instances comes before npolls is set. */
    for (i = 0; i < WATCH_POLLS; i++) {
        if (w.polls[i].fd >= 0)
            close(w.polls[i].fd);
        w.polls[i].fd = -1;
        w.polls[i].busy = 0;
    }
    w.npolls = 0;
    if (w.fd >= 0)
        close(w.fd);
    w.lock = fresh;
    w.fd = -1;
    w.id = 0;
    w.broken = 0;
    w.ndirs = w.nfiles = 0;
    memset(w.writing, 0, sizeof(w.writing));
    memset(w.added, 0, sizeof(w.added));
    w.events |= 1; /* forked in the middle of a drain */
}

/* Where wd is in list, or -1. */
static int find(const int *list, int n, int wd)
{
    int i;

    for (i = 0; i < n; i++)
        if (list[i] == wd)
            return i;
    return -1;
}

/* Watches a file (under w.lock): its watch, or -1 if it cannot. A
 * replaced file's watch goes when its inode does. */
static int watch_file(const char *path)
{
    int wd = inotify_add_watch(w.fd, path, FILE_MASK);

    if (wd < 0)
        return -1;
    if (find(w.files, w.nfiles, wd) >= 0)
        return wd;
    if (w.nfiles == WATCH_FILES || wd >= WATCH_WDS) {
        (void)inotify_rm_watch(w.fd, wd);
        return -1;
    }
    w.files[w.nfiles++] = wd;
    __atomic_store_n(&w.added[wd], apr_time_now(), __ATOMIC_SEQ_CST);
    return wd;
}

/* Watches a directory (under w.lock); 0 if it cannot. */
static int watch_dir(const char *dir, uint32_t mask)
{
    int wd = inotify_add_watch(w.fd, dir, mask);

    if (wd < 0)
        return 0;
    if (find(w.dirs, w.ndirs, wd) >= 0)
        return 1;
    if (w.ndirs == WATCH_DIRS)
        return 0;
    w.dirs[w.ndirs++] = wd;
    return 1;
}

static void set_writing(int wd, int on)
{
    if (wd >= 0 && wd < WATCH_WDS)
        __atomic_store_n(&w.writing[wd], on, __ATOMIC_SEQ_CST);
}

/* Takes in what the queue holds. The count moves on before the queue is
 * read, so that a lookup that finds the queue empty finds the count moved
 * on too, and after, so that a stat() made while the queue was read does
 * not count for a change the read took. */
static void drain(void)
{
    union {
        struct inotify_event ev;
        char buf[4096];
    } u;
    ssize_t n;

    pthread_mutex_lock(&w.lock);
    __atomic_add_fetch(&w.events, 1, __ATOMIC_SEQ_CST);
    while ((n = read(w.fd, u.buf, sizeof(u.buf))) > 0 ||
           (n < 0 && errno == EINTR)) {
        const char *q = u.buf;

        while (n > 0 && q < u.buf + n) {
            const struct inotify_event *ev = (const void *)q;
            int i = find(w.files, w.nfiles, ev->wd);

            if ((ev->mask & IN_Q_OVERFLOW) ||
                ((ev->mask &
                  (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) &&
                 find(w.dirs, w.ndirs, ev->wd) >= 0))
                __atomic_store_n(&w.broken, 1, __ATOMIC_SEQ_CST);
            else if ((ev->mask & IN_IGNORED) && i >= 0) {
                w.files[i] = w.files[--w.nfiles];
                set_writing(ev->wd, 0);
                if (ev->wd < WATCH_WDS)
                    __atomic_store_n(&w.added[ev->wd], 0, __ATOMIC_SEQ_CST);
            }
            else if (i >= 0 && (ev->mask & IN_CLOSE_WRITE))
                set_writing(ev->wd, 0); /* the writer is done */
            else if (i >= 0 && (ev->mask & IN_MODIFY))
                set_writing(ev->wd, 1);
            q += sizeof(*ev) + ev->len;
        }
    }
    if (n < 0 && errno != EAGAIN)
        __atomic_store_n(&w.broken, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&w.events, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&w.lock);
}

/* The count of events after taking in the queue's, to check generations
 * against; 0 when lookups must stat(). */
uint64_t authn_hmac_watch_events(void)
{
    int cpu = sched_getcpu(), np = w.npolls;
    poll_t *pl = np > 0 ? &w.polls[cpu > 0 ? cpu % np : 0] : NULL;
    struct epoll_event ev;
    uint64_t events;
    int n = 0;

    if (pl &&
        (pl->fd < 0 || __atomic_exchange_n(&pl->busy, 1, __ATOMIC_ACQUIRE)))
        pl = NULL; /* none, or another lookup is in it */
    if (pl) {
        /* NB: not epoll_wait(), a cancellation point whose bookkeeping
         * costs a tenth of a hit; SYS_epoll_pwait is on every arch. */
        n = (int)syscall(SYS_epoll_pwait, pl->fd, &ev, 1, 0, NULL, 0);
        __atomic_store_n(&pl->busy, 0, __ATOMIC_RELEASE);
        if (n < 0)
            return 0;
        /* NB: the ready list was read without a lock: the count below
         * must not be read before it. An empty list was emptied by an
         * earlier lookup in this instance (busy orders them), whose poll
         * came after any drain that took the event, and so after that
         * drain moved the count on. */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
    }
    else if (ioctl(w.fd, FIONREAD, &n) != 0)
        return 0;
    if (n > 0)
        drain();
    if (__atomic_load_n(&w.broken, __ATOMIC_SEQ_CST))
        return 0;
    events = __atomic_load_n(&w.events, __ATOMIC_SEQ_CST);
    /* NB: even while another thread drains: the queue it emptied may have
     * held a change that a generation checked at this count predates. */
    return events % 2 ? events : 0;
}

/* Whether the file watched as wd has no writer at work (modified and not
 * closed since), once the queue is taken in, and was watched since before
 * changed (real time): the first write of a writer that opened the file
 * before the watch was made is not seen. */
int authn_hmac_watch_quiet(int wd, apr_time_t changed)
{
    apr_time_t added;

    if (wd < 0 || wd >= WATCH_WDS || authn_hmac_watch_events() == 0)
        return 0;
    added = __atomic_load_n(&w.added[wd], __ATOMIC_SEQ_CST);
    return added != 0 && added < changed &&
           !__atomic_load_n(&w.writing[wd], __ATOMIC_SEQ_CST);
}

/* An epoll instance that reports fd readable, or -1. */
static int poll_on(int fd)
{
    struct epoll_event ev;
    int ep = epoll_create1(EPOLL_CLOEXEC);

    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN; /* level-triggered: for as long as it is so */
    if (ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(ep);
        ep = -1;
    }
    return ep;
}

/* Whether inotify sees every change made on the file system of fs. */
static int local_fs(const struct statfs *fs)
{
    switch ((unsigned long)fs->f_type) {
    case 0xEF53UL:     /* ext2, ext3, ext4 */
    case 0x58465342UL: /* xfs */
    case 0x9123683EUL: /* btrfs */
    case 0x01021994UL: /* tmpfs */
        return 1;
    default:
        return 0; /* NFS, CIFS, FUSE, overlay...: changes from elsewhere */
    }
}

uint64_t authn_hmac_watch_path(const char *path, int *wd)
{
    char *real = realpath(path, NULL), *slash;
    struct statfs fs;
    uint64_t id = 0;
    int ok = 0;

    *wd = -1;
    /* NB: a symbolic link anywhere on the path could be changed without an
     * event on what is watched (a Kubernetes ConfigMap is one). */
    if (!real || strcmp(real, path) != 0 || !(slash = strrchr(real, '/')) ||
        slash == real)
        goto out;
    *slash = '\0';
    if (statfs(real, &fs) != 0 || !local_fs(&fs))
        goto out;
    pthread_mutex_lock(&w.lock);
    if (!w.atfork && pthread_atfork(NULL, NULL, watch_forked) == 0)
        w.atfork = 1;
    if (w.id == 0 && w.atfork &&
        (w.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) >= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int i, np = cpus < 1 ? 1 : cpus > WATCH_POLLS ? WATCH_POLLS : (int)cpus;

        w.id = ++w.ids;
        for (i = 0; i < np; i++)
            w.polls[i].fd = poll_on(w.fd);
        w.npolls = np;
        /* NB: past any count a view inherited from a parent holds. */
        __atomic_add_fetch(&w.events, 2, __ATOMIC_SEQ_CST);
    }
    if (w.id != 0 && !w.broken) {
        *slash = '/';
        *wd = watch_file(real);
        ok = *wd >= 0;
        *slash = '\0';
        ok = ok && watch_dir(real, DIR_MASK);
        while (ok && (slash = strrchr(real, '/')) != NULL && slash != real) {
            *slash = '\0';
            ok = watch_dir(real, UP_MASK);
        }
        if (ok)
            id = w.id;
    }
    pthread_mutex_unlock(&w.lock);
out:
    free(real);
    return id;
}

int authn_hmac_watch_fd(int fd)
{
    struct statfs fs;
    char proc[64];
    int wd = -1;

    if (fd < 0 || fstatfs(fd, &fs) != 0 || !local_fs(&fs))
        return -1;
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    pthread_mutex_lock(&w.lock);
    if (w.id != 0)
        wd = watch_file(proc);
    pthread_mutex_unlock(&w.lock);
    return wd;
}

int authn_hmac_watch_live(uint64_t id)
{
    return id != 0 && id == __atomic_load_n(&w.id, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&w.broken, __ATOMIC_SEQ_CST);
}

#ifdef AUTHN_HMAC_TESTING
/* Seams for tests (sources/watch_testing.h): not in the shipped library. */
#include "sources/watch_testing.h"

void authn_hmac_test_set_writing(int wd, int on)
{
    set_writing(wd, on);
}

void authn_hmac_test_drain_begin(void)
{
    pthread_mutex_lock(&w.lock);
    __atomic_add_fetch(&w.events, 1, __ATOMIC_SEQ_CST);
}

void authn_hmac_test_drain_take(void)
{
    char buf[4096];

    while (read(w.fd, buf, sizeof(buf)) > 0)
        ;
}

void authn_hmac_test_drain_end(void)
{
    __atomic_add_fetch(&w.events, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&w.lock);
}

int authn_hmac_test_polls(int max_too)
{
    return max_too ? WATCH_POLLS : w.npolls;
}

int authn_hmac_test_poll_fd(int i)
{
    return w.polls[i].fd;
}

int authn_hmac_test_poll_busy(int i)
{
    return w.polls[i].busy;
}

void authn_hmac_test_poll_set(int i, int how)
{
    if (how == AUTHN_HMAC_TEST_POLL_HOLD)
        w.polls[i].busy = 1;
    else if (how == AUTHN_HMAC_TEST_POLL_CLOSE)
        close(w.polls[i].fd);
    else
        w.npolls = 0;
}
#endif
