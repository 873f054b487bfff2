/* Unit tests of the shared versions of an htpasswd index against a process
 * that runs as the server's user (and so can write the versions'
 * directory): what it writes there must never grant access that the file
 * does not. The attacker acts in the middle of a build, where the test
 * build's pause points stop it (testing/testing.h). */
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sources/userfile.h"
#include "testing/testing.h"
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>

#include "core/secret.h"

static const char *attack_dir;  /* the versions' directory */
static int attack_at;           /* the pause point to act at; 0: none */
static int attacked;            /* times an entry was rewritten */
static const char *writer_path; /* the file a writer appends to */
static int writer_at;           /* the pause point it writes at; 0: none */
static int writer_fd = -1;      /* held open: a writer at work */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    fputs(text, f);
    fclose(f);
}

/* Rewrites, in every file of the versions' directory, alice's hash AAAA
 * into EVIL, through a writable mapping of its own, as a process of the
 * server's user can at any moment. */
static void rewrite_versions(void)
{
    DIR *d = opendir(attack_dir);
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        int fd = openat(dirfd(d), de->d_name, O_RDWR);
        struct stat st;
        unsigned char *m;

        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
            (m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0)) != MAP_FAILED) {
            unsigned char *e = memmem(m, (size_t)st.st_size, "alice\0AAAA", 10);

            if (e) {
                memcpy(e + 6, "EVIL", 4);
                attacked++;
            }
            munmap(m, (size_t)st.st_size);
        }
        close(fd);
    }
    closedir(d);
}

static void attack(int n)
{
    if (attack_at && n == attack_at)
        rewrite_versions();
    if (writer_at && n == writer_at) {
        writer_at = 0;
        writer_fd = open(writer_path, O_WRONLY | O_APPEND);
        CHECK(writer_fd >= 0 && write(writer_fd, "carol:CCCC\n", 11) == 11);
    }
}

static authn_hmac_mac_t *make_mac(apr_pool_t *p)
{
    authn_hmac_secret_t *s = NULL;
    authn_hmac_mac_t *m = NULL;

    CHECK(authn_hmac_secret_random(&s, 32, p) == APR_SUCCESS);
    CHECK(authn_hmac_mac_create(&m, s, p) == APR_SUCCESS);
    return m;
}

typedef struct {
    char *dir, *vdir, *path;
    authn_hmac_share_t *sh;
    authn_hmac_mac_t *mac;
} setup_t;

static void set_up(setup_t *s, const char *text, apr_pool_t *p)
{
    const char *why = NULL;

    s->dir = apr_pstrdup(p, "/tmp/authn_hmac_share.XXXXXX");
    CHECK(mkdtemp(s->dir) != NULL);
    s->vdir = apr_pstrcat(p, s->dir, "/versions", NULL);
    s->path = apr_pstrcat(p, s->dir, "/users", NULL);
    write_text(s->path, text);
    s->mac = make_mac(p);
    CHECK(authn_hmac_share_create(&s->sh, s->vdir, 1, (uid_t)-1, (gid_t)-1,
                                  &why, p) == APR_SUCCESS);
    attack_dir = s->vdir;
}

/* A view of the file as a child has it. */
static authn_hmac_userfile_t *child(setup_t *s, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = authn_hmac_userfile_make(s->path, p);

    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    authn_hmac_userfile_share(uf, s->sh, 0, s->mac, NULL, NULL, NULL);
    return uf;
}

static const char *alice(authn_hmac_userfile_t *uf, apr_pool_t *p)
{
    const char *hash = NULL;
    size_t len = 0;

    /* NB: as a request makes it: a deny from a torn reading is asked
     * again of the quiet file. */
    if (authn_hmac_userfile_lookup_settled(uf, "alice", NULL, NULL, 0, &hash,
                                           &len, NULL, NULL, p) != APR_SUCCESS)
        return "(none)";
    return hash;
}

static void tear_down(setup_t *s)
{
    DIR *d = opendir(s->vdir);
    struct dirent *de;

    attack_at = 0;
    while (d && (de = readdir(d)) != NULL)
        (void)unlinkat(dirfd(d), de->d_name, 0);
    if (d)
        closedir(d);
    rmdir(s->vdir);
    unlink(s->path);
    rmdir(s->dir);
}

/* A process of the server's user that writes into the version being built
 * (its temporary file is in the directory, writable until published) must
 * not have its bytes tagged: the builder tags only what it wrote. */
static void test_written_during_build(apr_pool_t *p)
{
    setup_t s;
    authn_hmac_userfile_t *uf, *other;

    set_up(&s, "bob:BOB0\nalice:AAAA\n", p);
    uf = child(&s, p);
    attack_at = 4; /* the entries written, their tags not yet */
    attacked = 0;
    CHECK(strcmp(alice(uf, p), "EVIL") != 0);
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    attack_at = 0;
    other = child(&s, p);
    CHECK(strcmp(alice(other, p), "AAAA") == 0);
    tear_down(&s);
}

