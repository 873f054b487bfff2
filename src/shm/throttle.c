/* throttle.c: the throttle on guessing, in the shared segment.
 *
 * A client (an IPv4 address, or an IPv6 /64) that sends max_failures
 * distinct wrong passwords for one user within the window, or
 * max_client_failures for all users together (password spraying), is
 * refused for the ban time without a verification, and without a look at
 * the caches: a banned client that could still have its guesses checked
 * against cached credentials would guess at the server's speed, not
 * bcrypt's (a right guess a 200, a wrong one a quick 401). A client's ban
 * is its own: the user at any other address is served.
 *
 * A record per pair and per client, in fixed slots of 128 bytes (1/32 of
 * the segment: 1,024 in the default 4 MB): the first half of a MAC of who
 * it counts (no address or name), the window's first guess, the ban's end,
 * the count, the guesses under way, and the fingerprints of the pair's
 * wrong passwords in the window (RECENT, at least the limit of any
 * sensible AuthHMACMaxFailures): a repeat of one of them (a stale client,
 * a browser asking again, a user retrying old typos) is not a new guess,
 * however many others came between. A guess takes its place before its
 * verification (enter) and is counted after it (leave): concurrent guesses
 * never pass the limit. Concurrent requests with one credential are one
 * guess: only the one that runs the server's flight of that credential
 * (engine.c) takes a place. A record is found among PROBES slots from its id;
 * a new one takes a free slot there, else an idle one, else the one whose
 * window or ban is oldest (a spray over more addresses than slots forgets
 * the oldest). Everything is under the writers' mutex, but for the one
 * word that says whether any ban may be in force (throttle_until), which
 * the hit path reads.
 */
#include "shm/throttle.h"
#include "table_int.h"

#include <string.h>

#include <apr_strings.h>

#include <arpa/inet.h>

#define PROBES 8
/* The pair's wrong passwords remembered in its window: a record of 128
 * bytes holds 20 of 32 bits each (a new guess taken for a repeat by
 * chance: 20 in 2^32). */
#define RECENT 20

enum { KIND_PAIR = 1, KIND_CLIENT = 2 };

typedef struct {
    uint64_t id[2]; /* of the MAC; {0, 0}: free */
    int64_t first;  /* apr_time_t: the window's first guess */
    int64_t until;  /* apr_time_t: the ban's end; 0: none */
    uint32_t count; /* guesses in the window */
    uint16_t kind;
    uint16_t pending;        /* guesses under way (entered, not yet left) */
    int64_t last;            /* apr_time_t: the last guess that took a place */
    uint32_t recent[RECENT]; /* the pair's wrong passwords in the window */
} slot_t;

/* A guess under way longer than this is of a process that died: the
 * longest wait for a turn is a minute, and a verification is seconds. */
#define PENDING_MAX apr_time_from_sec(180)

typedef char
    slot_is_the_size_kept[sizeof(slot_t) == AUTHN_HMAC_THROTTLE_BYTES ? 1 : -1];

int authn_hmac_throttle_on(const authn_hmac_throttle_conf_t *conf)
{
    return conf && (conf->max_failures > 0 || conf->max_client_failures > 0);
}

size_t authn_hmac_client_bytes(const char *client, unsigned char out[16])
{
    /* ::ffff:0:0/96 (IPv4-mapped) and 64:ff9b::/96 (NAT64's well-known
     * prefix) hold an IPv4 client in their last 4 bytes. */
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0,    0,
                                             0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
    size_t n;

    if (!client)
        return 0;
    if (inet_pton(AF_INET6, client, out) == 1) {
        if (memcmp(out, mapped, 12) != 0 && memcmp(out, nat64, 12) != 0)
            return 8;
        memmove(out, out + 12, 4);
        return 4;
    }
    if (inet_pton(AF_INET, client, out) == 1)
        return 4;
    n = strnlen(client, 16);
    memcpy(out, client, n);
    return n;
}

