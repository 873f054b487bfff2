/* table.c: the shared segment, and in it the cache of credential MACs.
 *
 * table.c lays the segment out (below) and keeps the caches, the counters
 * and the histograms; single flight (flight.c) and the verification queue
 * (queue.c) keep their state in it too, where table_int.h says.
 *
 * A set-associative table of fixed 64-byte slots in one shared segment; a
 * set is a line of its slots' user words, then the slots.
 * Readers never lock: each slot carries a sequence counter (a seqlock), so a
 * lookup reads a consistent copy or retries. Writers are rare (one per
 * successful bcrypt) and serialize on a global mutex; a hit on an entry in
 * use moves its last use forward, once per half TTL, by compare-and-swap
 * of that one word, without the mutex. Entries hold
 * only a MAC, a keyed user id and two times: no user, password or hash.
 * The times are when the credential was verified and when it was last
 * used, not an expiry made for one TTL: each section applies its own idle
 * timeout and max age to them, so that two sections over one file, with
 * two TTLs, share the entry (an expiry set by one was too far out for the
 * other, which verified again on every switch).
 *
 * The set is chosen by the user id (a MAC of scope and user), so that all of
 * a user's entries meet in one set, where a user holds at most
 * AUTHN_HMAC_PER_USER of them: one account sending endless variants of a
 * password that all verify (DES crypt reads 8 characters, bcrypt 72 bytes)
 * only ever replaces its own entries.
 */
#include "shm/table.h"
#include "core/cred.h"
#include "core/util.h"
#include "table_int.h"
#ifdef AUTHN_HMAC_TESTING
#include "shm/table_testing.h"
#endif

#include <string.h>

#include <sched.h>

#include <bsd/string.h>
#include <openssl/crypto.h>

/* "ahmact", layout 10: any change to the layout or to what the MACs in it
 * are made of (7: the sets' user lines, encoding 3's digest; 8: a slot's
 * times are (verified, used), no longer (stored, expires); 9: the queue's
 * reap cursor, head and places' times; 10: the histograms; 11: the Redis
 * health's TLS handshake counts; 12: the Sentinel's shared primary; 13:
 * the throttle's records; 14 to 16: the Redis health, the Sentinel state
 * and the previous pepper; 17: the farm's late and timed-out waits; 18: the
 * throttle's records of 128 bytes, a slot's client mark; 19: the counters
 * of rechecks and outages; 20: the memo region, what SQL last said of each
 * user, after the book of bans; 21: the annex of 896 bytes, with the
 * sources' outage records) makes a kept segment
 * start afresh, across a graceful restart after an upgrade too. What the
 * layers above keep in the annex is part of the layout (table.h). */
#define TABLE_MAGIC 0x61686d6163740015ULL

#define WAYS        8 /* slots per set */
#define HIT_STRIPES 8

/* NB: in the negative region, whose entries are never used again and
 * keep the life their section gave them, `used` is the expiry. */
typedef struct {
    uint32_t seq;     /* odd while a writer is inside */
    uint32_t mark;    /* the client it was last stored or refreshed for */
    int64_t verified; /* apr_time_t; 0 = empty */
    int64_t used;     /* apr_time_t: last use (negative: expiry) */
    uint64_t key[4];
    uint64_t user; /* first 8 bytes of the user id */
} slot_t;

/* A lookup reads the line of user words, then only its user's slots: two
 * lines of nine instead of eight of eight (hitbench). A word is a hint,
 * written after its slot under the writers' mutex: a stale one can only
 * make a lookup look at a slot in vain, or miss as if it had come a moment
 * earlier; the slot's own copy of the word is what writers go by. */
typedef struct {
    uint64_t user[WAYS]; /* each slot's user word */
    slot_t slot[WAYS];
} set_t;

