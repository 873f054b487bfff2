/* htpasswd.c: an in-memory index of an htpasswd file, and the per-process
 * view that rebuilds it when the file changes. */
#include "authn_hmac.h"

#include <sched.h>

#include <stdlib.h>
#include <string.h>

#include <apr_file_info.h>
#include <apr_file_io.h>
#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_strings.h>

#define MAX_BAD_REPORTS 10u /* malformed lines logged one by one */

struct authn_hmac_htpasswd {
    apr_hash_t *users; /* user -> entry_t */
    unsigned bad;
    const char *typical; /* a hash of the file's typical cost, or NULL */
    size_t typical_len;
};

typedef struct {
    const char *hash;
    size_t len;
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

/* The hash that unknown users are checked against, so that they cost what
 * known users cost: one of the file's own, at the median bcrypt cost (or
 * any, in a file without bcrypt). */
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

        if (e->len && !pick)
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

apr_status_t authn_hmac_htpasswd_parse(authn_hmac_htpasswd_t **out, char *buf,
                                       size_t len, authn_hmac_badline_fn bad,
                                       void *baton, apr_pool_t *p)
{
    authn_hmac_htpasswd_t *idx = apr_pcalloc(p, sizeof(*idx));
    char *pos = buf, *end = buf + len;
    unsigned lineno = 0;

    idx->users = apr_hash_make(p);
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
} generation_t;

/* Lookups take no lock: they count themselves in readers[epoch & 1] and
 * read the current generation. A rebuild (under lock, one at a time)
 * publishes a new one, moves to the next epoch, and frees the old one
 * once the lookups counted under the old epoch are done: a lookup that
 * counted itself after that saw the new one. */
struct authn_hmac_userfile {
    const char *path;
    apr_pool_t *pool;         /* per process; parent of each generation */
    apr_thread_mutex_t *lock; /* rebuilds */
    generation_t *current;    /* NULL: not read yet, or unreadable */
    uint64_t epoch;
    uint64_t readers[2];
    unsigned reads; /* times the file was read; under lock */
};

authn_hmac_userfile_t *authn_hmac_userfile_make(const char *path, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = apr_pcalloc(p, sizeof(*uf));

    uf->path = apr_pstrdup(p, path);
    return uf;
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

    __atomic_store_n(&uf->current, g, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&uf->epoch, 1, __ATOMIC_SEQ_CST);
    /* NB: a lookup holds it for a hash-table probe and a copy. */
    while (__atomic_load_n(&uf->readers[was], __ATOMIC_SEQ_CST) != 0)
        sched_yield();
    if (old)
        apr_pool_destroy(old->pool);
}

/* Reads and indexes the file, and publishes it; called with uf->lock held.
 * On failure no generation is left: nothing stale can be used. */
static apr_status_t rebuild(authn_hmac_userfile_t *uf,
                            authn_hmac_badline_fn bad, void *baton)
{
    apr_pool_t *np = NULL;
    apr_file_t *f = NULL;
    generation_t *g;
    apr_finfo_t st;
    apr_size_t got;
    char *buf;
    apr_status_t rv;

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
        rv = apr_file_info_get(&st, USERFILE_WANTED, f);
        if (rv == APR_INCOMPLETE)
            rv = APR_SUCCESS;
    }
    if (rv == APR_SUCCESS && st.filetype != APR_REG)
        rv = APR_EBADF;
    if (rv == APR_SUCCESS && (apr_uint64_t)st.size > ((apr_uint64_t)1 << 30))
        rv = APR_ENOSPC; /* 1 GiB of users is not an htpasswd file */
    if (rv != APR_SUCCESS)
        goto done;
    buf = apr_palloc(np, (apr_size_t)st.size + 1);
    got = (apr_size_t)st.size;
    rv = apr_file_read_full(f, buf, got, &got);
    if (rv == APR_EOF)
        rv = APR_SUCCESS; /* shrank since fstat: the next stat sees it */
    if (rv != APR_SUCCESS)
        goto done;
    buf[got] = '\0';
    rv = authn_hmac_htpasswd_parse(&g->idx, buf, got, bad, baton, np);
    if (rv != APR_SUCCESS)
        goto done;
    uf->reads++;
    g->st = st;
    g->racy = apr_time_now() - changed(&st) < RACY_WINDOW;
done:
    if (f)
        apr_file_close(f);
    if (rv != APR_SUCCESS) {
        apr_pool_destroy(np);
        g = NULL;
    }
    publish(uf, g);
    return rv;
}

/* Whether g answers for the file as now stat()ed. */
static int fresh(const generation_t *g, const apr_finfo_t *now)
{
    return g && same_file(&g->st, now) &&
           !(g->racy && apr_time_now() - changed(now) >= RACY_WINDOW);
}

/* The user's hash (a copy in p), or the file's typical one and
 * APR_NOTFOUND. */
static apr_status_t answer(const generation_t *g, const char *user,
                           const char **hash, size_t *hash_len, apr_pool_t *p)
{
    size_t hl = 0;
    const char *h = authn_hmac_htpasswd_get(g->idx, user, &hl);
    apr_status_t rv = APR_SUCCESS;

    if (!h) {
        rv = APR_NOTFOUND;
        h = authn_hmac_htpasswd_typical(g->idx, &hl);
    }
    *hash = h ? apr_pstrmemdup(p, h, hl) : NULL;
    *hash_len = h ? hl : 0;
    return rv;
}

apr_status_t authn_hmac_userfile_lookup(authn_hmac_userfile_t *uf,
                                        const char *user, const char **hash,
                                        size_t *hash_len,
                                        authn_hmac_badline_fn bad, void *baton,
                                        apr_pool_t *p)
{
    apr_finfo_t now;
    generation_t *g;
    uint64_t e;
    apr_status_t rv;
    int done = 0;

    if (!uf->lock)
        return APR_EINIT; /* child_init did not run or failed */
    /* NB: the file is stat()ed before the index is read: a change that
     * this request saw is never answered from the index of before. */
    rv = apr_stat(&now, uf->path, USERFILE_WANTED, p);
    if (rv == APR_INCOMPLETE)
        rv = APR_SUCCESS;
    if (rv != APR_SUCCESS)
        return rv;
    if (now.filetype != APR_REG)
        return APR_EBADF; /* a FIFO, device or directory is never opened */
    /* The common case, without a lock. */
    e = __atomic_load_n(&uf->epoch, __ATOMIC_SEQ_CST) & 1;
    __atomic_add_fetch(&uf->readers[e], 1, __ATOMIC_SEQ_CST);
    g = __atomic_load_n(&uf->current, __ATOMIC_SEQ_CST);
    if (fresh(g, &now)) {
        rv = answer(g, user, hash, hash_len, p);
        done = 1;
    }
    __atomic_sub_fetch(&uf->readers[e], 1, __ATOMIC_SEQ_CST);
    if (done)
        return rv;
    /* The file changed (or was never read): one rebuild, under the lock. */
    apr_thread_mutex_lock(uf->lock);
    if (!fresh(uf->current, &now))
        rv = rebuild(uf, bad, baton);
    if (rv == APR_SUCCESS && uf->current)
        rv = answer(uf->current, user, hash, hash_len, p);
    else if (rv == APR_SUCCESS)
        rv = APR_EGENERAL;
    apr_thread_mutex_unlock(uf->lock);
    return rv;
}

unsigned authn_hmac_userfile_reads(authn_hmac_userfile_t *uf)
{
    unsigned n;

    apr_thread_mutex_lock(uf->lock);
    n = uf->reads;
    apr_thread_mutex_unlock(uf->lock);
    return n;
}