void authn_hmac_throttle_ids(const authn_hmac_mac_t *mac, const char *client,
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                             authn_hmac_throttle_ids_t *ids)
{
    static const unsigned char none[AUTHN_HMAC_KEY_LEN];
    char body[1 + 16];
    size_t n = authn_hmac_client_bytes(client, (unsigned char *)body + 1);

    /* NB: "T" and "C" as the bodies' first byte: a user entry's starts
     * with its version, a farm marker's with "F". */
    body[0] = 'T';
    authn_hmac_value_tag(mac, uid, body, 1 + n, ids->pair);
    body[0] = 'C';
    authn_hmac_value_tag(mac, none, body, 1 + n, ids->client);
}

static int lock(const authn_hmac_table_parts_t *s)
{
    return !s->mutex || apr_global_mutex_lock(s->mutex) == APR_SUCCESS;
}

static void unlock(const authn_hmac_table_parts_t *s)
{
    if (s->mutex)
        apr_global_mutex_unlock(s->mutex);
}

static void id_of(const unsigned char mac[AUTHN_HMAC_KEY_LEN], uint64_t id[2])
{
    memcpy(id, mac, 2 * sizeof(uint64_t));
    if (!id[0] && !id[1])
        id[1] = 1; /* never "free" */
}

/* Guesses under way: none once the last took its place too long ago (its
 * process died without giving it back). */
static unsigned pending(const slot_t *r, apr_time_t now)
{
    return now - r->last < PENDING_MAX ? r->pending : 0;
}

/* A window over, no guess under way and no ban: the record counts
 * nothing any more. */
static int idle(const slot_t *r, const authn_hmac_throttle_conf_t *conf,
                apr_time_t now)
{
    return r->until <= now && !pending(r, now) &&
           (r->count == 0 || now - r->first >= conf->window);
}

/* When the record was last of use: its window's start, its ban's end, its
 * last guess. */
static int64_t age(const slot_t *r)
{
    int64_t a = r->until > r->first ? r->until : r->first;

    return r->last > a ? r->last : a;
}

/* Which of two slots a new record takes: a free one, else an idle one,
 * else the one of least use lately. */
static int better(const slot_t *a, const slot_t *b,
                  const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    int fa = !a->id[0] && !a->id[1], fb = !b->id[0] && !b->id[1];
    int ia = idle(a, conf, now), ib = idle(b, conf, now);

    if (fa != fb)
        return fa;
    if (ia != ib)
        return ia;
    return age(a) < age(b);
}

/* The record of id among its probes; with conf, made if missing (never
 * in avoid, the other record of the same request), in a slot free or idle
 * only unless evict. */
static slot_t *find_in(const authn_hmac_table_parts_t *s, const uint64_t id[2],
                       uint16_t kind, const authn_hmac_throttle_conf_t *conf,
                       apr_time_t now, const slot_t *avoid, int evict)
{
    slot_t *slots = s->throttle, *take = NULL;
    uint64_t n = s->throttle_slots, at = (id[0] ^ id[1]) % n;
    int i;

    for (i = 0; i < PROBES; i++) {
        slot_t *r = &slots[(at + (uint64_t)i) % n];

        if (r->id[0] == id[0] && r->id[1] == id[1] && r->kind == kind)
            return r;
        if (conf && r != avoid && (!take || better(r, take, conf, now)))
            take = r;
    }
    if (take && !evict && (take->id[0] || take->id[1]) &&
        !idle(take, conf, now))
        take = NULL;
    if (take) {
        memset(take, 0, sizeof(*take));
        take->id[0] = id[0];
        take->id[1] = id[1];
        take->kind = kind;
        take->last = now;
    }
    return take;
}

static slot_t *find(const authn_hmac_table_parts_t *s, const uint64_t id[2],
                    uint16_t kind, const authn_hmac_throttle_conf_t *conf,
                    apr_time_t now, const slot_t *avoid)
{
    return find_in(s, id, kind, conf, now, avoid, 1);
}

int authn_hmac_throttle_any(authn_hmac_table_t *t, apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);

    return __atomic_load_n(s->throttle_until, __ATOMIC_RELAXED) > now;
}

/* The guesses r counts now: none once its window is over. */
static uint32_t counted(const slot_t *r, const authn_hmac_throttle_conf_t *conf,
                        apr_time_t now)
{
    return now - r->first < conf->window ? r->count : 0;
}

