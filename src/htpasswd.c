/* htpasswd.c: an in-memory index of an htpasswd file, and the per-process
 * view that rebuilds it when the file changes. */
#include "authn_hmac/htpasswd.h"
#include "authn_hmac/cred.h"
#include "authn_hmac/util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_file_info.h>
#include <apr_file_io.h>
#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_portable.h>
#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_proc.h>

#include <openssl/evp.h>

/* A file's index, in memory of p (authn_hmac_htpasswd_parse). */
struct authn_hmac_htpasswd {
    authn_hmac_index_t v;
};

apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_badline_fn bad,
                                       void *baton, apr_pool_t *p)
{
    authn_hmac_htpasswd_t *idx = apr_pcalloc(p, sizeof(*idx));
    size_t cap = authn_hmac_index_bound(len, authn_hmac_index_lines(buf, len)),
           used;
    void *area = apr_palloc(p, cap);
    apr_status_t rv;

    rv = authn_hmac_index_build(area, cap, buf, len, NULL, 0, NULL, bad, baton,
                                &used, p);
    if (rv == APR_SUCCESS)
        rv = authn_hmac_index_open(&idx->v, area, used, NULL);
    if (rv == APR_SUCCESS)
        *out = idx;
    return rv;
}

const char *authn_hmac_htpasswd_get(const authn_hmac_htpasswd_t *idx,
                                    const char *user, size_t *hash_len)
{
    authn_hmac_index_entry_t e;
    uint32_t ord;
    uint64_t off = authn_hmac_index_find(&idx->v, user, strlen(user), &ord);

    if (!off || authn_hmac_index_entry(&idx->v, off, NULL, &e) != APR_SUCCESS)
        return NULL;
    *hash_len = e.hash_len;
    return e.hash;
}

const char *authn_hmac_htpasswd_typical(const authn_hmac_htpasswd_t *idx,
                                        size_t *len)
{
    authn_hmac_index_entry_t e;
    uint64_t off = authn_hmac_index_typical(&idx->v);

    *len = 0;
    if (!off || authn_hmac_index_entry(&idx->v, off, NULL, &e) != APR_SUCCESS)
        return NULL;
    *len = e.hash_len;
    return e.hash;
}

unsigned authn_hmac_htpasswd_count(const authn_hmac_htpasswd_t *idx)
{
    return idx->v.count;
}

unsigned authn_hmac_htpasswd_bad_lines(const authn_hmac_htpasswd_t *idx)
{
    return idx->v.bad;
}

/* ------------------------------------------------------ per-process view */

#define USERFILE_WANTED                                                        \
    (APR_FINFO_TYPE | APR_FINFO_SIZE | APR_FINFO_MTIME | APR_FINFO_CTIME |     \
     APR_FINFO_IDENT)

/* A file modified this close to the moment we read it may change again
 * within the same timestamp; such an index is read once more later. */
#define RACY_WINDOW apr_time_from_sec(1)

/* A user's id and digest, worked out on the user's first lookup with a MAC
 * and kept for the life of the generation (see user_id), with the entry's
 * user and hash as read (from a checked copy, for a shared index). */
typedef struct memo {
    struct memo *next; /* the generation's memos, to free */
    const authn_hmac_mac_t *mac;
    size_t scope_len, user_len, hash_len;
    unsigned char id[AUTHN_HMAC_KEY_LEN];
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN];
    char text[]; /* scope, then user NUL, then hash NUL */
} memo_t;

/* Memos a generation keeps at most, per process: a user past them works
 * its id out on each hit (about a microsecond). */
#define MEMO_MAX 16384u

/* The version's metadata, kept in the index (and bound into a shared
 * one's tags): the file as it was when read, and what was read. */
typedef struct {
    uint64_t dev, ino;
    int64_t size, mtime, ctime;
    uint32_t racy, summed;
    uint64_t sum; /* authn_hmac_fingerprint of what was read, if summed */
    /* A shared version's number and region (authn_hmac_share_id): a
     * version put in place of another (an older one of the same file) is
     * never taken for it. */
    uint64_t version, region;
    char path[]; /* NUL-terminated */
} meta_t;

/* One reading of the file: never changed once published, so that lookups
 * read it without a lock. */
typedef struct {
    apr_pool_t *pool; /* holds all of it */
    authn_hmac_index_t v;
    void *mem; /* the index: this process's own, or a shared version mapped */
    size_t mem_size;
    uint64_t version; /* the shared version's number; 0: this process's own */
    memo_t **memos;   /* by entry number; NULL: none kept */
    memo_t *memo_list;
    size_t memos_size;
    uint32_t memos_made;
    struct authn_hmac_userfile *uf;
    apr_off_t reserved; /* of the budget */
    apr_finfo_t st;     /* the file as it was when idx was read */
    int racy;
    uint64_t checked; /* the watcher's events when a stat() found it fresh */
    uint64_t sum;     /* authn_hmac_fingerprint of what was read, if summed */
    int summed;
    const char *tail;   /* the user of a last line without a newline, or NULL */
    apr_time_t read_at; /* when it was read, or taken (monotonic) */
} generation_t;

/* Lookups take no lock: they count themselves under epoch & 1, in the
 * stripe of the CPU they run on, and read the current generation. A
 * rebuild (under lock, one at a time) publishes a new one, moves to the
 * next epoch, and frees the old one once every stripe's count under the
 * old epoch has been seen at 0: a lookup that counted itself after its
 * stripe was seen saw the new one. The stripes keep threads on different
 * CPUs from writing one line (hitbench, 2 threads). */
#define STRIPES 8

typedef struct {
    uint64_t n[2]; /* lookups inside, by epoch & 1 */
    char pad[64 - 2 * sizeof(uint64_t)];
} stripe_t;

struct authn_hmac_userfile {
    const char *path;
    apr_pool_t *pool;         /* per process; parent of each generation */
    apr_thread_mutex_t *lock; /* rebuilds */
    generation_t *current;    /* NULL: not read yet, or unreadable */
    uint64_t current_version; /* current's shared version, or 0: read
                                 without the lock (the reaper) */
    uint64_t epoch;
    stripe_t *stripes; /* STRIPES, each on a line of its own */
    unsigned reads;    /* times the file was read; under lock */
    uint64_t watch;    /* the watcher instance that watches it, or 0 */
    apr_off_t max_size;
    authn_hmac_budget_t *budget; /* holds current's size, or NULL */
    int wd;                      /* the file's inotify watch, or -1 */
    authn_hmac_share_t *share;   /* NULL: every process reads the file */
    unsigned slot;
    const authn_hmac_mac_t *mac; /* the shared versions' tags */
    authn_hmac_warn_fn warn;
    void *warn_baton;
    int unshared; /* sharing failed in this process: it reads the file */
    unsigned built, adopted; /* shared versions; under lock */
};

/* ------------------------------------------------------------ watching */

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

/* Whether uf is watched by this process's instance. */
static int watched(const authn_hmac_userfile_t *uf)
{
    uint64_t id = __atomic_load_n(&uf->watch, __ATOMIC_ACQUIRE);

    return id != 0 && id == __atomic_load_n(&w.id, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&w.broken, __ATOMIC_SEQ_CST);
}

/* The count of events after taking in the queue's, to check generations
 * against; 0 when lookups must stat(). */
