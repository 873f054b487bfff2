/* table.c: the shared-memory cache of credential MACs.
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
#include "authn_hmac/table.h"
#include "authn_hmac/cred.h"
#include "authn_hmac/redis.h"    /* the health's record, kept here */
#include "authn_hmac/sentinel.h" /* the primary's record, kept here */
#include "authn_hmac/util.h"

#include <string.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <bsd/string.h>
#include <openssl/crypto.h>

/* "ahmact", layout 10: any change to the layout or to what the MACs in it
 * are made of (7: the sets' user lines, encoding 3's digest; 8: a slot's
 * times are (verified, used), no longer (stored, expires); 9: the queue's
 * reap cursor, head and places' times; 10: the histograms; 11: the Redis
 * health's TLS handshake counts; 12: the Sentinel's shared primary) makes
 * a kept segment start afresh, across a graceful restart after an upgrade
 * too. */
#define TABLE_MAGIC 0x61686d616374000cULL
#define FLIGHTS     64 /* verifications in flight, per server */
#define WAYS        8  /* slots per set */
#define READ_TRIES  64 /* then treat the slot as a miss */
#define HIT_STRIPES 8

/* NB: in the negative region, whose entries are never used again and
 * keep the life their section gave them, `used` is the expiry. */
typedef struct {
    uint32_t seq; /* odd while a writer is inside */
    uint32_t unused;
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
 *                    full, the Redis health, the counters (HEADER_SIZE)
 *   flights          FLIGHTS verifications in flight, so that concurrent
 *                    misses of one credential wait for one bcrypt
 *   queue            AUTHN_HMAC_QUEUE_SLOTS places for verifications:
 *                    running (at most the cap) or waiting for a turn
 *   positive region  credentials verified: what grants (8 of 9 sets)
 *   negative region  wrong passwords seen recently: what denies without
 *                    bcrypt (1 of 9 sets; none in a table of one set)
 * All of it comes out of AuthHMACCacheSize.
 * Each region is sets of WAYS slots, and never writes into another: a flood
 * of wrong passwords cannot evict a verified credential. */
enum { POSITIVE, NEGATIVE, REGIONS };

/* A verification in flight, or just done. */
enum { FLIGHT_FREE, FLIGHT_RUNNING, FLIGHT_GRANTED, FLIGHT_REFUSED };

typedef struct {
    uint32_t seq; /* odd while a writer is inside */
    uint32_t state;
    int64_t pid;     /* of the runner */
    int64_t started; /* monotonic */
    int64_t done;    /* monotonic */
    uint64_t key[4]; /* the credential MAC */
} flight_t;

typedef char flight_is_64_bytes[sizeof(flight_t) == 64 ? 1 : -1];

/* A place in the verification queue; written under the writers' mutex. */
enum { PLACE_FREE, PLACE_WAITING, PLACE_RUNNING };

typedef struct {
    uint32_t state;
    uint32_t young_ms; /* for this long after taken, kill() alone tells */
    int64_t pid;       /* of the request's process */
    uint64_t start;    /* and when that process started: pids are reused */
    uint64_t ticket;   /* order of arrival */
    uint64_t client;   /* a hash of the client's address */
    int64_t taken;     /* monotonic */
} place_t;

typedef char place_is_48_bytes[sizeof(place_t) == 48 ? 1 : -1];

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
    uint64_t flights;   /* offset of the flights */
    uint64_t queue;     /* offset of the queue */
    uint64_t ticket;    /* the last place's */
    uint64_t places[3]; /* how many places are free, waiting, running */
    int64_t reaped;     /* monotonic: when the queue was last reaped */
    uint64_t cursor;    /* the place the next reap starts at */
    uint64_t head;      /* the first waiting place's ticket; 0: none */
    char pad0[64 - (96 + REGIONS * sizeof(region_hdr_t)) % 64];
    authn_hmac_redis_health_t redis;
    char pad2[64 - sizeof(authn_hmac_redis_health_t) % 64];
    authn_hmac_sentinel_shared_t sentinel; /* the primary, with Sentinel */
    char pad3[64 - sizeof(authn_hmac_sentinel_shared_t) % 64];
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
    flight_t *flights;
    place_t *queue;
    apr_global_mutex_t *mutex;
};

