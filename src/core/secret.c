/* secret.c: secrets (the pepper, the keyed MAC states, the Redis password)
 * kept out of core dumps and swap, and wiped when no longer needed.
 *
 * Each secret has pages of its own, mapped privately, excluded from core
 * dumps (MADV_DONTDUMP, which fork keeps) and locked (mlock, which fork does
 * not keep: children lock again with authn_hmac_secret_relock). */
#include "core/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <apr_general.h>
#include <apr_strings.h>
#include <bsd/string.h>

typedef struct {
    authn_hmac_secret_t pub;
    size_t maplen;
} secret_page_t;

/* Wipes and unmaps the page when the owning pool goes. */
static apr_status_t secret_cleanup(void *data)
{
    secret_page_t *s = data;

    if (s->pub.data) {
        explicit_bzero(s->pub.data, s->maplen);
        munlock(s->pub.data, s->maplen);
        munmap(s->pub.data, s->maplen);
        s->pub.data = NULL;
    }
    return APR_SUCCESS;
}

/* A zeroed page (or more) for `len` bytes, locked and excluded from dumps
 * where the kernel allows it (both are best effort); wiped when p is cleared,
 * unless `retained`. */
static apr_status_t secret_alloc_in(secret_page_t **out, size_t len,
                                    apr_pool_t *p, int retained)
{
    long pagesz = sysconf(_SC_PAGESIZE);
    secret_page_t *s = apr_pcalloc(p, sizeof(*s));
    void *m;

    if (pagesz <= 0)
        pagesz = 4096;
    s->maplen = ((len + (size_t)pagesz - 1) / (size_t)pagesz) * (size_t)pagesz;
    if (s->maplen == 0)
        s->maplen = (size_t)pagesz;
    m = mmap(NULL, s->maplen, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return errno ? errno : APR_ENOMEM;
#ifdef MADV_DONTDUMP
    (void)madvise(m, s->maplen, MADV_DONTDUMP);
#endif
    (void)mlock(m, s->maplen);
    s->pub.data = m;
    s->pub.len = len;
    if (!retained)
        apr_pool_cleanup_register(p, s, secret_cleanup, apr_pool_cleanup_null);
    *out = s;
    return APR_SUCCESS;
}

static apr_status_t secret_alloc(secret_page_t **out, size_t len, apr_pool_t *p)
{
    return secret_alloc_in(out, len, p, 0);
}

const char *authn_hmac_secret_read(authn_hmac_secret_t **out, const char *path,
                                   size_t min, size_t max, apr_pool_t *p)
{
    struct stat st;
    secret_page_t *s = NULL;
    const char *err = NULL;
    size_t got = 0;
    int fd;

    /* NB: not through a symbolic link. The checks below see only the file
     * it points to; whoever may write the link's directory could point it
     * at another file, between two reads or for good. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP && lstat(path, &st) == 0 &&
        S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);

        err = apr_psprintf(
            p,
            "'%s' is a symbolic link, and those are refused: the owner and "
            "mode checks would apply to its target, which whoever may change "
            "the link could repoint; name the file itself%s%s%s",
            path, real ? " ('" : "", real ? real : "", real ? "')" : "");
        free(real);
        return err;
    }
    if (fd < 0)
        return apr_psprintf(p, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        err = apr_psprintf(p, "cannot stat '%s': %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        err = apr_psprintf(p, "'%s' is not a regular file", path);
        goto done;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        err = apr_psprintf(p,
                           "'%s' is accessible by group or others "
                           "(mode %04o; it must be 0600 or 0400)",
                           path, (unsigned)(st.st_mode & 07777));
        goto done;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        err = apr_psprintf(p,
                           "'%s' must be owned by root or by the user "
                           "starting httpd (uid %lu), not uid %lu",
                           path, (unsigned long)geteuid(),
                           (unsigned long)st.st_uid);
        goto done;
    }
    if ((size_t)st.st_size < min || (size_t)st.st_size > max) {
        err = apr_psprintf(p, "'%s' holds %lu bytes; it must hold %lu to %lu",
                           path, (unsigned long)st.st_size, (unsigned long)min,
                           (unsigned long)max);
        goto done;
    }
    if (secret_alloc(&s, (size_t)st.st_size, p) != APR_SUCCESS || !s) {
        err = "cannot allocate memory for the secret";
        goto done;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, s->pub.data + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = apr_psprintf(p, "cannot read '%s': %s", path,
                               n < 0 ? strerror(errno) : "file shrank");
            goto done;
        }
        got += (size_t)n;
    }
    *out = &s->pub;
done:
    if (err && s)
        secret_cleanup(s);
    close(fd);
    return err;
}

apr_status_t authn_hmac_secret_alloc(authn_hmac_secret_t **out, size_t len,
                                     apr_pool_t *p)
{
    secret_page_t *s = NULL;
    apr_status_t rv = secret_alloc(&s, len, p);

    if (rv == APR_SUCCESS && !s)
        rv = APR_ENOMEM;
    if (rv == APR_SUCCESS)
        *out = &s->pub;
    return rv;
}

void authn_hmac_secret_relock(const authn_hmac_secret_t *secret)
{
    const secret_page_t *s = (const secret_page_t *)secret;

    if (s && s->pub.data)
        (void)mlock(s->pub.data, s->maplen);
}

void authn_hmac_secret_wipe(authn_hmac_secret_t *secret)
{
    if (secret)
        secret_cleanup(secret);
}

static apr_status_t secret_random(authn_hmac_secret_t **out, size_t len,
                                  apr_pool_t *p, int retained)
{
    secret_page_t *s = NULL;
    apr_status_t rv = secret_alloc_in(&s, len, p, retained);

    if (rv == APR_SUCCESS && !s)
        rv = APR_ENOMEM;
    if (rv == APR_SUCCESS)
        rv = apr_generate_random_bytes(s->pub.data, len);
    if (rv == APR_SUCCESS)
        *out = &s->pub;
    return rv;
}

apr_status_t authn_hmac_secret_random(authn_hmac_secret_t **out, size_t len,
                                      apr_pool_t *p)
{
    return secret_random(out, len, p, 0);
}

apr_status_t authn_hmac_secret_random_retained(authn_hmac_secret_t **out,
                                               size_t len, apr_pool_t *p)
{
    return secret_random(out, len, p, 1);
}
