/* shm/share.h: where the children of a server share the versions of
 * their htpasswd indexes.
 *
 * A region of shared memory, made by the parent before it forks, holds one
 * slot per file: the number of the version published, and a lock (a robust
 * process-shared mutex) that one builder holds at a time. Each version is a
 * file of its own in a directory of the server's, written under a
 * temporary name, then renamed to its version's name and published; the
 * version it replaces is unlinked then, and its memory goes back to the
 * system once the last process that maps it lets go. A builder that dies
 * holding the lock leaves its temporary file, which the next one truncates;
 * nothing it wrote is ever published. */
#ifndef AUTHN_HMAC_SHARE_H
#define AUTHN_HMAC_SHARE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <apr_errno.h>
#include <apr_pools.h>
#include <apr_time.h>

typedef struct authn_hmac_share authn_hmac_share_t;

/* Makes the region for nslots files, in the parent, with the versions kept
 * in dir (made if missing, mode 0700, owned by uid:gid when uid is not
 * (uid_t)-1; files there from servers no longer running are removed).
 * Freed with p. On failure, *why says what failed. */
apr_status_t authn_hmac_share_create(authn_hmac_share_t **out, const char *dir,
                                     unsigned nslots, uid_t uid, gid_t gid,
                                     const char **why, apr_pool_t *p);

/* This region's identity: a number no other region has (a version's
 * metadata carries it, so that a version of another region, one of the
 * server before a restart included, is never taken for one of this). */
uint64_t authn_hmac_share_id(const authn_hmac_share_t *sh);

/* The version published in slot, or 0. */
uint64_t authn_hmac_share_version(const authn_hmac_share_t *sh, unsigned slot);

/* Maps version of slot read-only: its memory and size. APR_ENOENT if it
 * has gone (a newer one replaced it); at most max bytes. */
apr_status_t authn_hmac_share_map(const authn_hmac_share_t *sh, unsigned slot,
                                  uint64_t version, size_t max, void **mem,
                                  size_t *size);

/* Takes slot's build lock, waiting at most timeout: APR_SUCCESS,
 * APR_TIMEUP, or an error. A holder that died is replaced. */
apr_status_t authn_hmac_share_lock(authn_hmac_share_t *sh, unsigned slot,
                                   apr_interval_time_t timeout);
void authn_hmac_share_unlock(authn_hmac_share_t *sh, unsigned slot);

/* Under the lock: a new version, under a temporary name. */
typedef struct {
    int fd;           /* its temporary file */
    uint64_t version; /* the number it is published under */
} authn_hmac_share_new_t;

apr_status_t authn_hmac_share_begin(authn_hmac_share_t *sh, unsigned slot,
                                    authn_hmac_share_new_t *n);

/* Writes the version (used bytes at data, made in the builder's own memory:
 * the file is writable by the server's user until it is published) and
 * publishes it, replacing the version before; *version is its number. Or,
 * with used 0, drops it. */
apr_status_t authn_hmac_share_end(authn_hmac_share_t *sh, unsigned slot,
                                  authn_hmac_share_new_t *n, const void *data,
                                  size_t used, uint64_t *version);

#endif /* AUTHN_HMAC_SHARE_H */