/* The segment, in one place:
 *   header           magic, size, start time, where each region is and how
 *                    full, the queue's words, the annex (the Redis
 *                    health and the Sentinel's primary, laid out by
 *                    the layers above: table.h), the counters
 *                    (HEADER_SIZE)
 *   flights          AUTHN_HMAC_FLIGHTS verifications in flight, so that
 *                    concurrent misses of one credential wait for one
 *                    bcrypt (flight.c)
 *   queue            AUTHN_HMAC_QUEUE_SLOTS places for verifications:
 *                    running (at most the cap) or waiting for a turn
 *                    (queue.c)
 *   throttle         records of clients' wrong passwords and bans, 1/32
 *                    of the segment, then the book of bans in force
 *                    (throttle.c)
 *   memo             what SQL last said of each user (its hash's digest,
 *                    none, locked; when), 1/32 of the segment (memo.c)
 *   positive region  credentials verified: what grants (8 of 9 sets)
 *   negative region  wrong passwords seen recently: what denies without
 *                    bcrypt (1 of 9 sets; none in a table of one set)
 * All of it comes out of AuthHMACCacheSize.
 * Each region is sets of WAYS slots, and never writes into another: a flood
 * of wrong passwords cannot evict a verified credential. */
enum { POSITIVE, NEGATIVE, REGIONS };

typedef struct {
    uint64_t offset; /* from the header */
    uint64_t nsets;
    uint64_t used; /* slots holding an entry, live or expired */
} region_hdr_t;

typedef struct {
    uint64_t magic;
    uint64_t size;
    int64_t started;
    region_hdr_t region[REGIONS];
    uint64_t flights;         /* offset of the flights */
    uint64_t queue;           /* offset of the queue */
    authn_hmac_queue_hdr_t q; /* the queue's words (queue.c) */
    uint64_t throttle;        /* offset of the throttle's records */
    uint64_t throttle_slots;  /* how many */
    int64_t throttle_until;   /* apr_time_t: no ban lasts past it */
    uint64_t memo;            /* offset of the memo records */
    uint64_t memo_slots;      /* how many */
    char pad0[64 - (136 + REGIONS * sizeof(region_hdr_t)) % 64];
    unsigned char annex[AUTHN_HMAC_TABLE_ANNEX_BYTES]; /* table.h */
    uint64_t counter[AUTHN_HMAC_C_COUNT];
    char pad1[64 - (AUTHN_HMAC_C_COUNT * 8) % 64];
    /* NB: hits, the counter every hit adds to, by CPU, a line for each: a
     * line that both cores add to costs two threads 0.1 µs a hit. */
    uint64_t hits[HIT_STRIPES][8];
    authn_hmac_histogram_t hist[AUTHN_HMAC_H_COUNT];
} header_t;

#define HEADER_SIZE ((sizeof(header_t) + 63) & ~(size_t)63)

typedef struct {
    set_t *sets;
    uint64_t nsets;
    uint64_t *used;
    int evictions; /* counted (the positive region's) */
    int expiring;  /* slots keep an expiry (the negative region's) */
} region_t;

struct authn_hmac_table {
    header_t *hdr;
    region_t region[REGIONS];
    apr_global_mutex_t *mutex;
    authn_hmac_table_parts_t parts; /* for flight.c and queue.c */
};

typedef char slot_is_64_bytes[sizeof(slot_t) == 64 ? 1 : -1];
typedef char
    queue_words_are_56_bytes[sizeof(authn_hmac_queue_hdr_t) == 56 ? 1 : -1];
typedef char hits_on_lines[offsetof(header_t, hits) % 64 == 0 ? 1 : -1];
typedef char annex_on_lines[offsetof(header_t, annex) % 64 == 0 &&
                                    AUTHN_HMAC_TABLE_ANNEX_BYTES % 64 == 0
                                ? 1
                                : -1];
typedef char set_is_9_lines[sizeof(set_t) == (size_t)9 * 64 ? 1 : -1];

/* NB: the flights and the queue, both fixed, after the header; then the
 * throttle's records, 1/32 of the segment (64 to 65536 of them: 1,024 in
 * the default 4 MB). */
#define FLIGHTS_SIZE                                                           \
    (AUTHN_HMAC_FLIGHTS * AUTHN_HMAC_FLIGHT_BYTES +                            \
     AUTHN_HMAC_QUEUE_SLOTS * AUTHN_HMAC_PLACE_BYTES)

static uint64_t throttle_slots(size_t size)
{
    uint64_t n = size / (32 * AUTHN_HMAC_THROTTLE_BYTES);

    return n < 64 ? 64 : n > 65536 ? 65536 : n;
}