typedef char slot_is_64_bytes[sizeof(slot_t) == 64 ? 1 : -1];
typedef char hits_on_lines[offsetof(header_t, hits) % 64 == 0 ? 1 : -1];
typedef char set_is_9_lines[sizeof(set_t) == (size_t)9 * 64 ? 1 : -1];

/* NB: the flights and the queue, both fixed, after the header. */
#define FLIGHTS_SIZE                                                           \
    (FLIGHTS * sizeof(flight_t) + AUTHN_HMAC_QUEUE_SLOTS * sizeof(place_t))

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
    size_t set = sizeof(set_t), fixed = LINE + HEADER_SIZE + FLIGHTS_SIZE;

    /* NB: the header and the flights come out of the budget (at most 1 GiB:
     * nothing here overflows). */
    if (budget > (size_t)1 << 40)
        budget = (size_t)1 << 40;
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

    if (size < skip + HEADER_SIZE + FLIGHTS_SIZE)
        return APR_EINVAL;
    memset(base, 0, size);
    h->flights = HEADER_SIZE;
    h->queue = HEADER_SIZE + FLIGHTS * sizeof(flight_t);
    h->places[PLACE_FREE] = AUTHN_HMAC_QUEUE_SLOTS;
    sets = (size - skip - HEADER_SIZE - FLIGHTS_SIZE) / sizeof(set_t);
    neg = sets >= 2 ? (sets / 9 ? sets / 9 : 1) : 0;
    h->region[POSITIVE].offset = HEADER_SIZE + FLIGHTS_SIZE;
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
    t->flights = (flight_t *)((char *)h + h->flights);
    t->queue = (place_t *)((char *)h + h->queue);
    t->mutex = mutex;
    return t;
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

    for (i = 0; i < READ_TRIES; i++) {
        uint32_t s1 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);

        if (s1 & 1)
            continue;
        copy->verified = __atomic_load_n(&s->verified, __ATOMIC_RELAXED);
        copy->used = __atomic_load_n(&s->used, __ATOMIC_RELAXED);
        for (k = 0; k < 4; k++)
            copy->key[k] = __atomic_load_n(&s->key[k], __ATOMIC_RELAXED);
        copy->user = __atomic_load_n(&s->user, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == s1)
            return 1;
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
    int i, own = 0;

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
    slot_write(victim, key, user, verified, used);
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
    return lookup_in(&t->region[POSITIVE], key, uid, now, ttl, max_age,
                     verified, used);
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

authn_hmac_redis_health_t *authn_hmac_table_redis_health(authn_hmac_table_t *t)
{
    return &t->hdr->redis;
}

authn_hmac_sentinel_shared_t *authn_hmac_table_sentinel(authn_hmac_table_t *t)
{
    return &t->hdr->sentinel;
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
        __atomic_load_n(&t->hdr->places[PLACE_RUNNING], __ATOMIC_RELAXED);
    out->waiting =
        __atomic_load_n(&t->hdr->places[PLACE_WAITING], __ATOMIC_RELAXED);
    out->redis_breaker =
        __atomic_load_n(&t->hdr->redis.breaker_until, __ATOMIC_RELAXED) != 0;
    out->redis_conns =
        (uint64_t)__atomic_load_n(&t->hdr->redis.conns, __ATOMIC_RELAXED);
    out->redis_tls_handshakes =
        __atomic_load_n(&t->hdr->redis.tls_handshakes, __ATOMIC_RELAXED);
    out->redis_tls_resumed =
        __atomic_load_n(&t->hdr->redis.tls_resumed, __ATOMIC_RELAXED);
    out->slots = n;
    out->bytes = t->hdr->size;
    out->started = t->hdr->started;
}

/* ------------------------------------------------------- single flight */

