/* htpasswd.c: the request path from the htpasswd file
 * (authn_hmac_check_user): the user's answer from the file's index
 * (sources/htpasswd.h), then one pass down the tiers; and the writer rule:
 * any answer but a grant (a deny, busy) from a reading of a file changed
 * or read less than a second ago waits for the file to be quiet, and is
 * checked again if the quiet file changed the user's answer; the same wait
 * for every such answer, none for a grant. The other sources' paths are
 * dbm.c and source.c. */
#include "engine_int.h"
#include "core/util.h"
#include "sources/htpasswd.h"

#include <string.h>
#include <time.h>

/* A user's answer from the file. */
typedef struct {
    apr_status_t rv; /* APR_SUCCESS, APR_NOTFOUND, AUTHN_HMAC_LOCKED */
    const char *hash;
    size_t hash_len;
    unsigned char uid[AUTHN_HMAC_KEY_LEN];
    unsigned char digest[AUTHN_HMAC_DIGEST_LEN];
} found_t;

/* Whether o grants; any other answer (a deny, busy, an error) from an
 * unsettled reading falls under the writer rule. */
static int granted(authn_hmac_outcome o)
{
    return o == AUTHN_HMAC_HIT || o == AUTHN_HMAC_REDIS_HIT ||
           o == AUTHN_HMAC_VERIFIED || o == AUTHN_HMAC_COALESCED;
}

/* The credential, with the user's answer f. */
static void with(authn_hmac_cred_t *c, const found_t *f)
{
    int known = f->rv == APR_SUCCESS;

    c->hash = known ? f->hash : NULL;
    c->hash_len = known ? f->hash_len : 0;
    c->dummy_hash = known ? NULL : f->hash;
    c->dummy_hash_len = known ? 0 : f->hash_len;
    c->locked = f->rv == AUTHN_HMAC_LOCKED;
    c->uid = known ? f->uid : NULL;
    c->digest = known ? f->digest : NULL;
}

/* Whether the user's answer changed: came, went, or another hash. */
static int changed(const found_t *a, const found_t *b)
{
    return a->rv != b->rv ||
           (a->rv == APR_SUCCESS &&
            (a->hash_len != b->hash_len || strcmp(a->hash, b->hash) != 0));
}

/* The monotonic clock to a tick (a few ms, earlier: a reading is then
 * taken for younger than it is), at a few ns where a precise one takes
 * more: the hit path takes it. */
static apr_time_t coarse_monotonic(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (apr_time_t)ts.tv_sec * APR_USEC_PER_SEC +
           (apr_time_t)(ts.tv_nsec / 1000);
}

static int found(apr_status_t rv)
{
    return rv == APR_SUCCESS || rv == APR_NOTFOUND || rv == AUTHN_HMAC_LOCKED;
}

authn_hmac_outcome authn_hmac_check_user(const authn_hmac_engine_t *e,
                                         const authn_hmac_policy_t *pol,
                                         authn_hmac_userfile_t *uf,
                                         authn_hmac_cred_t *c,
                                         authn_hmac_log_fn bad, void *baton,
                                         apr_pool_t *p, apr_status_t *rv)
{
    apr_time_t since = coarse_monotonic();
    authn_hmac_reading_t rd;
    authn_hmac_outcome o;
    authn_hmac_held_t held;
    found_t first, then;
    int unsettled;

    first.rv = authn_hmac_userfile_lookup_id(
        uf, c->user, e->mac, c->scope, c->scope_len, &first.hash,
        &first.hash_len, first.uid, first.digest, bad, baton, p, &rd);
    *rv = found(first.rv) ? APR_SUCCESS : first.rv;
    if (*rv != APR_SUCCESS)
        return AUTHN_HMAC_ERROR;
    /* NB: an answer the reading could not give (torn, or the user's line
     * the last, maybe cut) is asked of the quiet file before any
     * verification: checked after a first one against the dummy, it would
     * cost a known user a second one that an unknown user's deny never
     * makes. A torn reading is unsure even past the bound (settle's last
     * look): its answer is never taken, a torn index's locked line no
     * more than its user's hash. */
    if (rd.unsure) {
        then.rv = authn_hmac_userfile_settle(
            uf, c->user, e->mac, c->scope, c->scope_len, &then.hash,
            &then.hash_len, then.uid, then.digest, bad, baton, p, &rd,
            authn_hmac_monotonic());
        with(c, found(then.rv) && !rd.unsure ? &then : &first);
        o = authn_hmac_engine_run(e, pol, c, baton, p);
        goto done;
    }
    with(c, &first);
    /* NB: from a reading the writer rule may ask again, a wrong password's
     * count waits for the answer that stands: a right password that a
     * half-written file missed is never counted. */
    memset(&held, 0, sizeof(held));
    unsettled = authn_hmac_userfile_unsettled(&rd, since);
    c->hold = unsettled ? &held : NULL;
    o = authn_hmac_engine_run(e, pol, c, baton, p);
    c->hold = NULL;
    /* The writer rule: any answer but a grant from a reading that a
     * writer may have left half done is asked again of the quiet file, and
     * checked again only if that changed the user's answer. NB: a busy
     * too: a cached user missing from a half-written file takes the dummy
     * verification's way, and a full queue answered it busy (a 503) where
     * the quiet file holds its cached credential. The wait is the same for
     * every such answer (a wrong password, an unknown or a locked user,
     * busy, throttled). */
    if (!granted(o) && unsettled) {
        then.rv = authn_hmac_userfile_settle(
            uf, c->user, e->mac, c->scope, c->scope_len, &then.hash,
            &then.hash_len, then.uid, then.digest, bad, baton, p, &rd,
            authn_hmac_monotonic());
        if (found(then.rv) && !rd.unsure && changed(&first, &then)) {
            with(c, &then);
            o = authn_hmac_engine_run(e, pol, c, baton, p);
            held.what = 0; /* the second answer counted itself */
        }
        else
            with(c, &first);
        /* NB: a settled answer that could not be read is not counted;
         * one the same as the first is, quiet file or not (a file whose
         * time is in the future never looks quiet: counting would stop). */
        if (!found(then.rv) || rd.unsure)
            held.what = 0;
    }
    if (!granted(o))
        authn_hmac_count_held(e, c, &held, baton, p);
done:
    authn_hmac_engine_tally(e, c, o);
    c->uid = NULL; /* this function's */
    c->digest = NULL;
    return o;
}
