/* sources/index.h: an htpasswd file's index in one flat block of memory,
 * with offsets instead of pointers, so that one process can build it in a
 * file that every child of the server maps read-only.
 *
 * Layout: a header, the version's metadata (what the builder read, bound
 * into the tags), an open-addressing table of slots (a 32-bit tag of the
 * user's hash beside the entry's offset), the blocks' tags, then the
 * entries in the file's order. A shared index is tagged: every
 * AUTHN_HMAC_INDEX_BLOCK bytes of entries carry an HMAC under a subkey of
 * the pepper, so that what a process writes into the file afterwards
 * (anyone who runs as the server's user can) is never taken for a
 * user's hash: an entry is copied out of the mapping, then its blocks
 * checked, then read from the copy. The header carries a tag too (it says
 * where the typical hash is, which an unknown user's dummy verification
 * copies), checked when the index is opened. The slots are only ever
 * bounds-checked: a corrupt one can hide a user, never grant. */
#ifndef AUTHN_HMAC_INDEX_H
#define AUTHN_HMAC_INDEX_H

#include "core/cred.h"
#include "core/util.h"

#include <stddef.h>
#include <stdint.h>

#include <apr_errno.h>
#include <apr_pools.h>

/* A malformed line is told to an authn_hmac_log_fn (util.h) at warning,
 * by its number and what is wrong, never its content:
 * AUTHN_HMAC_INDEX_LINE "<why>". */
#define AUTHN_HMAC_INDEX_LINE "line %u "

#define AUTHN_HMAC_INDEX_BLOCK 1024u
/* The longest entry (user and hash) an index keeps; a longer line is
 * reported and skipped. */
#define AUTHN_HMAC_INDEX_ENTRY_MAX 8192u /* 8 blocks */
/* What a copy of a tagged entry needs: the blocks it spans. */
#define AUTHN_HMAC_INDEX_COPY                                                  \
    (AUTHN_HMAC_INDEX_ENTRY_MAX + 2u * AUTHN_HMAC_INDEX_BLOCK)
#define AUTHN_HMAC_INDEX_META_MAX 8192u

/* A view of an index (made by authn_hmac_index_open). */
typedef struct {
    const unsigned char *base;
    size_t size;
    uint64_t slots_off, tags_off, data_off, data_len, typical;
    uint32_t mask, count, bad;
    uint32_t entries;            /* entry numbers are below it */
    const authn_hmac_mac_t *mac; /* tagged: the key its tags are checked with */
    unsigned char vkey[AUTHN_HMAC_DIGEST_LEN];
    size_t meta_len;
    unsigned char meta[AUTHN_HMAC_INDEX_META_MAX]; /* a private copy */
} authn_hmac_index_t;

/* One entry, as read: user and hash are NUL-terminated. */
typedef struct {
    const char *user, *hash;
    size_t user_len, hash_len;
    uint32_t ord; /* 0 .. entries - 1, in the file's order */
} authn_hmac_index_entry_t;

/* Newlines in len bytes at buf. */
size_t authn_hmac_index_lines(const char *buf, size_t len);

/* The most bytes the index of a text of len bytes and lines newlines can
 * take. */
size_t authn_hmac_index_bound(size_t len, size_t lines);

/* A build, fed the text piece by piece. */
typedef struct authn_hmac_index_builder authn_hmac_index_builder_t;

/* Starts the index of an htpasswd text of len bytes and lines newlines in
 * area (cap bytes, at least authn_hmac_index_bound; 8-byte aligned), with
 * meta (at most AUTHN_HMAC_INDEX_META_MAX bytes) kept in it. */
apr_status_t authn_hmac_index_begin(authn_hmac_index_builder_t **b, void *area,
                                    size_t cap, size_t len, size_t lines,
                                    const void *meta, size_t meta_len,
                                    apr_pool_t *p);

/* Indexes the whole lines of text (len bytes, modified in place), read as
 * mod_authn_file reads them (the first line of a user listed twice wins);
 * with last, what remains is the last line. Returns the bytes taken: the
 * rest begins the next piece. */
size_t authn_hmac_index_feed(authn_hmac_index_builder_t *b, char *text,
                             size_t len, int last, authn_hmac_log_fn bad,
                             void *baton);

/* Indexes text (len bytes, modified in place) as the beginning of one
 * logical line longer than it, whose rest is not read: a line too long,
 * whose user (if it names one) is locked, never given a hash cut short. */
void authn_hmac_index_feed_cut(authn_hmac_index_builder_t *b, char *text,
                               size_t len, authn_hmac_log_fn bad, void *baton);

/* Finishes the index, tagged under mac unless mac is NULL; *used is what it
 * took of area. APR_EOF if the text held more than it was said to (the
 * lines past it are not in the index). */
apr_status_t authn_hmac_index_end(authn_hmac_index_builder_t *b,
                                  const authn_hmac_mac_t *mac,
                                  authn_hmac_log_fn bad, void *baton,
                                  size_t *used);

/* Opens the index in area (size bytes): APR_SUCCESS, or APR_EGENERAL for
 * one whose header does not hold together. With mac, only a tagged index
 * is opened, and its entries are checked against mac when read. */
apr_status_t authn_hmac_index_open(authn_hmac_index_t *v, const void *area,
                                   size_t size, const authn_hmac_mac_t *mac);

/* The offset of user's entry, or 0; *ord its number. Bounds-checked. */
uint64_t authn_hmac_index_find(const authn_hmac_index_t *v, const char *user,
                               size_t user_len, uint32_t *ord);

/* The entry at off (from find, or the typical one's), read from v, or for
 * a tagged index from a copy in buf (AUTHN_HMAC_INDEX_COPY bytes) whose
 * blocks' tags verified. APR_EGENERAL for an entry out of bounds or that
 * does not verify. */
apr_status_t authn_hmac_index_entry(const authn_hmac_index_t *v, uint64_t off,
                                    void *buf, authn_hmac_index_entry_t *e);

/* The offset of the entry whose hash is the file's typical one (one of its
 * own, at the median bcrypt cost; never a locked one), or 0. */
uint64_t authn_hmac_index_typical(const authn_hmac_index_t *v);

/* Whether a line's hash locks its user out: empty ("carol:"), or starting
 * with '!' or '*' ("dave:!", as in /etc/shadow), which no scheme writes. */
int authn_hmac_hash_locked(const char *hash, size_t len);

#endif /* AUTHN_HMAC_INDEX_H */