/* A client's ban is sealed at this many of its users' wrong passwords
 * answered from the cache (the count in recent[0], their fingerprints
 * after it, while the ban lasts). */
static uint32_t seal_at(const authn_hmac_throttle_conf_t *conf)
{
    return conf->max_failures > 0 ? (uint32_t)conf->max_failures : 10;
}

static int sealed(const slot_t *r, const authn_hmac_throttle_conf_t *conf,
                  apr_time_t now)
{
    return r->kind == KIND_CLIENT && r->until > now &&
           r->recent[0] >= seal_at(conf);
}

/* A ban starts on r: its seal's count starts from nothing. */
static void ban_starts(slot_t *r)
{
    if (r->kind == KIND_CLIENT)
        memset(r->recent, 0, sizeof(r->recent));
}

/* Whether r refuses a guess: banned, or at its limit with the guesses
 * under way (one more could start a ban: till it ends, its pair or client
 * is refused as a banned one is, caches and all). */
static int full(const slot_t *r, int limit,
                const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    return r->until > now ||
           (limit > 0 &&
            (int64_t)counted(r, conf, now) + pending(r, now) >= limit);
}

/* The record of id, read without the mutex (the hit path asks while a
 * record refuses anywhere): each word is read whole; a record rewritten
 * at that moment may answer one request as the one before it would.
 * Returns 0, or 1 and AUTHN_HMAC_BAN_SEALED for a sealed client's ban. */
static int refuses(const authn_hmac_table_parts_t *s, const uint64_t id[2],
                   uint16_t kind, int limit,
                   const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    slot_t *slots = s->throttle;
    uint64_t n = s->throttle_slots, at = (id[0] ^ id[1]) % n;
    int i;

    for (i = 0; i < PROBES; i++) {
        slot_t *r = &slots[(at + (uint64_t)i) % n], c;

        c.id[0] = __atomic_load_n(&r->id[0], __ATOMIC_ACQUIRE);
        c.id[1] = __atomic_load_n(&r->id[1], __ATOMIC_ACQUIRE);
        c.kind = __atomic_load_n(&r->kind, __ATOMIC_ACQUIRE);
        if (c.id[0] != id[0] || c.id[1] != id[1] || c.kind != kind)
            continue;
        c.first = __atomic_load_n(&r->first, __ATOMIC_ACQUIRE);
        c.until = __atomic_load_n(&r->until, __ATOMIC_ACQUIRE);
        c.count = __atomic_load_n(&r->count, __ATOMIC_ACQUIRE);
        c.pending = __atomic_load_n(&r->pending, __ATOMIC_ACQUIRE);
        c.last = __atomic_load_n(&r->last, __ATOMIC_ACQUIRE);
        c.recent[0] = __atomic_load_n(&r->recent[0], __ATOMIC_ACQUIRE);
        if (!full(&c, limit, conf, now))
            return 0;
        return sealed(&c, conf, now) ? AUTHN_HMAC_BAN_SEALED | 1 : 1;
    }
    return 0;
}

int authn_hmac_throttle_banned(authn_hmac_table_t *t,
                               const authn_hmac_throttle_conf_t *conf,
                               const authn_hmac_throttle_ids_t *ids,
                               apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t pid[2], cid[2];
    int bans = 0, c;

    id_of(ids->pair, pid);
    id_of(ids->client, cid);
    if (refuses(s, pid, KIND_PAIR, conf->max_failures, conf, now))
        bans |= AUTHN_HMAC_BAN_PAIR;
    /* NB: a client's record also says whether its ban is sealed: no lock
     * for the requests of a banned client's logged-in users either. */
    c = refuses(s, cid, KIND_CLIENT, conf->max_client_failures, conf, now);
    if (c)
        bans |= AUTHN_HMAC_BAN_CLIENT | (c & AUTHN_HMAC_BAN_SEALED);
    return bans;
}

/* The segment's word says a record may refuse till until. */
static void may_refuse(const authn_hmac_table_parts_t *s, apr_time_t until)
{
    if (__atomic_load_n(s->throttle_until, __ATOMIC_RELAXED) < until)
        __atomic_store_n(s->throttle_until, until, __ATOMIC_RELEASE);
}

