/* sources/htpasswd.h: a process's view of an htpasswd file, read again
 * when it changes, shared by the server's children where
 * authn_hmac_userfile_share set it up. */
#ifndef AUTHN_HMAC_HTPASSWD_H
#define AUTHN_HMAC_HTPASSWD_H

#include "core/cred.h"
#include "sources/index.h"
#include "shm/share.h"
#include "shm/table.h"

#include <apr_errno.h>

/* A per-process view of one htpasswd file, rebuilt when the file changes. */
typedef struct authn_hmac_userfile authn_hmac_userfile_t;

/* Made at configuration time; path must be absolute. */
authn_hmac_userfile_t *authn_hmac_userfile_make(const char *path,
                                                apr_pool_t *p);

/* Bytes that several views may hold between them (their files' sizes). */
typedef struct {
    uint64_t used, max;
} authn_hmac_budget_t;

/* Before child_init: read a file of at most max_bytes (1 GiB by default),
 * and, with budget, only while all the views sharing it hold at most
 * budget->max bytes. A file over either is refused with APR_ENOSPC. */
void authn_hmac_userfile_limit(authn_hmac_userfile_t *uf, apr_off_t max_bytes,
                               authn_hmac_budget_t *budget);

/* Before child_init, in the parent: the view's versions are shared in slot
 * of sh, their blocks tagged under mac, and what cannot be shared (no
 * space, a version altered) is told to warn; the view then reads the file
 * itself, as it does without sh; a process that keeps its own index is
 * counted in counts (index_private), if given. */
void authn_hmac_userfile_share(authn_hmac_userfile_t *uf,
                               authn_hmac_share_t *sh, unsigned slot,
                               const authn_hmac_mac_t *mac,
                               authn_hmac_table_t *counts,
                               authn_hmac_log_fn warn, void *baton);

/* Once per child process, before any lookup. */
apr_status_t authn_hmac_userfile_child_init(authn_hmac_userfile_t *uf,
                                            apr_pool_t *pchild);

/* After child_init, for a view that lives as long as the process: lookups
 * then skip the stat() while inotify reports nothing about the file, its
 * directory or any directory above it. Only where that sees every change:
 * a path without symbolic links, on a local file system (ext2/3/4, xfs,
 * btrfs, tmpfs); otherwise, or when any watch cannot be made or is lost,
 * every lookup stat()s the file. Returns whether the file is watched. */
int authn_hmac_userfile_watch(authn_hmac_userfile_t *uf);

/* A user whose line locks it out (not an error of the file's: APR_EACCES
 * is one). */
#define AUTHN_HMAC_LOCKED (APR_OS_START_USERERR + 1)

/* What a lookup's answer was read from; told of every answer, a grant's
 * too: a deny of a known user's wrong password waits as an unknown user's
 * does (see authn_hmac_userfile_unsettled). */
typedef struct {
    int racy;           /* read less than a second after the change */
    apr_time_t changed; /* when the file changed (real time) */
    apr_time_t read_at; /* when it was read (monotonic) */
    apr_off_t size;
    int unsure; /* the user's line not taken (torn, or the last maybe cut) */
} authn_hmac_reading_t;

/* Whether a deny (or busy) from rd's reading, asked for at (monotonic,
 * taken before the lookup), may come of a writer's half-written file: the
 * file changed, or was read, less than a second before. The request that
 * ends in any answer but a grant from such a reading waits for the file to
 * be quiet and looks again (authn_hmac_userfile_settle). */
int authn_hmac_userfile_unsettled(const authn_hmac_reading_t *rd,
                                  apr_time_t at);

/* Looks user up, first rebuilding the index if the file's dev, inode, size,
 * mtime or ctime changed; never waits: the answer is from the file as it
 * is now. Returns APR_SUCCESS and a copy of the hash in p;
 * APR_NOTFOUND for an unknown user, and AUTHN_HMAC_LOCKED for a locked one
 * (authn_hmac_hash_locked), each with a copy of the file's typical hash
 * (NULL in a file without one); or the error that kept the file from being read
 * (the index is then dropped: nothing stale can be used). Malformed lines
 * are told to bad (see sources/index.h), once per reading.
 * With mac, on APR_SUCCESS, id is also the user's id for scope under mac
 * (authn_hmac_user_id) and digest the digest of scope, user and hash
 * (authn_hmac_cred_digest), worked out on the user's first lookup in this
 * reading of the file and kept with its entry: a hit then makes one short
 * MAC. What was kept for another MAC or scope is not used. Without mac,
 * scope, id and digest are not used. rd (may be NULL): what the answer was
 * read from. */
apr_status_t authn_hmac_userfile_lookup_id(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_log_fn bad,
    void *baton, apr_pool_t *p, authn_hmac_reading_t *rd);

/* After a lookup whose reading rd is unsettled, at the deny (since,
 * monotonic): waits until the file is quiet (read 50 ms ago and unchanged
 * since, its change 50 ms old, no writer at work that inotify saw; a watch
 * begun after the change waits for the change to be a second old), until
 * a second after since at most, then answers as authn_hmac_userfile_
 * lookup_id from the quiet file (rd: its reading). The wait does not
 * depend on the user or the answer: every deny (or busy) pays the same. */
apr_status_t authn_hmac_userfile_settle(
    authn_hmac_userfile_t *uf, const char *user, const authn_hmac_mac_t *mac,
    const char *scope, size_t scope_len, const char **hash, size_t *hash_len,
    unsigned char id[AUTHN_HMAC_KEY_LEN],
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN], authn_hmac_log_fn bad,
    void *baton, apr_pool_t *p, authn_hmac_reading_t *rd, apr_time_t since);

/* After child_init, for a shared view: a thread of this process (one for
 * all views) lets go, within a second, of a version the server has
 * replaced, so that a process without requests does not hold its memory.
 * Stopped with pchild. */
apr_status_t authn_hmac_userfile_reaper(authn_hmac_userfile_t *uf,
                                        apr_pool_t *pchild);

#endif /* AUTHN_HMAC_HTPASSWD_H */
