/* Unit tests: the htpasswd parser (src/sources/htpasswd.c, its
 * whole-buffer form): odd and bad lines, files of every size, lines as
 * mod_authn_file reads them, the typical hash. The per-process view of a
 * file is test_userfile's. */
#include "sources/htpasswd.h"
#include "htpasswd_parse.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>

static void test_odd_lines(apr_pool_t *p)
{
    static const char f[] = "# comment\n"
                            "\n"
                            "alice:$2y$05$aaa\n"
                            "no-colon-here\n"
                            ":$2y$05$nouser\n"
                            "emptyhash:\n"
                            "  bob:{SHA}xyz=  \n"
                            "nul\0user:x\n"
                            "alice:$2y$05$second\n"
                            "carol:$apr1$s$h:extra\n"
                            "dave::$2y$05$ddd\n"
                            "no-colon-here:$2y$05$later\n"
                            "   \n";
    bad_t bad;
    authn_hmac_htpasswd_t *idx = parse(p, f, sizeof(f) - 1, &bad);

    /* As mod_authn_file reads them (ap_getword on ':'): the first line for
     * a user wins; the hash ends at the next ':' after the run of ':' that
     * follows the user; a line without a hash names a user who can never
     * log in, and hides the user's later lines. */
    CHECK(has(idx, "alice", "$2y$05$aaa"));
    CHECK(has(idx, "bob", "{SHA}xyz="));
    CHECK(has(idx, "carol", "$apr1$s$h"));
    CHECK(has(idx, "dave", "$2y$05$ddd"));
    CHECK(has(idx, "no-colon-here", ""));
    CHECK(has(idx, "emptyhash", ""));
    CHECK(has(idx, "", "$2y$05$nouser"));
    CHECK(has(idx, "nul", "")); /* the line ends at its NUL */
    CHECK(authn_hmac_htpasswd_count(idx) == 8);
    CHECK(bad.n == 4);
    CHECK(bad.lines[0] == 4 && bad.lines[1] == 5 && bad.lines[2] == 6 &&
          bad.lines[3] == 8);
    CHECK(authn_hmac_htpasswd_bad_lines(idx) == 4);
}

/* A file of malformed lines (a file named in .htaccess is its author's to
 * fill) is reported line by line 10 times, then once for the rest. */
static void test_bad_lines_are_reported_at_most_ten_times(apr_pool_t *p)
{
    char f[101];
    bad_t bad;
    authn_hmac_htpasswd_t *idx;
    int i;

    for (i = 0; i < 50; i++) {
        f[2 * i] = 'x';
        f[2 * i + 1] = '\n';
    }
    idx = parse(p, f, 100, &bad);
    CHECK(authn_hmac_htpasswd_bad_lines(idx) == 50);
    CHECK(bad.n == 11);
    CHECK(bad.lines[0] == 1 && bad.lines[9] == 10 && bad.lines[10] == 50);
}

static void test_crlf_and_no_final_newline(apr_pool_t *p)
{
    static const char f[] = "alice:hashA\r\nbob:hashB\r\ncarol:hashC";
    bad_t bad;
    authn_hmac_htpasswd_t *idx = parse(p, f, sizeof(f) - 1, &bad);

    CHECK(has(idx, "alice", "hashA"));
    CHECK(has(idx, "bob", "hashB"));
    CHECK(has(idx, "carol", "hashC"));
    CHECK(bad.n == 0);
}

static void test_empty_file(apr_pool_t *p)
{
    bad_t bad;
    authn_hmac_htpasswd_t *idx = parse(p, "", 0, &bad);

    CHECK(authn_hmac_htpasswd_count(idx) == 0);
    CHECK(authn_hmac_htpasswd_get(idx, "x", &(size_t){0}) == NULL);
}

/* Files of every size up to 200 users, with and without a final newline:
 * every user is found (a file of 11, 21, 43... users and no final newline
 * lost its last one: the table, sized for lines * 3 / 2 rounded down, had
 * room for one fewer entry than lines; found by fuzz_htpasswd in CI). */
static void test_every_size_without_final_newline(apr_pool_t *p)
{
    char *f = apr_palloc(p, 200 * 40), *w = f;
    authn_hmac_htpasswd_t *idx;
    bad_t bad;
    int n, i, nl, lost = 0;

    for (n = 1; n <= 200; n++) {
        w += sprintf(w, "user%05d:$2y$05$hash%05d\n", n - 1, n - 1);
        for (nl = 0; nl <= 1; nl++) {
            idx = parse(p, f, (size_t)(w - f) - (nl ? 0 : 1), &bad);
            for (i = 0; idx && i < n; i++) {
                char u[16], h[32];

                sprintf(u, "user%05d", i);
                sprintf(h, "$2y$05$hash%05d", i);
                if (!has(idx, u, h)) {
                    if (lost++ < 5)
                        printf("     %d users%s: user%05d not found\n", n,
                               nl ? "" : ", no final newline", i);
                }
            }
        }
    }
    CHECK(lost == 0);
}

