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
 * A record per pair and per client, in fixed slots of 64 bytes (1/64 of
 * the segment: 1,024 in the default 4 MB): the first half of a MAC of who
 * it counts (no address or name), the window's first guess, the ban's end,
 * the count, the guesses under way, and the fingerprints of the pair's
 * last wrong passwords: a repeat of one of them (a stale client, a browser
 * asking again) is not a new guess. A guess takes its place before its
 * verification (enter) and is counted after it (leave): concurrent guesses
 * never pass the limit. A record is found among PROBES slots from its id;
 * a new one takes a free slot there, else an idle one, else the one whose
 * window or ban is oldest (a spray over more addresses than slots forgets
 * the oldest). Everything is under the writers' mutex, but for the one
 * word that says whether any ban may be in force (throttle_until), which
 * the hit path reads.
 */
#include "authn_hmac/throttle.h"
#include "table_int.h"

#include <string.h>

#include <arpa/inet.h>

#define PROBES 8
#define RECENT 2

enum { KIND_PAIR = 1, KIND_CLIENT = 2 };

typedef struct {
    uint64_t id[2]; /* of the MAC; {0, 0}: free */
    int64_t first;  /* apr_time_t: the window's first guess */
    int64_t until;  /* apr_time_t: the ban's end; 0: none */
    uint32_t count; /* guesses in the window */
    uint16_t kind;
    uint16_t pending;        /* guesses under way (entered, not yet left) */
    uint64_t recent[RECENT]; /* the pair's last wrong passwords */
    uint64_t unused;
} slot_t;

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

/* A window over (and no ban): the record counts nothing any more. */
static int idle(const slot_t *r, const authn_hmac_throttle_conf_t *conf,
                apr_time_t now)
{
    return r->until <= now && !r->pending &&
           (r->count == 0 || now - r->first >= conf->window);
}

/* Which of two slots a new record takes: a free one, else an idle one,
 * else the one whose window or ban is oldest. */
static int better(const slot_t *a, const slot_t *b,
                  const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    int fa = !a->id[0] && !a->id[1], fb = !b->id[0] && !b->id[1];
    int ia = idle(a, conf, now), ib = idle(b, conf, now);
    int64_t aa = a->until > a->first ? a->until : a->first;
    int64_t ab = b->until > b->first ? b->until : b->first;

    if (fa != fb)
        return fa;
    if (ia != ib)
        return ia;
    return aa < ab;
}

/* The record of id among its probes; with conf, made if missing. */
static slot_t *find(const authn_hmac_table_parts_t *s, const uint64_t id[2],
                    uint16_t kind, const authn_hmac_throttle_conf_t *conf,
                    apr_time_t now)
{
    slot_t *slots = s->throttle, *take = NULL;
    uint64_t n = s->throttle_slots, at = (id[0] ^ id[1]) % n;
    int i;

    for (i = 0; i < PROBES; i++) {
        slot_t *r = &slots[(at + (uint64_t)i) % n];

        if (r->id[0] == id[0] && r->id[1] == id[1] && r->kind == kind)
            return r;
        if (conf && (!take || better(r, take, conf, now)))
            take = r;
    }
    if (take) {
        memset(take, 0, sizeof(*take));
        take->id[0] = id[0];
        take->id[1] = id[1];
        take->kind = kind;
    }
    return take;
}

int authn_hmac_throttle_any(authn_hmac_table_t *t, apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);

    return __atomic_load_n(s->throttle_until, __ATOMIC_RELAXED) > now;
}

/* r banned till until (under the mutex); the segment's word follows. */
static void ban(const authn_hmac_table_parts_t *s, slot_t *r, apr_time_t until)
{
    r->until = until;
    if (__atomic_load_n(s->throttle_until, __ATOMIC_RELAXED) < until)
        __atomic_store_n(s->throttle_until, until, __ATOMIC_RELAXED);
}

int authn_hmac_throttle_banned(authn_hmac_table_t *t,
                               const authn_hmac_throttle_ids_t *ids,
                               apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t pid[2], cid[2];
    slot_t *r;
    int bans = 0;

    id_of(ids->pair, pid);
    id_of(ids->client, cid);
    if (!lock(s))
        return 0;
    if ((r = find(s, pid, KIND_PAIR, NULL, now)) && r->until > now)
        bans |= AUTHN_HMAC_BAN_PAIR;
    if ((r = find(s, cid, KIND_CLIENT, NULL, now)) && r->until > now)
        bans |= AUTHN_HMAC_BAN_CLIENT;
    unlock(s);
    return bans;
}

/* The window from the first guess over: counting starts again. */
static void window(slot_t *r, const authn_hmac_throttle_conf_t *conf,
                   apr_time_t now)
{
    if (r->count && now - r->first >= conf->window) {
        r->count = 0;
        r->pending = 0; /* NB: a guess of a process that died lets go */
    }
}