/* The same, written after the version was published: every reader checks
 * what it reads. */
static void test_written_after_publish(apr_pool_t *p)
{
    setup_t s;
    authn_hmac_userfile_t *uf, *other;

    set_up(&s, "bob:BOB0\nalice:AAAA\n", p);
    uf = child(&s, p);
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    attacked = 0;
    rewrite_versions();
    CHECK(attacked == 1);
    other = child(&s, p);
    CHECK(strcmp(alice(other, p), "AAAA") == 0);
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    tear_down(&s);
}

/* A version altered after it was published is dropped, and the file read
 * by this process; a writer at work meanwhile (the reading torn, the file
 * held open) must not have it kept as the version of before, though it
 * answered for the file as the writer found it: its check fails again (the
 * lookup once failed, a 500). The writer appends carol where the reading
 * stops, and holds the file open past WRITE_WAIT. */
static void test_written_then_a_writer_at_work(apr_pool_t *p)
{
    setup_t s;
    authn_hmac_userfile_t *uf;
    const char *hash = NULL;
    size_t len = 0;

    set_up(&s, "bob:BOB0\nalice:AAAA\n", p);
    uf = child(&s, p);
    if (authn_hmac_userfile_watch(uf) != 1) {
        printf("     (skipped: /tmp is not watched)\n");
        tear_down(&s);
        return;
    }
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    CHECK(uf->current && uf->current->version != 0);
    attacked = 0;
    rewrite_versions();
    CHECK(attacked == 1);
    writer_path = s.path;
    writer_at = 4; /* the file read, not yet told torn */
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    CHECK(writer_fd >= 0 && uf->unshared);
    CHECK(uf->current && uf->current->version == 0);
    CHECK(writer_fd < 0 || close(writer_fd) == 0);
    writer_fd = -1;
    CHECK(authn_hmac_userfile_lookup(uf, "carol", &hash, &len, NULL, NULL, p) ==
              APR_SUCCESS &&
          strcmp(hash, "CCCC") == 0);
    tear_down(&s);
}

/* The path of version v of slot 0 in the directory, or NULL. */
static char *version_path(const char *vdir, uint64_t v, apr_pool_t *p)
{
    DIR *d = opendir(vdir);
    struct dirent *de;
    char tail[32], *got = NULL;
    size_t tl;

    snprintf(tail, sizeof(tail), ".0.%llu", (unsigned long long)v);
    tl = strlen(tail);

    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);

        if (l > tl && strcmp(de->d_name + l - tl, tail) == 0)
            got = apr_pstrcat(p, vdir, "/", de->d_name, NULL);
    }
    if (d)
        closedir(d);
    return got;
}

/* A version of before (kept by the attacker) put in place of the one
 * published is not taken. */
static void test_old_version_replayed(apr_pool_t *p)
{
    setup_t s;
    authn_hmac_userfile_t *uf, *late;
    char *old = NULL, *cur;
    size_t old_len = 0;
    uint64_t v;
    int fd;

    set_up(&s, "alice:AAAA\n", p);
    uf = child(&s, p);
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    v = authn_hmac_share_version(s.sh, 0);
    CHECK(v == 1);
    {
        char *name_v = version_path(s.vdir, v, p);
        apr_file_t *f;
        apr_finfo_t fi;
        apr_size_t got;

        CHECK(name_v != NULL);
        CHECK(apr_file_open(&f, name_v, APR_FOPEN_READ, 0, p) == APR_SUCCESS);
        CHECK(apr_file_info_get(&fi, APR_FINFO_SIZE, f) == APR_SUCCESS);
        old_len = (size_t)fi.size;
        old = apr_palloc(p, old_len);
        got = old_len;
        CHECK(apr_file_read_full(f, old, got, &got) == APR_SUCCESS);
        apr_file_close(f);
    }
    /* The password changes: a new version replaces it. */
    write_text(s.path, "alice:BBBBBB\n");
    CHECK(strcmp(alice(uf, p), "BBBBBB") == 0);
    v = authn_hmac_share_version(s.sh, 0);
    CHECK(v == 2);
    /* The attacker puts the old one in its place. */
    cur = version_path(s.vdir, v, p);
    CHECK(cur != NULL && unlink(cur) == 0);
    fd = open(cur, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0 && write(fd, old, old_len) == (ssize_t)old_len);
    close(fd);
    /* A new child: no path takes a version whatever file it was read from
     * (a child without one waits for a writer's close instead). */
    late = child(&s, p);
    /* Nor when the file's stat says it is the one of now. */
    CHECK(strcmp(alice(late, p), "BBBBBB") == 0);
    tear_down(&s);
}

