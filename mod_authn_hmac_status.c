/*
 * mod_authn_hmac_status.c: the counters of every process, on the
 * module's own handler ("authn-hmac-status": text, JSON or Prometheus)
 * and, with AuthHMACServerStatus on, on mod_status's server-status.
 */
#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "mod_status.h"

#include <string.h>

#include "authn_hmac/table.h"
#include "authn_hmac/util.h"

#include "mod_authn_hmac_private.h"

#define STATUS_HANDLER "authn-hmac-status"

/* The counters of every process, rendered in format f. */
static const char *status_text(authn_hmac_format_t f, apr_pool_t *p)
{
    authn_hmac_stats_t st;
    apr_time_t now = apr_time_now();

    authn_hmac_table_stats(hmac_conf.table, now, &st);
    st.redis = hmac_conf.redis_name != NULL;
    st.max_verifications = (uint64_t)hmac_conf.max_verifications;
    return authn_hmac_status_format(&st, f, p);
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
    r->allowed = AP_METHOD_BIT << M_GET;
    if (r->method_number != M_GET)
        return HTTP_METHOD_NOT_ALLOWED;
    if (!hmac_conf.table)
        return HTTP_SERVICE_UNAVAILABLE;
    f = authn_hmac_status_query(r->args);
    ap_set_content_type(r, type[f] ? type[f] : type[AUTHN_HMAC_FMT_TEXT]);
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (r->header_only)
        return OK;
    ap_rputs(status_text(f, r->pool), r);
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
        ap_rputs(status_text(AUTHN_HMAC_FMT_AUTO, r->pool), r);
    else if (flags & AP_STATUS_NOTABLE)
        ap_rvputs(r, "<h2>mod_authn_hmac</h2>\n<pre>\n",
                  status_text(AUTHN_HMAC_FMT_TEXT, r->pool), "</pre>\n", NULL);
    else
        ap_rputs(status_text(AUTHN_HMAC_FMT_HTML, r->pool), r);
    return OK;
}
