/* shm/memo.h: the memo region of the shared segment (src/shm/memo.c):
 * what a source the module does not own (SQL) last said of each user
 * (core/cred.h's authn_hmac_memo_t), keyed by the user's id, so that a
 * hit between rechecks asks the source nothing. Written under the writers'
 * mutex, read without a lock (a seqlock per record), as the caches are. */
#ifndef AUTHN_HMAC_MEMO_H
#define AUTHN_HMAC_MEMO_H

#include "core/cred.h"
#include "shm/table.h"

/* 1 with *m if the region holds a memo of the user uid (whatever its
 * age: the caller judges it), else 0. Takes no lock. */
int authn_hmac_memo_lookup(authn_hmac_table_t *t,
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                           authn_hmac_memo_t *m);

/* Stores m as the user's memo: replaces the user's record, unless it
 * holds a later one (a slower writer's older answer never replaces a
 * newer one) not ahead of now by more than AUTHN_HMAC_MEMO_SKEW (a clock
 * stepped back: a record from the future is replaceable), else takes a
 * free record of the user's set, else its oldest. */
apr_status_t authn_hmac_memo_store(authn_hmac_table_t *t,
                                   const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                                   const authn_hmac_memo_t *m, apr_time_t now);

#endif /* AUTHN_HMAC_MEMO_H */