static int alive(int64_t pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* Writes a flight; the caller holds the writers' mutex. */
static void flight_write(flight_t *f, uint32_t state, const unsigned char *key,
                         int64_t pid, int64_t started, int64_t done)
{
    uint32_t seq = __atomic_load_n(&f->seq, __ATOMIC_RELAXED);
    uint64_t k[4];
    int i;

    memcpy(k, key, sizeof(k));
    if (!(seq & 1))
        __atomic_store_n(&f->seq, ++seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&f->state, state, __ATOMIC_RELAXED);
    __atomic_store_n(&f->pid, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&f->started, started, __ATOMIC_RELAXED);
    __atomic_store_n(&f->done, done, __ATOMIC_RELAXED);
    for (i = 0; i < 4; i++)
        __atomic_store_n(&f->key[i], k[i], __ATOMIC_RELAXED);
    __atomic_store_n(&f->seq, seq + 1, __ATOMIC_RELEASE);
}

/* A consistent copy of a flight; 0 if a writer kept it busy. */
static int flight_read(const flight_t *f, flight_t *copy)
{
    int i, k;

    for (i = 0; i < READ_TRIES; i++) {
        uint32_t s1 = __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE);

        if (s1 & 1)
            continue;
        copy->state = __atomic_load_n(&f->state, __ATOMIC_RELAXED);
        copy->pid = __atomic_load_n(&f->pid, __ATOMIC_RELAXED);
        copy->started = __atomic_load_n(&f->started, __ATOMIC_RELAXED);
        copy->done = __atomic_load_n(&f->done, __ATOMIC_RELAXED);
        for (k = 0; k < 4; k++)
            copy->key[k] = __atomic_load_n(&f->key[k], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&f->seq, __ATOMIC_RELAXED) == s1)
            return 1;
    }
    return 0;
}

authn_hmac_flight_rc authn_hmac_flight_begin(
    authn_hmac_table_t *t, const unsigned char key[AUTHN_HMAC_KEY_LEN],
    apr_time_t now, apr_interval_time_t stale_after, int *slot)
{
    flight_t *f = t->flights, *claim = NULL;
    authn_hmac_flight_rc rc = AUTHN_HMAC_FLIGHT_NONE;
    int i;

    if (!t->mutex || apr_global_mutex_lock(t->mutex) != APR_SUCCESS)
        return AUTHN_HMAC_FLIGHT_NONE;
    /* Under the mutex no one else writes, so plain reads are safe. The
     * same credential running: wait for it, unless its runner died or is
     * past its time, in which case take it over. NB: a flight of it that
     * already ended is run again, not reused: its result was for those
     * who waited (the caches answer later requests, as configured). */
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE; i++) {
        if (f[i].state == FLIGHT_FREE ||
            CRYPTO_memcmp(f[i].key, key, AUTHN_HMAC_KEY_LEN) != 0)
            continue;
        if (f[i].state == FLIGHT_RUNNING && now - f[i].started < stale_after &&
            alive(f[i].pid)) {
            *slot = i;
            rc = AUTHN_HMAC_FLIGHT_WAIT;
        }
        else
            claim = &f[i];
    }
    /* Else a free flight, or the one that ended longest ago, or a runner
     * that died or is past its time. */
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE && !claim; i++)
        if (f[i].state == FLIGHT_FREE)
            claim = &f[i];
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE; i++)
        if ((f[i].state == FLIGHT_GRANTED || f[i].state == FLIGHT_REFUSED) &&
            (!claim ||
             (claim->state != FLIGHT_FREE && f[i].done < claim->done)))
            claim = &f[i];
    for (i = 0; i < FLIGHTS && rc == AUTHN_HMAC_FLIGHT_NONE && !claim; i++)
        if (now - f[i].started >= stale_after || !alive(f[i].pid))
            claim = &f[i];
    if (rc == AUTHN_HMAC_FLIGHT_NONE && claim) {
        flight_write(claim, FLIGHT_RUNNING, key, (int64_t)getpid(), now, 0);
        *slot = (int)(claim - f);
        rc = AUTHN_HMAC_FLIGHT_RUN;
    }
    apr_global_mutex_unlock(t->mutex);
    return rc;
}

