/*
 * mod_authn_hmac_walk.h: the walk of the configuration's sections at start
 * (mod_authn_hmac_walk.c).
 */
#ifndef MOD_AUTHN_HMAC_WALK_H
#define MOD_AUTHN_HMAC_WALK_H

#include "httpd.h"

/* Returns whether some section can never have an AuthHMACUserFile (each
 * is logged); with warn, also logs those that may not have one. */
int hmac_check_userfiles(apr_pool_t *ptemp, server_rec *s, int warn);

#endif
