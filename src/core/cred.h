/* core/cred.h: the credential MAC: the encoding of a credential,
 * the pepper's subkeys, the MACs made with them, and the dummy hash. */
#ifndef AUTHN_HMAC_CRED_H
#define AUTHN_HMAC_CRED_H

#include "core/secret.h"

#include <stddef.h>
#include <stdint.h>

#define AUTHN_HMAC_KEY_LEN 32 /* HMAC-SHA256 output */
/* The version of the encodings below (in the input of every MAC): a cache
 * written by another version never matches. The labels of the subkeys
 * name their purpose, and keep "v2". */
#define AUTHN_HMAC_ENCODING_VERSION 3

/* HKDF-SHA256 info labels of the three subkeys of the pepper. */
#define AUTHN_HMAC_LABEL_ENTRY    "authn_hmac v2 entry"    /* credential MAC */
#define AUTHN_HMAC_LABEL_USER     "authn_hmac v2 user"     /* user id */
#define AUTHN_HMAC_LABEL_VALUE    "authn_hmac v2 value"    /* Redis value tag */
#define AUTHN_HMAC_LABEL_NEGATIVE "authn_hmac v2 negative" /* refused creds */
#define AUTHN_HMAC_LABEL_DUMMY    "authn_hmac v2 dummy"    /* dummy hashes */
#define AUTHN_HMAC_LABEL_INDEX    "authn_hmac v2 index"    /* shared index */
#define AUTHN_HMAC_LABEL_MEMO     "authn_hmac v2 memo"     /* Redis memo pad */

/* Receives the encoding piece by piece. */
typedef void (*authn_hmac_sink_fn)(void *baton, const void *data, size_t len);

/* Length-prefixed encoding of (version, scope, user, stored hash): a 4-byte
 * big-endian version, then each field as a 4-byte big-endian length
 * followed by its bytes. Returns the number of bytes sent to sink. */
size_t authn_hmac_encode(authn_hmac_sink_fn sink, void *baton,
                         const char *scope, size_t scope_len, const char *user,
                         size_t user_len, const char *hash, size_t hash_len);

#define AUTHN_HMAC_DIGEST_LEN 32 /* SHA-256 output */

/* digest = SHA-256(encode(scope, user, hash)): what a credential's MACs
 * cover besides its password. No secret: the index of the file keeps it. */
void authn_hmac_cred_digest(const char *scope, size_t scope_len,
                            const char *user, size_t user_len, const char *hash,
                            size_t hash_len,
                            unsigned char digest[AUTHN_HMAC_DIGEST_LEN]);

/* What a source of hashes the module does not own (SQL) last said of a
 * user: its state, the digest of scope, user and hash (authn_hmac_cred_digest:
 * what the credential's keys are made of, never the hash itself; zeros for
 * no such user or a locked one) and when the source said it (apr_time_t).
 * Kept in shared memory (shm/memo.h) and in Redis (redis.h), so that a hit
 * between rechecks asks no one. */
typedef enum {
    AUTHN_HMAC_MEMO_HASH = 1,  /* the user has a hash */
    AUTHN_HMAC_MEMO_NONE = 2,  /* no such user */
    AUTHN_HMAC_MEMO_LOCKED = 3 /* a locked hash ('!', '*' or empty) */
} authn_hmac_memo_state;

typedef struct {
    int state; /* authn_hmac_memo_state; 0: none */
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN];
    int64_t confirmed; /* apr_time_t */
} authn_hmac_memo_t;

/* A memo's time may be another server's clock, a little ahead; one ahead
 * by more is of a clock stepped back since, and any answer replaces it. */
#define AUTHN_HMAC_MEMO_SKEW apr_time_from_sec(5)

/* HKDF-SHA256 (RFC 5869): out_len (at most 255 * 32) bytes. */
void authn_hmac_hkdf(const unsigned char *salt, size_t salt_len,
                     const unsigned char *ikm, size_t ikm_len,
                     const unsigned char *info, size_t info_len,
                     unsigned char *out, size_t out_len);

/* A subkey of the pepper: HKDF-SHA256 with salt "mod_authn_hmac" and the
 * label as info. */
