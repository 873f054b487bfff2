/* index.c: an htpasswd file's index in one flat, position-independent
 * block of memory (see sources/index.h). */
#include "sources/index.h"

#include <stdlib.h>
#include <string.h>

#include <apr_lib.h>
#include <apr_strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#define MAX_BAD_REPORTS 10u /* malformed lines logged one by one */
#define TAG_LEN         16u /* bytes of a block's HMAC kept */
#define ENTRY_HEAD      12u /* user length, hash length, number */
#define RING            16u
/* In an entry's number: a later line of a user listed before, which no
 * lookup reads (a slot that points at it is a corrupt one). */
#define SHADOWED 0x80000000u

/* NB: 2: the header carries a tag of its own. */
static const char MAGIC[8] = "AHMIDX2";
/* The header's tag is made as a block's, with this number, which no block
 * of data has (an index holds at most 1 GiB of them). */
#define HEADER_BLOCK UINT32_MAX

typedef struct {
    char magic[8];
    uint64_t size; /* bytes of the index, this header included */
    uint64_t meta_off, meta_len, slots_off, tags_off, data_off, data_len;
    uint64_t typical; /* offset of the typical entry, or 0 */
    uint32_t nslots, count, bad, tagged;
    uint32_t entries, pad;      /* entries written: count, and later lines for
                                   a user listed before */
    unsigned char tag[TAG_LEN]; /* a tagged index's: of all the above */
} header_t;

/* A slot: the high 32 bits of the user's hash, then the entry's offset from
 * the index's start; 0 is empty. */
#define SLOT(tag, off) (((uint64_t)(tag) << 32) | (uint64_t)(off))

static uint64_t user_hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static void put32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, sizeof(v));
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

int authn_hmac_hash_locked(const char *hash, size_t len)
{
    return len == 0 || hash[0] == '!' || hash[0] == '*';
}

/* The bcrypt cost of a "$2y$NN$..." hash, or -1 for another scheme. */
static int bcrypt_cost(const char *h, size_t len)
{
    if (len < 7 || h[0] != '$' || h[1] != '2' || h[3] != '$' || h[6] != '$' ||
        !apr_isdigit(h[4]) || !apr_isdigit(h[5]))
        return -1;
    return (h[4] - '0') * 10 + (h[5] - '0');
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

/* Lines in len bytes at buf. */
size_t authn_hmac_index_lines(const char *buf, size_t len)
{
    const char *p = buf, *end = buf + len;
    size_t lines = 0;

    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        lines++;
        p++;
    }
    return lines;
}

/* NB: room for every line, as add_user() counts it: at most two thirds of
 * the mask (lines * 3 / 2 rounded down left one line out at 11, 21, 43...
 * lines). */
static size_t slots_for(size_t lines)
{
    size_t nslots = 16;

    while ((nslots - 1) * 2 / 3 < lines)
        nslots *= 2;
    return nslots;
}

/* NB: an entry takes at most its line, its header, two NULs and the
 * padding to 4 bytes. */
static size_t data_cap(size_t len, size_t lines)
{
    return len + lines * (ENTRY_HEAD + 2 + 3);
}

size_t authn_hmac_index_bound(size_t len, size_t lines)
{
    size_t data;

    lines++; /* the last, without its newline */
    data = data_cap(len, lines);
    return align8(sizeof(header_t)) + align8(AUTHN_HMAC_INDEX_META_MAX) +
           slots_for(lines) * sizeof(uint64_t) +
           (data / AUTHN_HMAC_INDEX_BLOCK + 1) * TAG_LEN + data + 8;
}

/* What a build works with. */
struct authn_hmac_index_builder {
    unsigned char *base;
    header_t *h;
    uint64_t *slots;
    uint32_t mask;
    size_t data_cap, lines, cap;
    unsigned lineno;
    int full; /* more lines than counted: the rest is dropped */
    /* Entries written whose slots are not yet set: each slot is
     * prefetched when its entry is written and set RING entries later,
     * so that the misses of a table larger than the caches overlap. */
    uint64_t ring_h[RING], ring_off[RING];
    unsigned nring;
};
typedef struct authn_hmac_index_builder builder_t;

/* The user and hash of one line, as mod_authn_file reads it: trimmed as
 * ap_cfg_getline trims; the user is what comes before the first ':', the
 * hash what comes after the run of ':' that follows, up to the next ':'
 * ("user:hash:extra" has the hash "hash"). A line without a hash still
 * names its user, who then can never log in, as with mod_authn_file.
 * Returns NULL, or why the line is odd (it is then warned about); *add is
 * whether it names a user. */