/* A user listed twice: the first line wins, as with mod_authn_file. The
 * later line's entry is in the data, tagged as the rest: a slot rewritten
 * to point at it must not make its hash the user's. */
static void test_slot_at_a_later_line(apr_pool_t *p)
{
    char text[] = "alice:AAAA\nbob:BOB0\nalice:EVIL\n";
    size_t len = strlen(text), cap = authn_hmac_index_bound(len, 3), used = 0;
    unsigned char *area = apr_pcalloc(p, cap + 8), *later, *q;
    unsigned char copy[AUTHN_HMAC_INDEX_COPY];
    authn_hmac_mac_t *mac = make_mac(p);
    authn_hmac_index_t *v = apr_pcalloc(p, sizeof(*v));
    authn_hmac_index_entry_t e;
    uint64_t first, off;
    uint32_t ord = 0, moved = 0;

    area = (unsigned char *)(((uintptr_t)area + 7) & ~(uintptr_t)7);
    CHECK(authn_hmac_index_build(area, cap, text, len, "m", 1, mac, NULL, NULL,
                                 &used, p) == APR_SUCCESS);
    CHECK(authn_hmac_index_open(v, area, used, mac) == APR_SUCCESS);
    first = authn_hmac_index_find(v, "alice", 5, &ord);
    CHECK(first != 0);
    CHECK(authn_hmac_index_entry(v, first, copy, &e) == APR_SUCCESS &&
          strcmp(e.hash, "AAAA") == 0);
    /* The attacker points alice's slot at the later line's entry. */
    later = memmem(area, used, "alice\0EVIL", 10);
    CHECK(later != NULL);
    if (!later)
        return;
    /* NB: the slots: past the header (112 bytes) and the metadata's room,
     * before the tags and the data (which starts with alice's entry). */
    for (q = area + 112 + AUTHN_HMAC_INDEX_META_MAX; q + 8 <= area + first;
         q += 8) {
        uint64_t slot;

        memcpy(&slot, q, 8);
        if (slot != 0 && (uint32_t)slot == (uint32_t)first) {
            slot =
                (slot & ~(uint64_t)UINT32_MAX) | (uint64_t)(later - 12 - area);
            memcpy(q, &slot, 8);
            moved++;
        }
    }
    CHECK(moved == 1);
    CHECK(authn_hmac_index_open(v, area, used, mac) == APR_SUCCESS);
    off = authn_hmac_index_find(v, "alice", 5, &ord);
    CHECK(off == (uint64_t)(later - 12 - area));
    CHECK(authn_hmac_index_entry(v, off, copy, &e) != APR_SUCCESS ||
          strcmp(e.hash, "EVIL") != 0);
}

/* Every field of the header is tagged: the offset of the typical entry
 * (whose hash an unknown user's dummy verification copies: zeroed, unknown
 * names answered at once, found by review), the counts, the offsets. A
 * header changed in any byte is not opened; the view falls back (in the
 * server: a process's own index). */
static void test_header_changed(apr_pool_t *p)
{
    char text[] = "alice:$2y$05$abcdefghijklmnopqrstuu\nbob:BOB0\n";
    size_t len = strlen(text), cap = authn_hmac_index_bound(len, 2), used = 0;
    unsigned char *area = apr_pcalloc(p, cap + 8);
    authn_hmac_mac_t *mac = make_mac(p);
    authn_hmac_index_t *v = apr_pcalloc(p, sizeof(*v));
    uint64_t typical, zero = 0;
    size_t at;

    area = (unsigned char *)(((uintptr_t)area + 7) & ~(uintptr_t)7);
    CHECK(authn_hmac_index_build(area, cap, text, len, "m", 1, mac, NULL, NULL,
                                 &used, p) == APR_SUCCESS);
    CHECK(authn_hmac_index_open(v, area, used, mac) == APR_SUCCESS);
    typical = authn_hmac_index_typical(v);
    CHECK(typical != 0);
    /* NB: typical is the header's 9th word (magic, size, six offsets). */
    CHECK(memcmp(area + 64, &typical, 8) == 0);
    memcpy(area + 64, &zero, 8);
    CHECK(authn_hmac_index_open(v, area, used, mac) != APR_SUCCESS);
    memcpy(area + 64, &typical, 8);
    CHECK(authn_hmac_index_open(v, area, used, mac) == APR_SUCCESS);
    /* Any other byte of it, but the magic (checked as such). */
    for (at = 8; at < 112; at++) {
        area[at] ^= 1;
        CHECK(authn_hmac_index_open(v, area, used, mac) != APR_SUCCESS);
        area[at] ^= 1;
    }
    CHECK(authn_hmac_index_open(v, area, used, mac) == APR_SUCCESS);
}

/* A slot may point anywhere in the data: at every offset an entry can
 * start at (4-byte steps), what reads as an entry and verifies is one of
 * the file's, read whole, or the middle of one that no user name can be
 * found at. */
