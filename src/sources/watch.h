/* sources/watch.h: the process's one inotify watcher. It watches files
 * (their inode) and the directories on their path, tells whether anything
 * happened since (by a count of events), and whether a watched file has a
 * writer at work; it knows nothing of what it watches them for. A forked
 * child never reads its parent's queue: it makes an instance of its own. */
#ifndef AUTHN_HMAC_WATCH_H
#define AUTHN_HMAC_WATCH_H

#include <stdint.h>

#include <apr_time.h>

/* Watches path (absolute, without a symbolic link anywhere on it, on a
 * file system whose every change inotify sees: ext2/3/4, xfs, btrfs,
 * tmpfs), its directory and every directory above: the instance that
 * watches it, and in *wd the file's watch; 0 if it cannot. */
uint64_t authn_hmac_watch_path(const char *path, int *wd);

/* Watches the file open as fd (the very inode, never one put at its path
 * since), if an instance was made and its file system is one inotify fully
 * sees: its watch, or -1. */
int authn_hmac_watch_fd(int fd);

/* Whether instance id is this process's and still sees every change (no
 * full queue, no lost directory watch). */
int authn_hmac_watch_live(uint64_t id);

/* The count of events once the queue is taken in, to check what was read
 * against: the same count, nothing happened since. 0 while another thread
 * takes the queue in, or when the watcher cannot vouch (the caller
 * stat()s). */
uint64_t authn_hmac_watch_events(void);

/* Whether the file watched as wd has no writer at work (modified and not
 * closed since), once the queue is taken in, and was watched since before
 * changed (real time): a writer that began before its watch is not seen. */
int authn_hmac_watch_quiet(int wd, apr_time_t changed);

#endif /* AUTHN_HMAC_WATCH_H */
