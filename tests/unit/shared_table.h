/* shared_table.h: a table in shared memory with the writers' mutex, for
 * the unit tests that act across processes (test_table, test_queue). */
#ifndef AUTHN_HMAC_SHARED_TABLE_H
#define AUTHN_HMAC_SHARED_TABLE_H

#include "shm/table.h"
#include "unit.h"

#include <sys/mman.h>

static apr_global_mutex_t *shared_mutex;
static void *shared_base;
static size_t shared_size;

static inline authn_hmac_table_t *shared_table(apr_pool_t *p)
{
    shared_size = authn_hmac_table_size(1u << 20);
    shared_base = mmap(NULL, shared_size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared_base != MAP_FAILED);
    CHECK(authn_hmac_table_format(shared_base, shared_size,
                                  apr_time_from_sec(1)) == APR_SUCCESS);
    CHECK(apr_global_mutex_create(&shared_mutex, NULL, APR_LOCK_DEFAULT, p) ==
          APR_SUCCESS);
    return authn_hmac_table_attach(shared_base, shared_mutex, p);
}

static inline authn_hmac_table_t *shared_child(void)
{
    apr_pool_t *cp;

    apr_pool_create(&cp, NULL);
    apr_global_mutex_child_init(&shared_mutex, NULL, cp);
    return authn_hmac_table_attach(shared_base, shared_mutex, cp);
}

static inline void shared_done(void)
{
    apr_global_mutex_destroy(shared_mutex);
    munmap(shared_base, shared_size);
}

#endif
