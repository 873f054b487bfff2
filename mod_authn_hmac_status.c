/*
 * mod_authn_hmac_status.c: the counters of every process, on the
 * module's own handler ("authn-hmac-status": text, JSON or Prometheus)
 * and, with AuthHMACServerStatus on, on mod_status's server-status.
 */
#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_protocol.h"
#include "mod_status.h"

#include <string.h>

#include <apr_strings.h>

#include "request/annex.h"
#include "shm/table.h"
#include "shm/throttle.h"
#include "core/util.h"

#include "mod_authn_hmac.h"
#include "mod_authn_hmac_child.h"
#include "mod_authn_hmac_status.h"

#define STATUS_HANDLER "authn-hmac-status"

typedef char reason_fits[sizeof(((authn_hmac_stats_t *)0)->redis_reason) ==
                                 AUTHN_HMAC_REDIS_REASON_MAX
                             ? 1
                             : -1];

/* The Redis tier's state: whether it answers, the breaker's reason, the
 * primary (the server, or the one Sentinel named) and the Sentinel
 * counters. */
static void redis_state(authn_hmac_stats_t *st)
{
    const authn_hmac_sentinel_shared_t *sh =
        authn_hmac_annex_sentinel(hmac_conf.table);
    char ip[AUTHN_HMAC_SENTINEL_IP_MAX], host[AUTHN_HMAC_SENTINEL_HOST_MAX];
    int port = 0;

    st->redis = hmac_conf.redis_name != NULL;
    if (!st->redis)
        return;
    st->redis_up = (uint64_t)authn_hmac_redis_health_read(
        authn_hmac_annex_redis_health(hmac_conf.table), &st->redis_up_since,
        st->redis_reason);
    st->sentinel = hmac_conf.sentinel.n > 0;
    if (!st->sentinel) {
        apr_cpystrn(st->redis_primary, hmac_conf.redis_name,
                    sizeof(st->redis_primary));
        return;
    }
    /* NB: the address the pool connects to ([v6]:port). */
    if (authn_hmac_sentinel_read(sh, ip, host, &port)) {
        apr_snprintf(st->redis_primary, sizeof(st->redis_primary),
                     strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
        st->redis_primary_since = __atomic_load_n(&sh->since, __ATOMIC_RELAXED);
    }
    st->sentinel_discoveries =
        __atomic_load_n(&sh->discoveries, __ATOMIC_RELAXED);
    st->sentinel_switches = __atomic_load_n(&sh->switches, __ATOMIC_RELAXED);
}

/* The counters of every process, rendered in format f; with check, after
 * a probe of Redis (the page's ?check), whose answer they then show. */
static const char *status_text(authn_hmac_format_t f, request_rec *r, int check)
{
    authn_hmac_stats_t st;
    apr_time_t now;
    const char *why = "";
    int answered = 0;

    check = check && hmac_conf.redis_name;
    if (check)
        answered = authn_hmac_redis_check(&hmac_child.engine, r, &why, r->pool);
    now = apr_time_now();
    authn_hmac_table_stats(hmac_conf.table, now, &st);
    authn_hmac_annex_stats(hmac_conf.table, &st);
    st.checked = check;
    st.redis_check = (uint64_t)answered;
    apr_cpystrn(st.redis_check_reason, why, sizeof(st.redis_check_reason));
    redis_state(&st);
    st.pepper_random = hmac_conf.pepper_random;
    st.now = now;
    st.nbans = authn_hmac_throttle_bans(hmac_conf.table, now, st.bans,
                                        AUTHN_HMAC_BOOK);
    st.max_verifications = (uint64_t)hmac_conf.max_verifications;
    return authn_hmac_status_format(&st, f, r->pool);
}

/* POST ?lift=CLIENT[&user=NAME], with the header X-Authn-HMAC-Lift:
 * lifts the client's bans in this server (every one; with user=, its ban
 * for all users; with user=NAME, its ban for that user), and says how
 * many. NB: the header makes it no "simple" request: a browser sends one
 * from another site's page only after a CORS preflight, which this
 * handler never grants (a form an admin's browser were made to post
 * would lift a guesser's ban). */
static int lift(request_rec *r)
{
    const char *client = NULL, *user = NULL;
    char *args = apr_pstrdup(r->pool, r->args ? r->args : ""), *tok, *last;
    int n;

    if (!apr_table_get(r->headers_in, "X-Authn-HMAC-Lift")) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                      "a POST to the status handler without the header "
                      "X-Authn-HMAC-Lift: refused");
        return HTTP_FORBIDDEN;
    }

    for (tok = apr_strtok(args, "&", &last); tok;
         tok = apr_strtok(NULL, "&", &last)) {
        char *v = strchr(tok, '=');

        if (!v)
            continue;
        *v++ = '\0';
        if (ap_unescape_urlencoded(v) != OK)
            return HTTP_BAD_REQUEST;
        if (strcmp(tok, "lift") == 0)
            client = v;
        else if (strcmp(tok, "user") == 0)
            user = v;
    }
    if (!client || !*client)
        return HTTP_BAD_REQUEST;
    n = authn_hmac_throttle_lift(hmac_conf.table, client, user, apr_time_now());
    ap_log_rerror(APLOG_MARK, APLOG_NOTICE, 0, r,
                  "AHMAC0037: %d ban(s) of client %s%s%s lifted", n, client,
                  user ? (*user ? " for user " : " for all users") : "",
                  user ? user : "");
    ap_set_content_type(r, "text/plain; charset=utf-8");
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    ap_rprintf(r, "lifted: %d\n", n);
    return OK;
}