static const char *split_line(char *l, size_t len, const char **user,
                              size_t *ulen, const char **hash, size_t *hlen,
                              int *add)
{
    char *colon, *h, *h_end, *end = l + len;
    const char *why = NULL;

    *add = 0;
    while (l < end && apr_isspace(*l))
        l++;
    while (end > l && apr_isspace(end[-1]))
        end--;
    if (l == end || *l == '#')
        return NULL;
    colon = memchr(l, ':', (size_t)(end - l));
    h = colon ? colon : end;
    while (h < end && *h == ':')
        h++;
    h_end = memchr(h, ':', (size_t)(end - h));
    if (!h_end)
        h_end = end;
    if (!colon)
        why = "has no ':' separator; the user it names cannot log in";
    else if (colon == l)
        why = "has an empty user name";
    else if (h == h_end)
        why = "has an empty password hash; the user cannot log in";
    if (!colon)
        colon = end;
    *user = l;
    *ulen = (size_t)(colon - l);
    *hash = h;
    *hlen = (size_t)(h_end - h);
    /* NB: a line too long still names its user, who is then locked (no
     * hash), so that a later line of the same user is not used instead. */
    *add = *ulen <= AUTHN_HMAC_INDEX_ENTRY_MAX - ENTRY_HEAD - 2;
    if (*ulen + *hlen > AUTHN_HMAC_INDEX_ENTRY_MAX - ENTRY_HEAD - 2) {
        *hlen = 0;
        return "is too long; the user it names cannot log in";
    }
    return why;
}

/* The entry at off of an index being built (trusted). */
static const unsigned char *entry_at(const builder_t *b, uint64_t off,
                                     uint32_t *ulen, uint32_t *hlen)
{
    const unsigned char *e = b->base + off;

    *ulen = get32(e);
    *hlen = get32(e + 4);
    return e + ENTRY_HEAD;
}

/* Sets the slot of the entry at off (of user hash h) unless its user is
 * in the table already: the first line wins, a later one stays unused. */
static void insert(builder_t *b, uint64_t h, uint64_t off)
{
    uint32_t tag = (uint32_t)(h >> 32), i = (uint32_t)h & b->mask, u, hl, ul;
    const unsigned char *user = entry_at(b, off, &ul, &hl);
    uint64_t s;

    while ((s = b->slots[i]) != 0) {
        if ((uint32_t)(s >> 32) == tag) {
            const unsigned char *eu = entry_at(b, (uint32_t)s, &u, &hl);

            if (u == ul && memcmp(eu, user, ul) == 0) {
                /* NB: marked before the tags are made: in a shared index
                 * a rewritten slot could point at it. */
                unsigned char *e = b->base + off + 8;

                put32(e, get32(e) | SHADOWED);
                return;
            }
        }
        i = (i + 1) & b->mask;
    }
    b->slots[i] = SLOT(tag, off);
    b->h->count++;
}

static void flush(builder_t *b)
{
    unsigned i;

    for (i = 0; i < b->nring; i++)
        insert(b, b->ring_h[i], b->ring_off[i]);
    b->nring = 0;
}

/* Writes the entry of a line, its slot set later (insert). */
static void add_user(builder_t *b, const char *user, size_t ulen,
                     const char *hash, size_t hlen)
{
    uint64_t h = user_hash(user, ulen), off;
    unsigned char *e;

    /* NB: the lines were counted before (the file may have grown since):
     * the table stays at most two thirds full, the data within its room. */
    if ((uint64_t)b->h->entries + 1 > (uint64_t)b->mask * 2 / 3 ||
        b->h->data_len + ENTRY_HEAD + ulen + hlen + 2 + 3 > b->data_cap) {
        b->full = 1;
        return;
    }
    off = b->h->data_off + b->h->data_len;
    e = b->base + off;
    put32(e, (uint32_t)ulen);
    put32(e + 4, (uint32_t)hlen);
    put32(e + 8, b->h->entries++);
    memcpy(e + ENTRY_HEAD, user, ulen);
    e[ENTRY_HEAD + ulen] = '\0';
    memcpy(e + ENTRY_HEAD + ulen + 1, hash, hlen);
    e[ENTRY_HEAD + ulen + 1 + hlen] = '\0';
    b->h->data_len += (ENTRY_HEAD + ulen + hlen + 2 + 3) & ~(size_t)3;
    __builtin_prefetch(&b->slots[(uint32_t)h & b->mask], 1);
    if (b->nring == RING) {
        insert(b, b->ring_h[0], b->ring_off[0]);
        memmove(b->ring_h, b->ring_h + 1, (RING - 1) * sizeof(uint64_t));
        memmove(b->ring_off, b->ring_off + 1, (RING - 1) * sizeof(uint64_t));
        b->nring--;
    }
    b->ring_h[b->nring] = h;
    b->ring_off[b->nring++] = off;
}

