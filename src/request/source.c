/* source.c: the request path from a source of stored hashes other than
 * the htpasswd file (a DBM file, SQL through mod_dbd): the hash is the
 * source's, the rest is the engine's. The hash is in the credential's key,
 * so a changed or removed password stops working at the next request, as
 * with the htpasswd file. An unknown user costs a known user's wrong
 * password: a dummy verification against a hash of another user's scheme
 * and cost. */
#include "request/source.h"
#include "core/cred.h"
#include "sources/index.h"

#include "apr_thread_mutex.h"

#include <string.h>

/* The template of a process that has found no user yet: bcrypt, cost 10
 * (authn_hmac_dummy_hash takes its scheme and cost, and draws the rest).
 * NB: a DBM file gives its first record at once; an SQL source cannot. */
#define FIRST_TEMPLATE                                                         \
    "$2y$10$....................................................."

/* NB: the template is written once, under the lock, then published by
 * set: a request reads it without the lock (the hot path takes none). */
struct authn_hmac_source_t {
    apr_thread_mutex_t *lock; /* over the one write of tmpl */
    int set;                  /* tmpl is written (atomic) */
    char tmpl[AUTHN_HMAC_DUMMY_MAX];
};

authn_hmac_source_t *authn_hmac_source_make(apr_pool_t *p)
{
    authn_hmac_source_t *s = apr_pcalloc(p, sizeof(*s));

    if (apr_thread_mutex_create(&s->lock, APR_THREAD_MUTEX_DEFAULT, p) !=
        APR_SUCCESS)
        s->lock = NULL;
    return s;
}

int authn_hmac_source_has_template(authn_hmac_source_t *s)
{
    return __atomic_load_n(&s->set, __ATOMIC_ACQUIRE);
}

/* Keeps hash as the template, unless it is a locked line's or the
 * process has one: the first stays, so that the dummy, and an unknown
 * user's entry in the negative cache, do not change with the users found
 * (a repeat would then miss, where a known user's is a negative hit). Its
 * salt, where the dummy would keep it (MD5-crypt, SHA-crypt: the text
 * before the last '$'), is made '.'s: the processes that found another
 * user of the same scheme and cost make the same dummy. */
static void keep(authn_hmac_source_t *s, const char *hash)
{
    size_t len = hash ? strlen(hash) : 0;
    char *last, *salt;

    if (authn_hmac_source_has_template(s) || !len || len >= sizeof(s->tmpl) ||
        authn_hmac_hash_locked(hash, len) || !s->lock ||
        apr_thread_mutex_lock(s->lock) != APR_SUCCESS)
        return;
    if (!s->set) {
        memcpy(s->tmpl, hash, len + 1);
        last = strrchr(s->tmpl, '$');
        if (last &&
            (!strncmp(s->tmpl, "$apr1$", 6) || !strncmp(s->tmpl, "$1$", 3) ||
             !strncmp(s->tmpl, "$5$", 3) || !strncmp(s->tmpl, "$6$", 3))) {
            for (salt = last; salt > s->tmpl && salt[-1] != '$'; salt--)
                ;
            if (salt >= s->tmpl + 3)
                memset(salt, '.', (size_t)(last - salt));
        }
        __atomic_store_n(&s->set, 1, __ATOMIC_RELEASE);
    }
    apr_thread_mutex_unlock(s->lock);
}

const char *authn_hmac_source_template(authn_hmac_source_t *s)
{
    return authn_hmac_source_has_template(s) ? s->tmpl : FIRST_TEMPLATE;
}

authn_hmac_outcome authn_hmac_check_hash(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         authn_hmac_source_t *s,
                                         authn_hmac_cred_t *c, const char *hash,
                                         const char *other, void *baton,
                                         apr_pool_t *p)
{
    const char *tmpl;

    keep(s, hash ? hash : other);
    tmpl = authn_hmac_source_template(s);
    c->hash = hash;
    c->hash_len = hash ? strlen(hash) : 0;
    c->locked = hash && authn_hmac_hash_locked(hash, c->hash_len);
    c->dummy_hash = tmpl;
    c->dummy_hash_len = strlen(tmpl);
    c->uid = NULL;
    c->digest = NULL;
    return authn_hmac_check(e, pol, c, baton, p);
}
