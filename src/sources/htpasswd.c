/* htpasswd.c: a process's view of an htpasswd file: lookups without a
 * lock in the generation published (one reading of the file, see
 * htfile.c), when it is fresh, when to read the file again or take the
 * version another process shared, and the writer rule (settle()). */
#include "userfile.h"

#include "core/cred.h"
#include "core/util.h"

#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <apr_strings.h>

int authn_hmac_userfile_watch(authn_hmac_userfile_t *uf)
{
    int wd = -1;
    uint64_t id = authn_hmac_watch_path(uf->path, &wd);

    __atomic_store_n(&uf->wd, wd, __ATOMIC_RELAXED);
    if (id)
        __atomic_store_n(&uf->watch, id, __ATOMIC_RELEASE);
    return id != 0;
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

apr_status_t authn_hmac_userfile_child_init(authn_hmac_userfile_t *uf,
                                            apr_pool_t *pchild)
{
    apr_status_t rv = apr_pool_create(&uf->pool, pchild);

    if (rv == APR_SUCCESS)
        rv = apr_thread_mutex_create(&uf->lock, APR_THREAD_MUTEX_DEFAULT,
                                     uf->pool);
    return rv;
}

/* Publishes g (NULL: none) and frees the generation it replaces once no
 * lookup can be reading it; called with uf->lock held. */
void authn_hmac_uf_publish(authn_hmac_userfile_t *uf, generation_t *g)
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
    /* NB: not at the pool's cleanup: the budget may be gone by then. */
    if (old && old->reserved)
        authn_hmac_uf_release(uf, old->reserved);
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
    if (!g || !authn_hmac_uf_same_file(&g->st, now))
        return 0;
    if (!g->racy)
        return 1;
    return apr_time_now() - authn_hmac_uf_changed(now) < RACY_WINDOW &&
           events != 0 &&
           __atomic_load_n(&g->checked, __ATOMIC_SEQ_CST) == events;
}

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