static void test_ten_thousand_users(apr_pool_t *p)
{
    char *f = apr_palloc(p, 10000 * 40), *w = f;
    bad_t bad;
    authn_hmac_htpasswd_t *idx;
    int i, found = 0;

    for (i = 0; i < 10000; i++)
        w += sprintf(w, "user%05d:$2y$05$hash%05d\n", i, i);
    idx = parse(p, f, (size_t)(w - f), &bad);
    CHECK(authn_hmac_htpasswd_count(idx) == 10000);
    for (i = 0; i < 10000; i++) {
        char u[16], h[32];

        sprintf(u, "user%05d", i);
        sprintf(h, "$2y$05$hash%05d", i);
        found += has(idx, u, h);
    }
    CHECK(found == 10000);
    CHECK(!has(idx, "user10000", "$2y$05$hash10000"));
    CHECK(bad.n == 0);
}

/* Lines as ap_cfg_getline gives them to mod_authn_file (found by review):
 * a trailing backslash joins the next line, so a comment can swallow a
 * user; a NUL ends its line, and the user it names has no hash. */
static void test_continuation_and_nul(apr_pool_t *p)
{
    static const char f[] = "# a comment that ends in a backslash \\\n"
                            "bob:$2y$05$bbb\n"
                            "carol:$2y$\\\r\n"
                            "05$ccc\n"
                            "dave\0evil:$2y$05$evil\n"
                            "dave:$2y$05$ddd\n"
                            "erin:$2y$05$eee\\   \n"
                            "frank:x\\";
    bad_t bad;
    authn_hmac_htpasswd_t *idx = parse(p, f, sizeof(f) - 1, &bad);

    CHECK(authn_hmac_htpasswd_get(idx, "bob", &(size_t){0}) == NULL);
    CHECK(has(idx, "carol", "$2y$05$ccc"));
    CHECK(has(idx, "dave", "")); /* can never log in, as with the file */
    CHECK(has(idx, "erin", "$2y$05$eee\\")); /* not a continuation */
    CHECK(has(idx, "frank", "x\\"));         /* no newline: not either */
    CHECK(bad.n == 1 && bad.lines[0] == 5);
}

/* A line too long to index still names its user, who then cannot log in
 * (as the warning says), as a line without a hash does: a later line of
 * the same user is not used in its place (the first line wins). */
static void test_too_long_line_names_its_user(apr_pool_t *p)
{
    size_t n = 9000, len;
    char *f = apr_palloc(p, n + 64);
    authn_hmac_htpasswd_t *idx;
    bad_t bad;

    memcpy(f, "alice:$2y$05$", 13);
    memset(f + 13, 'a', n);
    len = 13 + n;
    memcpy(f + len, ":a comment\nalice:EVIL\nbob:\nbob:EVIL\n", 36);
    len += 36;
    idx = parse(p, f, len, &bad);
    CHECK(bad.n == 2 && bad.lines[0] == 1 && bad.lines[1] == 3);
    CHECK(!has(idx, "bob", "EVIL")); /* as it is now: bob's first line */
    CHECK(!has(idx, "alice", "EVIL"));
}

/* Unknown users are checked against one of the file's hashes, at its
 * median bcrypt cost. */
static void test_typical_hash(apr_pool_t *p)
{
    static const char f[] = "a:$2y$05$aaaa\n"
                            "b:$apr1$xyz$abc\n"
                            "c:$2y$12$cccc\n"
                            "d:$2y$10$dddd\n"
                            "e:\n";
    bad_t bad;
    authn_hmac_htpasswd_t *idx = parse(p, f, sizeof(f) - 1, &bad);
    size_t len = 0;
    const char *h = authn_hmac_htpasswd_typical(idx, &len);

    CHECK(h && len == 11 && memcmp(h, "$2y$10$dddd", 11) == 0);
    idx = parse(p, "x:{SHA}abc=\n", 12, &bad);
    h = authn_hmac_htpasswd_typical(idx, &len);
    CHECK(h && len == 9 && memcmp(h, "{SHA}abc=", 9) == 0);
    idx = parse(p, "", 0, &bad);
    CHECK(authn_hmac_htpasswd_typical(idx, &len) == NULL);
    /* Never a locked line's. */
    idx = parse(p, "x:!\ny:*\nz:!$2y$05$zzzz\n", 24, &bad);
    CHECK(authn_hmac_htpasswd_typical(idx, &len) == NULL);
    idx = parse(p, "x:!$2y$05$xxxx\ny:$apr1$s$h\n", 27, &bad);
    h = authn_hmac_htpasswd_typical(idx, &len);
    CHECK(h && len == 9 && memcmp(h, "$apr1$s$h", 9) == 0);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_odd_lines, p);
    RUN(test_crlf_and_no_final_newline, p);
    RUN(test_bad_lines_are_reported_at_most_ten_times, p);
    RUN(test_empty_file, p);
    RUN(test_ten_thousand_users, p);
    RUN(test_every_size_without_final_newline, p);
    RUN(test_continuation_and_nul, p);
    RUN(test_too_long_line_names_its_user, p);
    RUN(test_typical_hash, p);
    return unit_end();
}
