/* Unit tests: the per-process view of an htpasswd file
 * (src/sources/htpasswd.h, read by htfile.c, watched by watch.c): it
 * follows every change of the file, watched or stat()ed, within its
 * limits, read in pieces as the whole-file parser reads it, and answers
 * without a lock while the file is replaced. The parser alone is
 * test_htpasswd's. */
#include "sources/htpasswd.h"
#include "core/cred.h"
#include "core/secret.h"
#include "testing/testing.h"
#include "htpasswd_parse.h"
#include "unit.h"
#include "users_file.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <apr_strings.h>

/* The per-process view notices every change and never serves a stale or
 * missing file. */
static void test_userfile_follows_file(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    const char *path, *hash = NULL;
    authn_hmac_userfile_t *uf;
    size_t len = 0;
    bad_t bad;

    path = users_file(dir, "alice:AAAA\nbob:BBBB\n", p);
    uf = child_view(path, p);
    memset(&bad, 0, sizeof(bad));
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS &&
          strcmp(hash, "AAAA") == 0);
    CHECK(authn_hmac_userfile_lookup(uf, "zed", &hash, &len, note_bad, &bad,
                                     p) == APR_NOTFOUND &&
          hash && len == 4);
    /* Locked lines: the typical hash, and AUTHN_HMAC_LOCKED. */
    write_text(path, "alice:AAAA\nbob:BBBB\ncarol:\ndave:!BBBB\neve:*\n");
    CHECK(authn_hmac_userfile_lookup(uf, "carol", &hash, &len, note_bad, &bad,
                                     p) == AUTHN_HMAC_LOCKED &&
          (strcmp(hash, "AAAA") == 0 || strcmp(hash, "BBBB") == 0));
    CHECK(authn_hmac_userfile_lookup(uf, "dave", &hash, &len, note_bad, &bad,
                                     p) == AUTHN_HMAC_LOCKED &&
          (strcmp(hash, "AAAA") == 0 || strcmp(hash, "BBBB") == 0));
    CHECK(authn_hmac_userfile_lookup(uf, "eve", &hash, &len, note_bad, &bad,
                                     p) == AUTHN_HMAC_LOCKED);
    CHECK(bad.n == 1); /* carol's line is reported */
    memset(&bad, 0, sizeof(bad));
    write_text(path, "alice:AAAA\nbob:BBBB\n");
    /* Same size, new content, at once: seen on the very next lookup. */
    write_text(path, "alice:CCCC\nbob:BBBB\n");
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS &&
          strcmp(hash, "CCCC") == 0);
    /* A user removed. */
    write_text(path, "bob:BBBB\n");
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                     p) == APR_NOTFOUND);
    /* The file gone: an error, not the old index. */
    unlink(path);
    CHECK(authn_hmac_userfile_lookup(uf, "bob", &hash, &len, note_bad, &bad,
                                     p) != APR_SUCCESS);
    write_text(path, "bob:DDDD\nbad line\n");
    CHECK(authn_hmac_userfile_lookup(uf, "bob", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS &&
          strcmp(hash, "DDDD") == 0);
    CHECK(bad.n == 1 && bad.lines[0] == 2);
    /* The bad line is reported once per read of the file, not per lookup. */
    CHECK(authn_hmac_userfile_lookup(uf, "bob", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS);
    CHECK(bad.n == 1);
    remove_users_file(dir, path);
}

/* A file whose mtime was set back (rsync -t, touch -r, cp -p) but that
 * changed just now, by its ctime, is read again once the second is over:
 * a further change within the same timestamp cannot go unseen. */
static void test_recent_ctime_is_read_again(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    const char *path, *hash = NULL;
    authn_hmac_userfile_t *uf;
    struct timeval old[2];
    size_t len = 0;
    bad_t bad;

    path = users_file(dir, "alice:AAAA\n", p);
    old[0].tv_sec = old[1].tv_sec = time(NULL) - 3600;
    old[0].tv_usec = old[1].tv_usec = 0;
    CHECK(utimes(path, old) == 0);
    uf = child_view(path, p);
    memset(&bad, 0, sizeof(bad));
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS);
    CHECK(authn_hmac_userfile_reads(uf) == 1);
    usleep(1100 * 1000);
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS);
    CHECK(authn_hmac_userfile_reads(uf) == 2);
    /* Then it is settled: no more reads while nothing changes. */
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                     p) == APR_SUCCESS);
    CHECK(authn_hmac_userfile_reads(uf) == 2);
    remove_users_file(dir, path);
}

