/* dbm.c: users in a DBM file (AuthHMACUserDBMFile), as htdbm writes them
 * (the key the user's name, the value "hash[:extra]"): the file read, a
 * user looked up, and what it answered remembered. The check of the
 * credential through the engine is src/request/dbm.c's.
 *
 * The file is opened read-only, as mod_authn_dbm does, and closed at once:
 * a gdbm reader that kept it open would lock htdbm out. A writer's lock is
 * waited for, up to a quarter of a second (htdbm holds it for
 * milliseconds). What it answered is remembered by each
 * process (the memo) while stat() says the file is the same (device,
 * inode, size, mtime, ctime) as when it was read, and only if it had been
 * quiet for a second then: a change after it gives the file a later time.
 * So a hit costs a stat(), not an open, and a change counts at the next
 * request.
 */
#include "sources/dbm.h"

#include "apr_dbm.h"
#include "apr_hash.h"
#include "apr_strings.h"
#include "apr_thread_mutex.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WRITER_WAIT_MS 250
#define WRITER_NAP_MS  10
#define DBM_MEMO_MAX   4096 /* users a process remembers of one file */

const char *authn_hmac_dbm_type_check(const char *type, apr_pool_t *p)
{
    const char *used1 = NULL, *used2 = NULL;
    apr_status_t rv;

    rv = apr_dbm_get_usednames_ex(p, type, "/nonexistent/x", &used1, &used2);
    if (rv != APR_SUCCESS || !used1)
        return apr_psprintf(p,
                            "'%s' is not a DBM type this apr-util can open "
                            "(default, db, gdbm, ndbm or sdbm, where built "
                            "in)",
                            type);
    return NULL;
}

/* Opens the file read-only; a file that exists but cannot be opened is
 * taken for one a writer holds, and tried again for up to a second. */
static apr_status_t open_ro(const char *path, const char *type, apr_dbm_t **db,
                            apr_pool_t *p)
{
    struct timespec nap = {0, WRITER_NAP_MS * 1000000L};
    apr_status_t rv;
    int i;

    for (i = 0;; i++) {
        rv = apr_dbm_open_ex(db, type, path, APR_DBM_READONLY, APR_OS_DEFAULT,
                             p);
        if (rv == APR_SUCCESS || i >= WRITER_WAIT_MS / WRITER_NAP_MS)
            return rv;
        /* NB: the file of gdbm and db, or the ".pag" of sdbm and ndbm; one
         * that is missing or not readable is no writer's. */
        if (access(path, R_OK) != 0 &&
            access(apr_pstrcat(p, path, ".pag", NULL), R_OK) != 0)
            return APR_FROM_OS_ERROR(errno);
        nanosleep(&nap, NULL);
    }
}

/* The value's hash: up to its first ':'. */
static const char *hash_of(apr_datum_t v, apr_pool_t *p)
{
    const char *colon = memchr(v.dptr, ':', v.dsize);

    return apr_pstrmemdup(p, v.dptr,
                          colon ? (apr_size_t)(colon - v.dptr) : v.dsize);
}

/* ------------------------------------------------------------- the memo */

/* What stat() says of one of the file's files (gdbm and db have one, sdbm
 * and ndbm two). */
typedef struct {
    int found;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtim, ctim;
} file_id_t;

struct authn_hmac_dbmfile_t {
    const char *path;
    apr_thread_mutex_t *lock; /* over what follows */
    apr_pool_t *pool;         /* the memo's: cleared when the file changes */
    const char *type;         /* of the memo and the names */
    const char *names[2];     /* the files of path for type */
    file_id_t id[2];          /* theirs when the memo was read */
    apr_hash_t *users;        /* user -> "+hash", or "-": none */
};

authn_hmac_dbmfile_t *authn_hmac_dbmfile_make(const char *path, apr_pool_t *p)
{
    authn_hmac_dbmfile_t *d = apr_pcalloc(p, sizeof(*d));

    d->path = apr_pstrdup(p, path);
    if (apr_thread_mutex_create(&d->lock, APR_THREAD_MUTEX_DEFAULT, p) !=
            APR_SUCCESS ||
        apr_pool_create(&d->pool, p) != APR_SUCCESS)
        d->lock = NULL; /* no memo */
    return d;
}

static void stat_id(const char *name, file_id_t *id)
{
    struct stat sb;

    memset(id, 0, sizeof(*id));
    if (!name || stat(name, &sb) != 0)
        return;
    id->found = 1;
    id->dev = sb.st_dev;
    id->ino = sb.st_ino;
    id->size = sb.st_size;
    id->mtim = sb.st_mtim;
    id->ctim = sb.st_ctim;
}

static int same_id(const file_id_t *a, const file_id_t *b)
{
    return a->found == b->found && a->dev == b->dev && a->ino == b->ino &&
           a->size == b->size && a->mtim.tv_sec == b->mtim.tv_sec &&
           a->mtim.tv_nsec == b->mtim.tv_nsec &&
           a->ctim.tv_sec == b->ctim.tv_sec &&
           a->ctim.tv_nsec == b->ctim.tv_nsec;
}