/* The memo's records: 1/32 of the segment (4,096 users' in the default
 * 4 MB: a user whose memo was pushed out costs one query), in whole sets. */
static uint64_t memo_slots(size_t size)
{
    uint64_t n = size / (32 * AUTHN_HMAC_MEMO_BYTES);

    n = n < 64 ? 64 : n > ((uint64_t)1 << 20) ? (uint64_t)1 << 20 : n;
    return n / AUTHN_HMAC_MEMO_WAYS * AUTHN_HMAC_MEMO_WAYS;
}

/* What a segment of size holds besides the sets. */
static size_t fixed_size(size_t size)
{
    return HEADER_SIZE + FLIGHTS_SIZE +
           throttle_slots(size) * AUTHN_HMAC_THROTTLE_BYTES +
           AUTHN_HMAC_BOOK_BYTES + memo_slots(size) * AUTHN_HMAC_MEMO_BYTES;
}

/* The header starts at the segment's first cache line boundary: apr_shm's
 * memory starts a few bytes into a page, and a slot across two lines would
 * cost two misses. LINE bytes are set aside for that. */
#define LINE 64

static header_t *header_of(void *base)
{
    return (header_t *)(((uintptr_t)base + LINE - 1) & ~(uintptr_t)(LINE - 1));
}

size_t authn_hmac_table_size(size_t budget)
{
    size_t set = sizeof(set_t), fixed;

    /* NB: the header, the flights, the queue and the throttle come out of
     * the budget (at most 1 GiB: nothing here overflows). A smaller size
     * never has more of the throttle's records (format works them out
     * again from the size it is given). */
    if (budget > (size_t)1 << 40)
        budget = (size_t)1 << 40;
    fixed = LINE + fixed_size(budget);
    if (budget == 0)
        return fixed;
    if (budget < fixed + set)
        return fixed + set;
    return fixed + (budget - fixed) / set * set;
}

apr_status_t authn_hmac_table_format(void *base, size_t size, apr_time_t now)
{
    header_t *h = header_of(base);
    size_t skip = (size_t)((char *)h - (char *)base);
    uint64_t sets, neg;

    if (size < skip + fixed_size(size))
        return APR_EINVAL;
    memset(base, 0, size);
    h->flights = HEADER_SIZE;
    h->queue = HEADER_SIZE + AUTHN_HMAC_FLIGHTS * AUTHN_HMAC_FLIGHT_BYTES;
    h->throttle = HEADER_SIZE + FLIGHTS_SIZE;
    h->throttle_slots = throttle_slots(size);
    h->memo = h->throttle + h->throttle_slots * AUTHN_HMAC_THROTTLE_BYTES +
              AUTHN_HMAC_BOOK_BYTES;
    h->memo_slots = memo_slots(size);
    h->q.places[PLACE_FREE] = AUTHN_HMAC_QUEUE_SLOTS;
    sets = (size - skip - fixed_size(size)) / sizeof(set_t);
    neg = sets >= 2 ? (sets / 9 ? sets / 9 : 1) : 0;
    h->region[POSITIVE].offset = fixed_size(size);
    h->region[POSITIVE].nsets = sets - neg;
    h->region[NEGATIVE].offset =
        h->region[POSITIVE].offset + (sets - neg) * sizeof(set_t);
    h->region[NEGATIVE].nsets = neg;
    h->size = size;
    h->started = now;
    h->magic = TABLE_MAGIC;
    return APR_SUCCESS;
}