/* Whether the view answers `want` for alice (NULL: not found). */
static int alice_is(authn_hmac_userfile_t *uf, const char *want, apr_pool_t *p)
{
    const char *hash = NULL;
    size_t len = 0;
    apr_status_t rv;
    bad_t bad;

    memset(&bad, 0, sizeof(bad));
    rv =
        authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad, p);
    return want ? rv == APR_SUCCESS && strcmp(hash, want) == 0
                : rv == APR_NOTFOUND;
}

/* A watched view, read once the file is past the racy second: later
 * lookups skip the stat() until inotify reports something. */
static authn_hmac_userfile_t *settled_view(const char *path, const char *want,
                                           apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = authn_hmac_userfile_make(path, p);

    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    CHECK(authn_hmac_userfile_watch(uf) == 1);
    usleep(1100 * 1000);
    CHECK(alice_is(uf, want, p));
    CHECK(alice_is(uf, want, p));
    CHECK(authn_hmac_userfile_reads(uf) == 1);
    return uf;
}

/* A new directory where inotify sees every change (see
 * authn_hmac_userfile_watch), or NULL: /tmp is overlayfs in some
 * containers, where /dev/shm is tmpfs. */
static char *watchable_dir(apr_pool_t *p)
{
    const char *bases[] = {"/tmp", "/dev/shm", "/var/tmp"};
    size_t i;

    for (i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
        struct statfs fs;
        char *real = realpath(bases[i], NULL);
        int ok = real && strcmp(real, bases[i]) == 0 &&
                 statfs(bases[i], &fs) == 0 &&
                 ((unsigned long)fs.f_type == 0xEF53UL ||
                  (unsigned long)fs.f_type == 0x58465342UL ||
                  (unsigned long)fs.f_type == 0x9123683EUL ||
                  (unsigned long)fs.f_type == 0x01021994UL);
        char *dir = apr_pstrcat(p, bases[i], "/authn_hmac_unit.XXXXXX", NULL);

        free(real);
        if (ok && mkdtemp(dir))
            return dir;
    }
    printf("  skipped: no file system inotify fully sees at /tmp, /dev/shm "
           "or /var/tmp\n");
    return NULL;
}

/* Each way a watched file can change is seen on the very next lookup,
 * though lookups skip the stat(): a write through another name (a hard
 * link, as a bind mount's host path is), a file renamed over it (and then
 * written through another name), its directory or one above replaced. Each case
 * runs in a child of its own, as a lost directory watch sends the whole process
 * back to stat(). */