/* The ids of the pair and of its client, and the lock taken; 0, holding
 * nothing, if the throttle is off or the lock failed. */
static int lock_ids(const authn_hmac_table_parts_t *s,
                    const authn_hmac_throttle_conf_t *conf,
                    const authn_hmac_throttle_ids_t *ids, uint64_t pid[2],
                    uint64_t cid[2])
{
    if (!authn_hmac_throttle_on(conf))
        return 0;
    id_of(ids->pair, pid);
    id_of(ids->client, cid);
    return lock(s);
}

/* The records of the pair and of its client (either NULL where there is
 * no room), under the lock; 0, as lock_ids. */
static int lock_records(const authn_hmac_table_parts_t *s,
                        const authn_hmac_throttle_conf_t *conf,
                        const authn_hmac_throttle_ids_t *ids, apr_time_t now,
                        slot_t **pair, slot_t **client)
{
    uint64_t pid[2], cid[2];

    if (!lock_ids(s, conf, ids, pid, cid))
        return 0;
    *pair = find(s, pid, KIND_PAIR, conf, now, NULL);
    *client = find(s, cid, KIND_CLIENT, conf, now, *pair);
    return 1;
}

int authn_hmac_throttle_enter(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids,
                              apr_time_t now, int *entered)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    slot_t *pair, *client;
    int refused = 0;

    *entered = 0;
    if (!lock_records(s, conf, ids, now, &pair, &client))
        return 0;
    if (pair && full(pair, conf->max_failures, conf, now))
        refused |= AUTHN_HMAC_BAN_PAIR;
    if (client && full(client, conf->max_client_failures, conf, now))
        refused |= AUTHN_HMAC_BAN_CLIENT;
    if (!refused && pair && client && pending(pair, now) < UINT16_MAX &&
        pending(client, now) < UINT16_MAX) {
        pair->pending = (uint16_t)(pending(pair, now) + 1);
        client->pending = (uint16_t)(pending(client, now) + 1);
        pair->last = client->last = now;
        *entered = 1;
        /* NB: a record this guess makes full refuses, caches and all,
         * till the guess ends (from_ban asks the word first). */
        if (full(pair, conf->max_failures, conf, now) ||
            full(client, conf->max_client_failures, conf, now))
            may_refuse(s, now + PENDING_MAX);
    }
    unlock(s);
    return refused;
}

/* One more guess on r; 1 if it starts a ban. */
static int guess(const authn_hmac_table_parts_t *s, slot_t *r, int limit,
                 const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    if (!counted(r, conf, now)) {
        r->first = now;
        r->count = 0;
    }
    if (r->count < UINT32_MAX)
        r->count++;
    if (limit <= 0 || (int64_t)r->count < limit || r->until > now)
        return 0;
    /* NB: the count starts again: once the ban ends, the client has the
     * allowance anyone has. */
    r->until = now + conf->ban;
    r->count = 0;
    ban_starts(r);
    may_refuse(s, r->until);
    return 1;
}

static void leave_one(slot_t *r, apr_time_t now)
{
    if (r)
        r->pending = (uint16_t)(pending(r, now) ? r->pending - 1 : 0);
}

/* Whether fp is a new wrong password of the pair in its window (kept
 * among its recent ones if so); a window over forgets them. */
static int fresh_guess(slot_t *pair, uint32_t fp,
                       const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    int i;

    if (!counted(pair, conf, now) && now - pair->first >= conf->window)
        memset(pair->recent, 0, sizeof(pair->recent));
    for (i = 0; i < RECENT; i++)
        if (pair->recent[i] == fp)
            return 0;
    memmove(pair->recent + 1, pair->recent,
            (RECENT - 1) * sizeof(pair->recent[0]));
    pair->recent[0] = fp;
    return 1;
}

/* A fingerprint of 32 bits, never 0 (the empty one). */
static uint32_t fp32(uint64_t fp)
{
    uint32_t f = (uint32_t)(fp ^ (fp >> 32));

    return f ? f : 1;
}

/* A wrong password fp of the pair: counted for the pair and the client
 * unless a repeat; the bans that started. */
