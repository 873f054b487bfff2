/* Unit tests: one index per server, shared by its processes
 * (src/shm/share.c, and the shared views of src/sources/htpasswd.c and
 * src/sources/htfile.c): the build, publish and free cycle, a builder killed
 * mid-build, readers that hold an old version across rebuilds, and versions
 * altered or made for another file, which are never taken for the truth. */
#include "sources/htpasswd.h"
#include "core/cred.h"
#include "core/secret.h"
#include "testing/testing.h"
#include "unit.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <apr_strings.h>

static authn_hmac_mac_t *mac;
static char *dir, *idx_dir;
static int warnings;
static char last_warning[512];

static void note_warning(void *baton, int level, const char *msg)
{
    (void)baton;
    CHECK(level == AUTHN_HMAC_LOG_WARNING);
    warnings++;
    snprintf(last_warning, sizeof(last_warning), "%s", msg);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    fputs(text, f);
    fclose(f);
}

/* Rewrites path with text, a new inode (a rename, as editors do), so that
 * the change is seen whatever the clock. */
static void replace(apr_pool_t *p, const char *path, const char *text)
{
    char *tmp = apr_pstrcat(p, path, ".new", NULL);

    write_text(tmp, text);
    CHECK(rename(tmp, path) == 0);
}

/* A process's view of path, sharing slot 0 of sh. */
static authn_hmac_userfile_t *view(apr_pool_t *p, const char *path,
                                   authn_hmac_share_t *sh)
{
    authn_hmac_userfile_t *uf = authn_hmac_userfile_make(path, p);

    authn_hmac_userfile_share(uf, sh, 0, mac, NULL, note_warning, NULL);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    /* NB: watched (on a local file system): an unwatched view cannot vouch
     * for a racy version another made, and reads the file itself. */
    (void)authn_hmac_userfile_watch(uf);
    return uf;
}

static int hash_is(authn_hmac_userfile_t *uf, const char *user,
                   const char *want, apr_pool_t *p)
{
    const char *hash = NULL;
    size_t len = 0;
    unsigned char id[AUTHN_HMAC_KEY_LEN], digest[AUTHN_HMAC_DIGEST_LEN];
    apr_status_t rv =
        authn_hmac_userfile_lookup_id(uf, user, mac, "scope", 5, &hash, &len,
                                      id, digest, NULL, NULL, p, NULL);

    if (!want)
        return rv == APR_NOTFOUND;
    return rv == APR_SUCCESS && strcmp(hash, want) == 0;
}

/* The version files in the directory: how many (n), and the path of the
 * last one read (in p's memory; NULL without p). */
static char *scan_versions(apr_pool_t *p, int *n)
{
    DIR *d = opendir(idx_dir);
    struct dirent *de;
    char *last = NULL;

    *n = 0;
    while (d && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && !strstr(de->d_name, ".new")) {
            ++*n;
            if (p)
                last = apr_pstrcat(p, idx_dir, "/", de->d_name, NULL);
        }
    if (d)
        closedir(d);
    return last;
}

static int versions(void)
{
    int n;

    scan_versions(NULL, &n);
    return n;
}

static authn_hmac_share_t *region(apr_pool_t *p)
{
    authn_hmac_share_t *sh = NULL;
    const char *why = NULL;

    CHECK(authn_hmac_share_create(&sh, idx_dir, 1, (uid_t)-1, 0, &why, p) ==
          APR_SUCCESS);
    return sh;
}

/* One process builds and publishes; another takes it without reading the
 * file; a change makes one new version, and the one before is unlinked. */
static void test_build_publish_free(apr_pool_t *p)
{
    char *path = apr_pstrcat(p, dir, "/cycle", NULL);
    authn_hmac_share_t *sh = region(p);
    authn_hmac_userfile_t *a, *b;
    unsigned built, adopted;

    write_text(path, "alice:AAAA\nbob:BBBB\n");
    a = view(p, path, sh);
    b = view(p, path, sh);
    sleep(1); /* NB: not racy: b need not read the file to trust a's */
    CHECK(hash_is(a, "alice", "AAAA", p));
    CHECK(authn_hmac_share_version(sh, 0) == 1);
    CHECK(hash_is(b, "bob", "BBBB", p));
    CHECK(hash_is(b, "carol", NULL, p));
    CHECK(authn_hmac_userfile_reads(a) == 1 &&
          authn_hmac_userfile_reads(b) == 0);
    authn_hmac_userfile_shared(b, &built, &adopted);
    CHECK(built == 0 && adopted == 1);
    CHECK(versions() == 1);
    replace(p, path, "alice:CCCC\n");
    CHECK(hash_is(b, "alice", "CCCC", p)); /* b builds this one */
    CHECK(hash_is(b, "bob", NULL, p));     /* removed: at once */
    CHECK(hash_is(a, "bob", NULL, p));
    CHECK(hash_is(a, "alice", "CCCC", p));
    CHECK(authn_hmac_share_version(sh, 0) == 2);
    CHECK(versions() == 1);
}

/* A reader that maps a version keeps reading it after two rebuilds have
 * unlinked it; the directory keeps only the newest. */