/* The typical entry: the first at the median bcrypt cost (or the first
 * of any scheme, in a file without bcrypt), never a locked one. */
static uint64_t choose_typical(const builder_t *b)
{
    uint64_t off, end = b->h->data_off + b->h->data_len, pick = 0;
    uint64_t costs[100] = {0}, nb = 0, seen = 0;
    uint32_t ulen, hlen;
    int median = -1, c;

    for (off = b->h->data_off; off < end;
         off += (ENTRY_HEAD + ulen + hlen + 2 + 3) & ~(uint64_t)3) {
        const char *hash =
            (const char *)entry_at(b, off, &ulen, &hlen) + ulen + 1;
        int cost = bcrypt_cost(hash, hlen);

        if (authn_hmac_hash_locked(hash, hlen) ||
            (get32(b->base + off + 8) & SHADOWED))
            continue;
        if (!pick)
            pick = off;
        if (cost >= 0) {
            costs[cost]++;
            nb++;
        }
    }
    /* NB: the cost the sorted costs hold at nb / 2. */
    for (c = 0; nb && c < 100; c++) {
        seen += costs[c];
        if (seen > nb / 2) {
            median = c;
            break;
        }
    }
    for (off = b->h->data_off; median >= 0 && off < end;
         off += (ENTRY_HEAD + ulen + hlen + 2 + 3) & ~(uint64_t)3) {
        const char *hash =
            (const char *)entry_at(b, off, &ulen, &hlen) + ulen + 1;

        if (!authn_hmac_hash_locked(hash, hlen) &&
            !(get32(b->base + off + 8) & SHADOWED) &&
            bcrypt_cost(hash, hlen) == median) {
            pick = off;
            break;
        }
    }
    return pick;
}

/* vkey = SHA-256 of a label and the version's metadata. */
static void version_key(const void *meta, size_t len,
                        unsigned char vkey[AUTHN_HMAC_DIGEST_LEN])
{
    static const char label[] = "mod_authn_hmac index v1";
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    memset(vkey, 0, AUTHN_HMAC_DIGEST_LEN);
    if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
        EVP_DigestUpdate(ctx, label, sizeof(label)) == 1 &&
        EVP_DigestUpdate(ctx, meta, len) == 1)
        EVP_DigestFinal_ex(ctx, vkey, NULL);
    EVP_MD_CTX_free(ctx);
}

/* The header's tag: every field of it but the tag, under the version's
 * key. NB: the header says where the typical hash is, which the dummy
 * verification of an unknown user copies; a process of the server's user
 * that zeroed it made unknown names answer at once (found by review). */
static void header_tag(const authn_hmac_mac_t *mac,
                       const unsigned char vkey[AUTHN_HMAC_DIGEST_LEN],
                       const header_t *h, unsigned char out[TAG_LEN])
{
    header_t copy = *h;
    unsigned char tag[AUTHN_HMAC_KEY_LEN];

    memset(copy.tag, 0, sizeof(copy.tag));
    authn_hmac_index_tag(mac, vkey, HEADER_BLOCK, &copy, sizeof(copy), tag);
    memcpy(out, tag, TAG_LEN);
}

