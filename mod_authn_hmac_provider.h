/*
 * mod_authn_hmac_provider.h: the provider, mod_dbd's functions and the
 * busy 503 path's hooks (mod_authn_hmac_provider.c).
 */
#ifndef MOD_AUTHN_HMAC_PROVIDER_H
#define MOD_AUTHN_HMAC_PROVIDER_H

#include "httpd.h"
#include "mod_auth.h"
#include "apr_dbd.h"
#include "mod_dbd.h"

extern const authn_provider hmac_provider;
/* mod_dbd's functions, once hmac_dbd_find has found them (it returns
 * whether it did: mod_dbd is loaded). */
extern APR_OPTIONAL_FN_TYPE(ap_dbd_prepare) * hmac_dbd_prepare;
int hmac_dbd_find(void);
void hmac_busy_error(request_rec *r);
int hmac_busy_redirect(request_rec *r);
int hmac_busy_log(request_rec *r);
/* Names, at start, the sections whose configuration a wrapped provider
 * reads (see wrapped_scope). */
void hmac_wrapped_sections(apr_pool_t *pconf, server_rec *s);

#endif