static void test_watched_file_follows_every_change(apr_pool_t *p)
{
    char *top = watchable_dir(p);
    const char *cases[] = {"link", "rename", "dir", "up"};
    int i;

    if (!top)
        return;
    for (i = 0; i < 4; i++) {
        const char *d = apr_psprintf(p, "%s/%d", top, i);
        const char *conf = apr_pstrcat(p, d, "/a/conf", NULL);
        const char *path = apr_pstrcat(p, conf, "/users", NULL);
        const char *link_ = apr_pstrcat(p, d, "/link", NULL);
        int ok;
        pid_t pid;

        CHECK(mkdir(d, 0700) == 0 &&
              mkdir(apr_pstrcat(p, d, "/a", NULL), 0700) == 0 &&
              mkdir(conf, 0700) == 0);
        write_text(path, "alice:AAAA\n");
        CHECK(link(path, link_) == 0);
        if ((pid = unit_fork()) == 0) {
            authn_hmac_userfile_t *uf = settled_view(path, "AAAA", p);

            if (strcmp(cases[i], "link") == 0) {
                write_text(link_, "alice:BBBB\n");
            }
            else if (strcmp(cases[i], "rename") == 0) {
                /* NB: and a name elsewhere for the new file, written
                 * below: the rebuild must watch the inode it read. */
                write_text(apr_pstrcat(p, conf, "/new", NULL), "alice:BBBB\n");
                CHECK(link(apr_pstrcat(p, conf, "/new", NULL),
                           apr_pstrcat(p, d, "/link2", NULL)) == 0);
                CHECK(rename(apr_pstrcat(p, conf, "/new", NULL), path) == 0);
            }
            else {
                const char *moved = strcmp(cases[i], "dir") == 0
                                        ? conf
                                        : apr_pstrcat(p, d, "/a", NULL);

                CHECK(rename(moved, apr_pstrcat(p, moved, ".old", NULL)) == 0);
                CHECK(mkdir(apr_pstrcat(p, d, "/a", NULL), 0700) == 0 ||
                      errno == EEXIST);
                CHECK(mkdir(conf, 0700) == 0);
                write_text(path, "alice:BBBB\n");
            }
            CHECK(alice_is(uf, "BBBB", p));
            /* And again once settled, then in place through its path. */
            usleep(1100 * 1000);
            CHECK(alice_is(uf, "BBBB", p));
            CHECK(alice_is(uf, "BBBB", p));
            write_text(strcmp(cases[i], "rename") == 0
                           ? apr_pstrcat(p, d, "/link2", NULL)
                           : path,
                       "alice:CCCC\n");
            CHECK(alice_is(uf, "CCCC", p));
            _exit(unit_failures ? 1 : 0);
        }
        ok = unit_child_passed(pid);
        CHECK(ok);
        if (!ok)
            printf("  case %s failed\n", cases[i]);
    }
    CHECK(system(apr_pstrcat(p, "rm -rf ", top, NULL)) == 0);
}

/* A view watched in a parent is not watched in its forked child, which
 * stat()s; the parent still sees the child's change. */
static void test_forked_child_stats(apr_pool_t *p)
{
    char *dir = watchable_dir(p);
    authn_hmac_userfile_t *uf;
    const char *path;
    pid_t pid;

    if (!dir)
        return;
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_text(path, "alice:AAAA\n");
    uf = settled_view(path, "AAAA", p);
    if ((pid = unit_fork()) == 0) {
        /* NB: the parent's queue is not this process's to read. */
        usleep(1100 * 1000);
        write_text(path, "alice:BBBB\n");
        CHECK(alice_is(uf, "BBBB", p));
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    CHECK(alice_is(uf, "BBBB", p));
    remove_users_file(dir, path);
}

/* A path through a symbolic link is never watched: the link could change
 * without an event on what is watched. */
static void test_symlinked_path_is_not_watched(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    authn_hmac_userfile_t *uf;
    const char *path, *alias;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    alias = apr_pstrcat(p, dir, "/alias", NULL);
    write_text(path, "alice:AAAA\n");
    CHECK(symlink(path, alias) == 0);
    uf = child_view(alias, p);
    CHECK(authn_hmac_userfile_watch(uf) == 0);
    CHECK(alice_is(uf, "AAAA", p));
    unlink(alias);
    remove_users_file(dir, path);
}

/* A watched path that becomes a symbolic link is stat()ed from then on:
 * the link's target, and a link on the way to it (a release directory
 * swapped with ln -sfn), could change without an event on what is
 * watched. */
static void test_path_becoming_a_symlink_is_stated(apr_pool_t *p)
{
    char *dir = watchable_dir(p);
    authn_hmac_userfile_t *uf;
    const char *path, *hash = NULL;
    size_t len = 0;
    pid_t pid;

    if (!dir)
        return;
    /* NB: the links are in a directory above the file's: one watched
     * only for being moved or removed. */
    path = apr_pstrcat(p, dir, "/conf/users", NULL);
    CHECK(mkdir(apr_pstrcat(p, dir, "/conf", NULL), 0700) == 0 &&
          mkdir(apr_pstrcat(p, dir, "/v1", NULL), 0700) == 0 &&
          mkdir(apr_pstrcat(p, dir, "/v2", NULL), 0700) == 0);
    write_text(path, "alice:AAAA\n");
    write_text(apr_pstrcat(p, dir, "/v1/users", NULL), "alice:BBBB\n");
    write_text(apr_pstrcat(p, dir, "/v2/users", NULL), "bob:CCCC\n");
    CHECK(symlink("v1", apr_pstrcat(p, dir, "/current", NULL)) == 0);
    if ((pid = unit_fork()) == 0) {
        uf = settled_view(path, "AAAA", p);
        CHECK(symlink("../current/users",
                      apr_pstrcat(p, dir, "/conf/tmp", NULL)) == 0);
        CHECK(rename(apr_pstrcat(p, dir, "/conf/tmp", NULL), path) == 0);
        CHECK(alice_is(uf, "BBBB", p));
        usleep(1100 * 1000);
        CHECK(alice_is(uf, "BBBB", p));
        CHECK(alice_is(uf, "BBBB", p));
        /* Release v2, without alice: ln -sfn v2 current. */
        CHECK(symlink("v2", apr_pstrcat(p, dir, "/next", NULL)) == 0);
        CHECK(rename(apr_pstrcat(p, dir, "/next", NULL),
                     apr_pstrcat(p, dir, "/current", NULL)) == 0);
        CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, NULL, NULL,
                                         p) == APR_NOTFOUND);
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    CHECK(system(apr_pstrcat(p, "rm -rf ", dir, NULL)) == 0);
}