static int count_failed(const authn_hmac_table_parts_t *s, slot_t *pair,
                        slot_t *client, uint64_t fp,
                        const authn_hmac_throttle_conf_t *conf, apr_time_t now,
                        int *fresh)
{
    int started = 0;

    if (!pair || !fresh_guess(pair, fp32(fp), conf, now))
        return 0;
    *fresh = 1;
    if (guess(s, pair, conf->max_failures, conf, now))
        started |= AUTHN_HMAC_BAN_PAIR;
    if (client && guess(s, client, conf->max_client_failures, conf, now))
        started |= AUTHN_HMAC_BAN_CLIENT;
    return started;
}

/* A guess's end: its place given back (leave), and a wrong password
 * (failed) counted. */
static int end_guess(authn_hmac_table_t *t,
                     const authn_hmac_throttle_conf_t *conf,
                     const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                     int failed, int leave, apr_time_t now, int *fresh)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    slot_t *pair, *client;
    int started = 0;

    *fresh = 0;
    if (!lock_records(s, conf, ids, now, &pair, &client))
        return 0;
    if (leave) {
        leave_one(pair, now);
        leave_one(client, now);
    }
    if (failed)
        started = count_failed(s, pair, client, fp, conf, now, fresh);
    unlock(s);
    return started;
}

int authn_hmac_throttle_leave(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                              int failed, apr_time_t now, int *fresh)
{
    return end_guess(t, conf, ids, fp, failed, 1, now, fresh);
}

int authn_hmac_throttle_count(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                              apr_time_t now, int *fresh)
{
    return end_guess(t, conf, ids, fp, 1, 0, now, fresh);
}

int authn_hmac_throttle_refused(authn_hmac_table_t *t,
                                const authn_hmac_throttle_conf_t *conf,
                                const authn_hmac_throttle_ids_t *ids,
                                uint64_t fp, int oracle, apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t pid[2], cid[2];
    slot_t *pair, *client;
    uint32_t f = fp32(fp);
    int started = 0, i;

    if (!lock_ids(s, conf, ids, pid, cid))
        return 0;
    /* NB: a record for a new pair only where one is free or idle: the
     * refusals of a banned client cost no verification, and must not push
     * others' counts out at the server's speed. */
    pair = find_in(s, pid, KIND_PAIR, conf, now, NULL, 0);
    if (pair && pair->until <= now && fresh_guess(pair, f, conf, now) &&
        guess(s, pair, conf->max_failures, conf, now))
        started = AUTHN_HMAC_BAN_PAIR;
    client = oracle ? find(s, cid, KIND_CLIENT, NULL, now, NULL) : NULL;
    if (client && !sealed(client, conf, now)) {
        for (i = 1; i < RECENT && client->recent[i] != f; i++)
            ;
        if (i == RECENT) {
            memmove(client->recent + 2, client->recent + 1,
                    (RECENT - 2) * sizeof(client->recent[0]));
            client->recent[1] = f;
            /* NB: refused while full with guesses under way, before its
             * ban: a guess of the client's (which may start the ban);
             * under the ban, one towards its seal. */
            if (client->until > now)
                client->recent[0]++;
            else if (guess(s, client, conf->max_client_failures, conf, now))
                started |= AUTHN_HMAC_BAN_CLIENT;
        }
    }
    unlock(s);
    return started;
}

int authn_hmac_throttle_ban(authn_hmac_table_t *t,
                            const authn_hmac_throttle_conf_t *conf,
                            const authn_hmac_throttle_ids_t *ids, int which,
                            apr_time_t now, apr_time_t until)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t id[2];
    slot_t *r;
    int started = 0;

    /* NB: never past the ban time from now, whatever the farm said. */
    if (until > now + conf->ban)
        until = now + conf->ban;
    if ((which != AUTHN_HMAC_BAN_PAIR && which != AUTHN_HMAC_BAN_CLIENT) ||
        until <= now)
        return 0;
    id_of(which == AUTHN_HMAC_BAN_PAIR ? ids->pair : ids->client, id);
    if (!lock(s))
        return 0;
    r = find(s, id, which == AUTHN_HMAC_BAN_PAIR ? KIND_PAIR : KIND_CLIENT,
             conf, now, NULL);
    if (r && r->until < until) {
        started = r->until <= now ? which : 0;
        if (started)
            ban_starts(r);
        r->until = until;
        may_refuse(s, until);
    }
    unlock(s);
    return started;
}

