/* htfile.c: reading an htpasswd file and indexing it: the file is read
 * in pieces, twice (to size the index, then to fill it), never whole in
 * memory; the index is built in this process's own memory, then kept
 * there or shared with the server's other children (share.c). */
#include "userfile.h"

#include "core/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <apr_lib.h>
#include <apr_portable.h>
#include <apr_strings.h>

/* Watches the file that a rebuild opened, before it is read: the very
 * inode open, through /proc, never one put at the path since (a watch by
 * path could miss later writes through another name of the inode read).
 * A view that cannot is left to stat(), as is one whose file is on a file
 * system of its own that inotify does not fully see (a file bind-mounted
 * from NFS into a local directory). */
static void rewatch(authn_hmac_userfile_t *uf, apr_file_t *f)
{
    apr_os_file_t fd = -1;
    int wd = -1;

    if (!authn_hmac_uf_watched(uf))
        return;
    if (apr_os_file_get(&fd, f) == APR_SUCCESS)
        wd = authn_hmac_watch_fd(fd);
    __atomic_store_n(&uf->wd, wd, __ATOMIC_RELAXED);
    if (wd < 0)
        __atomic_store_n(&uf->watch, 0, __ATOMIC_RELEASE);
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

generation_t *authn_hmac_uf_gen_make(authn_hmac_userfile_t *uf)
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
apr_status_t authn_hmac_uf_gen_open(generation_t *g, size_t size,
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

void authn_hmac_uf_gen_destroy(generation_t *g)
{
    if (g && g->reserved)
        authn_hmac_uf_release(g->uf, g->reserved);
    if (g)
        apr_pool_destroy(g->pool);
}

/* Takes size bytes from the view's budget, if it has one; 0 if over. */
int authn_hmac_uf_reserve(authn_hmac_userfile_t *uf, apr_off_t size)
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

void authn_hmac_uf_release(authn_hmac_userfile_t *uf, apr_off_t size)
{
    if (uf->budget)
        __atomic_sub_fetch(&uf->budget->used, (uint64_t)size, __ATOMIC_RELAXED);
}

/* The file is read in pieces of this size, twice: once to count its lines
 * (which size the index) and sum it, once to index it. Never the whole
 * file in memory at once: its pages would be as many again as the
 * index's, each zeroed by the kernel first. */
#define CHUNK ((size_t)4 << 20)

void authn_hmac_uf_close(reading_t *r)
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
apr_status_t authn_hmac_uf_scan(authn_hmac_userfile_t *uf, reading_t *r,
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
        authn_hmac_uf_close(r);
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
                              authn_hmac_log_fn bad, void *baton)
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
                /* NB: never parsed as a whole line: its hash may run on
                 * past the piece (its user is locked). */
                authn_hmac_index_feed_cut(b, r->chunk, n, bad, baton);
                fed = n;
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
int authn_hmac_uf_torn(reading_t *r)
{
    apr_finfo_t after;

    return r->len != (size_t)r->st.size ||
           apr_file_info_get(&after, USERFILE_WANTED, r->f) != APR_SUCCESS ||
           !authn_hmac_uf_same_file(&r->st, &after);
}

/* The metadata of a reading, in p. */
meta_t *authn_hmac_uf_meta(const authn_hmac_userfile_t *uf,
                           const apr_finfo_t *st, int racy, int summed,
                           uint64_t sum, size_t *len, apr_pool_t *p)
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
                               authn_hmac_log_fn bad, void *baton, size_t *used,
                               apr_pool_t *tp)
{
    authn_hmac_index_builder_t *b;
    apr_status_t rv =
        authn_hmac_index_begin(&b, area, cap, r->len, r->lines, m, ml, tp);

    if (rv == APR_SUCCESS)
        rv = feed_file(r, b, bad, baton);
    PAUSE_POINT(4);
    if (rv == APR_SUCCESS)
        rv = authn_hmac_index_end(b, mac, bad, baton, used);
    if (rv == APR_SUCCESS && authn_hmac_uf_torn(r))
        rv = APR_EOF;
    return rv;
}

/* Indexes the reading as a new shared version, and maps it: an error if it
 * cannot be shared (no space, no directory), APR_EOF if the file changed
 * while read (nothing is published then). */
apr_status_t authn_hmac_uf_build_shared(authn_hmac_userfile_t *uf,
                                        generation_t *g, reading_t *r,
                                        meta_t *m, size_t ml,
                                        authn_hmac_log_fn bad, void *baton,
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
        rv = authn_hmac_uf_gen_open(g, g->mem_size, uf->mac);
    if (rv == APR_SUCCESS) {
        g->version = version;
        uf->built++;
    }
    return rv;
}

/* Indexes the reading in this process's own memory; APR_EOF if the file
 * changed while read (the index is whole all the same). */
apr_status_t authn_hmac_uf_build_private(generation_t *g, reading_t *r,
                                         const meta_t *m, size_t ml,
                                         authn_hmac_log_fn bad, void *baton,
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
    opened = authn_hmac_uf_gen_open(g, used, NULL);
    return opened != APR_SUCCESS ? opened : rv;
}
