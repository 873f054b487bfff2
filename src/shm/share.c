/* share.c: the versions of the htpasswd indexes that a server's children
 * share (see shm/share.h). */
#include "shm/share.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <apr_general.h>
#include <apr_strings.h>
#include <apr_time.h>

typedef struct {
    pthread_mutex_t lock; /* robust, process-shared: one builder */
    uint64_t version;     /* published; 0: none */
    uint64_t last;        /* the last number given */
    char pad[64];
} slot_t;

typedef struct {
    unsigned nslots;
    slot_t slots[];
} region_t;

struct authn_hmac_share {
    region_t *r; /* shared */
    size_t size;
    const char *dir;
    const char *tag; /* "<parent pid>-<time>": this region's files */
    uint64_t id;     /* random */
    pid_t maker;
};

/* Removes from dir the files of servers no longer running (named
 * "<pid>-...", whose pid is gone), and those of this server that are not
 * keep's (a region before a restart; its children still running map
 * theirs, or read the file themselves). */
static void sweep(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t kl = keep ? strlen(keep) : 0;
    long self = (long)getpid();

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);

        if (end == de->d_name || *end != '-' || pid <= 0)
            continue;
        if (pid == self ? !keep || strncmp(de->d_name, keep, kl) != 0 ||
                              de->d_name[kl] != '.'
                        : kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            (void)unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

static apr_status_t unmap(void *data)
{
    authn_hmac_share_t *sh = data;

    munmap(sh->r, sh->size);
    if (getpid() == sh->maker)
        sweep(sh->dir, NULL); /* stopped, or restarting: its files go */
    return APR_SUCCESS;
}

apr_status_t authn_hmac_share_create(authn_hmac_share_t **out, const char *dir,
                                     unsigned nslots, uid_t uid, gid_t gid,
                                     const char **why, apr_pool_t *p)
{
    authn_hmac_share_t *sh = apr_pcalloc(p, sizeof(*sh));
    pthread_mutexattr_t a;
    struct stat st;
    unsigned i;

    sh->dir = apr_pstrdup(p, dir);
    sh->maker = getpid();
    sh->tag = apr_psprintf(p, "%ld-%" APR_UINT64_T_HEX_FMT, (long)sh->maker,
                           (apr_uint64_t)apr_time_now());
    if (apr_generate_random_bytes((unsigned char *)&sh->id, sizeof(sh->id)) !=
        APR_SUCCESS)
        sh->id = ((uint64_t)sh->maker << 44) ^ (uint64_t)apr_time_now();
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        *why = "cannot make the directory";
        return errno;
    }
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        *why = "is not a directory";
        return APR_EBADF;
    }
    if (uid != (uid_t)-1 && (st.st_uid != uid || st.st_gid != gid) &&
        chown(dir, uid, gid) != 0) {
        *why = "cannot be given to the server's user";
        return errno;
    }
    if ((st.st_mode & 077) != 0 && chmod(dir, 0700) != 0) {
        *why = "cannot be made private (mode 0700)";
        return errno;
    }
    sweep(dir, sh->tag);
    sh->size = sizeof(region_t) + nslots * sizeof(slot_t);
    sh->r = mmap(NULL, sh->size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh->r == MAP_FAILED) {
        *why = "cannot map shared memory";
        return errno;
    }
    sh->r->nslots = nslots;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (i = 0; i < nslots; i++)
        pthread_mutex_init(&sh->r->slots[i].lock, &a);
    pthread_mutexattr_destroy(&a);
    apr_pool_cleanup_register(p, sh, unmap, apr_pool_cleanup_null);
    *out = sh;
    return APR_SUCCESS;
}

static void name(const authn_hmac_share_t *sh, unsigned slot, uint64_t version,
                 char *buf, size_t len)
{
    if (version)
        snprintf(buf, len, "%s/%s.%u.%llu", sh->dir, sh->tag, slot,
                 (unsigned long long)version);
    else
        snprintf(buf, len, "%s/%s.%u.new", sh->dir, sh->tag, slot);
}

