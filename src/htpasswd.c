/* htpasswd.c: an in-memory index of an htpasswd file, and the per-process
 * view that rebuilds it when the file changes. */
#include "authn_hmac/htpasswd.h"
#include "authn_hmac/cred.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_file_info.h>
#include <apr_file_io.h>
#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_portable.h>
#include <apr_strings.h>

#include <openssl/evp.h>

#define MAX_BAD_REPORTS 10u /* malformed lines logged one by one */

struct authn_hmac_htpasswd {
    apr_hash_t *users; /* user -> entry_t */
    unsigned bad;
    const char *typical; /* a hash of the file's typical cost, or NULL */
    size_t typical_len;
};

/* A user's id and digest, worked out on the user's first lookup with a MAC
 * and kept with the entry for the life of the index (see lookup_id). */
typedef struct {
    const authn_hmac_mac_t *mac;
    size_t scope_len;
    unsigned char id[AUTHN_HMAC_KEY_LEN];
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN];
    char scope[]; /* the scope they were made for */
} memo_t;

typedef struct {
    const char *hash;
    size_t len;
    memo_t *memo; /* set once, atomically; freed with the index */
} entry_t;

/* One line, read as mod_authn_file reads it: trimmed as ap_cfg_getline
 * trims; the user is what comes before the first ':', the hash what comes
 * after the run of ':' that follows, up to the next ':' ("user:hash:extra"
 * has the hash "hash"). A line without a hash still names its user, who
 * then can never log in, as with mod_authn_file. Returns NULL, or why the
 * line is odd (it is then warned about). */
static const char *parse_line(apr_hash_t *users, char *l, size_t len,
                              apr_pool_t *p)
{
    char *colon, *hash, *hash_end, *end = l + len;
    const char *why = NULL;
    entry_t *e;

    while (l < end && apr_isspace(*l))
        l++;
    while (end > l && apr_isspace(end[-1]))
        end--;
    if (l == end || *l == '#')
        return NULL;
    colon = memchr(l, ':', (size_t)(end - l));
    hash = colon ? colon : end;
    while (hash < end && *hash == ':')
        hash++;
    hash_end = memchr(hash, ':', (size_t)(end - hash));
    if (!hash_end)
        hash_end = end;
    if (!colon)
        why = "has no ':' separator; the user it names cannot log in";
    else if (colon == l)
        why = "has an empty user name";
    else if (hash == hash_end)
        why = "has an empty password hash; the user cannot log in";
    if (!colon)
        colon = end;
    *colon = '\0';
    *hash_end = '\0';
    if (apr_hash_get(users, l, (apr_ssize_t)(colon - l)))
        return why; /* the first line for a user wins */
    e = apr_palloc(p, sizeof(*e));
    e->hash = hash;
    e->len = (size_t)(hash_end - hash);
    e->memo = NULL;
    apr_hash_set(users, l, (apr_ssize_t)(colon - l), e);
    return why;
}

/* The bcrypt cost of a "$2y$NN$..." hash, or -1 for another scheme. */
static int bcrypt_cost(const char *h, size_t len)
{
    if (len < 7 || h[0] != '$' || h[1] != '2' || h[3] != '$' || h[6] != '$' ||
        !apr_isdigit(h[4]) || !apr_isdigit(h[5]))
        return -1;
    return (h[4] - '0') * 10 + (h[5] - '0');
}