authn_hmac_table_t *
authn_hmac_table_attach(void *base, apr_global_mutex_t *mutex, apr_pool_t *p)
{
    authn_hmac_table_t *t;
    header_t *h = header_of(base);
    int r;

    if (h->magic != TABLE_MAGIC)
        return NULL;
    t = apr_pcalloc(p, sizeof(*t));
    t->hdr = h;
    for (r = 0; r < REGIONS; r++) {
        t->region[r].sets = (set_t *)((char *)h + h->region[r].offset);
        t->region[r].nsets = h->region[r].nsets;
        t->region[r].used = &h->region[r].used;
    }
    t->region[POSITIVE].evictions = 1;
    t->region[NEGATIVE].expiring = 1;
    t->mutex = mutex;
    t->parts.mutex = mutex;
    t->parts.flights = (char *)h + h->flights;
    t->parts.places = (char *)h + h->queue;
    t->parts.throttle = (char *)h + h->throttle;
    t->parts.throttle_slots = h->throttle_slots;
    t->parts.throttle_until = &h->throttle_until;
    t->parts.book =
        (char *)h + h->throttle + h->throttle_slots * AUTHN_HMAC_THROTTLE_BYTES;
    t->parts.memo = (char *)h + h->memo;
    t->parts.memo_slots = h->memo_slots;
    t->parts.queue = &h->q;
    t->parts.verifying_max = &h->counter[AUTHN_HMAC_C_VERIFYING_MAX];
    return t;
}

const authn_hmac_table_parts_t *authn_hmac_table_parts(authn_hmac_table_t *t)
{
    return &t->parts;
}

static uint64_t user_word(const unsigned char *uid)
{
    uint64_t w;

    memcpy(&w, uid, sizeof(w));
    return w;
}

/* The user's set; the user id is a MAC, so no client can steer it without
 * the pepper. */
static set_t *set_for(const region_t *r, uint64_t user)
{
    return r->sets + user % r->nsets;
}

/* Copies a slot consistently; 0 if a writer kept it busy too long. */
static int slot_read(const slot_t *s, slot_t *copy)
{
    int i, k;

    for (i = 0; i < AUTHN_HMAC_READ_TRIES; i++) {
        uint32_t s1 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);

        if (s1 & 1)
            continue;
        copy->verified = __atomic_load_n(&s->verified, __ATOMIC_RELAXED);
        copy->used = __atomic_load_n(&s->used, __ATOMIC_RELAXED);
        for (k = 0; k < 4; k++)
            copy->key[k] = __atomic_load_n(&s->key[k], __ATOMIC_RELAXED);
        copy->user = __atomic_load_n(&s->user, __ATOMIC_RELAXED);
        copy->mark = __atomic_load_n(&s->mark, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == s1) {
            copy->seq = s1;
            return 1;
        }
    }
    return 0;
}

/* Writes a slot; the caller holds the writers' mutex. A sequence left odd
 * means a writer died inside: its half-written contents are overwritten
 * here, and the counter made even again. */
static void slot_write(slot_t *s, const unsigned char *key, uint64_t user,
                       apr_time_t verified, apr_time_t used)
{
    uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
    uint64_t k[4];
    int i;

    memcpy(k, key, sizeof(k));
    if (!(seq & 1))
        __atomic_store_n(&s->seq, ++seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->verified, verified, __ATOMIC_RELAXED);
    __atomic_store_n(&s->used, used, __ATOMIC_RELAXED);
    for (i = 0; i < 4; i++)
        __atomic_store_n(&s->key[i], k[i], __ATOMIC_RELAXED);
    __atomic_store_n(&s->user, user, __ATOMIC_RELAXED);
    __atomic_store_n(&s->mark, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELEASE);
}

static int slot_torn(const slot_t *s)
{
    return (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) & 1) != 0;
}

/* Whether an entry is live at now for a section of idle timeout ttl and
 * max age max_age: verified less than max_age ago (and not "in the
 * future": a clock stepped back), and used less than ttl ago. A use "in
 * the future" (the clock stepped back after it) is a use now: max_age
 * still bounds the entry. In an expiring region (negative entries), live
 * until its expiry. */
static int live(const region_t *r, const slot_t *s, apr_time_t now,
                apr_interval_time_t ttl, apr_interval_time_t max_age)
{
    if (r->expiring)
        return s->verified <= now && now < s->used;
    return s->verified <= now && now - s->verified < max_age &&
           now - s->used < ttl;
}

