/* sources/watch_testing.h: TEST ONLY. The watcher's seams, in
 * libauthnhmac_test.la (src/sources/watch.c built with AUTHN_HMAC_TESTING),
 * which only tests and fuzzers link, never the module; testing/testing.h
 * gathers them with the others. */
#ifndef AUTHN_HMAC_WATCH_TESTING_H
#define AUTHN_HMAC_WATCH_TESTING_H

/* A writer seen at work on wd, or done, as a drain would take it in. */
void authn_hmac_test_set_writing(int wd, int on);

/* A drain by hand: begun (the count moved on, under the watcher's lock),
 * the queue taken (as often as wanted), ended (the count moved on). */
void authn_hmac_test_drain_begin(void);
void authn_hmac_test_drain_take(void);
void authn_hmac_test_drain_end(void);

/* The epoll instances: how many (max_too: how many there can be), each
 * one's fd and busy flag; held busy, closed, or all of them dropped. */
int authn_hmac_test_polls(int max_too);
int authn_hmac_test_poll_fd(int i);
int authn_hmac_test_poll_busy(int i);
#define AUTHN_HMAC_TEST_POLL_HOLD  1
#define AUTHN_HMAC_TEST_POLL_CLOSE 2
#define AUTHN_HMAC_TEST_POLLS_OFF  3
void authn_hmac_test_poll_set(int i, int how);

#endif /* AUTHN_HMAC_WATCH_TESTING_H */