static int by_value(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int authn_hmac_hash_locked(const char *hash, size_t len)
{
    return len == 0 || hash[0] == '!' || hash[0] == '*';
}

/* The template of the hash that unknown and locked users are checked
 * against (authn_hmac_dummy_hash), so that they cost what known users
 * cost: one of the file's own, at the median bcrypt cost (or any, in a file
 * without bcrypt), never a locked one. */
static void choose_typical(authn_hmac_htpasswd_t *idx, apr_pool_t *p)
{
    unsigned n = apr_hash_count(idx->users), nb = 0;
    const entry_t *pick = NULL;
    apr_hash_index_t *hi;
    int *costs, median;

    if (!n)
        return;
    costs = apr_palloc(p, sizeof(int) * n);
    for (hi = apr_hash_first(p, idx->users); hi; hi = apr_hash_next(hi)) {
        const entry_t *e = apr_hash_this_val(hi);
        int cost = bcrypt_cost(e->hash, e->len);

        if (authn_hmac_hash_locked(e->hash, e->len))
            continue;
        if (!pick)
            pick = e;
        if (cost >= 0)
            costs[nb++] = cost;
    }
    if (nb) {
        qsort(costs, nb, sizeof(int), by_value);
        median = costs[nb / 2];
        for (hi = apr_hash_first(p, idx->users); hi; hi = apr_hash_next(hi)) {
            const entry_t *e = apr_hash_this_val(hi);

            if (bcrypt_cost(e->hash, e->len) == median) {
                pick = e;
                break;
            }
        }
    }
    if (pick) {
        idx->typical = pick->hash;
        idx->typical_len = pick->len;
    }
}

const char *authn_hmac_htpasswd_typical(const authn_hmac_htpasswd_t *idx,
                                        size_t *len)
{
    *len = idx->typical_len;
    return idx->typical;
}

/* The next logical line from *pos, as ap_cfg_getline reads it: a line
 * ending in '\\' (before its LF or CRLF) goes on with the next one, the
 * backslash removed; a NUL ends the line, and the rest of its physical line
 * is dropped. The line is joined in place at *line; returns its length and
 * sets *nul when a NUL cut it. */
static size_t next_line(char **pos, char *end, char **line, unsigned *lineno,
                        int *nul)
{
    char *w = *pos;

    *line = *pos;
    *nul = 0;
    while (*pos < end) {
        char *nl = memchr(*pos, '\n', (size_t)(end - *pos));
        char *e = nl ? nl : end;
        char *z = memchr(*pos, '\0', (size_t)(e - *pos));
        int more = 0;

        (*lineno)++;
        if (z) {
            *nul = 1;
            e = z;
        }
        else if (nl) {
            if (e > *pos && e[-1] == '\r')
                e--;
            if (e > *pos && e[-1] == '\\') {
                e--;
                more = 1;
            }
        }
        memmove(w, *pos, (size_t)(e - *pos));
        w += e - *pos;
        *pos = nl ? nl + 1 : end;
        if (!more)
            break;
    }
    return (size_t)(w - *line);
}

static apr_status_t free_memos(void *data)
{
    authn_hmac_htpasswd_t *idx = data;
    apr_hash_index_t *hi;

    for (hi = apr_hash_first(NULL, idx->users); hi; hi = apr_hash_next(hi))
        free(((entry_t *)apr_hash_this_val(hi))->memo);
    return APR_SUCCESS;
}

apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_badline_fn bad,
                                       void *baton, apr_pool_t *p)
{
    authn_hmac_htpasswd_t *idx = apr_pcalloc(p, sizeof(*idx));
    char *pos = buf, *end = buf + len;
    unsigned lineno = 0;

    idx->users = apr_hash_make(p);
    apr_pool_cleanup_register(p, idx, free_memos, apr_pool_cleanup_null);
    while (pos < end) {
        unsigned first = lineno + 1;
        char *line;
        int nul;
        size_t l = next_line(&pos, end, &line, &lineno, &nul);
        const char *why;

        /* NB: the terminators written by parse_line land inside what the
         * line took of the buffer, or on the byte past it, which callers
         * reserve. */
        why = parse_line(idx->users, line, l, p);
        if (nul)
            why = "contains a NUL byte; the rest of the line is ignored";
        if (why) {
            /* NB: at most MAX_BAD_REPORTS lines a reading, then one line
             * for the rest: a file named in .htaccess is its author's to
             * fill, and a file of bad lines must not flood the log. */
            if (bad && idx->bad < MAX_BAD_REPORTS)
                bad(baton, first, why);
            idx->bad++;
        }
    }
    if (bad && idx->bad > MAX_BAD_REPORTS)
        bad(baton, lineno,
            apr_psprintf(p,
                         "is the last of %u malformed lines; the %u after "
                         "the first %u are not reported one by one",
                         idx->bad, idx->bad - MAX_BAD_REPORTS,
                         MAX_BAD_REPORTS));
    choose_typical(idx, p);
    *out = idx;
    return APR_SUCCESS;
}

