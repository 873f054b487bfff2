/* testing/cred.c: TEST ONLY (libauthnhmac_test.la, see
 * testing/testing.h): a credential's keys in one call, from its fields,
 * as the engine makes them in two (the digest, then its MAC). */
#include "testing/testing.h"

apr_status_t authn_hmac_mac_compute(const authn_hmac_mac_t *mac,
                                    const char *scope, size_t scope_len,
                                    const char *user, size_t user_len,
                                    const char *password, size_t password_len,
                                    const char *hash, size_t hash_len,
                                    unsigned char key[AUTHN_HMAC_KEY_LEN])
{
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];

    authn_hmac_cred_digest(scope, scope_len, user, user_len, hash, hash_len, d);
    authn_hmac_cred_mac(mac, d, password, password_len, key);
    return APR_SUCCESS;
}

void authn_hmac_negative_key(const authn_hmac_mac_t *mac, const char *scope,
                             size_t scope_len, const char *user,
                             size_t user_len, const char *password,
                             size_t password_len, const char *hash,
                             size_t hash_len,
                             unsigned char nkey[AUTHN_HMAC_KEY_LEN])
{
    unsigned char d[AUTHN_HMAC_DIGEST_LEN];

    authn_hmac_cred_digest(scope, scope_len, user, user_len, hash, hash_len, d);
    authn_hmac_cred_negative(mac, d, password, password_len, nkey);
}