uint64_t authn_hmac_share_id(const authn_hmac_share_t *sh)
{
    return sh->id;
}

uint64_t authn_hmac_share_version(const authn_hmac_share_t *sh, unsigned slot)
{
    return __atomic_load_n(&sh->r->slots[slot].version, __ATOMIC_ACQUIRE);
}

apr_status_t authn_hmac_share_map(const authn_hmac_share_t *sh, unsigned slot,
                                  uint64_t version, size_t max, void **mem,
                                  size_t *size)
{
    char path[4096];
    struct stat st;
    void *m;
    int fd;

    name(sh, slot, version, path, sizeof(path));
    /* NB: the directory is the server user's: what is there now may not
     * be what was published (the index's tags tell). Never a link, never
     * a FIFO, never more than max. */
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? APR_ENOENT : errno;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > max) {
        close(fd);
        return APR_EBADF;
    }
    m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return errno;
    *mem = m;
    *size = (size_t)st.st_size;
    return APR_SUCCESS;
}

apr_status_t authn_hmac_share_lock(authn_hmac_share_t *sh, unsigned slot,
                                   apr_interval_time_t timeout)
{
    slot_t *s = &sh->r->slots[slot];
    struct timespec until;
    int rc;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)apr_time_sec(timeout);
    until.tv_nsec += (long)apr_time_usec(timeout) * 1000;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    rc = pthread_mutex_timedlock(&s->lock, &until);
    if (rc == EOWNERDEAD) {
        /* NB: the builder died holding it: nothing it wrote was published
         * (publishing is its last step), and its temporary file is
         * truncated by the next build. */
        pthread_mutex_consistent(&s->lock);
        rc = 0;
    }
    if (rc == ETIMEDOUT)
        return APR_TIMEUP;
    return rc;
}

void authn_hmac_share_unlock(authn_hmac_share_t *sh, unsigned slot)
{
    pthread_mutex_unlock(&sh->r->slots[slot].lock);
}

apr_status_t authn_hmac_share_begin(authn_hmac_share_t *sh, unsigned slot,
                                    authn_hmac_share_new_t *n)
{
    char path[4096];

    name(sh, slot, 0, path, sizeof(path));
    n->fd =
        open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (n->fd < 0)
        return errno;
    n->version = sh->r->slots[slot].last + 1; /* NB: under the lock */
    return APR_SUCCESS;
}

apr_status_t authn_hmac_share_end(authn_hmac_share_t *sh, unsigned slot,
                                  authn_hmac_share_new_t *n, const void *data,
                                  size_t used, uint64_t *version)
{
    slot_t *s = &sh->r->slots[slot];
    char tmp[4096], path[4096], old[4096];
    uint64_t was = s->version, v = n->version;
    apr_status_t rv = APR_SUCCESS;
    const char *p = data;
    size_t done = 0;

    name(sh, slot, 0, tmp, sizeof(tmp));
    if (used == 0) {
        close(n->fd);
        (void)unlink(tmp);
        return APR_SUCCESS;
    }
    /* NB: written, not mapped: a full tmpfs is then ENOSPC here, where a
     * page it cannot give to a mapping is a SIGBUS. */
    while (rv == APR_SUCCESS && done < used) {
        ssize_t w = pwrite(n->fd, p + done, used - done, (off_t)done);

        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno != EINTR)
            rv = errno;
        else if (w == 0)
            rv = APR_ENOSPC;
    }
    if (rv == APR_SUCCESS && fchmod(n->fd, 0400) != 0)
        rv = errno;
    close(n->fd);
    name(sh, slot, v, path, sizeof(path));
    if (rv == APR_SUCCESS && rename(tmp, path) != 0)
        rv = errno;
    if (rv != APR_SUCCESS) {
        (void)unlink(tmp);
        return rv;
    }
    s->last = v;
    __atomic_store_n(&s->version, v, __ATOMIC_RELEASE);
    if (was) {
        name(sh, slot, was, old, sizeof(old));
        (void)unlink(old);
    }
    *version = v;
    return APR_SUCCESS;
}