/* A file on a file system of its own, mounted on the path in a watched
 * directory, is watched only if inotify sees every change made there:
 * here an overlay (as a file bind-mounted from NFS would be), changed
 * through its upper layer. Needs root; skipped without it. */
static void test_file_mounted_from_elsewhere_is_stated(apr_pool_t *p)
{
    char *dir = watchable_dir(p);
    pid_t pid;

    if (!dir)
        return;
    if ((pid = unit_fork()) == 0) {
        const char *ov = apr_psprintf(p,
                                      "lowerdir=%s/lo,upperdir=%s/up,"
                                      "workdir=%s/wk",
                                      dir, dir, dir);
        const char *path = apr_pstrcat(p, dir, "/conf/users", NULL);
        authn_hmac_userfile_t *uf;

        CHECK(system(apr_psprintf(p, "cd %s && mkdir lo up wk ov conf", dir)) ==
              0);
        write_text(apr_pstrcat(p, dir, "/up/users", NULL), "alice:AAAA\n");
        write_text(path, "");
        if (unshare(CLONE_NEWNS) != 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("overlay", apr_pstrcat(p, dir, "/ov", NULL), "overlay", 0,
                  ov) != 0 ||
            mount(apr_pstrcat(p, dir, "/ov/users", NULL), path, NULL, MS_BIND,
                  NULL) != 0) {
            printf("  skipped: cannot mount (%s)\n", strerror(errno));
            _exit(unit_failures ? 1 : 0);
        }
        uf = settled_view(path, "AAAA", p);
        write_text(apr_pstrcat(p, dir, "/up/users", NULL), "alice:BBBB\n");
        CHECK(alice_is(uf, "BBBB", p));
        _exit(unit_failures ? 1 : 0);
    }
    CHECK(unit_child_passed(pid));
    CHECK(system(apr_pstrcat(p, "rm -rf ", dir, NULL)) == 0);
}

/* Status of a lookup of alice. */
static apr_status_t alice_rv(authn_hmac_userfile_t *uf, apr_pool_t *p)
{
    const char *hash = NULL;
    size_t len = 0;
    bad_t bad;

    memset(&bad, 0, sizeof(bad));
    return authn_hmac_userfile_lookup(uf, "alice", &hash, &len, note_bad, &bad,
                                      p);
}

/* A text of exactly n bytes (n >= 12) that is alice's entry. */
static void write_sized(const char *path, size_t n)
{
    FILE *f = fopen(path, "w");

    fputs("alice:", f);
    for (n -= 7; n > 0; n--)
        fputc('A', f);
    fputc('\n', f);
    fclose(f);
}

/* The limits on what views of files named in .htaccess may hold: one
 * file's size, and a budget shared by several, which a file read again
 * does not count twice. */
