/* shm/table.h: the shared-memory table: the cache of credentials,
 * the negative cache and the counters, in one segment shared by every
 * process, which also holds single flight (flight.h), the verification
 * queue (queue.h) and an annex that the layers above lay out (the Redis
 * health and the Sentinel's primary: request/annex.h). */
#ifndef AUTHN_HMAC_TABLE_H
#define AUTHN_HMAC_TABLE_H

#include "core/cred.h"
#include "core/util.h"

#include <apr_global_mutex.h>

/* The bucket a duration of usec microseconds falls in: the first whose
 * bound is at least usec (Prometheus's "le"). */
unsigned authn_hmac_bucket(enum authn_hmac_histogram h, uint64_t usec);

typedef struct authn_hmac_table authn_hmac_table_t;

/* Bytes of shared memory to request for a cache budget of `budget` bytes
 * (0 = counters only, no cache). */
size_t authn_hmac_table_size(size_t budget);

/* Formats a fresh segment of `size` bytes (from authn_hmac_table_size). */
apr_status_t authn_hmac_table_format(void *base, size_t size, apr_time_t now);

/* A process-local handle on a formatted segment. mutex serializes writers
 * (readers never lock); it may be NULL only in single-process tests. */
authn_hmac_table_t *
authn_hmac_table_attach(void *base, apr_global_mutex_t *mutex, apr_pool_t *p);

/* An entry keeps two times: when its credential was verified, and when it
 * was last used (refreshed at most once per half TTL). Each section applies
 * its own idle timeout and max age to those, so that sections with other
 * TTLs over the same file share one entry instead of fighting over it.
 *
 * 1 if key (of the user uid) is present and live at now for a section of
 * idle timeout ttl and max age max_age: verified (not "in the future": a
 * clock stepped back) less than max_age ago, and used less than ttl ago.
 * Its times go to *verified and *used (each may be NULL). Takes no lock. */
int authn_hmac_table_lookup(authn_hmac_table_t *t,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            apr_time_t now, apr_interval_time_t ttl,
                            apr_interval_time_t max_age, apr_time_t *verified,
                            apr_time_t *used);

/* After a hit at now on key, last used at *used: if half of ttl or more
 * has passed since, makes now its last use by compare-and-swap (no lock:
 * it never waits for the writers' mutex, nor is it skipped while another
 * process holds it), and returns 1 with *used = now (counted as a
 * refresh); of concurrent hits, one does. Else returns 0, having written
 * nothing: an entry is written at most once per half TTL of the section
 * that asks. */
int authn_hmac_table_refresh(authn_hmac_table_t *t,
                             const unsigned char key[AUTHN_HMAC_KEY_LEN],
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                             apr_time_t now, apr_interval_time_t ttl,
                             apr_interval_time_t max_age, apr_time_t *used);

/* Stores key of the user uid, verified at `verified` and last used at
 * `used` (no earlier than verified; the same key keeps the later of each).
 * A user holds at most AUTHN_HMAC_PER_USER entries: past that its least
 * recently used is replaced, never another user's. Otherwise a free slot
 * of the set is taken, else the least recently used; that is counted as an
 * eviction if it was used less than ttl (the storing section's) ago. */
apr_status_t authn_hmac_table_store(authn_hmac_table_t *t,
                                    const unsigned char key[AUTHN_HMAC_KEY_LEN],
                                    const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                    apr_time_t verified, apr_time_t used,
                                    apr_interval_time_t ttl);

/* Takes key of the user uid out of shared memory (a credential its source
 * refused: no longer one it confirmed, for the offline grace). */
void authn_hmac_table_forget(authn_hmac_table_t *t,
                             const unsigned char key[AUTHN_HMAC_KEY_LEN],
                             const unsigned char uid[AUTHN_HMAC_KEY_LEN]);

/* A client's mark on the credential's entry (a word of the throttle's
 * client id, never 0): the client it was last stored or refreshed for. A
 * client banned for all users is still served the entries marked for it
 * (its users logged in before the ban). mark() writes it without a lock;
 * marked() says whether the entry is there and carries mark. */
void authn_hmac_table_mark(authn_hmac_table_t *t,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           uint32_t mark);
/* Whether any entry of the user (uid) carries mark. */
int authn_hmac_table_user_marked(authn_hmac_table_t *t,
                                 const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                 uint32_t mark);
int authn_hmac_table_marked(authn_hmac_table_t *t,
                            const unsigned char key[AUTHN_HMAC_KEY_LEN],
                            const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                            uint32_t mark);

/* The negative region: nkey (a MAC of its own, authn_hmac_negative_key) of
 * a credential the verifier refused, until `expires`. Lookups take no lock;
 * the region holds at most AUTHN_HMAC_PER_USER entries per user, and never
 * touches the positive region. */
int authn_hmac_negative_lookup(authn_hmac_table_t *t,
                               const unsigned char nkey[AUTHN_HMAC_KEY_LEN],
                               const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                               apr_time_t now);

apr_status_t
authn_hmac_negative_store(authn_hmac_table_t *t,
                          const unsigned char nkey[AUTHN_HMAC_KEY_LEN],
                          const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                          apr_time_t now, apr_time_t expires);

void authn_hmac_table_count(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t delta);

uint64_t authn_hmac_table_counter(authn_hmac_table_t *t,
                                  enum authn_hmac_counter c);

/* Sets a gauge kept among the counters (a time). */
void authn_hmac_table_gauge(authn_hmac_table_t *t, enum authn_hmac_counter c,
                            uint64_t value);
/* Sets gauge c to value if it holds old: 1 if it did (of concurrent
 * callers, one does). */
int authn_hmac_table_gauge_swap(authn_hmac_table_t *t,
                                enum authn_hmac_counter c, uint64_t old,
                                uint64_t value);

/* Adds a duration of usec microseconds to histogram h. Takes no lock. */
void authn_hmac_table_observe(authn_hmac_table_t *t,
                              enum authn_hmac_histogram h, uint64_t usec);

/* The annex: AUTHN_HMAC_TABLE_ANNEX_BYTES of the segment's header,
 * starting on a cache line, zero in a fresh segment, kept across a graceful
 * restart like the rest; the table never reads it. The layers above lay
 * it out (request/annex.c, which checks that its layout fits). NB: the
 * annex's contents are part of the segment's layout: a change to them
 * must change TABLE_MAGIC (shm/table.c), as a change to the table's own
 * does. */
#define AUTHN_HMAC_TABLE_ANNEX_BYTES ((size_t)896)

void *authn_hmac_table_annex(authn_hmac_table_t *t);

/* The writers' mutex, for a layer above that writes several words of the
 * annex together (rarely: not on a hit's path). lock: 1 if taken (always
 * without a mutex); unlock releases it. */
int authn_hmac_table_lock(authn_hmac_table_t *t);
void authn_hmac_table_unlock(authn_hmac_table_t *t);

/* Counters and sizes, in O(1); the Redis tier's are not the table's
 * (authn_hmac_annex_stats fills them). */
void authn_hmac_table_stats(authn_hmac_table_t *t, apr_time_t now,
                            authn_hmac_stats_t *out);

#endif /* AUTHN_HMAC_TABLE_H */
