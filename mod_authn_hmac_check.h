/*
 * mod_authn_hmac_check.h: the checks that span directives
 * (mod_authn_hmac_check.c).
 */
#ifndef MOD_AUTHN_HMAC_CHECK_H
#define MOD_AUTHN_HMAC_CHECK_H

#include "httpd.h"

/* The check_config hook. */
int hmac_check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                      server_rec *s);

#endif
