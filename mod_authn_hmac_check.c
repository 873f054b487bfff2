/*
 * mod_authn_hmac_check.c: the checks that span directives, at
 * check_config, so that `apachectl -t` sees them: Sentinel's directives
 * against each other and AuthHMACRedisServer, a farm's pepper, the TLS
 * directives and their contexts (made here, once per reading of the
 * configuration, in the parent), then the walk of the sections
 * (mod_authn_hmac_walk.c). It rests on the server's configuration as the
 * directives left it (mod_authn_hmac_config.c) and on the Redis client's
 * TLS (src/redis).
 */
#include "httpd.h"
#include "http_core.h"
#include "http_log.h"

#include "apr_strings.h"

#include "core/secret.h"
#include "redis/redis.h"

#include "mod_authn_hmac.h"
#include "mod_authn_hmac_check.h"
#include "mod_authn_hmac_config.h"
#include "mod_authn_hmac_walk.h"

/* What the Sentinel directives need of each other and of the rest, or
 * NULL; then Redis is the primary they name. */
static const char *check_sentinel(apr_pool_t *p)
{
    if (!hmac_conf.sentinel.n && !hmac_conf.sentinel.master &&
        !hmac_conf.sentinel_secret)
        return NULL;
    if (hmac_conf.sentinel.n && hmac_conf.redis_name)
        return D_SENT " and " D_REDIS " exclude each other: the Sentinels "
                      "name the primary (remove one of them)";
    if (!hmac_conf.sentinel.n)
        return hmac_conf.sentinel.master ? D_SMASTER " needs " D_SENT
                                         : D_SAUTH " needs " D_SENT;
    if (!hmac_conf.sentinel.master)
        return D_SENT " needs " D_SMASTER
                      " (the name the Sentinels monitor the primary by)";
    hmac_conf.sentinel.conn.timeout_ms = hmac_conf.redis.timeout_ms;
    hmac_conf.sentinel.conn.prefix = hmac_conf.redis.prefix;
    hmac_conf.redis_name = apr_psprintf(
        p, "'%s' (the primary the Sentinels name)", hmac_conf.sentinel.master);
    return NULL;
}

/* The TLS contexts (the primary's, and the Sentinels' if any), or what is
 * wrong with the TLS directives' files. The key goes either way. */
static const char *make_tls_contexts(apr_pool_t *pconf)
{
    static const char *const part_name[] = {
        [AUTHN_HMAC_TLS_OTHER] = D_TLS,  [AUTHN_HMAC_TLS_NAME] = D_TLSNAME,
        [AUTHN_HMAC_TLS_CA] = D_TLSCA,   [AUTHN_HMAC_TLS_CERT] = D_TLSCERT,
        [AUTHN_HMAC_TLS_KEY] = D_TLSKEY,
    };
    authn_hmac_tls_part part = AUTHN_HMAC_TLS_OTHER;
    const char *err = authn_hmac_redis_tls_create(
        &hmac_conf.redis.tls, &hmac_conf.tls,
        hmac_conf.sentinel.n ? hmac_conf.sentinel.host[0]
                             : hmac_conf.redis.host,
        &part, pconf);

    /* NB: with Sentinel, each connection names its peer: a Sentinel
     * by its host, the primary by AuthHMACRedisTLSServerName or the
     * host the Sentinels name. The Sentinels get a context of their
     * own, the same but for that name, so that their sessions and the
     * primary's do not replace each other. */
    if (!err && hmac_conf.sentinel.n) {
        authn_hmac_redis_tls_conf_t tc = hmac_conf.tls;

        tc.server_name = NULL;
        hmac_conf.sentinel.primary_name = hmac_conf.tls.server_name;
        err = authn_hmac_redis_tls_create(&hmac_conf.sentinel.conn.tls, &tc,
                                          hmac_conf.sentinel.host[0], &part,
                                          pconf);
    }
    if (err)
        err = apr_pstrcat(pconf, part_name[part], ": ", err, NULL);
    /* NB: the context holds the key now, in OpenSSL's secure heap. */
    authn_hmac_secret_wipe(hmac_conf.tls_key);
    hmac_conf.tls_key = NULL;
    hmac_conf.tls.key = NULL;
    return err;
}

/* The TLS context, made once per reading of the configuration (in the
 * parent; the children share it), or what is wrong, logged. */
static int check_tls(server_rec *s, apr_pool_t *pconf)
{
    const char *set = hmac_conf.tls.ca_file       ? D_TLSCA
                      : hmac_conf.tls.server_name ? D_TLSNAME
                      : hmac_conf.tls.cert_file   ? D_TLSCERT
                      : hmac_conf.tls_key         ? D_TLSKEY
                                                  : NULL;
    const char *err;

    if (!hmac_conf.redis_tls && set)
        err = apr_pstrcat(pconf, set, " needs " D_TLS " on", NULL);
    else if (!hmac_conf.redis_tls)
        return OK;
    else if (!hmac_conf.redis_name)
        err = D_TLS " on needs " D_REDIS " or " D_SENT;
    else if (hmac_conf.redis.socket)
        err = D_TLS " on needs a host:port in " D_REDIS
                    ", not a unix socket (which is local: no TLS)";
    else if (!hmac_conf.tls.cert_file != !hmac_conf.tls_key)
        err = hmac_conf.tls_key ? D_TLSKEY " needs " D_TLSCERT
                                : D_TLSCERT " needs " D_TLSKEY;
    /* NB: a Sentinel names the primary, and the primary gets AUTH with
     * the Redis password once its certificate verifies for the name the
     * Sentinel gave. With the system store any host with a public
     * certificate (for a name, or now for an address) would verify: a
     * rogue Sentinel would get the password. Your own CA, or one name
     * every primary must carry, keeps it among your servers. */
    else if (hmac_conf.sentinel.n && !hmac_conf.tls.ca_file &&
             !hmac_conf.tls.server_name)
        err = D_TLS " on with " D_SENT " needs " D_TLSCA " or " D_TLSNAME
                    " (with the system store, a Sentinel could name any host "
                    "with a public certificate, and it would get the Redis "
                    "password)";
    else
        err = make_tls_contexts(pconf);
    if (!err)
        return OK;
    ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s, "AHMAC0021: %s",
                 err);
    return HTTP_INTERNAL_SERVER_ERROR;
}

/* Checks that span directives, so that `apachectl -t` sees them. */
int hmac_check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                      server_rec *s)
{
    const char *err = check_sentinel(pconf);

    (void)plog;
    if (err) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s,
                     "AHMAC0022: %s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    if (hmac_conf.redis_name && !hmac_conf.pepper) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s,
                     "AHMAC0008: %s needs " D_PEPPER ": the servers sharing a "
                     "Redis must share one pepper (none is set; a line "
                     "inside <IfFile>, as an older authn_hmac.conf has it, "
                     "is skipped when the file is missing: make it with "
                     "authn-hmac-pepper, or copy the farm's)",
                     hmac_conf.sentinel.n ? D_SENT : D_REDIS);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    /* NB: the warnings go to the error log once per start (post_config);
     * `apachectl -t` prints them here. */
    if (hmac_check_userfiles(
            ptemp, s, ap_state_query(AP_SQ_RUN_MODE) == AP_SQ_RM_CONFIG_TEST))
        return HTTP_INTERNAL_SERVER_ERROR;
    return check_tls(s, pconf);
}