static void test_reader_holds_old_version(apr_pool_t *p)
{
    char *path = apr_pstrcat(p, dir, "/hold", NULL);
    authn_hmac_share_t *sh = region(p);
    authn_hmac_userfile_t *a;
    authn_hmac_index_t *v = apr_pcalloc(p, sizeof(*v));
    authn_hmac_index_entry_t e;
    unsigned char copy[AUTHN_HMAC_INDEX_COPY];
    void *mem = NULL, *gone = NULL;
    size_t size = 0, gone_size = 0;
    uint32_t ord;
    uint64_t off;

    write_text(path, "alice:OLD1\n");
    a = view(p, path, sh);
    CHECK(hash_is(a, "alice", "OLD1", p));
    CHECK(authn_hmac_share_map(sh, 0, 1, 1 << 20, &mem, &size) == APR_SUCCESS);
    replace(p, path, "alice:NEW2\n");
    CHECK(hash_is(a, "alice", "NEW2", p));
    replace(p, path, "alice:NEW3\n");
    CHECK(hash_is(a, "alice", "NEW3", p));
    CHECK(authn_hmac_share_version(sh, 0) == 3);
    CHECK(versions() == 1);
    CHECK(authn_hmac_share_map(sh, 0, 1, 1 << 20, &gone, &gone_size) ==
          APR_ENOENT); /* gone by name, still read by who maps it */
    CHECK(authn_hmac_index_open(v, mem, size, mac) == APR_SUCCESS);
    off = authn_hmac_index_find(v, "alice", 5, &ord);
    CHECK(off && authn_hmac_index_entry(v, off, copy, &e) == APR_SUCCESS &&
          strcmp(e.hash, "OLD1") == 0);
    munmap(mem, size);
}

/* A builder that dies holding the lock, its version half written: the
 * next build takes the lock, and nothing of the dead one is ever read. */
static void test_builder_killed_mid_build(apr_pool_t *p)
{
    char *path = apr_pstrcat(p, dir, "/killed", NULL);
    authn_hmac_share_t *sh = region(p);
    authn_hmac_userfile_t *a;
    int fds[2];
    pid_t pid;
    char c;

    write_text(path, "alice:AAAA\n");
    CHECK(pipe(fds) == 0);
    pid = fork();
    if (pid == 0) {
        authn_hmac_share_new_t n;

        static char junk[1 << 16];

        if (authn_hmac_share_lock(sh, 0, apr_time_from_sec(5)) != APR_SUCCESS ||
            authn_hmac_share_begin(sh, 0, &n) != APR_SUCCESS)
            _exit(1);
        memset(junk, 'x', sizeof(junk)); /* half a version, never ended */
        if (write(n.fd, junk, sizeof(junk)) != (ssize_t)sizeof(junk))
            _exit(1);
        (void)write(fds[1], "b", 1);
        pause();
        _exit(0);
    }
    CHECK(read(fds[0], &c, 1) == 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    a = view(p, path, sh);
    CHECK(hash_is(a, "alice", "AAAA", p));
    CHECK(authn_hmac_share_version(sh, 0) ==
          1); /* the dead one published none */
    CHECK(versions() == 1);
    close(fds[0]);
    close(fds[1]);
}

/* Flips one byte of the published version's entries, as anyone running as
 * the server's user could: a process that takes it finds the entry does
 * not verify, says so, and reads the file itself. */
static void tamper(const char *file, const char *from, const char *to)
{
    int fd;
    struct stat st;
    char *m;

    CHECK(chmod(file, 0600) == 0);
    fd = open(file, O_RDWR);
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
             0);
    CHECK(m != MAP_FAILED);
    if (m != MAP_FAILED) {
        char *at = memmem(m, (size_t)st.st_size, from, strlen(from));

        CHECK(at != NULL);
        if (at)
            memcpy(at, to, strlen(to));
        munmap(m, (size_t)st.st_size);
    }
    close(fd);
}

static char *version_file(apr_pool_t *p)
{
    int n;

    return scan_versions(p, &n);
}

static void test_altered_version_is_refused(apr_pool_t *p)
{
    char *path = apr_pstrcat(p, dir, "/altered", NULL), *file;
    authn_hmac_share_t *sh = region(p);
    authn_hmac_userfile_t *a, *b;

    write_text(path, "alice:$2y$05$AAAAAAAAAAAAAAAAAAAAAA\n"
                     "mallory:$2y$05$MMMMMMMMMMMMMMMMMMMMMM\n");
    a = view(p, path, sh);
    sleep(1);
    CHECK(hash_is(a, "alice", "$2y$05$AAAAAAAAAAAAAAAAAAAAAA", p));
    file = version_file(p);
    CHECK(file != NULL);
    if (!file)
        return;
    /* alice's hash made mallory's: the tag of its block no longer holds */
    tamper(file, "$2y$05$AAAA", "$2y$05$MMMM");
    warnings = 0;
    b = view(p, path, sh);
    CHECK(hash_is(b, "alice", "$2y$05$AAAAAAAAAAAAAAAAAAAAAA", p));
    CHECK(warnings == 1 && strstr(last_warning, "does not verify"));
    CHECK(authn_hmac_userfile_reads(b) == 1); /* it read the file itself */
}

