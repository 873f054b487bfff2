/* Unit tests of the watcher's inner workings, with the source included
 * so that a test can stand where another thread would. */
#include "../../src/htpasswd.c"
#include "unit.h"

#include <sys/stat.h>
#include <sys/vfs.h>

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    fputs(text, f);
    fclose(f);
}

static int alice_is(authn_hmac_userfile_t *uf, const char *want, apr_pool_t *p)
{
    const char *hash = NULL;
    size_t len = 0;

    return authn_hmac_userfile_lookup(uf, "alice", &hash, &len, NULL, NULL,
                                      p) == APR_SUCCESS &&
           strcmp(hash, want) == 0;
}

typedef struct {
    authn_hmac_userfile_t *uf;
    int ok;
} lookup_t;

static void *late_lookup(void *arg)
{
    lookup_t *l = arg;
    apr_pool_t *p;

    if (apr_pool_create_unmanaged(&p) != APR_SUCCESS)
        abort();
    l->ok = alice_is(l->uf, "BBBB", p);
    apr_pool_destroy(p);
    return NULL;
}

/* A lookup made while another thread drains the queue is not answered
 * from the count the drain has not moved on yet: the queue it took may
 * have held a change (here a rename) that a generation found fresh at
 * that count predates. This test drains by hand, as that thread would. */
static void test_lookup_during_drain(apr_pool_t *p)
{
    const char *bases[] = {"/tmp", "/dev/shm"};
    char buf[4096];
    const char *dir = NULL, *path;
    authn_hmac_userfile_t *uf;
    lookup_t late;
    pthread_t t;
    size_t i;

    for (i = 0; i < 2 && !dir; i++) {
        struct statfs fs;
        char *d = apr_pstrcat(p, bases[i], "/authn_hmac_unit.XXXXXX", NULL);

        if (statfs(bases[i], &fs) == 0 &&
            ((unsigned long)fs.f_type == 0xEF53UL ||
             (unsigned long)fs.f_type == 0x01021994UL) &&
            mkdtemp(d))
            dir = d;
    }
    if (!dir) {
        printf("  skipped: no file system inotify fully sees\n");
        return;
    }
    path = apr_pstrcat(p, dir, "/users", NULL);
    write_text(path, "alice:AAAA\n");
    uf = authn_hmac_userfile_make(path, p);
    CHECK(authn_hmac_userfile_child_init(uf, p) == APR_SUCCESS);
    CHECK(authn_hmac_userfile_watch(uf) == 1);
    usleep(1100 * 1000);
    CHECK(alice_is(uf, "AAAA", p));
    CHECK(alice_is(uf, "AAAA", p));
    /* A drain begins (something was queued) and takes the queue... */
    pthread_mutex_lock(&w.lock);
    __atomic_add_fetch(&w.events, 1, __ATOMIC_SEQ_CST);
    while (read(w.fd, buf, sizeof(buf)) > 0)
        ;
    /* ...meanwhile a lookup finds the file unchanged... */
    CHECK(alice_is(uf, "AAAA", p));
    /* ...the file is replaced, and the drain takes that too... */
    write_text(apr_pstrcat(p, dir, "/new", NULL), "alice:BBBB\n");
    CHECK(rename(apr_pstrcat(p, dir, "/new", NULL), path) == 0);
    while (read(w.fd, buf, sizeof(buf)) > 0)
        ;
    /* ...and a lookup made since must see the new file. */
    late.uf = uf;
    late.ok = 0;
    CHECK(pthread_create(&t, NULL, late_lookup, &late) == 0);
    usleep(100 * 1000);
    __atomic_add_fetch(&w.events, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&w.lock);
    CHECK(pthread_join(t, NULL) == 0 && late.ok);
    CHECK(alice_is(uf, "BBBB", p));
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    apr_pool_t *p = unit_start();

    RUN(test_lookup_during_drain, p);
    return unit_end();
}