static int lookup_in(const region_t *r, const unsigned char *key,
                     const unsigned char *uid, apr_time_t now,
                     apr_interval_time_t ttl, apr_interval_time_t max_age,
                     apr_time_t *verified, apr_time_t *used)
{
    uint64_t user = user_word(uid);
    set_t *st;
    slot_t copy;
    int i, found = 0;

    if (r->nsets == 0)
        return 0;
    st = set_for(r, user);
    for (i = 0; i < WAYS; i++) {
        /* NB: the key covers the user, so another user's slot cannot hold
         * it: such a slot is passed over without a copy or a compare. One
         * taken over for this user just now may be missed, as if this
         * lookup had come a moment earlier. */
        if (__atomic_load_n(&st->user[i], __ATOMIC_RELAXED) != user ||
            !slot_read(&st->slot[i], &copy) || copy.verified == 0)
            continue;
        if (CRYPTO_memcmp(copy.key, key, AUTHN_HMAC_KEY_LEN) == 0 &&
            live(r, &copy, now, ttl, max_age)) {
            found = 1;
            if (verified)
                *verified = copy.verified;
            if (used)
                *used = copy.used;
        }
    }
    explicit_bzero(&copy, sizeof(copy));
    return found;
}

/* Whether a hit at now, under an idle timeout of ttl, writes the entry's
 * last use: once half of ttl has passed since. So a section writes an
 * entry in use at most once per half of its own TTL, whatever other
 * sections do (a section of a longer TTL writes it less often). */
static int refresh_due(apr_time_t used, apr_time_t now, apr_interval_time_t ttl)
{
    return now - used >= ttl / 2;
}