/* ------------------------------------------------ the book of bans */

typedef struct {
    int64_t until; /* 0: free */
    uint32_t kind;
    uint32_t unused;
    unsigned char id[AUTHN_HMAC_KEY_LEN]; /* the record's whole MAC */
    char client[64];
    char user[144];
} book_t;

typedef char key_fits[sizeof(((authn_hmac_ban_t *)0)->key) ==
                              2 + 2 * AUTHN_HMAC_KEY_LEN + 1
                          ? 1
                          : -1];
typedef char book_is_the_size_kept
    [AUTHN_HMAC_BOOK * sizeof(book_t) == AUTHN_HMAC_BOOK_BYTES ? 1 : -1];

static void hex(char *o, const unsigned char *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        *o++ = digits[b[i] >> 4];
        *o++ = digits[b[i] & 15];
    }
    *o = '\0';
}

void authn_hmac_throttle_book(authn_hmac_table_t *t,
                              const authn_hmac_throttle_ids_t *ids, int which,
                              const char *client, const char *user,
                              size_t user_len, apr_time_t until)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    const unsigned char *id =
        which == AUTHN_HMAC_BAN_PAIR ? ids->pair : ids->client;
    book_t *b = s->book, *take = NULL;
    int i;

    if (!b ||
        (which != AUTHN_HMAC_BAN_PAIR && which != AUTHN_HMAC_BAN_CLIENT) ||
        !lock(s))
        return;
    for (i = 0; i < AUTHN_HMAC_BOOK; i++) {
        if (memcmp(b[i].id, id, sizeof(b[i].id)) == 0) {
            take = &b[i];
            break;
        }
        if (!take || b[i].until < take->until)
            take = &b[i];
    }
    memset(take, 0, sizeof(*take));
    take->until = until;
    take->kind = (uint32_t)which;
    memcpy(take->id, id, sizeof(take->id));
    apr_cpystrn(take->client, client ? client : "", sizeof(take->client));
    if (which == AUTHN_HMAC_BAN_PAIR) {
        if (user_len >= sizeof(take->user)) {
            user_len = sizeof(take->user) - 1;
            /* NB: not in the middle of a UTF-8 character. */
            while (user_len > 0 &&
                   ((unsigned char)user[user_len] & 0xc0) == 0x80)
                user_len--;
        }
        memcpy(take->user, user, user_len);
    }
    unlock(s);
}

int authn_hmac_throttle_bans(authn_hmac_table_t *t, apr_time_t now,
                             authn_hmac_ban_t *out, int max)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    const book_t *b = s->book;
    int i, n = 0;

    if (!b || !lock(s))
        return 0;
    for (i = 0; i < AUTHN_HMAC_BOOK && n < max; i++) {
        if (b[i].until <= now)
            continue;
        apr_cpystrn(out[n].client, b[i].client, sizeof(out[n].client));
        apr_cpystrn(out[n].user, b[i].user, sizeof(out[n].user));
        out[n].until = b[i].until;
        memcpy(out[n].key, "b:", 2);
        hex(out[n].key + 2, b[i].id, sizeof(b[i].id));
        n++;
    }
    unlock(s);
    return n;
}

int authn_hmac_throttle_lift(authn_hmac_table_t *t, const char *client,
                             const char *user, apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    book_t *b = s->book;
    int i, n = 0;

    if (!b || !client || !lock(s))
        return 0;
    for (i = 0; i < AUTHN_HMAC_BOOK; i++) {
        uint64_t id[2];
        slot_t *r;

        if (b[i].until <= now || strcmp(b[i].client, client) != 0 ||
            (user && strcmp(b[i].user, user) != 0))
            continue;
        id_of(b[i].id, id);
        r = find(s, id,
                 b[i].kind == AUTHN_HMAC_BAN_PAIR ? KIND_PAIR : KIND_CLIENT,
                 NULL, now, NULL);
        if (r) {
            r->until = 0;
            r->count = 0;
        }
        memset(&b[i], 0, sizeof(b[i]));
        n++;
    }
    unlock(s);
    return n;
}
