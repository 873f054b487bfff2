/* Unit tests of readings that a writer tears: a read() of the file that
 * a writer's change lands in the middle of (the kernel copies a read page
 * by page, and a write may land between two pages) holds the bytes of two
 * versions, a state the file never was in. What such a reading says must
 * never grant. This program's read() stands in for the C library's, to
 * let the change land between two pages at the moment a test wants. */
#include "sources/htpasswd.h"
#include "testing/testing.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <apr_strings.h>

#include "unit.h"

#define PAGE 4096

/* The change to make in the middle of the nth read() from offset 0 of
 * the file of inode tear_ino (1: the first reading, 2: the second...). */
static ino_t tear_ino;
static int tear_at, tear_seen;
static const char *tear_path, *tear_text;
static int tear_in_place; /* the writer overwrites, without truncating */

static void rewrite(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | (tear_in_place ? 0 : O_TRUNC),
                  0600); /* as htpasswd does, or an editor in place */
    size_t n = strlen(text);

    if (fd < 0 || write(fd, text, n) != (ssize_t)n)
        abort();
    close(fd);
}

ssize_t read(int fd, void *buf, size_t n)
{
    struct stat st;

    if (tear_at && n > PAGE && fstat(fd, &st) == 0 && st.st_ino == tear_ino &&
        lseek(fd, 0, SEEK_CUR) == 0 && ++tear_seen == tear_at) {
        /* NB: the first page as it was; the rest as the writer left it. */
        ssize_t got = (ssize_t)syscall(SYS_read, fd, buf, PAGE);

        tear_at = 0;
        rewrite(tear_path, tear_text);
        return got;
    }
    return (ssize_t)syscall(SYS_read, fd, buf, n);
}

static char *hash_of(apr_pool_t *p, char c)
{
    char *h = apr_palloc(p, 61);

    memcpy(h, "$2y$05$", 7);
    memset(h + 7, c, 53);
    h[60] = '\0';
    return h;
}

/* Comment lines of len bytes in all. */
static char *padding(apr_pool_t *p, size_t len)
{
    char *s = apr_palloc(p, len + 1);
    size_t at = 0;

    while (at < len) {
        size_t line = len - at > 200 ? 100 : len - at;

        memset(s + at, 'x', line);
        s[at] = '#';
        s[at + line - 1] = '\n';
        at += line;
    }
    s[len] = '\0';
    return s;
}

/* htpasswd -D x: the file truncated and written anew without the line of
 * x, which came before victim's and attack's. A reading whose first page
 * is from before and the rest from after holds victim's name from before
 * and, past the page, the rest of attack's line from after: a line
 * "victim:<attack's hash>" that no version of the file ever held. Or
 * (in_place) a writer that overwrites the file without truncating it,
 * victim's and attack's lines swapped: the same line. */