static apr_status_t store_in(authn_hmac_table_t *t, region_t *r,
                             const unsigned char *key, const unsigned char *uid,
                             apr_time_t verified, apr_time_t used,
                             apr_interval_time_t ttl)
{
    uint64_t user = user_word(uid);
    set_t *st;
    slot_t *set, *victim = NULL, *own_lru = NULL;
    apr_status_t rv;
    int i, own = 0, same = 0;

    if (r->nsets == 0 || verified <= 0 || used < verified)
        return APR_SUCCESS;
    if (t->mutex && (rv = apr_global_mutex_lock(t->mutex)) != APR_SUCCESS)
        return rv;
    st = set_for(r, user);
    set = st->slot;
    /* Under the mutex no one else writes, so plain reads are safe; a slot
     * left odd by a writer that died is free to take. The same key, else
     * the user's least recently used entry once the user holds its share,
     * else a free slot, else the least recently used. NB: no slot is
     * "expired" here: that depends on the TTL of the section that asks,
     * and an entry idle for one section may be live for another. Every
     * entry of the user counts towards its share, live or idle. */
    for (i = 0; i < WAYS; i++) {
        if (slot_torn(&set[i]) || !set[i].verified)
            continue;
        if (CRYPTO_memcmp(set[i].key, key, AUTHN_HMAC_KEY_LEN) == 0)
            victim = &set[i];
        else if (set[i].user == user) {
            own++;
            if (!own_lru || set[i].used < own_lru->used)
                own_lru = &set[i];
        }
    }
    if (victim) {
        same = 1;
        /* NB: the same credential (its MAC covers the stored hash): it was
         * verified and used at the later of the times each writer saw (a
         * Redis entry may bring older ones than a refresh here wrote). */
        if (victim->verified > verified)
            verified = victim->verified;
        if (victim->used > used)
            used = victim->used;
    }
    if (!victim && own >= AUTHN_HMAC_PER_USER)
        victim = own_lru;
    for (i = 0; i < WAYS && !victim; i++)
        if (slot_torn(&set[i]) || set[i].verified == 0) {
            victim = &set[i];
            if (set[i].verified == 0)
                __atomic_add_fetch(r->used, 1, __ATOMIC_RELAXED);
        }
    if (!victim) {
        victim = &set[0];
        for (i = 1; i < WAYS; i++)
            if (set[i].used < victim->used)
                victim = &set[i];
        /* NB: one used within the storing section's TTL was likely live
         * (an admin reads evictions as "the cache is too small"); one idle
         * longer is only the set's least recently used. */
        if (r->evictions && used - victim->used < ttl)
            authn_hmac_table_count(t, AUTHN_HMAC_C_EVICTIONS, 1);
    }
    {
        /* NB: the same credential keeps the client it was marked for. */
        uint32_t mark =
            same ? __atomic_load_n(&victim->mark, __ATOMIC_RELAXED) : 0;

        slot_write(victim, key, user, verified, used);
        if (mark)
            __atomic_store_n(&victim->mark, mark, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&st->user[victim - set], user, __ATOMIC_RELAXED);
    if (r->evictions)
        authn_hmac_table_count(t, AUTHN_HMAC_C_STORES, 1);
    if (t->mutex)
        apr_global_mutex_unlock(t->mutex);
    return APR_SUCCESS;
}

int authn_hmac_table_lookup(authn_hmac_table_t *t,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl,
                            apr_interval_time_t max_age, apr_time_t *verified,
                            apr_time_t *used)
{
    int found = lookup_in(&t->region[POSITIVE], key, uid, now, ttl, max_age,
                          verified, used);

#ifdef AUTHN_HMAC_TESTING
    /* A test's pause on a miss (shm/table_testing.h). */
    if (!found)
        authn_hmac_test_pause(6);
#endif
    return found;
}

int authn_hmac_table_refresh(authn_hmac_table_t *t,
                             const unsigned char key[AUTHN_HMAC_KEY_LEN],
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                             apr_time_t now, apr_interval_time_t ttl,
                             apr_interval_time_t max_age, apr_time_t *used)
{
    region_t *r = &t->region[POSITIVE];
    slot_t *set;
    int i;

    /* NB: the common hit ends here, on what the lookup read: no write. */
    if (r->nsets == 0 || !refresh_due(*used, now, ttl))
        return 0;
    /* NB: no lock either: the writers' mutex is the verification queue's
     * too, and a refresh must neither wait for it (a flood of misses would
     * hold up the hits) nor be skipped (a skipped refresh can let an entry
     * in use reach its idle timeout). The last use is one word, moved
     * forward by compare-and-swap from the value read in a consistent copy
     * of the slot: of concurrent hits, one moves it and the others find it
     * moved. A writer that rewrites the slot meanwhile writes the word too
     * (under the sequence), and the swap then fails, unless the new entry
     * was stored with the very same microsecond, which it then only
     * carries forward to now. Readers take either value, both true. */
    set = set_for(r, user_word(uid))->slot;
    for (i = 0; i < WAYS; i++) {
        slot_t *s = &set[i], copy;
        int64_t seen;

        if (!slot_read(s, &copy) || !copy.verified ||
            CRYPTO_memcmp(copy.key, key, AUTHN_HMAC_KEY_LEN) != 0 ||
            !live(r, &copy, now, ttl, max_age) ||
            !refresh_due(copy.used, now, ttl))
            continue;
        seen = copy.used;
        explicit_bzero(&copy, sizeof(copy));
        if (!__atomic_compare_exchange_n(&s->used, &seen, (int64_t)now, 0,
                                         __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            return 0;
        *used = now;
        authn_hmac_table_count(t, AUTHN_HMAC_C_REFRESHES, 1);
        return 1;
    }
    return 0;
}

apr_status_t authn_hmac_table_store(authn_hmac_table_t *t,
                                    const unsigned char key[AUTHN_HMAC_KEY_LEN],
                                    const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                    apr_time_t verified, apr_time_t used,
                                    apr_interval_time_t ttl)
{
    return store_in(t, &t->region[POSITIVE], key, uid, verified, used, ttl);
}

void authn_hmac_table_forget(authn_hmac_table_t *t,
                             const unsigned char key[AUTHN_HMAC_KEY_LEN],
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN])
{
    static const unsigned char none[AUTHN_HMAC_KEY_LEN];
    region_t *r = &t->region[POSITIVE];
    set_t *st;
    int i;

    if (r->nsets == 0 ||
        (t->mutex && apr_global_mutex_lock(t->mutex) != APR_SUCCESS))
        return;
    st = set_for(r, user_word(uid));
    for (i = 0; i < WAYS; i++) {
        slot_t *s = &st->slot[i];

        if (slot_torn(s) || !s->verified ||
            CRYPTO_memcmp(s->key, key, AUTHN_HMAC_KEY_LEN) != 0)
            continue;
        slot_write(s, none, 0, 0, 0);
        __atomic_store_n(&st->user[i], 0, __ATOMIC_RELAXED);
        __atomic_sub_fetch(r->used, 1, __ATOMIC_RELAXED);
    }
    if (t->mutex)
        apr_global_mutex_unlock(t->mutex);
}

/* The credential's slot in its user's set, read consistently into copy;
 * NULL if it is not there. */
static slot_t *slot_of(authn_hmac_table_t *t, const unsigned char *key,
                       const unsigned char *uid, slot_t *copy)
{
    region_t *r = &t->region[POSITIVE];
    uint64_t user = user_word(uid);
    set_t *st;
    int i;

    if (r->nsets == 0)
        return NULL;
    st = set_for(r, user);
    for (i = 0; i < WAYS; i++)
        if (__atomic_load_n(&st->user[i], __ATOMIC_RELAXED) == user &&
            slot_read(&st->slot[i], copy) && copy->verified != 0 &&
            CRYPTO_memcmp(copy->key, key, AUTHN_HMAC_KEY_LEN) == 0)
            return &st->slot[i];
    return NULL;
}

void authn_hmac_table_mark(authn_hmac_table_t *t,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           uint32_t mark)
{
    slot_t copy, *s = slot_of(t, key, uid, &copy);

    /* NB: no lock, as a refresh: one word. A slot rewritten for another
     * credential meanwhile (its sequence moved) loses the mark again: a
     * mark may be missing, never another credential's. */
    if (s && copy.mark != mark) {
        __atomic_store_n(&s->mark, mark, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != copy.seq)
            __atomic_store_n(&s->mark, 0, __ATOMIC_RELAXED);
    }
    explicit_bzero(&copy, sizeof(copy));
}

int authn_hmac_table_user_marked(authn_hmac_table_t *t,
                                 const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                 uint32_t mark)
{
    region_t *r = &t->region[POSITIVE];
    uint64_t user = user_word(uid);
    set_t *st;
    slot_t copy;
    int i, yes = 0;

    if (r->nsets == 0 || !mark)
        return 0;
    st = set_for(r, user);
    /* NB: every slot of the user's set looked at, whatever it finds: the
     * same work for a user with entries and one without. */
    for (i = 0; i < WAYS; i++)
        if (slot_read(&st->slot[i], &copy) && copy.verified != 0 &&
            copy.user == user && copy.mark == mark)
            yes = 1;
    explicit_bzero(&copy, sizeof(copy));
    return yes;
}

int authn_hmac_table_marked(authn_hmac_table_t *t,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            uint32_t mark)
{
    slot_t copy;
    int yes = slot_of(t, key, uid, &copy) != NULL && mark && copy.mark == mark;

    explicit_bzero(&copy, sizeof(copy));
    return yes;
}

int authn_hmac_negative_lookup(authn_hmac_table_t *t,
                               const unsigned char nkey[AUTHN_HMAC_KEY_LEN],
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               apr_time_t now)
{
    /* NB: a negative entry's life is its expiry, set when it was stored;
     * it is never refreshed. */
    return lookup_in(&t->region[NEGATIVE], nkey, uid, now, 0, 0, NULL, NULL);
}

apr_status_t
authn_hmac_negative_store(authn_hmac_table_t *t,
                          const unsigned char nkey[AUTHN_HMAC_KEY_LEN],
                          const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                          apr_time_t now, apr_time_t expires)
{
    /* NB: an expiry already past is not stored. */
    if (expires <= now)
        return APR_SUCCESS;
    return store_in(t, &t->region[NEGATIVE], nkey, uid, now, expires, 0);
}

#ifdef AUTHN_HMAC_TESTING
/* A seam for tests (shm/table_testing.h): not in the shipped library. */
void authn_hmac_table_tear(authn_hmac_table_t *t,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN])
{
    slot_t *set;
    int i;

    if (t->region[POSITIVE].nsets == 0)
        return;
    set = set_for(&t->region[POSITIVE], user_word(uid))->slot;

    for (i = 0; i < WAYS; i++)
        if (CRYPTO_memcmp(set[i].key, key, AUTHN_HMAC_KEY_LEN) == 0) {
            /* What a writer leaves when it dies after the first store. */
            __atomic_add_fetch(&set[i].seq, 1, __ATOMIC_RELEASE);
            set[i].key[0] ^= 1;
            return;
        }
}
#endif

void authn_hmac_table_count(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t delta)
{
    int cpu;

    if (c != AUTHN_HMAC_C_HITS) {
        __atomic_fetch_add(&t->hdr->counter[c], delta, __ATOMIC_RELAXED);
        return;
    }
    cpu = sched_getcpu();
    __atomic_fetch_add(
        &t->hdr->hits[cpu > 0 ? (unsigned)cpu % HIT_STRIPES : 0][0], delta,
        __ATOMIC_RELAXED);
}

void authn_hmac_table_gauge(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t value)
{
    __atomic_store_n(&t->hdr->counter[c], value, __ATOMIC_RELAXED);
}

int authn_hmac_table_gauge_swap(authn_hmac_table_t *t,
                                enum authn_hmac_counter c, uint64_t old,
                                uint64_t value)
{
    return __atomic_compare_exchange_n(&t->hdr->counter[c], &old, value, 0,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

uint64_t authn_hmac_table_counter(authn_hmac_table_t *t,
                                  enum authn_hmac_counter c)
{
    uint64_t n = 0;
    int i;

    if (c != AUTHN_HMAC_C_HITS)
        return __atomic_load_n(&t->hdr->counter[c], __ATOMIC_RELAXED);
    for (i = 0; i < HIT_STRIPES; i++)
        n += __atomic_load_n(&t->hdr->hits[i][0], __ATOMIC_RELAXED);
    return n;
}

unsigned authn_hmac_bucket(enum authn_hmac_histogram h, uint64_t usec)
{
    unsigned b = 0;

    while (usec > authn_hmac_bucket_bounds[h][b])
        b++;
    return b;
}

void authn_hmac_table_observe(authn_hmac_table_t *t,
                              enum authn_hmac_histogram h, uint64_t usec)
{
    authn_hmac_histogram_t *hist = &t->hdr->hist[h];

    __atomic_fetch_add(&hist->bucket[authn_hmac_bucket(h, usec)], 1,
                       __ATOMIC_RELAXED);
    __atomic_fetch_add(&hist->sum_usec, usec, __ATOMIC_RELAXED);
}

void *authn_hmac_table_annex(authn_hmac_table_t *t)
{
    return t->hdr->annex;
}

int authn_hmac_table_lock(authn_hmac_table_t *t)
{
    return !t->mutex || apr_global_mutex_lock(t->mutex) == APR_SUCCESS;
}

void authn_hmac_table_unlock(authn_hmac_table_t *t)
{
    if (t->mutex)
        apr_global_mutex_unlock(t->mutex);
}

void authn_hmac_table_stats(authn_hmac_table_t *t, apr_time_t now,
                            authn_hmac_stats_t *out)
{
    uint64_t n = t->region[POSITIVE].nsets * WAYS;
    int c, b;

    memset(out, 0, sizeof(*out));
    for (c = 0; c < AUTHN_HMAC_C_COUNT; c++)
        out->counter[c] =
            authn_hmac_table_counter(t, (enum authn_hmac_counter)c);
    for (c = 0; c < AUTHN_HMAC_H_COUNT; c++) {
        for (b = 0; b < AUTHN_HMAC_BUCKETS; b++)
            out->hist[c].bucket[b] =
                __atomic_load_n(&t->hdr->hist[c].bucket[b], __ATOMIC_RELAXED);
        out->hist[c].sum_usec =
            __atomic_load_n(&t->hdr->hist[c].sum_usec, __ATOMIC_RELAXED);
    }
    /* NB: O(1): the count is kept as slots fill, never by a scan. */
    out->entries = __atomic_load_n(t->region[POSITIVE].used, __ATOMIC_RELAXED);
    out->negative_entries =
        __atomic_load_n(t->region[NEGATIVE].used, __ATOMIC_RELAXED);
    out->negative_slots = t->region[NEGATIVE].nsets * WAYS;
    out->verifying =
        __atomic_load_n(&t->hdr->q.places[PLACE_RUNNING], __ATOMIC_RELAXED);
    out->waiting =
        __atomic_load_n(&t->hdr->q.places[PLACE_WAITING], __ATOMIC_RELAXED);
    out->slots = n;
    out->bytes = t->hdr->size;
    out->started = t->hdr->started;
}
