/* shm/table_testing.h: TEST ONLY. The cache's seams, in
 * libauthnhmac_test.la (src/shm/table.c built with AUTHN_HMAC_TESTING),
 * which only tests and fuzzers link, never the module; testing/testing.h
 * gathers them with the others. */
#ifndef AUTHN_HMAC_TABLE_TESTING_H
#define AUTHN_HMAC_TABLE_TESTING_H

#include "shm/table.h"

/* Leaves key's slot as a writer that died halfway through writing it would
 * (its sequence odd, its contents torn). */
void authn_hmac_table_tear(authn_hmac_table_t *t,
                           const unsigned char key[AUTHN_HMAC_KEY_LEN],
                           const unsigned char uid[AUTHN_HMAC_KEY_LEN]);

/* Where a test stops a thread (testing/testing.h says where each pause
 * point is); a lookup in the cache that missed is 6. Calls the test's
 * hook, if it set one (src/testing/seams.c). */
void authn_hmac_test_pause(int n);

#endif /* AUTHN_HMAC_TABLE_TESTING_H */