int hmac_status_handler(request_rec *r)
{
    static const char *const type[AUTHN_HMAC_FMT_HTML + 1] = {
        [AUTHN_HMAC_FMT_TEXT] = "text/plain; charset=utf-8",
        [AUTHN_HMAC_FMT_JSON] = "application/json",
        [AUTHN_HMAC_FMT_PROMETHEUS] =
            "text/plain; version=0.0.4; charset=utf-8",
    };
    authn_hmac_format_t f;

    if (!r->handler || strcmp(r->handler, STATUS_HANDLER) != 0)
        return DECLINED;
    r->allowed = (AP_METHOD_BIT << M_GET) | (AP_METHOD_BIT << M_POST);
    if (r->method_number != M_GET && r->method_number != M_POST)
        return HTTP_METHOD_NOT_ALLOWED;
    if (!hmac_conf.table)
        return HTTP_SERVICE_UNAVAILABLE;
    if (r->method_number == M_POST)
        return lift(r);
    f = authn_hmac_status_query(r->args);
    ap_set_content_type(r, type[f] ? type[f] : type[AUTHN_HMAC_FMT_TEXT]);
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (r->header_only)
        return OK;
    ap_rputs(status_text(f, r, authn_hmac_status_check(r->args)), r);
    return OK;
}

/* mod_status's server-status: a table on its page (lines with
 * ?notable), lines in ?auto. */
int hmac_status_hook(request_rec *r, int flags)
{
    /* NB: only when asked for. Debian enables mod_status for every local
     * client, and behind a reverse proxy on the same host every client is
     * local: unknown_user moving would tell names apart. */
    if (!hmac_conf.table || !hmac_conf.server_status)
        return OK;
    if (flags & AP_STATUS_SHORT)
        ap_rputs(status_text(AUTHN_HMAC_FMT_AUTO, r, 0), r);
    else if (flags & AP_STATUS_NOTABLE)
        /* NB: escaped: the breaker's reason is Redis's text (found by
         * review: whatever answers as Redis could put HTML there). */
        ap_rvputs(
            r, "<h2>mod_authn_hmac</h2>\n<pre>\n",
            ap_escape_html(r->pool, status_text(AUTHN_HMAC_FMT_TEXT, r, 0)),
            "</pre>\n", NULL);
    else
        ap_rputs(status_text(AUTHN_HMAC_FMT_HTML, r, 0), r);
    return OK;
}