static void test_size_limit_and_budget(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    authn_hmac_budget_t budget = {0, 100};
    authn_hmac_userfile_t *a, *b, *c;
    const char *pa, *pb, *pc;

    CHECK(mkdtemp(dir) != NULL);
    pa = apr_pstrcat(p, dir, "/a", NULL);
    pb = apr_pstrcat(p, dir, "/b", NULL);
    pc = apr_pstrcat(p, dir, "/c", NULL);
    a = authn_hmac_userfile_make(pa, p);
    b = authn_hmac_userfile_make(pb, p);
    c = authn_hmac_userfile_make(pc, p);
    authn_hmac_userfile_limit(a, 1000, &budget);
    authn_hmac_userfile_limit(b, 1000, &budget);
    authn_hmac_userfile_limit(c, 20, NULL);
    CHECK(authn_hmac_userfile_child_init(a, p) == APR_SUCCESS &&
          authn_hmac_userfile_child_init(b, p) == APR_SUCCESS &&
          authn_hmac_userfile_child_init(c, p) == APR_SUCCESS);
    write_sized(pc, 21);
    CHECK(alice_rv(c, p) == APR_ENOSPC);
    write_sized(pc, 20);
    CHECK(alice_rv(c, p) == APR_SUCCESS);
    write_sized(pa, 60);
    write_sized(pb, 60);
    CHECK(alice_rv(a, p) == APR_SUCCESS && budget.used == 60);
    CHECK(alice_rv(b, p) == APR_ENOSPC && budget.used == 60);
    write_sized(pa, 70);
    CHECK(alice_rv(a, p) == APR_SUCCESS && budget.used == 70);
    CHECK(alice_rv(b, p) == APR_ENOSPC);
    write_sized(pa, 30);
    CHECK(alice_rv(a, p) == APR_SUCCESS && budget.used == 30);
    CHECK(alice_rv(b, p) == APR_SUCCESS && budget.used == 90);
    /* Gone: refused, its index kept (and counted) until it is back. */
    unlink(pa);
    CHECK(alice_rv(a, p) != APR_SUCCESS && budget.used == 90);
    write_sized(pa, 10);
    CHECK(alice_rv(a, p) == APR_SUCCESS && budget.used == 70);
    unlink(pa);
    unlink(pb);
    unlink(pc);
    rmdir(dir);
}

/* A FIFO, a directory or a device at the path is refused from its stat,
 * without an open() that could block the worker. */
static void test_not_a_regular_file(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    const char *path, *paths[3];
    authn_hmac_userfile_t *uf;
    int i;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/fifo", NULL);
    CHECK(mkfifo(path, 0600) == 0);
    paths[0] = path;
    paths[1] = dir;
    paths[2] = "/dev/zero";
    for (i = 0; i < 3; i++) {
        apr_time_t t0 = apr_time_now();

        uf = child_view(paths[i], p);
        CHECK(alice_rv(uf, p) == APR_EBADF);
        CHECK(apr_time_now() - t0 < apr_time_from_sec(1));
        CHECK(authn_hmac_userfile_reads(uf) == 0);
    }
    remove_users_file(dir, path);
}

/* A logical line longer than the 4 MiB piece the file is read in (one
 * physical line, or many joined by a final backslash) is one line, too
 * long, as the whole-file parser reads it: what lies past the piece's end
 * is not a line of its own. Else a field someone else fills (a comment)
 * could name any user with any hash, at a place that does not depend on
 * where the line starts (a piece begins where a line does). */
static void test_line_longer_than_a_piece(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    const size_t piece = (size_t)4 << 20;
    static const char tail[] = "alice:EVIL\nalice:GOOD\n";
    const char *path, *hash = NULL;
    authn_hmac_userfile_t *uf;
    int cont;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    for (cont = 0; cont < 2; cont++) {
        size_t len = piece + sizeof(tail) - 1, i;
        char *text = malloc(len + 1);
        authn_hmac_htpasswd_t *idx;
        size_t hl = 0;
        bad_t bad;
        FILE *f;

        /* "bob:BBBB:" and a comment up to the piece's end, alice's line
         * after it; or bob's line followed by lines "x\" to the end. */
        memset(text, 'x', piece);
        memcpy(text, "bob:BBBB:", 9);
        if (cont) {
            memcpy(text, "bob:BBBB\\\n", 10);
            for (i = 11; i < piece; i += 3) {
                text[i] = '\\';
                text[i + 1] = '\n';
            }
            text[piece - 2] = '\\';
            text[piece - 1] = '\n';
        }
        memcpy(text + piece, tail, sizeof(tail) - 1);
        text[len] = '\0';
        f = fopen(path, "w");
        CHECK(f && fwrite(text, 1, len, f) == len);
        fclose(f);
        /* The whole-file parser: one long line, then alice's. */
        idx = parse(p, text, len, &bad);
        CHECK(has(idx, "alice", "EVIL") == 0 && has(idx, "alice", "GOOD"));
        /* The file read in pieces: the same. */
        uf = child_view(path, p);
        CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &hl, NULL, NULL,
                                         p) == APR_SUCCESS &&
              strcmp(hash, "GOOD") == 0);
        free(text);
    }
    remove_users_file(dir, path);
}