const char *authn_hmac_htpasswd_get(const authn_hmac_htpasswd_t *idx,
                                    const char *user, size_t *hash_len)
{
    const entry_t *e = apr_hash_get(idx->users, user, APR_HASH_KEY_STRING);

    if (!e)
        return NULL;
    *hash_len = e->len;
    return e->hash;
}

unsigned authn_hmac_htpasswd_count(const authn_hmac_htpasswd_t *idx)
{
    return apr_hash_count(idx->users);
}

unsigned authn_hmac_htpasswd_bad_lines(const authn_hmac_htpasswd_t *idx)
{
    return idx->bad;
}

/* ------------------------------------------------------ per-process view */

#define USERFILE_WANTED                                                        \
    (APR_FINFO_TYPE | APR_FINFO_SIZE | APR_FINFO_MTIME | APR_FINFO_CTIME |     \
     APR_FINFO_IDENT)

/* A file modified this close to the moment we read it may change again
 * within the same timestamp; such an index is read once more later. */
#define RACY_WINDOW apr_time_from_sec(1)

/* One reading of the file: never changed once published, so that lookups
 * read it without a lock. */
typedef struct {
    apr_pool_t *pool; /* holds all of it */
    authn_hmac_htpasswd_t *idx;
    apr_finfo_t st; /* the file as it was when idx was read */
    int racy;
    uint64_t checked; /* the watcher's events when a stat() found it fresh */
    unsigned char sum[32]; /* SHA-256 of what was read, if summed */
    int summed;
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
    uint64_t epoch;
    stripe_t *stripes; /* STRIPES, each on a line of its own */
    unsigned reads;    /* times the file was read; under lock */
    uint64_t watch;    /* the watcher instance that watches it, or 0 */
    apr_off_t max_size;
    authn_hmac_budget_t *budget; /* holds current's size, or NULL */
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
#define FILE_MASK                                                              \
    (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF |  \
     IN_MASK_ADD)
#define DIR_MASK                                                               \
    (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE |          \
     IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |             \
     IN_ONLYDIR | IN_MASK_ADD)
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

/* Watches a file (under w.lock); 0 if it cannot. A replaced file's watch
 * goes when its inode does. */
static int watch_file(const char *path)
{
    int wd = inotify_add_watch(w.fd, path, FILE_MASK);

    if (wd < 0)
        return 0;
    if (find(w.files, w.nfiles, wd) >= 0)
        return 1;
    if (w.nfiles == WATCH_FILES) {
        (void)inotify_rm_watch(w.fd, wd);
        return 0;
    }
    w.files[w.nfiles++] = wd;
    return 1;
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
            else if ((ev->mask & IN_IGNORED) && i >= 0)
                w.files[i] = w.files[--w.nfiles];
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
    int ok = 0;

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
        ok = watch_file(real);
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
    int ok = 0;

    if (!watched(uf))
        return;
    if (apr_os_file_get(&fd, f) == APR_SUCCESS && fd >= 0 &&
        fstatfs(fd, &fs) == 0 && local_fs(&fs)) {
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        pthread_mutex_lock(&w.lock);
        ok = watch_file(proc);
        pthread_mutex_unlock(&w.lock);
    }
    if (!ok)
        __atomic_store_n(&uf->watch, 0, __ATOMIC_RELEASE);
}

authn_hmac_userfile_t *authn_hmac_userfile_make(const char *path, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = apr_pcalloc(p, sizeof(*uf));

    uf->path = apr_pstrdup(p, path);
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
    __atomic_add_fetch(&uf->epoch, 1, __ATOMIC_SEQ_CST);
    /* NB: a lookup holds it for a hash-table probe and a copy. */
    for (i = 0; i < STRIPES; i++)
        while (__atomic_load_n(&uf->stripes[i].n[was], __ATOMIC_SEQ_CST) != 0)
            sched_yield();
    if (old)
        apr_pool_destroy(old->pool);
}

/* Reads and indexes the file, and publishes it; called with uf->lock held.
 * On failure no generation is left: nothing stale can be used. */
static apr_status_t rebuild(authn_hmac_userfile_t *uf,
                            authn_hmac_badline_fn bad, void *baton,
                            uint64_t events)
{
    apr_pool_t *np = NULL;
    apr_file_t *f = NULL;
    generation_t *g;
    apr_finfo_t st;
    apr_size_t got;
    char *buf;
    apr_status_t rv;
    int reserved = 0;

    /* NB: the generation it replaces is gone when this returns, read or
     * not: its bytes go back to the budget now. */
    if (uf->current)
        release(uf, uf->current->st.size);
    rv = apr_pool_create(&np, uf->pool);
    if (rv != APR_SUCCESS) {
        publish(uf, NULL);
        return rv;
    }
    g = apr_pcalloc(np, sizeof(*g));
    g->pool = np;
    memset(&st, 0, sizeof(st));
    /* NB: non-blocking, so that a FIFO put at the path cannot hold the
     * worker in open(); its type is refused just below. */
    rv = apr_file_open(&f, uf->path, APR_FOPEN_READ | APR_FOPEN_NONBLOCK,
                       APR_OS_DEFAULT, np);
    if (rv == APR_SUCCESS) {
        /* NB: watched before its fstat(): a write made between the two
         * through a name not watched is in the size read, or queued. */
        rewatch(uf, f);
        rv = apr_file_info_get(&st, USERFILE_WANTED, f);
        if (rv == APR_INCOMPLETE)
            rv = APR_SUCCESS;
    }
    if (rv == APR_SUCCESS && st.filetype != APR_REG)
        rv = APR_EBADF;
    if (rv == APR_SUCCESS && st.size > uf->max_size)
        rv = APR_ENOSPC;
    if (rv != APR_SUCCESS)
        goto done;
    if (!reserve(uf, st.size)) {
        rv = APR_ENOSPC;
        goto done;
    }
    reserved = 1;
    buf = apr_palloc(np, (apr_size_t)st.size + 1);
    got = (apr_size_t)st.size;
    rv = apr_file_read_full(f, buf, got, &got);
    if (rv == APR_EOF)
        rv = APR_SUCCESS; /* shrank since fstat: the next stat sees it */
    if (rv != APR_SUCCESS)
        goto done;
    buf[got] = '\0';
    /* NB: the same bytes as the reading before (a racy file read again)
     * had their bad lines told then. */
    g->summed = EVP_Digest(buf, got, g->sum, NULL, EVP_sha256(), NULL) == 1;
    if (g->summed && uf->current && uf->current->summed &&
        memcmp(uf->current->sum, g->sum, sizeof(g->sum)) == 0)
        bad = NULL;
    rv = authn_hmac_htpasswd_parse(&g->idx, buf, got, bad, baton, np);
    if (rv != APR_SUCCESS)
        goto done;
    uf->reads++;
    g->st = st;
    g->racy = apr_time_now() - changed(&st) < RACY_WINDOW;
    g->checked = events; /* counted before the file was watched and read */
done:
    if (f)
        apr_file_close(f);
    if (rv != APR_SUCCESS) {
        if (reserved)
            release(uf, st.size);
        apr_pool_destroy(np);
        g = NULL;
    }
    publish(uf, g);
    return rv;
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
} ask_t;

/* The user's id and digest: the memo's, if made for this MAC and scope;
 * else worked out, and kept if the entry has none yet (of threads that
 * race, the first to publish keeps it). NB: the memo is whole before it is
 * published, and never changed after: readers take no lock. */
static void user_id(entry_t *e, const ask_t *a)
{
    memo_t *m = __atomic_load_n(&e->memo, __ATOMIC_ACQUIRE), *n, *none = NULL;
    size_t ul = strlen(a->user);

    if (m && m->mac == a->mac && m->scope_len == a->scope_len &&
        memcmp(m->scope, a->scope, a->scope_len) == 0) {
        memcpy(a->id, m->id, AUTHN_HMAC_KEY_LEN);
        memcpy(a->digest, m->digest, AUTHN_HMAC_DIGEST_LEN);
        return;
    }
    authn_hmac_user_id(a->mac, a->scope, a->scope_len, a->user, ul, a->id);
    authn_hmac_cred_digest(a->scope, a->scope_len, a->user, ul, e->hash, e->len,
                           a->digest);
    if (m || !(n = malloc(sizeof(*n) + a->scope_len)))
        return;
    n->mac = a->mac;
    n->scope_len = a->scope_len;
    memcpy(n->id, a->id, AUTHN_HMAC_KEY_LEN);
    memcpy(n->digest, a->digest, AUTHN_HMAC_DIGEST_LEN);
    memcpy(n->scope, a->scope, a->scope_len);
    if (!__atomic_compare_exchange_n(&e->memo, &none, n, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_RELAXED))
        free(n);
}

/* The user's hash (a copy in p) and id; or the file's typical hash and
 * APR_NOTFOUND (no such user) or AUTHN_HMAC_LOCKED (a locked line). */
static apr_status_t answer(const generation_t *g, const ask_t *a, apr_pool_t *p)
{
    entry_t *e = apr_hash_get(g->idx->users, a->user, APR_HASH_KEY_STRING);
    size_t hl = 0;
    const char *h;

    if (!e || authn_hmac_hash_locked(e->hash, e->len)) {
        h = authn_hmac_htpasswd_typical(g->idx, &hl);
        *a->hash = h ? apr_pstrmemdup(p, h, hl) : NULL;
        *a->hash_len = h ? hl : 0;
        return e ? AUTHN_HMAC_LOCKED : APR_NOTFOUND;
    }
    *a->hash = apr_pstrmemdup(p, e->hash, e->len);
    *a->hash_len = e->len;
    if (a->mac)
        user_id(e, a);
    return APR_SUCCESS;
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

static apr_status_t lookup(authn_hmac_userfile_t *uf, const ask_t *a,
                           authn_hmac_badline_fn bad, void *baton,
                           apr_pool_t *p)
{
    apr_finfo_t now;
    generation_t *g;
    stripe_t *st;
    uint64_t e, events = 0;
    apr_status_t rv;
    int done = 0;

    if (!uf->lock)
        return APR_EINIT; /* child_init did not run or failed */
    /* The common case, without a lock: a watched file that nothing has
     * happened to since a stat() found its generation fresh. */
    if (watched(uf) && (events = watch_events()) != 0) {
        st = enter(uf, &e);
        g = __atomic_load_n(&uf->current, __ATOMIC_SEQ_CST);
        PAUSE_POINT(2);
        if (g && !g->racy &&
            __atomic_load_n(&g->checked, __ATOMIC_SEQ_CST) == events) {
            rv = answer(g, a, p);
            done = 1;
        }
        __atomic_sub_fetch(&st->n[e], 1, __ATOMIC_SEQ_CST);
        if (done)
            return rv;
    }
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
        if (events)
            __atomic_store_n(&g->checked, events, __ATOMIC_SEQ_CST);
        done = 1;
    }
    __atomic_sub_fetch(&st->n[e], 1, __ATOMIC_SEQ_CST);
    if (done)
        return rv;
    /* The file changed (or was never read): one rebuild, under the lock. */
    apr_thread_mutex_lock(uf->lock);
    if (!fresh(uf->current, &now, events))
        rv = rebuild(uf, bad, baton, events);
    if (rv == APR_SUCCESS && uf->current)
        rv = answer(uf->current, a, p);
    else if (rv == APR_SUCCESS)
        rv = APR_EGENERAL;
    apr_thread_mutex_unlock(uf->lock);
    return rv;
}

apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len,
                                        authn_hmac_badline_fn bad, void *baton,
                                        apr_pool_t *p)
{
    ask_t a = {user, NULL, NULL, 0, hash, hash_len, NULL, NULL};

    return lookup(uf, &a, bad, baton, p);
}

apr_status_t authn_hmac_userfile_lookup_id(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_badline_fn bad,
    void *baton, apr_pool_t *p)
{
    ask_t a = {user, mac, scope, scope_len, hash, hash_len, id, digest};

    return lookup(uf, &a, bad, baton, p);
}

unsigned authn_hmac_userfile_reads(authn_hmac_userfile_t *uf)
{
    unsigned n;

    apr_thread_mutex_lock(uf->lock);
    n = uf->reads;
    apr_thread_mutex_unlock(uf->lock);
    return n;
}