static void test_slot_at_every_offset(apr_pool_t *p)
{
    char text[] = "alice:$2y$05$abcdefghijklmnopqrstuu\n"
                  "bob:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n"
                  "carol:\n"
                  "dave:!locked\n"
                  "eve:x:y:z\n"
                  "a:b\n";
    const char *users[] = {"alice", "bob", "carol", "dave", "eve", "a"};
    size_t len = strlen(text), cap = authn_hmac_index_bound(len, 6), used = 0;
    unsigned char *area = apr_pcalloc(p, cap + 8);
    unsigned char copy[AUTHN_HMAC_INDEX_COPY];
    authn_hmac_mac_t *mac = make_mac(p);
    authn_hmac_index_t *v = apr_pcalloc(p, sizeof(*v));
    authn_hmac_index_entry_t e;
    uint64_t starts[6], off;
    uint32_t ord;
    size_t i, good = 0;

    area = (unsigned char *)(((uintptr_t)area + 7) & ~(uintptr_t)7);
    CHECK(authn_hmac_index_build(area, cap, text, len, "m", 1, mac, NULL, NULL,
                                 &used, p) == APR_SUCCESS);
    CHECK(authn_hmac_index_open(v, area, used, mac) == APR_SUCCESS);
    for (i = 0; i < 6; i++) {
        starts[i] = authn_hmac_index_find(v, users[i], strlen(users[i]), &ord);
        CHECK(starts[i] != 0);
    }
    for (off = 0; off < used + 64; off += 4) {
        int real = 0;

        if (authn_hmac_index_entry(v, off, copy, &e) != APR_SUCCESS)
            continue;
        for (i = 0; i < 6; i++)
            if (off == starts[i] && strcmp(e.user, users[i]) == 0)
                real = 1;
        /* NB: the middle of one may read as an entry, whose user then
         * holds a NUL (a length's high bytes): no user name matches it
         * (a name is a C string, compared with its length). */
        CHECK(real || memchr(e.user, '\0', e.user_len) != NULL);
        good += real;
    }
    CHECK(good == 6);
}

/* Names the server's user puts in the directory before a build: a FIFO
 * at the temporary file's name, a directory or a link at the next
 * version's (the huge sparse file of the last step lands past the version
 * built: a name in the way only): no build hangs on them or follows them,
 * and every lookup answers with the file as it is now. */
static void test_names_put_in_the_way(apr_pool_t *p)
{
    static const char *const hashes[] = {"BBBB", "CCCC", "DDDD", "EEEE"};
    setup_t s;
    authn_hmac_userfile_t *uf, *other;
    char *v1, *base, *tmp, *next;
    int i, v, fd;

    set_up(&s, "alice:AAAA\n", p);
    uf = child(&s, p);
    CHECK(strcmp(alice(uf, p), "AAAA") == 0);
    v1 = version_path(s.vdir, 1, p);
    CHECK(v1 != NULL);
    base = apr_pstrndup(p, v1, strlen(v1) - 1); /* ".../<tag>.0." */
    tmp = apr_pstrcat(p, base, "new", NULL);
    for (i = 0; i < 4; i++) {
        char text[32];

        /* The next version: one more than the last published. */
        for (v = 1; v < 16 && version_path(s.vdir, v + 1, p); v++)
            ;
        next = apr_psprintf(p, "%s%d", base, v + 1);
        (void)unlink(tmp);
        if (i == 0)
            CHECK(mkfifo(tmp, 0600) == 0);
        else if (i == 1)
            CHECK(mkdir(next, 0700) == 0);
        else if (i == 2)
            CHECK(symlink(s.path, tmp) == 0 && symlink(s.path, next) == 0);
        else {
            fd = open(next, O_WRONLY | O_CREAT, 0600);
            CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 40) == 0);
            close(fd);
        }
        snprintf(text, sizeof(text), "alice:%s\n", hashes[i]);
        usleep(1100000);
        write_text(s.path, text);
        CHECK(strcmp(alice(uf, p), hashes[i]) == 0);
        other = child(&s, p);
        CHECK(strcmp(alice(other, p), hashes[i]) == 0);
        (void)unlink(tmp);
        (void)rmdir(next);
    }
    tear_down(&s);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    authn_hmac_test_pause_hook = attack;
    RUN(test_written_after_publish, p);
    RUN(test_written_during_build, p);
    RUN(test_old_version_replayed, p);
    RUN(test_slot_at_a_later_line, p);
    RUN(test_header_changed, p);
    RUN(test_slot_at_every_offset, p);
    RUN(test_names_put_in_the_way, p);
    /* NB: last: its directory removed, this process's watcher is broken. */
    RUN(test_written_then_a_writer_at_work, p);
    return unit_end();
}