apr_status_t authn_hmac_index_begin(authn_hmac_index_builder_t **out,
                                    void *area, size_t cap, size_t len,
                                    size_t lines, const void *meta,
                                    size_t meta_len, apr_pool_t *p)
{
    builder_t *b;
    size_t nslots;

    lines++;
    if (cap < authn_hmac_index_bound(len, lines - 1) ||
        meta_len > AUTHN_HMAC_INDEX_META_MAX || cap > UINT32_MAX)
        return APR_ENOSPC; /* NB: offsets are 32 bits in a slot */
    b = apr_pcalloc(p, sizeof(*b));
    b->base = area;
    b->h = area;
    b->cap = cap;
    b->lines = lines;
    memset(b->h, 0, sizeof(*b->h));
    b->h->meta_off = align8(sizeof(header_t));
    b->h->meta_len = meta_len;
    if (meta_len)
        memcpy(b->base + b->h->meta_off, meta, meta_len);
    b->h->slots_off = b->h->meta_off + align8(AUTHN_HMAC_INDEX_META_MAX);
    nslots = slots_for(lines);
    b->data_cap = data_cap(len, lines);
    b->h->nslots = (uint32_t)nslots;
    b->mask = (uint32_t)nslots - 1;
    b->slots = (uint64_t *)(void *)(b->base + b->h->slots_off);
    memset(b->slots, 0, nslots * sizeof(uint64_t));
    b->h->tags_off = b->h->slots_off + nslots * sizeof(uint64_t);
    b->h->data_off = align8(
        b->h->tags_off + (b->data_cap / AUTHN_HMAC_INDEX_BLOCK + 1) * TAG_LEN);
    *out = b;
    return APR_SUCCESS;
}

/* Whether the logical line at pos (up to end) is whole: its last physical
 * line ends in a newline, or the text is all there is (last). */
static int whole_line(const char *pos, const char *end, int last)
{
    while (pos < end) {
        const char *nl = memchr(pos, '\n', (size_t)(end - pos));
        const char *e = nl;

        if (!nl)
            return last;
        if (memchr(pos, '\0', (size_t)(nl - pos)))
            return 1; /* a NUL ends it */
        if (e > pos && e[-1] == '\r')
            e--;
        if (!(e > pos && e[-1] == '\\'))
            return 1;
        pos = nl + 1;
    }
    return last;
}

/* Indexes the logical line at *pos (up to end), and moves *pos past it;
 * with cut, a line the text cuts (its rest never read): a user whose hash
 * runs on to the cut is locked (the hash may go on past it). */
static void feed_line(authn_hmac_index_builder_t *b, char **pos, char *end,
                      int cut, authn_hmac_log_fn bad, void *baton)
{
    unsigned first = b->lineno + 1;
    char *line;
    int nul, add;
    size_t l = next_line(pos, end, &line, &b->lineno, &nul), ulen = 0, hlen = 0;
    const char *why, *user = NULL, *hash = NULL;

    why = split_line(line, l, &user, &ulen, &hash, &hlen, &add);
    /* NB: a hash that runs on to the text's end (no ':' after it, no NUL
     * that ends the line) may run on past it. */
    while (cut && !nul && l > 0 && apr_isspace(line[l - 1]))
        l--;
    if (cut && !nul && hash && hash + hlen >= line + l) {
        hlen = 0;
        why = "is too long; the user it names cannot log in";
    }
    if (add && hash) /* NB: hash is set wherever add is */
        add_user(b, user, ulen, hash, hlen);
    if (nul)
        why = "contains a NUL byte; the rest of the line is ignored";
    if (why) {
        /* NB: at most MAX_BAD_REPORTS lines a reading, then one line
         * for the rest: a file named in .htaccess is its author's to
         * fill, and a file of bad lines must not flood the log. */
        if (b->h->bad < MAX_BAD_REPORTS)
            authn_hmac_logf(bad, baton, AUTHN_HMAC_LOG_WARNING,
                            AUTHN_HMAC_INDEX_LINE "%s", first, why);
        b->h->bad++;
    }
}

size_t authn_hmac_index_feed(authn_hmac_index_builder_t *b, char *text,
                             size_t len, int last, authn_hmac_log_fn bad,
                             void *baton)
{
    char *pos = text, *end = text + len;

    while (pos < end && whole_line(pos, end, last))
        feed_line(b, &pos, end, 0, bad, baton);
    return (size_t)(pos - text);
}

void authn_hmac_index_feed_cut(authn_hmac_index_builder_t *b, char *text,
                               size_t len, authn_hmac_log_fn bad, void *baton)
{
    char *pos = text;

    if (len)
        feed_line(b, &pos, text + len, 1, bad, baton);
}

