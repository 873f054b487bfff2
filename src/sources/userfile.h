/* userfile.h: what the files of the user-file layer share (private to
 * src/): a view (htpasswd.c) holds generations, each one reading of the
 * file (htfile.c), published for lookups that take no lock; the reaper
 * (reaper.c) lets go of a version the server replaced. */
#ifndef AUTHN_HMAC_USERFILE_H
#define AUTHN_HMAC_USERFILE_H

#include "sources/htpasswd.h"
#include "sources/watch.h"

#include <apr_file_info.h>
#include <apr_file_io.h>
#include <apr_thread_mutex.h>

#define USERFILE_WANTED                                                        \
    (APR_FINFO_TYPE | APR_FINFO_SIZE | APR_FINFO_MTIME | APR_FINFO_CTIME |     \
     APR_FINFO_IDENT)

/* A file modified this close to the moment we read it may change again
 * within the same timestamp; such an index is read once more later. */
#define RACY_WINDOW apr_time_from_sec(1)

/* A deny from a generation read within this of a change, or this long
 * ago, is asked again once the file is quiet (see settle()). */
#define SETTLE_MAX RACY_WINDOW

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
    int torn; /* the file changed while it was read: it may hold the bytes
                 of two versions, a line of neither (it answers no grant) */
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
    unsigned settles;  /* waits for the file to be quiet; atomic */
    uint64_t watch;    /* the watcher instance that watches it, or 0 */
    apr_off_t max_size;
    authn_hmac_budget_t *budget; /* holds current's size, or NULL */
    int wd;                      /* the file's inotify watch, or -1 */
    authn_hmac_share_t *share;   /* NULL: every process reads the file */
    unsigned slot;
    const authn_hmac_mac_t *mac; /* the shared versions' tags */
    authn_hmac_log_fn warn;      /* what goes wrong with sharing */
    authn_hmac_table_t *counts;  /* index_private, if not NULL */
    void *warn_baton;
    int unshared; /* sharing failed in this process: it reads the file */
    unsigned built, adopted; /* shared versions; under lock */
};

/* Where a test stops a thread (a test build only, see testing.h). */
#ifdef AUTHN_HMAC_TESTING
void authn_hmac_test_pause(int n);
#define PAUSE_POINT(n) authn_hmac_test_pause(n)
#else
#define PAUSE_POINT(n)
#endif

/* Whether uf is watched by this process's instance. */
static inline int authn_hmac_uf_watched(const authn_hmac_userfile_t *uf)
{
    return authn_hmac_watch_live(__atomic_load_n(&uf->watch, __ATOMIC_ACQUIRE));
}

/* When the file last changed: the later of mtime and ctime (a tool that
 * sets mtime back, such as rsync -t or touch -r, still moves ctime). */
static inline apr_time_t authn_hmac_uf_changed(const apr_finfo_t *f)
{
    return f->mtime > f->ctime ? f->mtime : f->ctime;
}

static inline int authn_hmac_uf_same_file(const apr_finfo_t *a,
                                          const apr_finfo_t *b)
{
    return a->device == b->device && a->inode == b->inode &&
           a->size == b->size && a->mtime == b->mtime && a->ctime == b->ctime;
}

/* ------------------------------------------ generations (htfile.c) */

/* The view's budget: size bytes taken (0 if over), or given back. */
int authn_hmac_uf_reserve(authn_hmac_userfile_t *uf, apr_off_t size);
void authn_hmac_uf_release(authn_hmac_userfile_t *uf, apr_off_t size);

/* A new generation of uf, in a pool of its own; opened over the index at
 * g->mem (with mac: only a tagged one); destroyed with its reservation. */
generation_t *authn_hmac_uf_gen_make(authn_hmac_userfile_t *uf);
apr_status_t authn_hmac_uf_gen_open(generation_t *g, size_t size,
                                    const authn_hmac_mac_t *mac);
void authn_hmac_uf_gen_destroy(generation_t *g);

/* ---------------------------------------------- a reading (htfile.c) */

/* A reading of the file, read in pieces of CHUNK, twice: once to count
 * its lines (which size the index) and sum it, once to index it. */
typedef struct {
    apr_file_t *f;
    apr_finfo_t st; /* as fstat() saw it before */
    size_t len, lines;
    uint64_t sum; /* of the pieces, each authn_hmac_fingerprint'ed */
    char *chunk;  /* CHUNK bytes */
    char *tail;   /* the user of a last line without a newline, or NULL */
    int cut;      /* the last line has no newline */
} reading_t;

/* Opens uf's file (watched first, if uf is) and reads it once: its
 * length, lines, sum and tail. */
apr_status_t authn_hmac_uf_scan(authn_hmac_userfile_t *uf, reading_t *r,
                                apr_pool_t *tp);
void authn_hmac_uf_close(reading_t *r);

/* Whether the file changed while it was read. */
int authn_hmac_uf_torn(reading_t *r);

/* The metadata of a reading, in p (NULL: a path too long). */
meta_t *authn_hmac_uf_meta(const authn_hmac_userfile_t *uf,
                           const apr_finfo_t *st, int racy, int summed,
                           uint64_t sum, size_t *len, apr_pool_t *p);

/* Indexes the reading as a new shared version of uf's slot, mapped into
 * g: an error if it cannot be shared, APR_EOF if the file changed while it
 * was read (nothing is published then). */
apr_status_t authn_hmac_uf_build_shared(authn_hmac_userfile_t *uf,
                                        generation_t *g, reading_t *r,
                                        meta_t *m, size_t ml,
                                        authn_hmac_log_fn bad, void *baton,
                                        apr_pool_t *tp);

/* Indexes the reading in this process's own memory; APR_EOF if the file
 * changed while it was read (the index is whole all the same). */
apr_status_t authn_hmac_uf_build_private(generation_t *g, reading_t *r,
                                         const meta_t *m, size_t ml,
                                         authn_hmac_log_fn bad, void *baton,
                                         apr_pool_t *tp);

/* -------------------------------------------------- the view (htpasswd.c) */

/* Publishes g (NULL: none) and frees the generation it replaces once no
 * lookup can be reading it; called with uf->lock held. */
void authn_hmac_uf_publish(authn_hmac_userfile_t *uf, generation_t *g);

#endif /* AUTHN_HMAC_USERFILE_H */
