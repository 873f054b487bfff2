/* memo.c: the memo region (shm/memo.h): records of 128 bytes in sets of
 * MEMO_WAYS, a user's set chosen by its id (a MAC: no client steers it
 * without the pepper). Its place and size in the segment are the table's
 * (table.c: 1/32 of the segment, from AuthHMACCacheSize). A record is a
 * seqlock: odd while a writer is inside; a reader copies it and keeps the
 * copy only if the sequence did not move (a torn record is a miss, and a
 * miss only costs a query). A writer that died inside leaves it odd: the
 * next writer overwrites it. */
#include "shm/memo.h"
#include "shm/table_int.h"

#include <string.h>

#include <openssl/crypto.h>

typedef struct {
    uint32_t seq;       /* odd while a writer is inside */
    uint32_t state;     /* authn_hmac_memo_state; 0: empty */
    int64_t confirmed;  /* apr_time_t */
    uint64_t uid[4];    /* the user's id */
    uint64_t digest[4]; /* authn_hmac_cred_digest, or zeros */
    char pad[AUTHN_HMAC_MEMO_BYTES - 80];
} memo_rec_t;

typedef char
    memo_rec_size[sizeof(memo_rec_t) == AUTHN_HMAC_MEMO_BYTES ? 1 : -1];

static memo_rec_t *set_of(const authn_hmac_table_parts_t *parts,
                          const unsigned char *uid)
{
    uint64_t w, sets = parts->memo_slots / AUTHN_HMAC_MEMO_WAYS;

    if (!sets)
        return NULL;
    memcpy(&w, uid, sizeof(w));
    return (memo_rec_t *)parts->memo + (w % sets) * AUTHN_HMAC_MEMO_WAYS;
}

/* Copies r consistently into *copy; 0 if a writer kept it busy. */
static int rec_read(const memo_rec_t *r, memo_rec_t *copy)
{
    int i, k;

    for (i = 0; i < AUTHN_HMAC_READ_TRIES; i++) {
        uint32_t s1 = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);

        if (s1 & 1)
            continue;
        copy->state = __atomic_load_n(&r->state, __ATOMIC_RELAXED);
        copy->confirmed = __atomic_load_n(&r->confirmed, __ATOMIC_RELAXED);
        for (k = 0; k < 4; k++) {
            copy->uid[k] = __atomic_load_n(&r->uid[k], __ATOMIC_RELAXED);
            copy->digest[k] = __atomic_load_n(&r->digest[k], __ATOMIC_RELAXED);
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) == s1)
            return 1;
    }
    return 0;
}

int authn_hmac_memo_lookup(authn_hmac_table_t *t,
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           authn_hmac_memo_t *m)
{
    memo_rec_t *set = set_of(authn_hmac_table_parts(t), uid), copy;
    int i, found = 0;

    memset(m, 0, sizeof(*m));
    for (i = 0; set && i < AUTHN_HMAC_MEMO_WAYS && !found; i++) {
        if (!rec_read(&set[i], &copy) || !copy.state ||
            CRYPTO_memcmp(copy.uid, uid, AUTHN_HMAC_KEY_LEN) != 0)
            continue;
        found = 1;
        m->state = (int)copy.state;
        m->confirmed = copy.confirmed;
        memcpy(m->digest, copy.digest, sizeof(m->digest));
    }
    return found;
}

/* Writes r; the caller holds the writers' mutex. */
static void rec_write(memo_rec_t *r, const unsigned char *uid,
                      const authn_hmac_memo_t *m)
{
    uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
    uint64_t u[4], d[4];
    int k;

    memcpy(u, uid, sizeof(u));
    memcpy(d, m->digest, sizeof(d));
    if (!(seq & 1))
        __atomic_store_n(&r->seq, ++seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&r->state, (uint32_t)m->state, __ATOMIC_RELAXED);
    __atomic_store_n(&r->confirmed, m->confirmed, __ATOMIC_RELAXED);
    for (k = 0; k < 4; k++) {
        __atomic_store_n(&r->uid[k], u[k], __ATOMIC_RELAXED);
        __atomic_store_n(&r->digest[k], d[k], __ATOMIC_RELAXED);
    }
    __atomic_store_n(&r->seq, seq + 1, __ATOMIC_RELEASE);
}

apr_status_t authn_hmac_memo_store(authn_hmac_table_t *t,
                                   const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                   const authn_hmac_memo_t *m, apr_time_t now)
{
    const authn_hmac_table_parts_t *parts = authn_hmac_table_parts(t);
    memo_rec_t *set = set_of(parts, uid), *own = NULL, *free_rec = NULL,
               *oldest = NULL;
    apr_status_t rv;
    int i;

    if (!set || m->state < AUTHN_HMAC_MEMO_HASH ||
        m->state > AUTHN_HMAC_MEMO_LOCKED)
        return APR_SUCCESS;
    if (parts->mutex &&
        (rv = apr_global_mutex_lock(parts->mutex)) != APR_SUCCESS)
        return rv;
    /* NB: under the mutex no one else writes: plain reads. The user's own
     * record, else a free or torn one, else the oldest. */
    for (i = 0; i < AUTHN_HMAC_MEMO_WAYS; i++) {
        if (!set[i].state || (set[i].seq & 1)) {
            if (!free_rec)
                free_rec = &set[i];
        }
        else if (CRYPTO_memcmp(set[i].uid, uid, AUTHN_HMAC_KEY_LEN) == 0)
            own = &set[i];
        else if (!oldest || set[i].confirmed < oldest->confirmed)
            oldest = &set[i];
    }
    /* NB: a slower writer's older answer never replaces a newer one; but
     * a record from the future (a clock stepped back) would never be
     * replaced, nor used (not fresh) until the clock caught up. */
    if (!own || own->confirmed <= m->confirmed ||
        own->confirmed > now + AUTHN_HMAC_MEMO_SKEW)
        rec_write(own ? own : free_rec ? free_rec : oldest, uid, m);
    if (parts->mutex)
        apr_global_mutex_unlock(parts->mutex);
    return APR_SUCCESS;
}