/* Lookups take no lock while another thread replaces the file again and
 * again (as htpasswd does: a new file renamed over it): each answer is one
 * of the two contents, whole; none is missing, none is torn, and no index
 * is freed under a reader (ASan and valgrind run this too). */
static int id_is(authn_hmac_userfile_t *uf, const char *user,
                 const authn_hmac_mac_t *mac, const char *scope, apr_pool_t *p)
{
    unsigned char id[AUTHN_HMAC_KEY_LEN], want[AUTHN_HMAC_KEY_LEN];
    unsigned char d[AUTHN_HMAC_DIGEST_LEN], dwant[AUTHN_HMAC_DIGEST_LEN];
    const char *hash = NULL;
    size_t len = 0;

    authn_hmac_user_id(mac, scope, strlen(scope), user, strlen(user), want);
    if (authn_hmac_userfile_lookup_id(uf, user, mac, scope, strlen(scope),
                                      &hash, &len, id, d, NULL, NULL, p,
                                      NULL) != APR_SUCCESS)
        return 0;
    authn_hmac_cred_digest(scope, strlen(scope), user, strlen(user), hash, len,
                           dwant);
    return memcmp(id, want, sizeof(id)) == 0 &&
           memcmp(d, dwant, sizeof(d)) == 0;
}

/* The user's id and the digest come with the hash, kept after the first
 * lookup: right for each MAC and scope asked with, kept or not, and
 * through a change of the file (alice's hash changes); an unknown user
 * gets none. */
static void test_user_id_is_kept(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    authn_hmac_secret_t *pep1 = NULL, *pep2 = NULL;
    authn_hmac_mac_t *m1, *m2;
    authn_hmac_userfile_t *uf;
    unsigned char id[AUTHN_HMAC_KEY_LEN], none[AUTHN_HMAC_KEY_LEN];
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];
    const char *path, *hash = NULL;
    size_t len = 0;
    int round;

    CHECK(authn_hmac_secret_random(&pep1, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_secret_random(&pep2, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&m1, pep1, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&m2, pep2, p) == APR_SUCCESS);
    path = users_file(dir, "alice:AAAA\nbob:BBBB\n", p);
    uf = child_view(path, p);
    for (round = 0; round < 2; round++) {
        CHECK(id_is(uf, "alice", m1, "/s1", p));
        CHECK(id_is(uf, "alice", m1, "/s1", p)); /* kept */
        CHECK(id_is(uf, "alice", m1, "/s2", p));
        CHECK(id_is(uf, "alice", m1, "/s1x", p));
        CHECK(id_is(uf, "alice", m1, "/s", p));
        CHECK(id_is(uf, "alice", m2, "/s1", p));
        CHECK(id_is(uf, "alice", m1, "/s1", p));
        CHECK(id_is(uf, "bob", m2, "/s1", p));
        CHECK(id_is(uf, "bob", m1, "/s1", p));
        memset(id, 0xa5, sizeof(id));
        memcpy(none, id, sizeof(id));
        CHECK(authn_hmac_userfile_lookup_id(uf, "carol", m1, "/s1", 3, &hash,
                                            &len, id, d, NULL, NULL, p,
                                            NULL) == APR_NOTFOUND);
        CHECK(memcmp(id, none, sizeof(id)) == 0);
        sleep(1); /* a change within the same second is seen too, later */
        write_text(path, "bob:BBBB\nalice:CCCC\n");
    }
    remove_users_file(dir, path);
}