static void test_torn_reading_never_grants(apr_pool_t *p, int watch,
                                           int in_place)
{
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path;
    const char *hx = hash_of(p, 'X'), *hv = hash_of(p, 'V'),
               *ha = hash_of(p, 'A'), *hash = NULL, *old, *now;
    size_t line = strlen("victim:") + 60 + 1, len = 0;
    /* victim's line starts at pad + line (pad in place); the page ends 14
     * bytes into it, past "victim:$2y$05$" */
    size_t pad = PAGE - (in_place ? 0 : line) - 14;
    authn_hmac_userfile_t *uf;
    struct stat st;
    apr_status_t rv;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    if (in_place) {
        old = apr_pstrcat(p, padding(p, pad), "victim:", hv, "\nattack:", ha,
                          "\n", NULL);
        now = apr_pstrcat(p, padding(p, pad), "attack:", ha, "\nvictim:", hv,
                          "\n", NULL);
    }
    else {
        old = apr_pstrcat(p, padding(p, pad), "xxxxxx:", hx, "\nvictim:", hv,
                          "\nattack:", ha, "\n", NULL);
        now = apr_pstrcat(p, padding(p, pad), "victim:", hv, "\nattack:", ha,
                          "\n", NULL);
    }
    CHECK(memcmp(old + PAGE - 14, "victim:$2y$05$", 14) == 0);
    tear_in_place = 0;
    rewrite(path, old);
    tear_in_place = in_place;
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    if (watch && authn_hmac_userfile_watch(uf) != 1)
        printf("     (/tmp is not watched: unwatched)\n");
    CHECK(stat(path, &st) == 0);
    tear_ino = st.st_ino;
    tear_path = path;
    tear_text = now;
    tear_seen = 0;
    tear_at = 2; /* the reading that indexes (the first counts the lines) */
    rv = authn_hmac_userfile_lookup(uf, "victim", &hash, &len, NULL, NULL, p);
    CHECK(tear_at == 0); /* the writer came */
    tear_at = 0;
    CHECK(rv != APR_SUCCESS || strcmp(hash, ha) != 0);
    /* The torn reading's deny, asked again of the quiet file as a request
     * asks it (authn_hmac_check_user). */
    rv = authn_hmac_userfile_lookup_settled(uf, "victim", NULL, NULL, 0, &hash,
                                            &len, NULL, NULL, p);
    CHECK(rv != APR_SUCCESS || strcmp(hash, ha) != 0);
    CHECK(rv == APR_SUCCESS && strcmp(hash, hv) == 0);
    CHECK(authn_hmac_userfile_lookup(uf, "victim", &hash, &len, NULL, NULL,
                                     p) == APR_SUCCESS &&
          strcmp(hash, hv) == 0);
    if (system(apr_pstrcat(p, "rm -rf ", dir, NULL)) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void test_torn_reading_never_grants_unwatched(apr_pool_t *p)
{
    test_torn_reading_never_grants(p, 0, 0);
}

static void test_torn_reading_never_grants_watched(apr_pool_t *p)
{
    test_torn_reading_never_grants(p, 1, 0);
}

static void test_torn_reading_never_grants_in_place(apr_pool_t *p)
{
    test_torn_reading_never_grants(p, 1, 1);
}

/* The file is read in pieces of 4 MiB (CHUNK in src/sources/htfile.c). */
#define PIECE ((size_t)4 << 20)

/* A logical line longer than a piece: its first piece is fed as a line
 * of its own, too long. Its hash must not be cut at the piece's end: a
 * line "<4 MiB of blanks>victim:<attack's hash>XYZ" names victim with the
 * hash "<attack's hash>XYZ", read whole (as the whole-buffer parser reads
 * it), which no password matches; cut at the piece, attack's hash. */
static void test_line_longer_than_a_piece_never_grants(apr_pool_t *p)
{
    char *dir = apr_pstrdup(p, "/tmp/authn_hmac_unit.XXXXXX"), *path, *text;
    const char *ha = hash_of(p, 'A'), *hv = hash_of(p, 'V'), *hash = NULL;
    size_t lead = PIECE - strlen("victim:") - 60, len = 0, n;
    authn_hmac_htpasswd_t *idx = NULL;
    authn_hmac_userfile_t *uf;
    apr_status_t rv;
    FILE *f;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    text = apr_palloc(p, lead + 200);
    memset(text, ' ', lead);
    n = lead + (size_t)apr_snprintf(text + lead, 200,
                                    "victim:%sXYZ\nalice:%s\n", ha, hv);
    CHECK(memcmp(text + PIECE - 60, ha, 60) == 0); /* the piece ends there */
    f = fopen(path, "w");
    CHECK(f && fwrite(text, 1, n, f) == n && fclose(f) == 0);
    /* Read whole: victim's hash is attack's and XYZ. */
    CHECK(authn_hmac_htpasswd_parse(&idx, apr_pmemdup(p, text, n + 1), n, NULL,
                                    NULL, p) == APR_SUCCESS);
    hash = idx ? authn_hmac_htpasswd_get(idx, "victim", &len) : NULL;
    CHECK(hash && len == 63 && memcmp(hash, ha, 60) == 0);
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    hash = NULL;
    rv = authn_hmac_userfile_lookup(uf, "victim", &hash, &len, NULL, NULL, p);
    CHECK(rv != APR_SUCCESS || strcmp(hash, ha) != 0);
    CHECK(authn_hmac_userfile_lookup(uf, "alice", &hash, &len, NULL, NULL, p) ==
              APR_SUCCESS &&
          strcmp(hash, hv) == 0);
    if (system(apr_pstrcat(p, "rm -rf ", dir, NULL)) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_torn_reading_never_grants_unwatched, p);
    RUN(test_torn_reading_never_grants_watched, p);
    RUN(test_torn_reading_never_grants_in_place, p);
    RUN(test_line_longer_than_a_piece_never_grants, p);
    return unit_end();
}