void authn_hmac_flight_end(authn_hmac_table_t *t, int slot,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           int result, apr_time_t now)
{
    flight_t *f = &t->flights[slot];

    if (apr_global_mutex_lock(t->mutex) != APR_SUCCESS)
        return;
    /* NB: only if it is still this runner's (it may have been taken over).
     * No result (-1) frees it: its waiters verify by themselves. */
    if (f->state == FLIGHT_RUNNING && f->pid == (int64_t)getpid() &&
        CRYPTO_memcmp(f->key, key, AUTHN_HMAC_KEY_LEN) == 0)
        flight_write(f,
                     result > 0    ? FLIGHT_GRANTED
                     : result == 0 ? FLIGHT_REFUSED
                                   : FLIGHT_FREE,
                     key, f->pid, f->started, now);
    apr_global_mutex_unlock(t->mutex);
}

int authn_hmac_flight_wait(authn_hmac_table_t *t, int slot,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           apr_time_t deadline)
{
    const flight_t *f = &t->flights[slot];
    struct timespec nap = {0, 2000000}; /* 2 ms */
    int polls = 0;

    for (;;) {
        flight_t copy;
        int mine;

        if (flight_read(f, &copy)) {
            mine = CRYPTO_memcmp(copy.key, key, AUTHN_HMAC_KEY_LEN) == 0;
            if (!mine || copy.state == FLIGHT_FREE)
                return -1; /* reused: ask again, or verify */
            if (copy.state == FLIGHT_GRANTED)
                return 1;
            if (copy.state == FLIGHT_REFUSED)
                return 0;
            if (++polls % 25 == 0 && !alive(copy.pid))
                return -1; /* the runner died */
        }
        if (authn_hmac_monotonic() >= deadline)
            return -1;
        nanosleep(&nap, NULL);
    }
}

/* ------------------------------------------------- the verification queue */

/* NB: the queue's mutex is the writers' mutex, which refreshes also try and
 * stores take: nothing done under it grows with the places taken, and no
 * more than REAP_CHECKS processes are asked whether they live per hold (a
 * kill() and, for an old place, a read of /proc: 2.6 µs each). */
#define REAP_EVERY  10000 /* µs: the least time between two reaps */
#define REAP_CHECKS 16    /* other processes' places looked at per reap */

/* The first waiting place's ticket, found again; under the mutex. */
static void queue_find_head(authn_hmac_table_t *t)
{
    uint64_t head = 0;
    int i;

    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS; i++) {
        const place_t *pl = &t->queue[i];

        if (pl->state == PLACE_WAITING && (!head || pl->ticket < head))
            head = pl->ticket;
    }
    __atomic_store_n(&t->hdr->head, head, __ATOMIC_RELAXED);
}

/* Moves a place to another state, and keeps the header's count of each
 * (the status page and the queue read those, never the places) and the
 * head of the line; under the mutex. */
static void place_set(authn_hmac_table_t *t, place_t *pl, uint32_t state)
{
    uint64_t *n = t->hdr->places, head = t->hdr->head;
    uint32_t was = pl->state;

    __atomic_store_n(&n[was], n[was] - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&n[state], n[state] + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->state, state, __ATOMIC_RELAXED);
    /* NB: tickets only grow, so a newcomer heads the line only when no one
     * waits; the head found again only when it leaves the line (once a
     * turn: 256 words read, no call). */
    if (state == PLACE_WAITING && (!head || pl->ticket < head))
        __atomic_store_n(&t->hdr->head, pl->ticket, __ATOMIC_RELAXED);
    else if (was == PLACE_WAITING && state != PLACE_WAITING &&
             pl->ticket == head)
        queue_find_head(t);
}