static void warn(authn_hmac_userfile_t *uf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A process that keeps its own index: told, and counted. */
static void kept_own(authn_hmac_userfile_t *uf)
{
    if (uf->counts)
        authn_hmac_table_count(uf->counts, AUTHN_HMAC_C_INDEX_PRIVATE, 1);
}

static void warn(authn_hmac_userfile_t *uf, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    authn_hmac_vlogf(uf->warn, uf->warn_baton, AUTHN_HMAC_LOG_WARNING, fmt, ap);
    va_end(ap);
}

void authn_hmac_userfile_share(authn_hmac_userfile_t *uf,
                               authn_hmac_share_t *sh, unsigned slot,
                               const authn_hmac_mac_t *mac,
                               authn_hmac_table_t *counts,
                               authn_hmac_log_fn warn_fn, void *baton)
{
    uf->counts = counts;
    uf->share = sh && mac ? sh : NULL;
    uf->slot = slot;
    uf->mac = mac;
    uf->warn = warn_fn;
    uf->warn_baton = baton;
}

/* Bad lines told on, but for the last one of a racy reading that has no
 * newline: a writer may not have written the rest yet. */
typedef struct {
    authn_hmac_log_fn bad;
    void *baton;
    unsigned last; /* that line's number, or 0 */
} told_t;

static void tell_bad(void *baton, int level, const char *msg)
{
    const told_t *t = baton;
    char last[32];
    int n = apr_snprintf(last, sizeof(last), AUTHN_HMAC_INDEX_LINE, t->last);

    if (strncmp(msg, last, (size_t)n) != 0)
        t->bad(t->baton, level, msg);
}

/* Indexes the reading into *g: as a shared version if share, else (or
 * where it cannot be shared) in this process's own memory, within the
 * view's budget. APR_EOF if the file changed while it was read. */
static apr_status_t build(authn_hmac_userfile_t *uf, generation_t **g,
                          reading_t *r, meta_t *m, size_t ml,
                          authn_hmac_log_fn bad, void *baton, apr_pool_t *tp,
                          int share)
{
    apr_status_t rv = APR_EGENERAL;

    if (share) {
        rv = authn_hmac_uf_build_shared(uf, *g, r, m, ml, bad, baton, tp);
        if (rv != APR_SUCCESS && rv != APR_EOF) {
            warn(uf,
                 "cannot share the index of %s with the other processes "
                 "(%pm); this process keeps its own",
                 uf->path, &rv);
            kept_own(uf);
        }
        if (rv != APR_SUCCESS) {
            authn_hmac_uf_gen_destroy(*g);
            *g = authn_hmac_uf_gen_make(uf);
            rv = *g ? APR_EGENERAL : APR_ENOMEM;
        }
    }
    if (*g && rv != APR_SUCCESS) {
        if (!authn_hmac_uf_reserve(uf, r->st.size))
            return APR_ENOSPC;
        (*g)->reserved = r->st.size;
        rv = authn_hmac_uf_build_private(*g, r, m, ml, bad, baton, tp);
    }
    return rv;
}

/* Reads and indexes the file (as a shared version if share), and
 * publishes it; called with uf->lock held. On failure no generation is
 * left: nothing stale can be used. A reading that the file changed under
 * (a writer at work) is published torn: it may hold the bytes of two
 * versions, so it grants no one; its answer, a deny, is asked again once
 * the file is quiet (see settle()). */
static apr_status_t load(authn_hmac_userfile_t *uf, authn_hmac_log_fn bad,
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
        authn_hmac_uf_release(uf, cur->reserved);
        cur->reserved = 0;
    }
    rv = apr_pool_create(&tp, uf->pool);
    if (rv == APR_SUCCESS)
        rv = authn_hmac_uf_scan(uf, &r, tp);
    if (rv == APR_SUCCESS && !(g = authn_hmac_uf_gen_make(uf)))
        rv = APR_ENOMEM;
    if (rv != APR_SUCCESS)
        goto done;
    racy = apr_time_now() - authn_hmac_uf_changed(&r.st) < RACY_WINDOW;
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
    m = authn_hmac_uf_meta(uf, &r.st, racy, 1, r.sum, &ml, tp);
    if (!m) {
        rv = APR_ENAMETOOLONG;
        goto done;
    }
    rv = build(uf, &g, &r, m, ml, bad, baton, tp, share);
    if (rv == APR_EOF) { /* torn: a writer at work */
        rv = APR_SUCCESS;
        racy = 1;
        g->torn = 1;
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
    authn_hmac_uf_close(&r);
    if (tp)
        apr_pool_destroy(tp);
    if (rv != APR_SUCCESS) {
        authn_hmac_uf_gen_destroy(g);
        g = NULL;
    }
    authn_hmac_uf_publish(uf, g);
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
    if (authn_hmac_uf_scan(uf, &r, tp) == APR_SUCCESS) {
        same = !authn_hmac_uf_torn(&r) && authn_hmac_uf_same_file(&r.st, now) &&
               r.sum == sum;
        if (same && g && r.tail)
            g->tail = apr_pstrdup(g->pool, r.tail);
        authn_hmac_uf_close(&r);
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
    generation_t *g = authn_hmac_uf_gen_make(uf);
    const meta_t *m;
    apr_finfo_t st;
    int racy = 0;

    if (!g)
        return 0;
    if (authn_hmac_share_map(uf->share, uf->slot, version,
                             (size_t)uf->max_size * 2 + (64u << 20), &g->mem,
                             &g->mem_size) != APR_SUCCESS ||
        authn_hmac_uf_gen_open(g, g->mem_size, uf->mac) != APR_SUCCESS ||
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
    if (!authn_hmac_uf_same_file(&st, now))
        goto no;
    if (m->racy) {
        /* NB: read past the second, the same bytes are as good as a
         * reading that is not racy: a later change has a later time. */
        int late = apr_time_now() - authn_hmac_uf_changed(now) >= RACY_WINDOW;

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
    authn_hmac_uf_publish(uf, g);
    return 1;
no:
    authn_hmac_uf_gen_destroy(g);
    return 0;
}

/* Makes the index answer for the file as now stat()ed: a shared version
 * another process made, or one made here (shared when the slot's lock
 * comes within SHARE_WAIT, else this process's own). Called with uf->lock
 * held. */
static apr_status_t refresh(authn_hmac_userfile_t *uf, const apr_finfo_t *now,
                            uint64_t events, authn_hmac_log_fn bad, void *baton)
{
    apr_status_t rv;
    int tries;

    /* NB: a racy generation past its second, the file unchanged: read
     * once more (its fingerprint), not indexed again, and no longer racy. */
    if (uf->current && uf->current->racy && !uf->current->torn &&
        uf->current->summed && authn_hmac_uf_same_file(&uf->current->st, now) &&
        apr_time_now() - authn_hmac_uf_changed(now) >= RACY_WINDOW &&
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
            kept_own(uf);
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
    int final; /* from a quiet file: a line maybe cut is answered as read */
    authn_hmac_reading_t rd; /* of the generation that answered */
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

/* A deny from a generation read within SETTLE_MAX of a change (racy) or
 * less than SETTLE_MAX ago is unsettled (see authn_hmac_userfile_settle):
 * a file that htpasswd truncates shows its new size a moment before its
 * new time. */

int authn_hmac_userfile_unsettled(const authn_hmac_reading_t *rd, apr_time_t at)
{
    return rd->racy || at - rd->read_at < SETTLE_MAX;
}

/* Notes in a what g was read from. NB: no clock read here: the hit path
 * takes none. */
static void note(const generation_t *g, ask_t *a)
{
    a->rd.changed = authn_hmac_uf_changed(&g->st);
    a->rd.size = g->st.size;
    a->rd.read_at = g->read_at;
    a->rd.racy = __atomic_load_n(&g->racy, __ATOMIC_SEQ_CST);
}

/* The user's hash (a copy in p) and id; or the file's typical hash and
 * APR_NOTFOUND (no such user) or AUTHN_HMAC_LOCKED (a locked line); or
 * CORRUPT for a shared version altered since it was written. The user of
 * a last line without its newline in an unsettled reading (a writer may
 * not have written the rest yet) is not found, unless a->final. NB: an
 * unknown user's typical hash is read and checked as a known user's entry
 * is, so that both cost the same; and every answer tells what it was read
 * from, so that every deny waits the same. */
static apr_status_t answer(generation_t *g, ask_t *a, apr_pool_t *p)
{
    unsigned char copy[AUTHN_HMAC_INDEX_COPY];
    authn_hmac_index_entry_t e;
    size_t ul = strlen(a->user);
    uint32_t ord = 0;
    uint64_t off = authn_hmac_index_find(&g->v, a->user, ul, &ord), t;
    const memo_t *m;

    note(g, a);
    /* NB: a torn reading may splice one version's user to another's hash
     * (htpasswd -D shifts the lines after the one removed): it answers a
     * deny for every user alike (not found), checked again once the file
     * is quiet (a torn reading is racy). So does the user of a last line
     * maybe cut. */
    a->rd.unsure =
        g->torn ||
        (!a->final && off && g->tail && strcmp(g->tail, a->user) == 0 &&
         authn_hmac_userfile_unsettled(&a->rd, authn_hmac_monotonic()));
    if (a->rd.unsure)
        off = 0;
    if (off && !g->torn && a->mac && g->memos && ord < g->v.entries &&
        (m = __atomic_load_n(&g->memos[ord], __ATOMIC_ACQUIRE)) != NULL &&
        memo_for(m, a, ul)) {
        *a->hash =
            apr_pstrmemdup(p, m->text + m->scope_len + ul + 1, m->hash_len);
        *a->hash_len = m->hash_len;
        memcpy(a->id, m->id, AUTHN_HMAC_KEY_LEN);
        memcpy(a->digest, m->digest, AUTHN_HMAC_DIGEST_LEN);
        return APR_SUCCESS;
    }
    if (off && !g->torn) {
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
                         authn_hmac_log_fn bad, void *baton, apr_pool_t *p)
{
    apr_finfo_t now;
    generation_t *g;
    stripe_t *st;
    uint64_t e, events = 0;
    apr_status_t rv;
    int done = 0;

    /* The common case, without a lock: a watched file that nothing has
     * happened to since a stat() found its generation fresh. */
    if (authn_hmac_uf_watched(uf) &&
        (events = authn_hmac_watch_events()) != 0 &&
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

/* Whether the file that a's answer was read from is quiet: read QUIET ago
 * at least (the look that follows finds it unchanged since), unchanged
 * since QUIET at least, and no writer at work: as the watcher sees it, for
 * a watched file that it watched before the change; else, with a change
 * less than SETTLE_MAX ago, a writer may be at work unseen. */
static int quiet(authn_hmac_userfile_t *uf, const ask_t *a)
{
    apr_time_t age = apr_time_now() - a->rd.changed;

    if (authn_hmac_monotonic() - a->rd.read_at < QUIET || age < QUIET)
        return 0;
    if (authn_hmac_uf_watched(uf) &&
        authn_hmac_watch_quiet(__atomic_load_n(&uf->wd, __ATOMIC_RELAXED),
                               a->rd.changed))
        return 1;
    return !authn_hmac_uf_watched(uf) || age >= SETTLE_MAX;
}

/* The writer rule. A reading of a file that a writer rewrites in place
 * holds what the file held then (htpasswd truncates it, then writes it
 * whole): a user may be missing, or the last line cut. A request that
 * ends in a deny from a reading of a file that changed less than
 * SETTLE_MAX ago, or read less than that ago, waits here for the file to
 * be quiet, SETTLE_MAX at most from since, and looks again: the answer
 * from the quiet file, or past that, is final. The wait is the same
 * whatever the user and the answers on the way (a known user's wrong
 * password waits as an unknown user does). There is no version of before:
 * what is not in the file is never granted, and a completed write is in
 * force on the very next lookup. */
static apr_status_t settle(authn_hmac_userfile_t *uf, ask_t *a,
                           authn_hmac_log_fn bad, void *baton, apr_pool_t *p,
                           apr_time_t since)
{
    authn_hmac_reading_t seen;
    apr_status_t rv;
    int last;

    for (;;) {
        last = authn_hmac_monotonic() - since >= SETTLE_MAX;
        if (!last && !quiet(uf, a)) {
            usleep(QUIET_POLL);
            (void)look(uf, a, bad, baton, p);
            continue;
        }
        /* NB: final only if it is the reading found quiet (a writer may
         * have begun since). */
        seen = a->rd;
        a->final = 1;
        rv = look(uf, a, bad, baton, p);
        a->final = 0;
        if (last || (a->rd.changed == seen.changed && a->rd.size == seen.size &&
                     a->rd.read_at == seen.read_at))
            return rv;
    }
}

static apr_status_t lookup(authn_hmac_userfile_t *uf, ask_t *a,
                           authn_hmac_log_fn bad, void *baton, apr_pool_t *p,
                           authn_hmac_reading_t *rd)
{
    apr_status_t rv;

    if (!uf->lock)
        return APR_EINIT; /* child_init did not run or failed */
    memset(&a->rd, 0, sizeof(a->rd));
    rv = look(uf, a, bad, baton, p);
    if (rd)
        *rd = a->rd;
    return rv;
}

apr_status_t authn_hmac_userfile_lookup_id(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_log_fn bad,
    void *baton, apr_pool_t *p, authn_hmac_reading_t *rd)
{
    ask_t a = {user,     mac, scope,  scope_len, hash,
               hash_len, id,  digest, 0,         {0, 0, 0, 0, 0}};

    return lookup(uf, &a, bad, baton, p, rd);
}

apr_status_t authn_hmac_userfile_settle(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_log_fn bad,
    void *baton, apr_pool_t *p, authn_hmac_reading_t *rd, apr_time_t since)
{
    ask_t a = {user, mac, scope, scope_len, hash, hash_len, id, digest, 0, *rd};
    apr_status_t rv;

    if (!uf->lock)
        return APR_EINIT;
    __atomic_add_fetch(&uf->settles, 1, __ATOMIC_RELAXED);
    rv = settle(uf, &a, bad, baton, p, since);
    *rd = a.rd;
    return rv;
}