typedef struct {
    authn_hmac_userfile_t *uf;
    const authn_hmac_mac_t *mac; /* NULL: no id asked for */
    int lookups, bad;
} reader_t;

static volatile int replacing;

static void *reader(void *arg)
{
    reader_t *r = arg;
    apr_pool_t *p;
    int i;

    apr_pool_create(&p, NULL);
    for (i = 0; i < 20000 || replacing; i++) {
        const char *hash = NULL;
        size_t len = 0;
        unsigned char id[AUTHN_HMAC_KEY_LEN], want[AUTHN_HMAC_KEY_LEN];
        unsigned char d[AUTHN_HMAC_DIGEST_LEN], dwant[AUTHN_HMAC_DIGEST_LEN];
        /* NB: as a request makes it: a deny from a reading the rename
         * tore is asked again of the quiet file. */
        apr_status_t rv = authn_hmac_userfile_lookup_settled(
            r->uf, "alice", r->mac, "/s", 2, &hash, &len, id, d, p);

        if (rv != APR_SUCCESS ||
            (strcmp(hash, "AAAA") != 0 && strcmp(hash, "BBBBBBBB") != 0))
            r->bad++;
        if (r->mac && rv == APR_SUCCESS) {
            authn_hmac_user_id(r->mac, "/s", 2, "alice", 5, want);
            r->bad += memcmp(id, want, sizeof(id)) != 0;
            /* NB: the digest of the very hash answered with. */
            authn_hmac_cred_digest("/s", 2, "alice", 5, hash, len, dwant);
            r->bad += memcmp(d, dwant, sizeof(d)) != 0;
        }
        r->lookups++;
        if (i % 256 == 0)
            apr_pool_clear(p);
    }
    apr_pool_destroy(p);
    return NULL;
}

static void test_lookups_without_lock_while_replaced(apr_pool_t *p)
{
    char dir[] = "/tmp/authn_hmac_unit.XXXXXX";
    const char *path, *tmp;
    authn_hmac_userfile_t *uf;
    reader_t r[4];
    pthread_t th[4];
    authn_hmac_secret_t *pep = NULL;
    authn_hmac_mac_t *mac;
    unsigned before;
    int i;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    tmp = apr_pstrcat(p, dir, "/users.tmp", NULL);
    write_text(path, "alice:AAAA\n");
    uf = child_view(path, p);
    before = authn_hmac_userfile_reads(uf);
    replacing = 1;
    CHECK(authn_hmac_secret_random(&pep, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mac, pep, p) == APR_SUCCESS);
    for (i = 0; i < 4; i++) {
        r[i].uf = uf;
        r[i].mac = i % 2 ? mac : NULL; /* half ask for the id, kept or made */
        r[i].lookups = r[i].bad = 0;
        CHECK(pthread_create(&th[i], NULL, reader, &r[i]) == 0);
    }
    for (i = 0; i < 200; i++) {
        write_text(tmp, i % 2 ? "alice:AAAA\n" : "alice:BBBBBBBB\n");
        CHECK(rename(tmp, path) == 0);
        usleep(1000);
    }
    replacing = 0;
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(r[i].bad == 0);
        CHECK(r[i].lookups >= 20000);
    }
    /* The replacements were seen (each a new inode): read many times. */
    CHECK(authn_hmac_userfile_reads(uf) - before > 20);
    remove_users_file(dir, path);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_userfile_follows_file, p);
    RUN(test_recent_ctime_is_read_again, p);
    RUN(test_line_longer_than_a_piece, p);
    RUN(test_not_a_regular_file, p);
    RUN(test_user_id_is_kept, p);
    RUN(test_lookups_without_lock_while_replaced, p);
    RUN(test_watched_file_follows_every_change, p);
    RUN(test_forked_child_stats, p);
    RUN(test_symlinked_path_is_not_watched, p);
    RUN(test_path_becoming_a_symlink_is_stated, p);
    RUN(test_file_mounted_from_elsewhere_is_stated, p);
    RUN(test_size_limit_and_budget, p);
    return unit_end();
}