apr_status_t authn_hmac_index_end(authn_hmac_index_builder_t *b,
                                  const authn_hmac_mac_t *mac,
                                  authn_hmac_log_fn bad, void *baton,
                                  size_t *used)
{
    unsigned char vkey[AUTHN_HMAC_DIGEST_LEN];
    uint64_t i, blocks;

    if (b->h->bad > MAX_BAD_REPORTS)
        authn_hmac_logf(bad, baton, AUTHN_HMAC_LOG_WARNING,
                        AUTHN_HMAC_INDEX_LINE "is the last of %u malformed "
                                              "lines; the %u after the first "
                                              "%u are not reported one by one",
                        b->lineno, b->h->bad, b->h->bad - MAX_BAD_REPORTS,
                        MAX_BAD_REPORTS);
    flush(b);
    b->h->typical = choose_typical(b);
    if (mac) {
        version_key(b->base + b->h->meta_off, b->h->meta_len, vkey);
        blocks = (b->h->data_len + AUTHN_HMAC_INDEX_BLOCK - 1) /
                 AUTHN_HMAC_INDEX_BLOCK;
        for (i = 0; i < blocks; i++) {
            uint64_t from = i * AUTHN_HMAC_INDEX_BLOCK;
            uint64_t n = b->h->data_len - from < AUTHN_HMAC_INDEX_BLOCK
                             ? b->h->data_len - from
                             : AUTHN_HMAC_INDEX_BLOCK;
            unsigned char tag[AUTHN_HMAC_KEY_LEN];

            authn_hmac_index_tag(mac, vkey, (uint32_t)i,
                                 b->base + b->h->data_off + from, (size_t)n,
                                 tag);
            memcpy(b->base + b->h->tags_off + i * TAG_LEN, tag, TAG_LEN);
        }
        b->h->tagged = 1;
    }
    b->h->size = b->h->data_off + b->h->data_len;
    memcpy(b->h->magic, MAGIC, sizeof(MAGIC));
    if (mac)
        header_tag(mac, vkey, b->h, b->h->tag);
    *used = (size_t)b->h->size;
    return b->full ? APR_EOF : APR_SUCCESS;
}

apr_status_t authn_hmac_index_open(authn_hmac_index_t *v, const void *area,
                                   size_t size, const authn_hmac_mac_t *mac)
{
    header_t h;

    if (size < sizeof(h))
        return APR_EGENERAL;
    memcpy(&h, area, sizeof(h)); /* NB: a copy: the mapping may change */
    if (memcmp(h.magic, MAGIC, sizeof(MAGIC)) != 0 || h.size > size ||
        h.meta_len > AUTHN_HMAC_INDEX_META_MAX || h.meta_off < sizeof(h) ||
        h.meta_off + h.meta_len > h.size || h.nslots == 0 ||
        (h.nslots & (h.nslots - 1)) != 0 || h.slots_off > h.size ||
        (uint64_t)h.nslots * sizeof(uint64_t) > h.size - h.slots_off ||
        h.data_off > h.size || h.data_len > h.size - h.data_off ||
        h.tags_off > h.size ||
        (h.data_len / AUTHN_HMAC_INDEX_BLOCK + 1) * TAG_LEN >
            h.size - h.tags_off ||
        h.entries > h.data_len / (ENTRY_HEAD + 4) || h.count > h.entries ||
        (mac && !h.tagged))
        return APR_EGENERAL;
    v->base = area;
    v->size = (size_t)h.size;
    v->slots_off = h.slots_off;
    v->tags_off = h.tags_off;
    v->data_off = h.data_off;
    v->data_len = h.data_len;
    v->typical = h.typical;
    v->mask = h.nslots - 1;
    v->count = h.count;
    v->entries = h.entries;
    v->bad = h.bad;
    v->mac = h.tagged ? mac : NULL;
    v->meta_len = (size_t)h.meta_len;
    memcpy(v->meta, v->base + h.meta_off, v->meta_len);
    if (v->mac) {
        unsigned char tag[TAG_LEN];
        int ok;

        version_key(v->meta, v->meta_len, v->vkey);
        header_tag(v->mac, v->vkey, &h, tag);
        ok = CRYPTO_memcmp(tag, h.tag, TAG_LEN) == 0;
        if (!ok)
            return APR_EGENERAL;
    }
    return APR_SUCCESS;
}

/* Whether an entry of ulen and hlen fits at off in the data. */
static int fits(const authn_hmac_index_t *v, uint64_t off, uint64_t ulen,
                uint64_t hlen)
{
    uint64_t end = v->data_off + v->data_len;

    return off >= v->data_off && off <= end && (off - v->data_off) % 4 == 0 &&
           end - off >= ENTRY_HEAD &&
           ulen + hlen + 2 <= AUTHN_HMAC_INDEX_ENTRY_MAX - ENTRY_HEAD &&
           ulen + hlen + 2 <= end - off - ENTRY_HEAD;
}