/* When process pid started (clock ticks since boot, from /proc), or 0. */
static uint64_t proc_start(int64_t pid)
{
    char path[64], buf[512];
    unsigned long long start = 0;
    const char *c;
    char *end = NULL;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* NB: after the command's closing parenthesis (the command may hold
     * spaces and parentheses): field 3 on; the start time is field 22. */
    if (!(c = strrchr(buf, ')')))
        return 0;
    for (field = 2; *c && field < 22; c++)
        if (*c == ' ')
            field++;
    start = strtoull(c, &end, 10);
    return end != c ? (uint64_t)start : 0;
}

/* This process's start time, once. */
static uint64_t own_start(void)
{
    static int64_t pid;
    static uint64_t start;

    if (__atomic_load_n(&pid, __ATOMIC_ACQUIRE) != (int64_t)getpid()) {
        __atomic_store_n(&start, proc_start((int64_t)getpid()),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&pid, (int64_t)getpid(), __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&start, __ATOMIC_RELAXED);
}

/* Whether the process that took the place still runs: its pid, and once
 * the place is older than its wait limit (where /proc tells) the same start
 * time, not another process given its pid. NB: a pid reused within the
 * wait limit keeps the place until then, never longer. */
static int place_alive(const place_t *pl, apr_time_t now)
{
    return alive(pl->pid) &&
           (now - pl->taken < (apr_time_t)pl->young_ms * 1000 || !pl->start ||
            proc_start(pl->pid) == pl->start);
}

/* Whether a reap is due at now, claimed for the caller: of the processes
 * that look at once, one reaps. */
static int reap_due(authn_hmac_table_t *t, apr_time_t now)
{
    int64_t last = __atomic_load_n(&t->hdr->reaped, __ATOMIC_RELAXED);

    return (now - last >= REAP_EVERY || now < last) &&
           __atomic_compare_exchange_n(&t->hdr->reaped, &last, now, 0,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Frees the places of processes that died, looking at REAP_CHECKS places
 * of other processes from where the last reap stopped (so every place is
 * looked at in turn); under the mutex. Returns how many it freed. */
static int queue_reap(authn_hmac_table_t *t, apr_time_t now)
{
    uint64_t at = t->hdr->cursor % AUTHN_HMAC_QUEUE_SLOTS;
    int i, checks = 0, freed = 0;

    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS && checks < REAP_CHECKS; i++) {
        place_t *pl = &t->queue[at];

        at = (at + 1) % AUTHN_HMAC_QUEUE_SLOTS;
        if (pl->state == PLACE_FREE ||
            (pl->pid == (int64_t)getpid() && pl->start == own_start()))
            continue; /* this process's own */
        checks++;
        if (!place_alive(pl, now)) {
            place_set(t, pl, PLACE_FREE);
            freed++;
        }
    }
    __atomic_store_n(&t->hdr->cursor, at, __ATOMIC_RELAXED);
    return freed;
}

static void queue_take(authn_hmac_table_t *t, int i, uint32_t state,
                       uint64_t client, apr_time_t now,
                       apr_interval_time_t patience, authn_hmac_turn_t *turn)
{
    place_t *pl = &t->queue[i];
    apr_interval_time_t ms = patience > 0 ? patience / 1000 : 0;

    if (pl->state != PLACE_FREE)
        place_set(t, pl, PLACE_FREE); /* a newcomer takes it over */
    turn->place = i;
    turn->ticket = ++t->hdr->ticket;
    __atomic_store_n(&pl->pid, (int64_t)getpid(), __ATOMIC_RELAXED);
    __atomic_store_n(&pl->start, own_start(), __ATOMIC_RELAXED);
    __atomic_store_n(&pl->client, client, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->ticket, turn->ticket, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->taken, now, __ATOMIC_RELAXED);
    __atomic_store_n(&pl->young_ms, ms < UINT32_MAX ? (uint32_t)ms : UINT32_MAX,
                     __ATOMIC_RELAXED);
    place_set(t, pl, state);
}

/* Notes a place that starts to run, and the most that ran at once. */
static void queue_ran(authn_hmac_table_t *t)
{
    uint64_t *max = &t->hdr->counter[AUTHN_HMAC_C_VERIFYING_MAX];
    uint64_t running = t->hdr->places[PLACE_RUNNING];

    if (running > __atomic_load_n(max, __ATOMIC_RELAXED))
        __atomic_store_n(max, running, __ATOMIC_RELAXED);
}

/* The places each client holds, counted once: an open-addressed table of
 * twice the places. */
#define HOLDERS ((size_t)2 * AUTHN_HMAC_QUEUE_SLOTS)

typedef struct {
    uint64_t client[HOLDERS];
    int n[HOLDERS];
} holders_t;

static int *holds(holders_t *h, uint64_t client)
{
    size_t i = (size_t)(client ^ client >> 29) % HOLDERS;

    while (h->n[i] && h->client[i] != client)
        i = (i + 1) % HOLDERS;
    h->client[i] = client;
    return &h->n[i];
}

/* With every place taken, for a newcomer of client: the newest waiting
 * place of the client that holds the most, if that is more than client's
 * own + 1; else -1. Two passes over the places (it was a count of each
 * waiting place's client's places: 65,000 reads with 256 taken). */
static int queue_victim(const authn_hmac_table_t *t, uint64_t client)
{
    holders_t h;
    int i, victim = -1, most, taken = 0;

    memset(h.n, 0, sizeof(h.n));
    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS; i++)
        if (t->queue[i].state != PLACE_FREE) {
            ++*holds(&h, t->queue[i].client);
            taken++;
        }
    most = *holds(&h, client) + 1;
    /* NB: no other client can hold more than most when the places left
     * are that few (one client alone: none to take). */
    if (taken - (most - 1) <= most)
        return -1;
    for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS; i++) {
        const place_t *pl = &t->queue[i];
        int n;

        if (pl->state != PLACE_WAITING)
            continue;
        n = *holds(&h, pl->client);
        if (n > most || (n == most && victim >= 0 &&
                         pl->ticket > t->queue[victim].ticket)) {
            most = n;
            victim = i;
        }
    }
    return victim;
}