/* A version made for another file (same slot, its metadata names the
 * other path) is not taken. */
static void test_version_of_another_file(apr_pool_t *p)
{
    char *one = apr_pstrcat(p, dir, "/one", NULL);
    char *two = apr_pstrcat(p, dir, "/two", NULL);
    authn_hmac_share_t *sh = region(p);
    authn_hmac_userfile_t *a, *b;
    unsigned built, adopted;

    write_text(one, "alice:ONE1\n");
    write_text(two, "alice:TWO2\n");
    a = view(p, one, sh);
    b = view(p, two, sh); /* the same slot: a misconfiguration, or a forgery */
    sleep(1);
    CHECK(hash_is(a, "alice", "ONE1", p));
    CHECK(hash_is(b, "alice", "TWO2", p));
    authn_hmac_userfile_shared(b, &built, &adopted);
    CHECK(adopted == 0 && built == 1);
}

/* Mappings of this process whose file name holds what. */
static int mapped(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int n = 0;

    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, what))
            n++;
    if (f)
        fclose(f);
    return n;
}

/* A process that gets no request lets go of a version the server has
 * replaced within a second or two (its reaper), not at its next request. */
static void test_idle_process_lets_go(apr_pool_t *p)
{
    char *path = apr_pstrcat(p, dir, "/idle", NULL), *old;
    authn_hmac_share_t *sh = region(p);
    authn_hmac_userfile_t *a, *b;
    int i;

    write_text(path, "alice:AAAA\n");
    a = view(p, path, sh);
    b = view(p, path, sh);
    sleep(1);
    CHECK(hash_is(a, "alice", "AAAA", p));
    CHECK(hash_is(b, "alice", "AAAA", p));
    CHECK(authn_hmac_userfile_reaper(a, p) == APR_SUCCESS);
    old = apr_pstrcat(p, strrchr(version_file(p), '/'), NULL);
    CHECK(mapped(old) == 2);
    replace(p, path, "alice:BBBB\n");
    CHECK(hash_is(b, "alice", "BBBB", p)); /* b moves on, a is idle */
    CHECK(mapped(old) == 1);
    for (i = 0; i < 30 && mapped(old) > 0; i++)
        usleep(100 * 1000);
    CHECK(mapped(old) == 0);
    CHECK(hash_is(a, "alice", "BBBB", p));
}

/* A process that cannot share the index (its directory went) keeps its
 * own, says so, and is counted (the status page's index_private, which
 * authn-hmac-stat --check warns of). */
static void test_cannot_share_is_counted(apr_pool_t *p)
{
    char *path = apr_pstrcat(p, dir, "/unshared", NULL);
    char *gone = apr_pstrcat(p, dir, "/gone", NULL);
    size_t size = authn_hmac_table_size(1 << 20);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    authn_hmac_table_t *t;
    authn_hmac_share_t *sh = NULL;
    authn_hmac_userfile_t *uf;
    const char *why = NULL;

    CHECK(m != MAP_FAILED);
    CHECK(authn_hmac_table_format(m, size, apr_time_now()) == APR_SUCCESS);
    t = authn_hmac_table_attach(m, NULL, p);
    CHECK(authn_hmac_share_create(&sh, gone, 1, (uid_t)-1, 0, &why, p) ==
          APR_SUCCESS);
    CHECK(rmdir(gone) == 0);
    write_text(path, "alice:AAAA\n");
    uf = authn_hmac_userfile_make(path, p);
    authn_hmac_userfile_share(uf, sh, 0, mac, t, note_warning, NULL);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    warnings = 0;
    CHECK(hash_is(uf, "alice", "AAAA", p));
    CHECK(warnings == 1 && strstr(last_warning, "keeps its own"));
    CHECK(authn_hmac_table_counter(t, AUTHN_HMAC_C_INDEX_PRIVATE) == 1);
    munmap(m, size);
}

int main(void)
{
    apr_pool_t *p = unit_start();
    authn_hmac_secret_t *pepper = NULL;
    char tmpl[] = "/tmp/authn_hmac_share.XXXXXX";

    CHECK(authn_hmac_secret_random_retained(&pepper, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&mac, pepper, p) == APR_SUCCESS);
    dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    idx_dir = apr_pstrcat(p, dir, "/idx", NULL);
    {
        apr_pool_t *tp;

        /* NB: each test in a pool of its own: unit_start's is cleared. */
        apr_pool_create(&tp, NULL);
        RUN(test_build_publish_free, tp);
        RUN(test_reader_holds_old_version, tp);
        RUN(test_builder_killed_mid_build, tp);
        RUN(test_altered_version_is_refused, tp);
        RUN(test_version_of_another_file, tp);
        RUN(test_cannot_share_is_counted, tp);
        RUN(test_idle_process_lets_go, tp);
    }
    if (system(apr_pstrcat(p, "rm -rf ", dir, NULL)) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return unit_end();
}