uint64_t authn_hmac_index_find(const authn_hmac_index_t *v, const char *user,
                               size_t user_len, uint32_t *ord)
{
    const uint64_t *slots =
        (const uint64_t *)(const void *)(v->base + v->slots_off);
    uint64_t h = user_hash(user, user_len), s;
    uint32_t tag = (uint32_t)(h >> 32), i = (uint32_t)h & v->mask, n;

    /* NB: at most every slot once, whatever a corrupt table holds. */
    for (n = 0; n <= v->mask; n++, i = (i + 1) & v->mask) {
        s = __atomic_load_n(&slots[i], __ATOMIC_RELAXED);
        if (s == 0)
            return 0;
        if ((uint32_t)(s >> 32) == tag) {
            uint64_t off = (uint32_t)s;
            const unsigned char *e = v->base + off;

            if (fits(v, off, 0, 0) && get32(e) == user_len &&
                fits(v, off, user_len, get32(e + 4)) &&
                memcmp(e + ENTRY_HEAD, user, user_len) == 0) {
                *ord = get32(e + 8);
                return off;
            }
        }
    }
    return 0;
}

apr_status_t authn_hmac_index_entry(const authn_hmac_index_t *v, uint64_t off,
                                    void *buf, authn_hmac_index_entry_t *e)
{
    const unsigned char *p = v->base + off;
    uint32_t ulen, hlen;

    if (v->mac) {
        /* Copies the blocks the entry spans, checks them, and reads the
         * entry from the copy alone. */
        uint64_t rel, first, last, end, i, have;
        unsigned char *copy = buf;
        const unsigned char *q;
        int done = 0;

        if (!fits(v, off, 0, 0))
            return APR_EGENERAL;
        rel = off - v->data_off;
        first = rel / AUTHN_HMAC_INDEX_BLOCK;
        end = rel + AUTHN_HMAC_INDEX_ENTRY_MAX;
        if (end > v->data_len)
            end = v->data_len;
        last = (end - 1) / AUTHN_HMAC_INDEX_BLOCK;
        /* NB: the entry's lengths, read from the checked copy, say when
         * enough blocks are in it. */
        if (last - first + 1 > AUTHN_HMAC_INDEX_COPY / AUTHN_HMAC_INDEX_BLOCK)
            return APR_EGENERAL;
        for (i = first; i <= last; i++) {
            uint64_t from = i * AUTHN_HMAC_INDEX_BLOCK;
            uint64_t n = v->data_len - from < AUTHN_HMAC_INDEX_BLOCK
                             ? v->data_len - from
                             : AUTHN_HMAC_INDEX_BLOCK;
            unsigned char *dst = copy + (i - first) * AUTHN_HMAC_INDEX_BLOCK;
            unsigned char tag[AUTHN_HMAC_KEY_LEN];

            memcpy(dst, v->base + v->data_off + from, (size_t)n);
            authn_hmac_index_tag(v->mac, v->vkey, (uint32_t)i, dst, (size_t)n,
                                 tag);
            if (CRYPTO_memcmp(tag, v->base + v->tags_off + i * TAG_LEN,
                              TAG_LEN) != 0)
                return APR_EGENERAL;
            /* Enough blocks once the entry's end is in the copy. */
            have = from + n - rel;
            q = copy + (rel - first * AUTHN_HMAC_INDEX_BLOCK);
            if (have >= ENTRY_HEAD &&
                have >= (uint64_t)ENTRY_HEAD + get32(q) + get32(q + 4) + 2) {
                done = 1;
                break;
            }
        }
        p = copy + (rel - first * AUTHN_HMAC_INDEX_BLOCK);
        ulen = get32(p);
        hlen = get32(p + 4);
        if (!done || !fits(v, off, ulen, hlen))
            return APR_EGENERAL;
    }
    else {
        if (!fits(v, off, 0, 0))
            return APR_EGENERAL;
        ulen = get32(p);
        hlen = get32(p + 4);
        if (!fits(v, off, ulen, hlen))
            return APR_EGENERAL;
    }
    if (p[ENTRY_HEAD + ulen] != '\0' || p[ENTRY_HEAD + ulen + 1 + hlen] != '\0')
        return APR_EGENERAL;
    e->user = (const char *)p + ENTRY_HEAD;
    e->user_len = ulen;
    e->hash = e->user + ulen + 1;
    e->hash_len = hlen;
    e->ord = get32(p + 8);
    if ((e->ord & SHADOWED) || e->ord >= v->entries)
        return APR_EGENERAL;
    return APR_SUCCESS;
}

uint64_t authn_hmac_index_typical(const authn_hmac_index_t *v)
{
    return v->typical;
}