authn_hmac_queue_rc authn_hmac_queue_enter(authn_hmac_table_t *t,
                                           uint64_t client, int cap,
                                           int backlog,
                                           apr_interval_time_t patience,
                                           authn_hmac_turn_t *turn)
{
    const uint64_t *n = t->hdr->places;
    int i, free_at = -1, victim;
    uint64_t running, waiting, room;
    authn_hmac_queue_rc rc = AUTHN_HMAC_QUEUE_BUSY;
    apr_time_t now = authn_hmac_monotonic();

    if (cap + backlog > AUTHN_HMAC_QUEUE_SLOTS)
        backlog = AUTHN_HMAC_QUEUE_SLOTS - cap;
    room = (uint64_t)cap + (uint64_t)backlog;
    turn->place = -1;
    turn->ticket = 0;
    if (!t->mutex)
        return AUTHN_HMAC_QUEUE_RUN; /* nothing shared: no cap */
    if (apr_global_mutex_lock(t->mutex) != APR_SUCCESS)
        return AUTHN_HMAC_QUEUE_BUSY;
    /* NB: reaped when the queue looks full (a dead process's place must
     * not make a newcomer busy), else once in a while: not on each entry. */
    if (n[PLACE_RUNNING] + n[PLACE_WAITING] >= room || reap_due(t, now))
        queue_reap(t, now);
    running = n[PLACE_RUNNING];
    waiting = n[PLACE_WAITING];
    if (running + waiting < room)
        for (i = 0; i < AUTHN_HMAC_QUEUE_SLOTS && free_at < 0; i++)
            if (t->queue[i].state == PLACE_FREE)
                free_at = i;
    /* NB: none waiting, else a newcomer would pass them. */
    if (free_at >= 0 && waiting == 0 && running < (uint64_t)cap) {
        queue_take(t, free_at, PLACE_RUNNING, client, now, patience, turn);
        queue_ran(t);
        rc = AUTHN_HMAC_QUEUE_RUN;
    }
    else if (free_at >= 0) {
        queue_take(t, free_at, PLACE_WAITING, client, now, patience, turn);
        rc = AUTHN_HMAC_QUEUE_WAIT;
    }
    /* Full: a newcomer takes the newest waiting place of the client that
     * holds the most places, if that is at least two more than its own
     * client holds; that request is then busy. No address (nor two) can
     * hold the queue against the others; alone, one may use all of it (a
     * burst of logins from behind one NAT). */
    else if ((victim = queue_victim(t, client)) >= 0) {
        queue_take(t, victim, PLACE_WAITING, client, now, patience, turn);
        rc = AUTHN_HMAC_QUEUE_WAIT;
    }
    apr_global_mutex_unlock(t->mutex);
    return rc;
}

