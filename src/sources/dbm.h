/* sources/dbm.h: users in a DBM file, as htdbm writes them (the key the
 * user's name, the value "hash[:extra]"): read, looked up, and remembered
 * while the file does not change (src/sources/dbm.c). The check of a
 * credential against them is request/dbm.h's. */
#ifndef AUTHN_HMAC_DBMFILE_H
#define AUTHN_HMAC_DBMFILE_H

#include <stddef.h>

#include <apr_errno.h>
#include <apr_pools.h>

/* Whether apr-util can open DBM files of type (default, db, gdbm, ndbm,
 * sdbm, as AuthDBMType takes them, in any case): NULL, or what is wrong. */
const char *authn_hmac_dbm_type_check(const char *type, apr_pool_t *p);

/* A DBM file's state in this process, made in p, which it lives in; usable
 * by any thread once made: the file at path (absolute), and the memo of
 * what the file answered while it has not changed. */
typedef struct authn_hmac_dbmfile_t authn_hmac_dbmfile_t;
authn_hmac_dbmfile_t *authn_hmac_dbmfile_make(const char *path, apr_pool_t *p);

/* Looks user (user_len bytes, a C string) up in the file d, of type:
 * *hash the value's hash (up to its first ':'), NULL if no such user; and
 * then, if want_other, *other the hash of the file's first record (an
 * unknown user's dummy is made from another user's), else NULL. From the
 * memo while the file is unchanged; else the file is opened read-only
 * and closed at once, a writer's lock waited for up to 250 ms.
 * APR_SUCCESS, or the error when the file cannot be read. */
apr_status_t authn_hmac_dbmfile_lookup(authn_hmac_dbmfile_t *d,
                                       const char *type, const char *user,
                                       size_t user_len, int want_other,
                                       const char **hash, const char **other,
                                       apr_pool_t *p);

#endif /* AUTHN_HMAC_DBMFILE_H */