/* Whether the file was last changed over a second before now: a change
 * after a reading then gives it another time (a file system's clock
 * ticks in milliseconds at most). */
static int settled(const file_id_t *id, time_t now)
{
    return !id->found ||
           (id->mtim.tv_sec < now - 1 && id->ctim.tv_sec < now - 1);
}

/* The ids of the file's files now, under the lock (the memo's names are
 * made for type first). Returns whether the memo holds for them. */
static int look(authn_hmac_dbmfile_t *d, const char *type, file_id_t now[2])
{
    int i;

    if (!d->type || strcasecmp(d->type, type) != 0) {
        apr_pool_clear(d->pool);
        d->users = NULL;
        d->type = apr_pstrdup(d->pool, type);
        d->names[0] = d->names[1] = NULL;
        (void)apr_dbm_get_usednames_ex(d->pool, type, d->path, &d->names[0],
                                       &d->names[1]);
    }
    for (i = 0; i < 2; i++)
        stat_id(d->names[i], &now[i]);
    return d->users && same_id(&now[0], &d->id[0]) &&
           same_id(&now[1], &d->id[1]);
}

/* The memo's answer for user: 1 with *hash (NULL: no such user), else 0;
 * ids: the file's ids as this request found them. */
static int recall(authn_hmac_dbmfile_t *d, const char *type, const char *user,
                  const char **hash, file_id_t ids[2], apr_pool_t *p)
{
    const char *v = NULL;
    int held;

    if (!d->lock || apr_thread_mutex_lock(d->lock) != APR_SUCCESS)
        return 0;
    held = look(d, type, ids);
    if (held)
        v = apr_hash_get(d->users, user, APR_HASH_KEY_STRING);
    if (v)
        *hash = *v == '+' ? apr_pstrdup(p, v + 1) : NULL;
    apr_thread_mutex_unlock(d->lock);
    return v != NULL;
}

/* Keeps the file's answer for user, if the file did not change while it
 * was read (before: its ids then) and has been quiet for a second. */
static void memo(authn_hmac_dbmfile_t *d, const char *type, const char *user,
                 const char *hash, const file_id_t before[2])
{
    file_id_t now[2];
    time_t t = time(NULL);

    if (!d->lock || apr_thread_mutex_lock(d->lock) != APR_SUCCESS)
        return;
    (void)look(d, type, now);
    if (same_id(&now[0], &before[0]) && same_id(&now[1], &before[1]) &&
        settled(&now[0], t) && settled(&now[1], t)) {
        if (!d->users || !same_id(&now[0], &d->id[0]) ||
            !same_id(&now[1], &d->id[1]) ||
            apr_hash_count(d->users) >= DBM_MEMO_MAX) {
            /* NB: a new memo: the pool goes, the type's names with it
             * (look made d->type type's: taken again from type, which the
             * configuration keeps, not from the pool being cleared). */
            apr_pool_clear(d->pool);
            d->type = apr_pstrdup(d->pool, type);
            (void)apr_dbm_get_usednames_ex(d->pool, d->type, d->path,
                                           &d->names[0], &d->names[1]);
            d->users = apr_hash_make(d->pool);
            d->id[0] = now[0];
            d->id[1] = now[1];
        }
        apr_hash_set(d->users, apr_pstrdup(d->pool, user), APR_HASH_KEY_STRING,
                     hash ? apr_pstrcat(d->pool, "+", hash, NULL) : "-");
    }
    apr_thread_mutex_unlock(d->lock);
}

apr_status_t authn_hmac_dbmfile_lookup(authn_hmac_dbmfile_t *d,
                                       const char *type, const char *user,
                                       size_t user_len, int want_other,
                                       const char **hash, const char **other,
                                       apr_pool_t *p)
{
    file_id_t ids[2];
    apr_datum_t k, v;
    apr_dbm_t *db;
    apr_status_t rv;

    *hash = *other = NULL;
    memset(ids, 0, sizeof(ids)); /* NB: recall may not get to them */
    if (recall(d, type, user, hash, ids, p))
        return APR_SUCCESS;
    rv = open_ro(d->path, type, &db, p);
    if (rv != APR_SUCCESS)
        return rv;
    k.dptr = (char *)apr_pstrdup(p, user);
    k.dsize = user_len;
    rv = apr_dbm_fetch(db, k, &v);
    if (rv == APR_SUCCESS && v.dptr)
        *hash = hash_of(v, p);
    /* NB: an unknown user's dummy needs another user's hash: the file's
     * first record, while the caller knows none (one more read, once). */
    else if (rv == APR_SUCCESS && want_other &&
             apr_dbm_firstkey(db, &k) == APR_SUCCESS && k.dptr &&
             apr_dbm_fetch(db, k, &v) == APR_SUCCESS && v.dptr)
        *other = hash_of(v, p);
    apr_dbm_close(db);
    if (rv != APR_SUCCESS)
        return rv;
    memo(d, type, user, *hash, ids);
    return APR_SUCCESS;
}