/* Whether the place is still this turn's (not taken by a newcomer, not
 * reaped). */
static int queue_mine(const authn_hmac_table_t *t,
                      const authn_hmac_turn_t *turn)
{
    const place_t *pl = &t->queue[turn->place];

    return __atomic_load_n(&pl->ticket, __ATOMIC_RELAXED) == turn->ticket &&
           __atomic_load_n(&pl->state, __ATOMIC_RELAXED) != PLACE_FREE;
}

/* Whether the waiting place may run now: a free turn, and it heads the
 * line (no one waiting came before it). */
static int queue_turn(const authn_hmac_table_t *t,
                      const authn_hmac_turn_t *turn, int cap)
{
    return __atomic_load_n(&t->hdr->head, __ATOMIC_RELAXED) == turn->ticket &&
           __atomic_load_n(&t->hdr->places[PLACE_RUNNING], __ATOMIC_RELAXED) <
               (uint64_t)cap;
}

/* How long a waiter sleeps between looks: 5 ms among the first few of the
 * line, 100 ms further back (tickets count those that left, too: a place
 * may look slower than it needs, never wait longer than it may). NB: 192
 * waiters that all looked every 5 ms woke 38,000 times a second, at the
 * priority of requests. */
#define NEAR_HEAD 8

static long queue_nap(const authn_hmac_table_t *t,
                      const authn_hmac_turn_t *turn)
{
    uint64_t head = __atomic_load_n(&t->hdr->head, __ATOMIC_RELAXED);

    return turn->ticket - head < NEAR_HEAD ? 5000000L : 100000000L;
}

int authn_hmac_queue_wait(authn_hmac_table_t *t, authn_hmac_turn_t *turn,
                          int cap, apr_time_t deadline)
{
    int hurry = 0;

    for (;;) {
        apr_time_t now = authn_hmac_monotonic();
        int ran = 0, mine, reap;
        struct timespec nap = {0, hurry ? 5000000L : queue_nap(t, turn)};

        /* NB: a look without the mutex first; the mutex decides. A reap
         * is done by one waiter of those that look, every REAP_EVERY. */
        if (!queue_mine(t, turn))
            return 0; /* a newcomer within its share took it */
        reap = reap_due(t, now);
        if (queue_turn(t, turn, cap) || reap) {
            if (apr_global_mutex_lock(t->mutex) != APR_SUCCESS)
                break;
            /* NB: more dead may follow those just freed: this waiter
             * looks often until a reap frees none. */
            if (reap)
                hurry = queue_reap(t, now) > 0;
            mine = queue_mine(t, turn);
            if (mine && queue_turn(t, turn, cap)) {
                place_set(t, &t->queue[turn->place], PLACE_RUNNING);
                queue_ran(t);
                ran = 1;
            }
            apr_global_mutex_unlock(t->mutex);
            if (ran)
                return 1;
            if (!mine)
                return 0;
        }
        if (now >= deadline)
            break;
        nanosleep(&nap, NULL);
    }
    authn_hmac_queue_leave(t, turn);
    return 0;
}

void authn_hmac_queue_leave(authn_hmac_table_t *t, authn_hmac_turn_t *turn)
{
    if (turn->place < 0 || !t->mutex ||
        apr_global_mutex_lock(t->mutex) != APR_SUCCESS)
        return;
    if (queue_mine(t, turn))
        place_set(t, &t->queue[turn->place], PLACE_FREE);
    turn->place = -1;
    apr_global_mutex_unlock(t->mutex);
}