void authn_hmac_subkey(const authn_hmac_secret_t *pepper, const char *label,
                       unsigned char out[AUTHN_HMAC_KEY_LEN]);

/* The keyed HMAC states of the three subkeys, in a locked page excluded
 * from core dumps. */
typedef struct authn_hmac_mac authn_hmac_mac_t;

/* Derives the subkeys; wiped with the pool. */
apr_status_t authn_hmac_mac_create(authn_hmac_mac_t **out,
                                   const authn_hmac_secret_t *pepper,
                                   apr_pool_t *p);

/* Locks the states' page again (in each child). */
void authn_hmac_mac_relock(const authn_hmac_mac_t *mac);

/* key = HMAC-SHA256(entry subkey, digest | password): the digest has a
 * fixed length, so no two credentials share an input. Thread-safe. */
void authn_hmac_cred_mac(const authn_hmac_mac_t *mac,
                         const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                         const char *password, size_t password_len,
                         unsigned char key[AUTHN_HMAC_KEY_LEN]);

/* nkey = HMAC-SHA256(negative subkey, digest | password): names a refused
 * credential in the negative region. Thread-safe. */
void authn_hmac_cred_negative(const authn_hmac_mac_t *mac,
                              const unsigned char digest[AUTHN_HMAC_DIGEST_LEN],
                              const char *password, size_t password_len,
                              unsigned char nkey[AUTHN_HMAC_KEY_LEN]);

/* The hash an unknown user, or a locked line, is checked against, so that
 * either costs what a known user's wrong password costs: tmpl's scheme and
 * cost (its text up to its last '$', or "{SHA}"), then characters of that
 * scheme's alphabet drawn from HMAC(dummy subkey, that prefix), the same in
 * every process and server that shares the pepper. Its last character is
 * one that scheme never writes there (a bcrypt, MD5-crypt, SHA-crypt or
 * {SHA} digest ends in padding bits that are always 0), so no password can
 * ever match it, not even tmpl's own. Returns its length, or 0 if tmpl is
 * empty, too long or all prefix. */
#define AUTHN_HMAC_DUMMY_MAX 256
size_t authn_hmac_dummy_hash(const authn_hmac_mac_t *mac, const char *tmpl,
                             size_t len, char out[AUTHN_HMAC_DUMMY_MAX]);

/* id = HMAC-SHA256(user subkey, version, scope, user), length-prefixed. */
void authn_hmac_user_id(const authn_hmac_mac_t *mac, const char *scope,
                        size_t scope_len, const char *user, size_t user_len,
                        unsigned char id[AUTHN_HMAC_KEY_LEN]);

/* tag = HMAC-SHA256(value subkey, uid | body). */
void authn_hmac_value_tag(const authn_hmac_mac_t *mac,
                          const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                          const void *body, size_t len,
                          unsigned char tag[AUTHN_HMAC_KEY_LEN]);

/* pad = HMAC-SHA256(memo subkey, uid | confirmed as 8 bytes big-endian):
 * what a memo's digest is XORed with in Redis (redis/memo.c), so that
 * Redis holds no unkeyed digest of a stored hash (nor the same bytes for
 * the same hash at two times). Thread-safe. */
void authn_hmac_memo_pad(const authn_hmac_mac_t *mac,
                         const unsigned char uid[AUTHN_HMAC_KEY_LEN],
                         int64_t confirmed,
                         unsigned char pad[AUTHN_HMAC_DIGEST_LEN]);

/* tag = HMAC-SHA256(index subkey, vkey | block | data): authenticates one
 * block of a shared htpasswd index (index.h), vkey naming the file's
 * version it was read from. Thread-safe. */
void authn_hmac_index_tag(const authn_hmac_mac_t *mac,
                          const unsigned char vkey[AUTHN_HMAC_DIGEST_LEN],
                          uint32_t block, const void *data, size_t len,
                          unsigned char tag[AUTHN_HMAC_KEY_LEN]);

/* A user's cached credentials: at most PER_USER, in shared memory and in
 * Redis. */
#define AUTHN_HMAC_PER_USER 2

#endif /* AUTHN_HMAC_CRED_H */
