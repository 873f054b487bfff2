/*
 * mod_authn_hmac_status.h: the status handler and mod_status's hook
 * (mod_authn_hmac_status.c).
 */
#ifndef MOD_AUTHN_HMAC_STATUS_H
#define MOD_AUTHN_HMAC_STATUS_H

#include "httpd.h"

int hmac_status_handler(request_rec *r);
int hmac_status_hook(request_rec *r, int flags);

#endif