static uint64_t watch_events(void)
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
static int watch_quiet(int wd, apr_time_t changed)
{
    apr_time_t added;

    if (wd < 0 || wd >= WATCH_WDS || watch_events() == 0)
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

int authn_hmac_userfile_watch(authn_hmac_userfile_t *uf)
{
    char *real = realpath(uf->path, NULL), *slash;
    struct statfs fs;
    int ok = 0, wd;

    /* NB: a symbolic link anywhere on the path could be changed without an
     * event on what is watched (a Kubernetes ConfigMap is one). */
    if (!real || strcmp(real, uf->path) != 0 || !(slash = strrchr(real, '/')) ||
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
        int i;

        w.id = ++w.ids;
        int np = cpus < 1 ? 1 : cpus > WATCH_POLLS ? WATCH_POLLS : (int)cpus;

        for (i = 0; i < np; i++)
            w.polls[i].fd = poll_on(w.fd);
        w.npolls = np;
        /* NB: past any count a view inherited from a parent holds. */
        __atomic_add_fetch(&w.events, 2, __ATOMIC_SEQ_CST);
    }
    if (w.id != 0 && !w.broken) {
        *slash = '/';
        wd = watch_file(real);
        ok = wd >= 0;
        __atomic_store_n(&uf->wd, wd, __ATOMIC_RELAXED);
        *slash = '\0';
        ok = ok && watch_dir(real, DIR_MASK);
        while (ok && (slash = strrchr(real, '/')) != NULL && slash != real) {
            *slash = '\0';
            ok = watch_dir(real, UP_MASK);
        }
        if (ok)
            __atomic_store_n(&uf->watch, w.id, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&w.lock);
out:
    free(real);
    return ok;
}

/* Watches the file that a rebuild opened, before it is read: the very
 * inode open, through /proc, never one put at the path since (a watch by
 * path could miss later writes through another name of the inode read).
 * A view that cannot is left to stat(), as is one whose file is on a file
 * system of its own that inotify does not fully see (a file bind-mounted
 * from NFS into a local directory). */
static void rewatch(authn_hmac_userfile_t *uf, apr_file_t *f)
{
    apr_os_file_t fd = -1;
    struct statfs fs;
    char proc[64];
    int ok = 0, wd;

    if (!watched(uf))
        return;
    if (apr_os_file_get(&fd, f) == APR_SUCCESS && fd >= 0 &&
        fstatfs(fd, &fs) == 0 && local_fs(&fs)) {
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        pthread_mutex_lock(&w.lock);
        wd = watch_file(proc);
        __atomic_store_n(&uf->wd, wd, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&w.lock);
        ok = wd >= 0;
    }
    if (!ok)
        __atomic_store_n(&uf->watch, 0, __ATOMIC_RELEASE);
}

authn_hmac_userfile_t *authn_hmac_userfile_make(const char *path, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = apr_pcalloc(p, sizeof(*uf));

    uf->path = apr_pstrdup(p, path);
    uf->wd = -1;
    uf->max_size = (apr_off_t)1 << 30; /* 1 GiB of users is not htpasswd */
    uf->stripes = (stripe_t *)(((uintptr_t)apr_pcalloc(
                                    p, STRIPES * sizeof(stripe_t) + 63) +
                                63) &
                               ~(uintptr_t)63);
    return uf;
}

void authn_hmac_userfile_limit(authn_hmac_userfile_t *uf, apr_off_t max_bytes,
                               authn_hmac_budget_t *budget)
{
    uf->max_size = max_bytes;
    uf->budget = budget;
}

/* Takes size bytes from the view's budget, if it has one; 0 if over. */
static int reserve(authn_hmac_userfile_t *uf, apr_off_t size)
{
    uint64_t used;

    if (!uf->budget)
        return 1;
    used = __atomic_load_n(&uf->budget->used, __ATOMIC_RELAXED);
    do {
        if (used + (uint64_t)size > uf->budget->max)
            return 0;
    } while (!__atomic_compare_exchange_n(&uf->budget->used, &used,
                                          used + (uint64_t)size, 0,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 1;
}

static void release(authn_hmac_userfile_t *uf, apr_off_t size)
{
    if (uf->budget)
        __atomic_sub_fetch(&uf->budget->used, (uint64_t)size, __ATOMIC_RELAXED);
}

apr_status_t authn_hmac_userfile_child_init(authn_hmac_userfile_t *uf,
                                            apr_pool_t *pchild)
{
    apr_status_t rv = apr_pool_create(&uf->pool, pchild);

    if (rv == APR_SUCCESS)
        rv = apr_thread_mutex_create(&uf->lock, APR_THREAD_MUTEX_DEFAULT,
                                     uf->pool);
    return rv;
}

/* When the file last changed: the later of mtime and ctime (a tool that
 * sets mtime back, such as rsync -t or touch -r, still moves ctime). */
static apr_time_t changed(const apr_finfo_t *f)
{
    return f->mtime > f->ctime ? f->mtime : f->ctime;
}

static int same_file(const apr_finfo_t *a, const apr_finfo_t *b)
{
    return a->device == b->device && a->inode == b->inode &&
           a->size == b->size && a->mtime == b->mtime && a->ctime == b->ctime;
}

/* Publishes g (NULL: none) and frees the generation it replaces once no
 * lookup can be reading it; called with uf->lock held. */
static void publish(authn_hmac_userfile_t *uf, generation_t *g)
{
    generation_t *old = uf->current;
    uint64_t was = __atomic_load_n(&uf->epoch, __ATOMIC_SEQ_CST) & 1;

    int i;

    __atomic_store_n(&uf->current, g, __ATOMIC_SEQ_CST);
    __atomic_store_n(&uf->current_version, g ? g->version : 0,
                     __ATOMIC_RELAXED);
    __atomic_add_fetch(&uf->epoch, 1, __ATOMIC_SEQ_CST);
    /* NB: a lookup holds it for a hash-table probe and a copy. */
    for (i = 0; i < STRIPES; i++)
        while (__atomic_load_n(&uf->stripes[i].n[was], __ATOMIC_SEQ_CST) != 0)
            sched_yield();
    if (old && old->reserved)
        release(uf, old->reserved); /* NB: not at the pool's cleanup: the
                                       budget may be gone by then */
    if (old)
        apr_pool_destroy(old->pool);
}

/* Whether g answers for the file as now stat()ed, with the watcher's
 * count of events (0: not watched). A generation read within a second of
 * a change is racy: a further change in the same timestamp tick, of the
 * same size, looks the same to stat() (on kernels and file systems without
 * fine-grained timestamps). Only inotify can vouch for it, by no event
 * since it was read; unwatched, it is read again on every lookup until the
 * second is over, as mod_authn_file reads it. Past the second it is read
 * once more, to a generation that is not racy. */
static int fresh(const generation_t *g, const apr_finfo_t *now, uint64_t events)
{
    if (!g || !same_file(&g->st, now))
        return 0;
    if (!g->racy)
        return 1;
    return apr_time_now() - changed(now) < RACY_WINDOW && events != 0 &&
           __atomic_load_n(&g->checked, __ATOMIC_SEQ_CST) == events;
}

#ifndef PAUSE_POINT
#define PAUSE_POINT(n) /* where a test stops a lookup (test_watch.c) */
#endif

/* Counts a lookup in, under the epoch it saw (*e & 1), in the stripe
 * returned; it leaves by taking 1 from that stripe's count under *e. NB:
 * counted only under an epoch still current after the count: a rebuild
 * that moves on from it then waits for the count. A lookup that read the
 * epoch before a rebuild went by, and counted itself after, would be
 * counted where the next rebuild does not look, and have the generation
 * it reads freed under it: it counts itself again. */
static stripe_t *enter(authn_hmac_userfile_t *uf, uint64_t *e)
{
    int cpu = sched_getcpu();
    stripe_t *st = &uf->stripes[cpu > 0 ? (unsigned)cpu % STRIPES : 0];

    for (;;) {
        *e = __atomic_load_n(&uf->epoch, __ATOMIC_SEQ_CST);
        PAUSE_POINT(1);
        __atomic_add_fetch(&st->n[*e & 1], 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&uf->epoch, __ATOMIC_SEQ_CST) == *e)
            break;
        __atomic_sub_fetch(&st->n[*e & 1], 1, __ATOMIC_SEQ_CST);
    }
    *e &= 1;
    return st;
}

/* A shared version of a 1 GiB file takes a few seconds to build: past
 * this, a waiting lookup reads the file itself. */
#define SHARE_WAIT apr_time_from_sec(5)
/* What answer() returns for an entry of a shared version that does not
 * verify (altered since it was written). */
#define CORRUPT (APR_OS_START_USERERR + 2)
/* What answer() returns for a line the reading may have cut (see there). */
#define MAYBE_CUT (APR_OS_START_USERERR + 3)

static void warn(authn_hmac_userfile_t *uf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void warn(authn_hmac_userfile_t *uf, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (!uf->warn)
        return;
    va_start(ap, fmt);
    apr_vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    uf->warn(uf->warn_baton, msg);
}

void authn_hmac_userfile_share(authn_hmac_userfile_t *uf,
                               authn_hmac_share_t *sh, unsigned slot,
                               const authn_hmac_mac_t *mac,
                               authn_hmac_warn_fn warn_fn, void *baton)
{
    uf->share = sh && mac ? sh : NULL;
    uf->slot = slot;
    uf->mac = mac;
    uf->warn = warn_fn;
    uf->warn_baton = baton;
}

static apr_status_t generation_free(void *data)
{
    generation_t *g = data;

    while (g->memo_list) {
        memo_t *m = g->memo_list;

        g->memo_list = m->next;
        free(m);
    }
    if (g->memos)
        munmap(g->memos, g->memos_size);
    if (g->mem)
        munmap(g->mem, g->mem_size);
    return APR_SUCCESS;
}

static generation_t *generation_make(authn_hmac_userfile_t *uf)
{
    apr_pool_t *np;
    generation_t *g;

    if (apr_pool_create(&np, uf->pool) != APR_SUCCESS)
        return NULL;
    g = apr_pcalloc(np, sizeof(*g));
    g->pool = np;
    g->uf = uf;
    apr_pool_cleanup_register(np, g, generation_free, apr_pool_cleanup_null);
    return g;
}

/* Opens the index at g->mem (with mac: only a tagged one), and makes room
 * for its memos. */
static apr_status_t generation_open(generation_t *g, size_t size,
                                    const authn_hmac_mac_t *mac)
{
    apr_status_t rv = authn_hmac_index_open(&g->v, g->mem, size, mac);

    /* NB: by entry number, zeroed pages the kernel gives only when a
     * memo is kept there. */
    if (rv == APR_SUCCESS && g->v.entries) {
        g->memos_size = g->v.entries * sizeof(memo_t *);
        g->memos = mmap(NULL, g->memos_size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (g->memos == MAP_FAILED)
            g->memos = NULL;
    }
    return rv;
}

static void destroy(generation_t *g)
{
    if (g && g->reserved)
        release(g->uf, g->reserved);
    if (g)
        apr_pool_destroy(g->pool);
}

/* The file is read in pieces of this size, twice: once to count its lines
 * (which size the index) and sum it, once to index it. Never the whole
 * file in memory at once: its pages would be as many again as the
 * index's, each zeroed by the kernel first. */
#define CHUNK ((size_t)4 << 20)

/* A reading of the file. */
typedef struct {
    apr_file_t *f;
    apr_finfo_t st; /* as fstat() saw it before */
    size_t len, lines;
    uint64_t sum; /* of the pieces, each authn_hmac_fingerprint'ed */
    char *chunk;  /* CHUNK bytes */
    char *tail;   /* the user of a last line without a newline, or NULL */
    int cut;      /* the last line has no newline */
} reading_t;

static void close_file(reading_t *r)
{
    if (r->chunk)
        munmap(r->chunk, CHUNK);
    r->chunk = NULL;
    if (r->f)
        apr_file_close(r->f);
    r->f = NULL;
}

/* The user that the last line of the reading names, where that line has
 * no newline (a writer may not have written the rest yet): from the last
 * piece read (got bytes), as the index splits a line. */
static void tail_of(reading_t *r, size_t got, apr_pool_t *tp)
{
    const char *b = r->chunk, *e = b + got, *u, *c;

    r->tail = NULL;
    r->cut = got > 0 && e[-1] != '\n';
    if (!r->cut)
        return;
    u = memrchr(b, '\n', got);
    if (!u && r->len != got)
        return; /* a line longer than a piece: too long, locked */
    u = u ? u + 1 : b;
    while (u < e && apr_isspace(*u))
        u++;
    if (u >= e)
        return;
    c = memchr(u, ':', (size_t)(e - u));
    if (!c)
        for (c = e; c > u && apr_isspace(c[-1]); c--)
            ;
    if (c > u)
        r->tail = apr_pstrmemdup(tp, u, (apr_size_t)(c - u));
}

/* Opens the file and reads it once: its length, lines, sum and tail. */
static apr_status_t scan_file(authn_hmac_userfile_t *uf, reading_t *r,
                              apr_pool_t *tp)
{
    apr_status_t rv;
    apr_size_t got;

    memset(r, 0, sizeof(*r));
    /* NB: non-blocking, so that a FIFO put at the path cannot hold the
     * worker in open(); its type is refused just below. */
    rv = apr_file_open(&r->f, uf->path, APR_FOPEN_READ | APR_FOPEN_NONBLOCK,
                       APR_OS_DEFAULT, tp);
    if (rv != APR_SUCCESS)
        return rv;
    /* NB: watched before its fstat(): a write made between the two
     * through a name not watched is in the size read, or queued. */
    rewatch(uf, r->f);
    rv = apr_file_info_get(&r->st, USERFILE_WANTED, r->f);
    if (rv == APR_INCOMPLETE)
        rv = APR_SUCCESS;
    if (rv == APR_SUCCESS && r->st.filetype != APR_REG)
        rv = APR_EBADF;
    if (rv == APR_SUCCESS && r->st.size > uf->max_size)
        rv = APR_ENOSPC;
    /* NB: not malloc()ed: glibc would keep the pages when it is freed. */
    if (rv == APR_SUCCESS &&
        (r->chunk = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) {
        r->chunk = NULL;
        rv = APR_ENOMEM;
    }
    while (rv == APR_SUCCESS) {
        got = CHUNK;
        rv = apr_file_read_full(r->f, r->chunk, got, &got);
        r->len += got;
        if (got > 0)
            tail_of(r, got, tp);
        r->lines += authn_hmac_index_lines(r->chunk, got);
        r->sum = (r->sum ^ authn_hmac_fingerprint(r->chunk, got)) *
                     0x9E3779B97F4A7C15ULL +
                 got;
        if (rv == APR_EOF) {
            rv = APR_SUCCESS;
            break;
        }
        if (got < CHUNK || (apr_off_t)r->len > uf->max_size)
            break; /* NB: a file that grows while read stops at its max */
    }
    if (rv != APR_SUCCESS)
        close_file(r);
    return rv;
}

/* The rest of a logical line longer than a piece, skipped: in it, whether
 * its physical line so far holds a NUL, and its last two bytes. */
typedef struct {
    int in, nul;
    char c1, c2;
} skip_t;

/* How much of text (n bytes) is still the line s skips: up to the end of
 * a physical line that neither a backslash nor a NUL continues (the rules
 * of authn_hmac_index_feed). */
static size_t skip_rest(skip_t *s, const char *text, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (text[i] == '\n') {
            int e = s->c1 == '\r' ? s->c2 : s->c1;

            if (s->nul || e != '\\') {
                memset(s, 0, sizeof(*s));
                return i + 1;
            }
            s->nul = 0;
            s->c1 = s->c2 = 0;
            continue;
        }
        s->nul |= text[i] == '\0';
        s->c2 = s->c1;
        s->c1 = text[i];
    }
    return n;
}

/* Reads the file again into the index b. A logical line longer than a
 * piece is one line, too long (its first piece is fed as such), as the
 * whole file would be read: the rest of it is skipped, never read as
 * lines of its own. */
static apr_status_t feed_file(reading_t *r, authn_hmac_index_builder_t *b,
                              authn_hmac_badline_fn bad, void *baton)
{
    apr_off_t at = 0;
    apr_status_t rv = apr_file_seek(r->f, APR_SET, &at);
    size_t keep = 0, total = 0;
    skip_t s = {0, 0, 0, 0};

    while (rv == APR_SUCCESS) {
        apr_size_t got = CHUNK - keep;
        size_t n, used;
        int last;

        rv = apr_file_read_full(r->f, r->chunk + keep, got, &got);
        if (rv == APR_EOF)
            rv = APR_SUCCESS;
        if (rv != APR_SUCCESS)
            break;
        total += got;
        /* NB: no more than the first reading saw: the index was sized
         * for it (a change since is told by the fstat() after). */
        if (total > r->len) {
            got -= total - r->len;
            total = r->len;
        }
        n = keep + got;
        last = got < CHUNK - keep || total == r->len;
        used = s.in ? skip_rest(&s, r->chunk, n) : 0;
        if (!s.in) {
            size_t fed = authn_hmac_index_feed(b, r->chunk + used, n - used,
                                               last, bad, baton);

            if (fed == 0 && used == 0 && n == CHUNK) {
                s.in = 1;
                (void)skip_rest(&s, r->chunk, n); /* as at the piece's end */
                fed = authn_hmac_index_feed(b, r->chunk, n, 1, bad, baton);
            }
            used += fed;
        }
        memmove(r->chunk, r->chunk + used, n - used);
        keep = n - used;
        if (last)
            break;
    }
    return rv;
}

/* Whether the file changed while it was read. */
static int torn(reading_t *r)
{
    apr_finfo_t after;

    return r->len != (size_t)r->st.size ||
           apr_file_info_get(&after, USERFILE_WANTED, r->f) != APR_SUCCESS ||
           !same_file(&r->st, &after);
}

/* The metadata of a reading, in p. */
static meta_t *meta_make(const authn_hmac_userfile_t *uf, const apr_finfo_t *st,
                         int racy, int summed, uint64_t sum, size_t *len,
                         apr_pool_t *p)
{
    size_t pl = strlen(uf->path);
    meta_t *m;

    *len = sizeof(*m) + pl + 1;
    if (*len > AUTHN_HMAC_INDEX_META_MAX)
        return NULL;
    m = apr_pcalloc(p, *len);
    m->dev = (uint64_t)st->device;
    m->ino = (uint64_t)st->inode;
    m->size = st->size;
    m->mtime = st->mtime;
    m->ctime = st->ctime;
    m->racy = (uint32_t)racy;
    m->summed = (uint32_t)summed;
    m->sum = summed ? sum : 0;
    memcpy(m->path, uf->path, pl + 1);
    return m;
}

/* Indexes the reading r in area (cap bytes), tagged under mac if not
 * NULL; *used what it took. APR_EOF if the file changed while read. */
static apr_status_t index_file(authn_hmac_userfile_t *uf, reading_t *r,
                               void *area, size_t cap, const meta_t *m,
                               size_t ml, const authn_hmac_mac_t *mac,
                               authn_hmac_badline_fn bad, void *baton,
                               size_t *used, apr_pool_t *tp)
{
    authn_hmac_index_builder_t *b;
    apr_status_t rv =
        authn_hmac_index_begin(&b, area, cap, r->len, r->lines, m, ml, tp);

    if (rv == APR_SUCCESS)
        rv = feed_file(r, b, bad, baton);
    PAUSE_POINT(4);
    if (rv == APR_SUCCESS)
        rv = authn_hmac_index_end(b, mac, bad, baton, used);
    if (rv == APR_SUCCESS && torn(r))
        rv = APR_EOF;
    return rv;
}

/* Indexes the reading as a new shared version, and maps it: an error if it
 * cannot be shared (no space, no directory), APR_EOF if the file changed
 * while read (nothing is published then). */
static apr_status_t build_shared(authn_hmac_userfile_t *uf, generation_t *g,
                                 reading_t *r, meta_t *m, size_t ml,
                                 authn_hmac_badline_fn bad, void *baton,
                                 apr_pool_t *tp)
{
    size_t cap = authn_hmac_index_bound(r->len, r->lines), used = 0;
    authn_hmac_share_new_t n;
    apr_status_t rv, built;
    uint64_t version = 0;
    void *area;

    /* NB: built in this process's own memory, then copied: the version's
     * file is writable by any process of the server's user (PHP-FPM...)
     * until published, and the tags must cover only what was built, never
     * what such a process wrote there before they were made. */
    area = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                -1, 0);
    if (area == MAP_FAILED)
        return APR_ENOMEM;
    /* NB: a huge page takes one fault where 512 small ones take 512. */
    (void)madvise(area, cap, MADV_HUGEPAGE);
    rv = authn_hmac_share_begin(uf->share, uf->slot, &n);
    if (rv != APR_SUCCESS) {
        munmap(area, cap);
        return rv;
    }
    PAUSE_POINT(3);
    m->version = n.version;
    m->region = authn_hmac_share_id(uf->share);
    built = index_file(uf, r, area, cap, m, ml, uf->mac, bad, baton, &used, tp);
    rv = authn_hmac_share_end(uf->share, uf->slot, &n, area,
                              built == APR_SUCCESS ? used : 0, &version);
    munmap(area, cap);
    if (rv == APR_SUCCESS && built != APR_SUCCESS)
        return built;
    if (rv == APR_SUCCESS)
        rv = authn_hmac_share_map(uf->share, uf->slot, version, cap, &g->mem,
                                  &g->mem_size);
    if (rv == APR_SUCCESS)
        rv = generation_open(g, g->mem_size, uf->mac);
    if (rv == APR_SUCCESS) {
        g->version = version;
        uf->built++;
    }
    return rv;
}

/* Indexes the reading in this process's own memory; APR_EOF if the file
 * changed while read (the index is whole all the same). */
static apr_status_t build_private(generation_t *g, reading_t *r,
                                  const meta_t *m, size_t ml,
                                  authn_hmac_badline_fn bad, void *baton,
                                  apr_pool_t *tp)
{
    size_t cap = authn_hmac_index_bound(r->len, r->lines), used = 0;
    apr_status_t rv, opened;

    g->mem = mmap(NULL, cap, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->mem == MAP_FAILED) {
        g->mem = NULL;
        return APR_ENOMEM;
    }
    g->mem_size = cap;
    rv = index_file(g->uf, r, g->mem, cap, m, ml, NULL, bad, baton, &used, tp);
    if (rv != APR_SUCCESS && rv != APR_EOF)
        return rv;
    opened = generation_open(g, used, NULL);
    return opened != APR_SUCCESS ? opened : rv;
}

/* Bad lines told on, but for the last one of a racy reading that has no
 * newline: a writer may not have written the rest yet. */
typedef struct {
    authn_hmac_badline_fn bad;
    void *baton;
    unsigned last; /* that line's number, or 0 */
} told_t;

static void tell_bad(void *baton, unsigned lineno, const char *why)
{
    const told_t *t = baton;

    if (lineno != t->last)
        t->bad(t->baton, lineno, why);
}

/* Reads and indexes the file (as a shared version if share), and
 * publishes it; called with uf->lock held. On failure no generation is
 * left: nothing stale can be used. A reading that the file changed under
 * (a writer at work) is used, racy: it is what the file held while it was
 * read, and a deny from it is asked again once the file is quiet (see
 * settle()). */
static apr_status_t load(authn_hmac_userfile_t *uf, authn_hmac_badline_fn bad,
                         void *baton, uint64_t events, int share)
{
    generation_t *g = NULL, *cur = uf->current;
    apr_pool_t *tp = NULL;
    told_t told = {bad, baton, 0};
    reading_t r;
    size_t ml = 0;
    int racy;
    meta_t *m;
    apr_status_t rv;

    memset(&r, 0, sizeof(r));
    /* NB: the generation it replaces goes when this returns, read or not:
     * its bytes go back to the budget now. */
    if (cur && cur->reserved) {
        release(uf, cur->reserved);
        cur->reserved = 0;
    }
    rv = apr_pool_create(&tp, uf->pool);
    if (rv == APR_SUCCESS)
        rv = scan_file(uf, &r, tp);
    if (rv == APR_SUCCESS && !(g = generation_make(uf)))
        rv = APR_ENOMEM;
    if (rv != APR_SUCCESS)
        goto done;
    racy = apr_time_now() - changed(&r.st) < RACY_WINDOW;
    /* NB: the same bytes as the reading before (a racy file read again)
     * had their bad lines told then. */
    if (cur && cur->summed && cur->sum == r.sum &&
        cur->st.size == (apr_off_t)r.len)
        bad = NULL;
    if (bad && racy && r.cut) {
        told.last = (unsigned)r.lines + 1;
        bad = tell_bad;
        baton = &told;
    }
    m = meta_make(uf, &r.st, racy, 1, r.sum, &ml, tp);
    if (!m) {
        rv = APR_ENAMETOOLONG;
        goto done;
    }
    rv = APR_EGENERAL;
    if (share) {
        rv = build_shared(uf, g, &r, m, ml, bad, baton, tp);
        if (rv != APR_SUCCESS && rv != APR_EOF)
            warn(uf,
                 "cannot share the index of %s with the other processes "
                 "(%pm); this process keeps its own",
                 uf->path, &rv);
        if (rv != APR_SUCCESS) {
            destroy(g);
            g = generation_make(uf);
            rv = g ? APR_EGENERAL : APR_ENOMEM;
        }
    }
    if (g && rv != APR_SUCCESS) {
        if (!reserve(uf, r.st.size)) {
            rv = APR_ENOSPC;
            goto done;
        }
        g->reserved = r.st.size;
        rv = build_private(g, &r, m, ml, bad, baton, tp);
    }
    if (rv == APR_EOF) { /* torn: a writer at work */
        rv = APR_SUCCESS;
        racy = 1;
    }
    if (rv == APR_SUCCESS) {
        uf->reads++;
        g->st = r.st;
        g->racy = racy;
        g->summed = 1;
        g->sum = r.sum;
        g->checked = events; /* counted before the file was watched and read */
        g->read_at = authn_hmac_monotonic();
        if (r.tail)
            g->tail = apr_pstrdup(g->pool, r.tail);
    }
done:
    close_file(&r);
    if (tp)
        apr_pool_destroy(tp);
    if (rv != APR_SUCCESS) {
        destroy(g);
        g = NULL;
    }
    publish(uf, g);
    return rv;
}

/* Whether the file, read now, is what was read into a version of sum: the
 * same bytes (by their fingerprint) under the same stat() as now. */
static int same_reading(authn_hmac_userfile_t *uf, const apr_finfo_t *now,
                        uint64_t sum, generation_t *g)
{
    apr_pool_t *tp;
    reading_t r;
    int same = 0;

    if (apr_pool_create(&tp, uf->pool) != APR_SUCCESS)
        return 0;
    if (scan_file(uf, &r, tp) == APR_SUCCESS) {
        same = !torn(&r) && same_file(&r.st, now) && r.sum == sum;
        if (same && g && r.tail)
            g->tail = apr_pstrdup(g->pool, r.tail);
        close_file(&r);
    }
    apr_pool_destroy(tp);
    return same;
}

/* Takes the shared version numbered version for this process, if it
 * answers for the file as now stat()ed: read from it (its metadata says,
 * bound into its tags), and not racy, or racy but read within the second
 * and the same bytes as the file holds now (read again here to tell: this
 * process's watcher cannot vouch for another's reading). Called with
 * uf->lock held; whether it took it. */
static int adopt(authn_hmac_userfile_t *uf, uint64_t version,
                 const apr_finfo_t *now, uint64_t events)
{
    generation_t *g = generation_make(uf);
    const meta_t *m;
    apr_finfo_t st;
    int racy = 0;

    if (!g)
        return 0;
    if (authn_hmac_share_map(uf->share, uf->slot, version,
                             (size_t)uf->max_size * 2 + (64u << 20), &g->mem,
                             &g->mem_size) != APR_SUCCESS ||
        generation_open(g, g->mem_size, uf->mac) != APR_SUCCESS ||
        g->v.meta_len < sizeof(meta_t) + 1)
        goto no;
    m = (const meta_t *)(const void *)g->v.meta; /* a private copy */
    if (g->v.meta[g->v.meta_len - 1] != '\0' ||
        strcmp(m->path, uf->path) != 0 || m->version != version ||
        m->region != authn_hmac_share_id(uf->share))
        goto no;
    memset(&st, 0, sizeof(st));
    st.filetype = APR_REG;
    st.device = (apr_dev_t)m->dev;
    st.inode = (apr_ino_t)m->ino;
    st.size = (apr_off_t)m->size;
    st.mtime = (apr_time_t)m->mtime;
    st.ctime = (apr_time_t)m->ctime;
    if (!same_file(&st, now))
        goto no;
    if (m->racy) {
        /* NB: read past the second, the same bytes are as good as a
         * reading that is not racy: a later change has a later time. */
        int late = apr_time_now() - changed(now) >= RACY_WINDOW;

        if (!m->summed || (!late && events == 0) ||
            !same_reading(uf, now, m->sum, g))
            goto no;
        g->sum = m->sum;
        g->summed = 1;
        racy = !late;
    }
    g->st = st;
    g->racy = racy;
    g->version = version;
    g->checked = events;
    g->read_at = authn_hmac_monotonic();
    uf->adopted++;
    publish(uf, g);
    return 1;
no:
    destroy(g);
    return 0;
}

/* Makes the index answer for the file as now stat()ed: a shared version
 * another process made, or one made here (shared when the slot's lock
 * comes within SHARE_WAIT, else this process's own). Called with uf->lock
 * held. */
static apr_status_t refresh(authn_hmac_userfile_t *uf, const apr_finfo_t *now,
                            uint64_t events, authn_hmac_badline_fn bad,
                            void *baton)
{
    apr_status_t rv;
    int tries;

    /* NB: a racy generation past its second, the file unchanged: read
     * once more (its fingerprint), not indexed again, and no longer racy. */
    if (uf->current && uf->current->racy && uf->current->summed &&
        same_file(&uf->current->st, now) &&
        apr_time_now() - changed(now) >= RACY_WINDOW &&
        same_reading(uf, now, uf->current->sum, NULL)) {
        __atomic_store_n(&uf->current->racy, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&uf->current->checked, events, __ATOMIC_SEQ_CST);
        uf->reads++;
        return APR_SUCCESS;
    }
    for (tries = 0; uf->share && !uf->unshared && tries < 3; tries++) {
        uint64_t v = authn_hmac_share_version(uf->share, uf->slot);

        if (v && (!uf->current || uf->current->version != v) &&
            adopt(uf, v, now, events))
            return APR_SUCCESS;
        rv = authn_hmac_share_lock(uf->share, uf->slot, SHARE_WAIT);
        if (rv == APR_TIMEUP) {
            warn(uf,
                 "the shared index of %s was not ready within %d s; this "
                 "request reads the file itself",
                 uf->path, (int)apr_time_sec(SHARE_WAIT));
            break;
        }
        if (rv != APR_SUCCESS) {
            warn(uf,
                 "cannot lock the shared index of %s (%pm); this process "
                 "keeps its own",
                 uf->path, &rv);
            uf->unshared = 1;
            break;
        }
        /* NB: another process may have published while this one waited. */
        if (authn_hmac_share_version(uf->share, uf->slot) != v) {
            authn_hmac_share_unlock(uf->share, uf->slot);
            continue;
        }
        rv = load(uf, bad, baton, events, 1);
        authn_hmac_share_unlock(uf->share, uf->slot);
        return rv;
    }
    return load(uf, bad, baton, events, 0);
}

/* What a lookup asks for and gets. */
typedef struct {
    const char *user;
    const authn_hmac_mac_t *mac; /* NULL: no id wanted */
    const char *scope;
    size_t scope_len;
    const char **hash;
    size_t *hash_len;
    unsigned char *id;
    unsigned char *digest;
    int final; /* a deny is final: a line maybe cut is answered as read */
    /* Of the generation that answered: */
    int unsettled;      /* racy, or read less than SETTLE_MAX ago */
    apr_time_t changed; /* when the file it was read from changed */
    apr_time_t read_at; /* when it was read (monotonic) */
    apr_off_t size;     /* its size */
} ask_t;

static int memo_for(const memo_t *m, const ask_t *a, size_t ul)
{
    return m->mac == a->mac && m->scope_len == a->scope_len &&
           m->user_len == ul && memcmp(m->text, a->scope, a->scope_len) == 0 &&
           memcmp(m->text + m->scope_len, a->user, ul) == 0;
}

/* The user's id and digest, worked out from the entry (a checked copy),
 * and kept in a memo if the entry has none yet and the generation keeps
 * fewer than MEMO_MAX (of threads that race, the first to publish keeps
 * it). NB: the memo is whole before it is published, and never changed
 * after: readers take no lock. */
static void user_id(generation_t *g, const authn_hmac_index_entry_t *e,
                    const ask_t *a)
{
    memo_t *n, *none = NULL;
    size_t tl = a->scope_len + e->user_len + e->hash_len + 2;

    authn_hmac_user_id(a->mac, a->scope, a->scope_len, e->user, e->user_len,
                       a->id);
    authn_hmac_cred_digest(a->scope, a->scope_len, e->user, e->user_len,
                           e->hash, e->hash_len, a->digest);
    if (!g->memos ||
        __atomic_load_n(&g->memos_made, __ATOMIC_RELAXED) >= MEMO_MAX ||
        __atomic_load_n(&g->memos[e->ord], __ATOMIC_RELAXED) ||
        !(n = malloc(sizeof(*n) + tl)))
        return;
    n->mac = a->mac;
    n->scope_len = a->scope_len;
    n->user_len = e->user_len;
    n->hash_len = e->hash_len;
    memcpy(n->id, a->id, AUTHN_HMAC_KEY_LEN);
    memcpy(n->digest, a->digest, AUTHN_HMAC_DIGEST_LEN);
    memcpy(n->text, a->scope, a->scope_len);
    memcpy(n->text + a->scope_len, e->user, e->user_len + 1);
    memcpy(n->text + a->scope_len + e->user_len + 1, e->hash, e->hash_len + 1);
    n->next = __atomic_load_n(&g->memo_list, __ATOMIC_RELAXED);
    if (!__atomic_compare_exchange_n(&g->memos[e->ord], &none, n, 0,
                                     __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
        free(n);
        return;
    }
    __atomic_add_fetch(&g->memos_made, 1, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&g->memo_list, &n->next, n, 0,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

/* A deny is asked again once the file is quiet (see settle()) where the
 * generation was read within SETTLE_MAX of a change (racy) or less than
 * SETTLE_MAX ago: a file that htpasswd truncates shows its new size a
 * moment before its new time. */
#define SETTLE_MAX RACY_WINDOW

/* Whether a deny from g is unsettled; notes in a what g was read from. */
static int unsettled(const generation_t *g, ask_t *a)
{
    a->changed = changed(&g->st);
    a->size = g->st.size;
    a->read_at = g->read_at;
    a->unsettled = __atomic_load_n(&g->racy, __ATOMIC_SEQ_CST) ||
                   authn_hmac_monotonic() - g->read_at < SETTLE_MAX;
    return a->unsettled;
}

/* The user's hash (a copy in p) and id; or the file's typical hash and
 * APR_NOTFOUND (no such user) or AUTHN_HMAC_LOCKED (a locked line); or
 * CORRUPT for a shared version altered since it was written; or MAYBE_CUT
 * for the user of a last line without its newline in a racy reading (a
 * writer may not have written the rest yet), unless a->final. NB: an
 * unknown user's typical hash is read and checked as a known user's entry
 * is, so that both cost the same. */
static apr_status_t answer(generation_t *g, ask_t *a, apr_pool_t *p)
{
    unsigned char copy[AUTHN_HMAC_INDEX_COPY];
    authn_hmac_index_entry_t e;
    size_t ul = strlen(a->user);
    uint32_t ord = 0;
    uint64_t off = authn_hmac_index_find(&g->v, a->user, ul, &ord), t;
    const memo_t *m;

    a->unsettled = 0;
    if (g->tail && !a->final && strcmp(g->tail, a->user) == 0 &&
        unsettled(g, a)) {
        *a->hash = NULL;
        *a->hash_len = 0;
        return MAYBE_CUT;
    }
    if (off && a->mac && g->memos && ord < g->v.entries &&
        (m = __atomic_load_n(&g->memos[ord], __ATOMIC_ACQUIRE)) != NULL &&
        memo_for(m, a, ul)) {
        *a->hash =
            apr_pstrmemdup(p, m->text + m->scope_len + ul + 1, m->hash_len);
        *a->hash_len = m->hash_len;
        memcpy(a->id, m->id, AUTHN_HMAC_KEY_LEN);
        memcpy(a->digest, m->digest, AUTHN_HMAC_DIGEST_LEN);
        return APR_SUCCESS;
    }
    if (off) {
        if (authn_hmac_index_entry(&g->v, off, copy, &e) != APR_SUCCESS ||
            e.user_len != ul || memcmp(e.user, a->user, ul) != 0)
            return CORRUPT;
        if (!authn_hmac_hash_locked(e.hash, e.hash_len)) {
            *a->hash = apr_pstrmemdup(p, e.hash, e.hash_len);
            *a->hash_len = e.hash_len;
            if (a->mac)
                user_id(g, &e, a);
            return APR_SUCCESS;
        }
    }
    *a->hash = NULL;
    *a->hash_len = 0;
    if ((t = authn_hmac_index_typical(&g->v)) != 0) {
        if (authn_hmac_index_entry(&g->v, t, copy, &e) != APR_SUCCESS ||
            authn_hmac_hash_locked(e.hash, e.hash_len))
            return CORRUPT;
        *a->hash = apr_pstrmemdup(p, e.hash, e.hash_len);
        *a->hash_len = e.hash_len;
    }
    (void)unsettled(g, a);
    return off ? AUTHN_HMAC_LOCKED : APR_NOTFOUND;
}

/* Answers from the generation there is, without a stat(): under no lock,
 * or 0 if there is none that inotify vouches for. */
static int answer_current(authn_hmac_userfile_t *uf, ask_t *a, apr_pool_t *p,
                          uint64_t events, apr_status_t *rv)
{
    stripe_t *st;
    generation_t *g;
    uint64_t e;
    int done = 0;

    st = enter(uf, &e);
    g = __atomic_load_n(&uf->current, __ATOMIC_SEQ_CST);
    PAUSE_POINT(2);
    if (g && !__atomic_load_n(&g->racy, __ATOMIC_SEQ_CST) &&
        __atomic_load_n(&g->checked, __ATOMIC_SEQ_CST) == events) {
        *rv = answer(g, a, p);
        done = *rv != CORRUPT;
    }
    __atomic_sub_fetch(&st->n[e], 1, __ATOMIC_SEQ_CST);
    return done;
}

/* The answer from uf->current, under uf->lock: a shared version that does
 * not verify is dropped, and the file read by this process from then on. */
static apr_status_t answer_locked(authn_hmac_userfile_t *uf, ask_t *a,
                                  apr_pool_t *p, uint64_t events)
{
    apr_status_t rv;

    if (!uf->current)
        return APR_EGENERAL;
    rv = answer(uf->current, a, p);
    if (rv == CORRUPT) {
        warn(uf,
             "the shared index of %s does not verify (altered since it was "
             "written); this process reads the file itself",
             uf->path);
        uf->unshared = 1;
        rv = load(uf, NULL, NULL, events, 0);
        if (rv == APR_SUCCESS)
            rv = uf->current ? answer(uf->current, a, p) : APR_EGENERAL;
    }
    return rv;
}

/* One answer from a reading of the file as it is now: the generation
 * there is if nothing happened to the file since it was found fresh, else
 * one made or taken now. */
static apr_status_t look(authn_hmac_userfile_t *uf, ask_t *a,
                         authn_hmac_badline_fn bad, void *baton, apr_pool_t *p)
{
    apr_finfo_t now;
    generation_t *g;
    stripe_t *st;
    uint64_t e, events = 0;
    apr_status_t rv;
    int done = 0;

    /* The common case, without a lock: a watched file that nothing has
     * happened to since a stat() found its generation fresh. */
    if (watched(uf) && (events = watch_events()) != 0 &&
        answer_current(uf, a, p, events, &rv))
        return rv;
    /* NB: the file is stat()ed before the index is read: a change that
     * this request saw is never answered from the index of before. A
     * watched path is not followed: one that has become a symbolic link
     * (whose target, and the links and directories on the way to it, are
     * not watched) is stat()ed from now on. */
    rv = apr_stat(&now, uf->path,
                  USERFILE_WANTED | (events ? APR_FINFO_LINK : 0), p);
    if ((rv == APR_SUCCESS || rv == APR_INCOMPLETE) && events &&
        now.filetype == APR_LNK) {
        __atomic_store_n(&uf->watch, 0, __ATOMIC_RELEASE);
        events = 0;
        rv = apr_stat(&now, uf->path, USERFILE_WANTED, p);
    }
    if (rv == APR_INCOMPLETE)
        rv = APR_SUCCESS;
    if (rv != APR_SUCCESS)
        return rv;
    if (now.filetype != APR_REG)
        return APR_EBADF; /* a FIFO, device or directory is never opened */
    st = enter(uf, &e);
    g = __atomic_load_n(&uf->current, __ATOMIC_SEQ_CST);
    PAUSE_POINT(2);
    if (fresh(g, &now, events)) {
        rv = answer(g, a, p);
        /* NB: the count was read before the stat(): what happened after
         * it is in the queue, and moves the count on. */
        if (events && rv != CORRUPT)
            __atomic_store_n(&g->checked, events, __ATOMIC_SEQ_CST);
        done = rv != CORRUPT;
    }
    __atomic_sub_fetch(&st->n[e], 1, __ATOMIC_SEQ_CST);
    if (done)
        return rv;
    /* The file changed (or was never read): one refresh, under the lock. */
    apr_thread_mutex_lock(uf->lock);
    rv = APR_SUCCESS;
    if (!fresh(uf->current, &now, events))
        rv = refresh(uf, &now, events, bad, baton);
    if (rv == APR_SUCCESS)
        rv = answer_locked(uf, a, p, events);
    apr_thread_mutex_unlock(uf->lock);
    return rv;
}

/* Quiet: the file unchanged for this long, and no writer at work that the
 * watcher sees (a watched file). */
#define QUIET      apr_time_from_msec(50)
#define QUIET_POLL 5000 /* us */

static int denies(apr_status_t rv)
{
    return rv == APR_NOTFOUND || rv == AUTHN_HMAC_LOCKED || rv == MAYBE_CUT;
}

/* Whether the file that a's answer was read from is quiet: read QUIET ago
 * at least (the look that follows finds it unchanged since), unchanged
 * since QUIET at least, and no writer at work: as the watcher sees it, for
 * a watched file that it watched before the change; else, with a change
 * less than SETTLE_MAX ago, a writer may be at work unseen. */
static int quiet(authn_hmac_userfile_t *uf, const ask_t *a)
{
    apr_time_t age = apr_time_now() - a->changed;

    if (authn_hmac_monotonic() - a->read_at < QUIET || age < QUIET)
        return 0;
    if (watched(uf) &&
        watch_quiet(__atomic_load_n(&uf->wd, __ATOMIC_RELAXED), a->changed))
        return 1;
    return !watched(uf) || age >= SETTLE_MAX;
}

/* The writer rule. A reading of a file that a writer rewrites in place
 * holds what the file held then (htpasswd truncates it, then writes it
 * whole): a user may be missing, or the last line cut. A deny from a
 * reading of a file that changed less than SETTLE_MAX ago, or read less
 * than that ago, is asked again once the file is quiet (a grant on the
 * way ends it), SETTLE_MAX at most from now: the answer from the quiet
 * file, or past that, is final. There is no version of before: what is
 * not in the file is never granted, and a completed write is in force on
 * the very next lookup. */
static apr_status_t settle(authn_hmac_userfile_t *uf, ask_t *a,
                           authn_hmac_badline_fn bad, void *baton,
                           apr_pool_t *p, apr_status_t rv)
{
    apr_time_t start = authn_hmac_monotonic(), seen, read_at;
    apr_off_t size;
    int last;

    while (denies(rv) && a->unsettled) {
        last = authn_hmac_monotonic() - start >= SETTLE_MAX;
        if (!last && !quiet(uf, a)) {
            usleep(QUIET_POLL);
            rv = look(uf, a, bad, baton, p);
            continue;
        }
        /* NB: final only if it is the reading found quiet (a writer may
         * have begun since). */
        seen = a->changed;
        size = a->size;
        read_at = a->read_at;
        a->final = 1;
        rv = look(uf, a, bad, baton, p);
        a->final = 0;
        if (last ||
            (a->changed == seen && a->size == size && a->read_at == read_at))
            break;
    }
    return rv;
}

static apr_status_t lookup(authn_hmac_userfile_t *uf, ask_t *a,
                           authn_hmac_badline_fn bad, void *baton,
                           apr_pool_t *p)
{
    apr_status_t rv;

    if (!uf->lock)
        return APR_EINIT; /* child_init did not run or failed */
    rv = look(uf, a, bad, baton, p);
    if (denies(rv) && a->unsettled)
        rv = settle(uf, a, bad, baton, p, rv);
    return rv;
}

apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len,
                                        authn_hmac_badline_fn bad, void *baton,
                                        apr_pool_t *p)
{
    ask_t a = {user, NULL, NULL, 0, hash, hash_len, NULL, NULL, 0, 0, 0, 0, 0};

    return lookup(uf, &a, bad, baton, p);
}

apr_status_t authn_hmac_userfile_lookup_id(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_badline_fn bad,
    void *baton, apr_pool_t *p)
{
    ask_t a = {user,   mac, scope, scope_len, hash, hash_len, id,
               digest, 0,   0,     0,         0,    0};

    return lookup(uf, &a, bad, baton, p);
}

/* ------------------------------------------------------------- reaper */

/* A process that gets no request holds the version it used last until its
 * next one, though the server has replaced it (a prefork child among many
 * idle ones): its memory would not go back. A thread of each process lets
 * go of such a version within a second; the next request takes the new
 * one. */
#define REAP_EVERY apr_time_from_sec(1)
#define REAP_MAX   64

static struct {
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *cond;
    apr_thread_t *thread;
    int stop;
    authn_hmac_userfile_t *ufs[REAP_MAX];
    unsigned n;
} reaper;

static void reap(authn_hmac_userfile_t *uf)
{
    generation_t *g;
    uint64_t v = __atomic_load_n(&uf->current_version, __ATOMIC_RELAXED);

    if (!uf->share || !v || authn_hmac_share_version(uf->share, uf->slot) == v)
        return;
    if (apr_thread_mutex_trylock(uf->lock) != APR_SUCCESS)
        return; /* a request is at it: it will take the new one */
    /* NB: read under the lock: a request's rebuild frees the generation
     * it replaces once no lookup counted in the stripes reads it, and the
     * reaper is not counted there. */
    g = uf->current;
    PAUSE_POINT(5);
    if (g && g->version &&
        authn_hmac_share_version(uf->share, uf->slot) != g->version)
        publish(uf, NULL);
    apr_thread_mutex_unlock(uf->lock);
}

static void *APR_THREAD_FUNC reaper_main(apr_thread_t *t, void *data)
{
    unsigned i;

    (void)data;
    apr_thread_mutex_lock(reaper.lock);
    while (!reaper.stop) {
        (void)apr_thread_cond_timedwait(reaper.cond, reaper.lock, REAP_EVERY);
        for (i = 0; i < reaper.n && !reaper.stop; i++)
            reap(reaper.ufs[i]);
    }
    apr_thread_mutex_unlock(reaper.lock);
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static apr_status_t reaper_stop(void *data)
{
    apr_status_t rv;

    (void)data;
    if (!reaper.thread)
        return APR_SUCCESS;
    apr_thread_mutex_lock(reaper.lock);
    reaper.stop = 1;
    apr_thread_cond_signal(reaper.cond);
    apr_thread_mutex_unlock(reaper.lock);
    apr_thread_join(&rv, reaper.thread);
    reaper.thread = NULL;
    reaper.n = 0;
    return APR_SUCCESS;
}

apr_status_t authn_hmac_userfile_reaper(authn_hmac_userfile_t *uf,
                                        apr_pool_t *pchild)
{
    apr_status_t rv = APR_SUCCESS;

    if (!uf->share || !uf->lock || reaper.n == REAP_MAX)
        return APR_SUCCESS;
    if (!reaper.thread) {
        reaper.stop = 0;
        rv = apr_thread_mutex_create(&reaper.lock, APR_THREAD_MUTEX_DEFAULT,
                                     pchild);
        if (rv == APR_SUCCESS)
            rv = apr_thread_cond_create(&reaper.cond, pchild);
        if (rv == APR_SUCCESS)
            rv = apr_thread_create(&reaper.thread, NULL, reaper_main, NULL,
                                   pchild);
        if (rv != APR_SUCCESS)
            return rv;
        /* NB: before pchild's subpools (the views') go. */
        apr_pool_pre_cleanup_register(pchild, NULL, reaper_stop);
    }
    apr_thread_mutex_lock(reaper.lock);
    reaper.ufs[reaper.n++] = uf;
    apr_thread_mutex_unlock(reaper.lock);
    return APR_SUCCESS;
}

void authn_hmac_userfile_shared(authn_hmac_userfile_t *uf, unsigned *built,
                                unsigned *adopted)
{
    apr_thread_mutex_lock(uf->lock);
    *built = uf->built;
    *adopted = uf->adopted;
    apr_thread_mutex_unlock(uf->lock);
}

unsigned authn_hmac_userfile_reads(authn_hmac_userfile_t *uf)
{
    unsigned n;

    apr_thread_mutex_lock(uf->lock);
    n = uf->reads;
    apr_thread_mutex_unlock(uf->lock);
    return n;
}