/* Whether r refuses a new guess: banned, or at its limit with the guesses
 * under way. */
static int full(const slot_t *r, int limit, apr_time_t now)
{
    return r->until > now ||
           (limit > 0 && (int64_t)r->count + r->pending >= limit);
}

int authn_hmac_throttle_enter(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids,
                              apr_time_t now, int *entered)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t pid[2], cid[2];
    slot_t *pair, *client;
    int refused = 0;

    *entered = 0;
    if (!authn_hmac_throttle_on(conf))
        return 0;
    id_of(ids->pair, pid);
    id_of(ids->client, cid);
    if (!lock(s))
        return 0;
    pair = find(s, pid, KIND_PAIR, conf, now);
    client = find(s, cid, KIND_CLIENT, conf, now);
    if (pair) {
        window(pair, conf, now);
        if (full(pair, conf->max_failures, now))
            refused |= AUTHN_HMAC_BAN_PAIR;
    }
    if (client) {
        window(client, conf, now);
        if (full(client, conf->max_client_failures, now))
            refused |= AUTHN_HMAC_BAN_CLIENT;
    }
    if (!refused && pair && client && pair->pending < UINT16_MAX &&
        client->pending < UINT16_MAX) {
        pair->pending++;
        client->pending++;
        *entered = 1;
    }
    unlock(s);
    return refused;
}

/* One more guess on r; 1 if it starts a ban. */
static int guess(const authn_hmac_table_parts_t *s, slot_t *r, int limit,
                 const authn_hmac_throttle_conf_t *conf, apr_time_t now)
{
    window(r, conf, now);
    if (r->count == 0)
        r->first = now;
    if (r->count < UINT32_MAX)
        r->count++;
    if (limit <= 0 || (int64_t)r->count < limit || r->until > now)
        return 0;
    ban(s, r, now + conf->ban);
    return 1;
}

static void leave_one(slot_t *r)
{
    if (r && r->pending)
        r->pending--;
}

int authn_hmac_throttle_leave(authn_hmac_table_t *t,
                              const authn_hmac_throttle_conf_t *conf,
                              const authn_hmac_throttle_ids_t *ids, uint64_t fp,
                              int failed, apr_time_t now, int *fresh)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t pid[2], cid[2];
    slot_t *pair, *client;
    int i, started = 0;

    *fresh = 0;
    if (!authn_hmac_throttle_on(conf))
        return 0;
    id_of(ids->pair, pid);
    id_of(ids->client, cid);
    fp = fp ? fp : 1; /* never 0, the empty fingerprint */
    if (!lock(s))
        return 0;
    pair = find(s, pid, KIND_PAIR, conf, now);
    client = find(s, cid, KIND_CLIENT, conf, now);
    leave_one(pair);
    leave_one(client);
    for (i = 0; failed && pair && i < RECENT; i++)
        if (pair->recent[i] == fp && pair->count &&
            now - pair->first < conf->window)
            break;
    if (failed && pair && i == RECENT) {
        memmove(pair->recent + 1, pair->recent,
                (RECENT - 1) * sizeof(pair->recent[0]));
        pair->recent[0] = fp;
        *fresh = 1;
        if (guess(s, pair, conf->max_failures, conf, now))
            started |= AUTHN_HMAC_BAN_PAIR;
        if (client && guess(s, client, conf->max_client_failures, conf, now))
            started |= AUTHN_HMAC_BAN_CLIENT;
    }
    unlock(s);
    return started;
}

int authn_hmac_throttle_ban(authn_hmac_table_t *t,
                            const authn_hmac_throttle_conf_t *conf,
                            const authn_hmac_throttle_ids_t *ids, int which,
                            apr_time_t now)
{
    const authn_hmac_table_parts_t *s = authn_hmac_table_parts(t);
    uint64_t pid[2], cid[2];
    slot_t *r;
    int started = 0;

    id_of(ids->pair, pid);
    id_of(ids->client, cid);
    if (!which || !lock(s))
        return 0;
    if ((which & AUTHN_HMAC_BAN_PAIR) &&
        (r = find(s, pid, KIND_PAIR, conf, now)) && r->until <= now) {
        ban(s, r, now + conf->ban);
        started |= AUTHN_HMAC_BAN_PAIR;
    }
    if ((which & AUTHN_HMAC_BAN_CLIENT) &&
        (r = find(s, cid, KIND_CLIENT, conf, now)) && r->until <= now) {
        ban(s, r, now + conf->ban);
        started |= AUTHN_HMAC_BAN_CLIENT;
    }
    unlock(s);
    return started;
}
