/* testing/seams.c: TEST ONLY (libauthnhmac_test.la, see
 * testing/testing.h): where a test stops a thread of the user-file
 * layer. */
#include "testing/testing.h"

#include <stddef.h>

void (*authn_hmac_test_pause_hook)(int n) = NULL;

void authn_hmac_test_pause(int n)
{
    if (authn_hmac_test_pause_hook)
        authn_hmac_test_pause_hook(n);
}
