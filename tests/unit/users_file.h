/* users_file.h: a users' file in a new directory, and a view of it as a
 * child has it, for the tests of the per-process view and the watcher
 * (test_userfile, test_watch, test_watch_writers). */
#ifndef AUTHN_HMAC_USERS_FILE_H
#define AUTHN_HMAC_USERS_FILE_H

#include "sources/htpasswd.h"
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <apr_strings.h>

static inline void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    fputs(text, f);
    fclose(f);
}

/* A new directory made from the template dir (mkdtemp), holding a file
 * "users" of text: the file's path. */
static inline char *users_file(char *dir, const char *text, apr_pool_t *p)
{
    char *path;

    CHECK(mkdtemp(dir) != NULL);
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_text(path, text);
    return path;
}

/* Removes a users_file() and its directory. */
static inline void remove_users_file(const char *dir, const char *path)
{
    unlink(path);
    rmdir(dir);
}

/* A view of path as a child of the server has it, not watched. */
static inline authn_hmac_userfile_t *child_view(const char *path, apr_pool_t *p)
{
    authn_hmac_userfile_t *uf = authn_hmac_userfile_make(path, p);

    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    return uf;
}

#endif
