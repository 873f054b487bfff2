/* tls.c: TLS to Redis, a transport over socket.c's socket (socket.h's
 * table, as plain TCP is the other), for the connection layer (conn.c).
 *
 * One client context per configuration, made in the parent when the
 * configuration is read and shared by the children: TLS 1.2 or later, the
 * server's certificate verified (there is no switch that turns that off)
 * against the CA file or OpenSSL's default store, and its name checked
 * against the configured name (an IP address against the IP SANs); the
 * name goes as SNI unless it is an address. A client certificate's key
 * comes from a secret page (read as the pepper is) and lives, parsed, in
 * OpenSSL's secure heap: locked, and out of core dumps.
 *
 * Each connection's handshake, writes and reads run on the connection's
 * non-blocking socket under the deadline of its operation, as plain ones
 * do. The last session the server gave each process is offered on the
 * next connect, so that reconnecting (a breaker's new epoch, a dropped
 * connection) costs a resumption, not a full handshake. */
#include "tls.h"
#include "core/secret.h"
#include "core/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <apr_strings.h>
#include <bsd/string.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* The secure heap holds the parsed client key; OpenSSL also takes its
 * handshakes' temporary keys from it while it is set up. */
#define SECURE_HEAP     (1 << 20)
#define SECURE_HEAP_MIN 16
#define KEY_FILE_MAX    16384

struct authn_hmac_redis_tls {
    SSL_CTX *ctx;
    const char *peer; /* the name the certificate must carry */
    int peer_is_ip;
    pthread_mutex_t lock; /* of last */
    SSL_SESSION *last;    /* this process's newest session, or NULL */
    char last_peer[AUTHN_HMAC_REDIS_HOST_MAX]; /* the name it was for */
};

size_t authn_hmac_redis_tls_key_max(void)
{
    return KEY_FILE_MAX;
}

const char *authn_hmac_redis_tls_peer(const char *name, const char *host,
                                      int *is_ip)
{
    const char *peer = name && *name ? name : host;
    unsigned char buf[16];

    *is_ip = 0;
    if (!peer || !*peer)
        return NULL;
    *is_ip = inet_pton(AF_INET, peer, buf) == 1 ||
             inet_pton(AF_INET6, peer, buf) == 1;
    return peer;
}

/* OpenSSL's first queued error, as text, and the queue emptied. */
static const char *ssl_error(const char *fallback, apr_pool_t *p)
{
    unsigned long e = ERR_peek_last_error();
    char buf[256];

    if (!e)
        return fallback;
    ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    return apr_pstrdup(p, buf);
}

/* The name or address a connection's certificate is checked for, as
 * OpenSSL holds it ("" if none). */
static void peer_of(SSL *ssl, char out[AUTHN_HMAC_REDIS_HOST_MAX])
{
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    const char *host = X509_VERIFY_PARAM_get0_host(param, 0);
    char *ip = host ? NULL : X509_VERIFY_PARAM_get1_ip_asc(param);

    strlcpy(out, host ? host : ip ? ip : "", AUTHN_HMAC_REDIS_HOST_MAX);
    OPENSSL_free(ip);
}

/* Keeps the newest session the server gave (with TLS 1.3 the tickets come
 * after the handshake, with the first reply), with the name it is for. */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
    authn_hmac_redis_tls_t *t = SSL_get_app_data(ssl);
    char peer[AUTHN_HMAC_REDIS_HOST_MAX];
    SSL_SESSION *old;

    if (!t || !SSL_SESSION_is_resumable(sess))
        return 0;
    peer_of(ssl, peer);
    pthread_mutex_lock(&t->lock);
    old = t->last;
    t->last = sess;
    memcpy(t->last_peer, peer, sizeof(peer));
    pthread_mutex_unlock(&t->lock);
    if (old)
        SSL_SESSION_free(old);
    return 1; /* the reference is ours */
}

static apr_status_t tls_cleanup(void *data)
{
    authn_hmac_redis_tls_t *t = data;

    if (t->last)
        SSL_SESSION_free(t->last);
    t->last = NULL;
    SSL_CTX_free(t->ctx);
    t->ctx = NULL;
    return APR_SUCCESS;
}

/* ------------------------------------------------- the client key */

/* The key is parsed in a child process, which hands its parameters back
 * through a pipe and exits: OpenSSL's decoders leave copies of the key's
 * DER in the heap they free it to (found by review: the private scalar in
 * a core dump of every child), and that heap goes with the child. The
 * parameters come back into the secure heap, and the key is made from
 * them there. A record: a kind ('T' the key's type, 'P' a parameter, 'Z'
 * the end, 'E' an error's text), its name (NUL-terminated), its OSSL_PARAM
 * data type (uint32), its size (uint32), its bytes and a NUL. The child
 * cannot dump core, and must exit with 0 after the end record. */
#define KEY_PARAMS_MAX 32768 /* bytes of records */
#define KEY_PARAMS_N   32    /* parameters */
#define KEY_PARAMS_STORE                                                       \
    (KEY_PARAMS_MAX + 16 * (KEY_PARAMS_N + 1)) /* their values, aligned */

static int put_record(int fd, char kind, const char *name, uint32_t type,
                      const void *data, uint32_t size)
{
    size_t nl = strlen(name) + 1;
    unsigned char head[1 + 8];

    head[0] = (unsigned char)kind;
    memcpy(head + 1, &type, 4);
    memcpy(head + 5, &size, 4);
    /* NB: a NUL after the bytes: a UTF-8 string's size leaves it out, and
     * its readers expect it. */
    return write(fd, head, 1) == 1 && write(fd, name, nl) == (ssize_t)nl &&
           write(fd, head + 1, 8) == 8 &&
           (!size || write(fd, data, size) == (ssize_t)size) &&
           write(fd, "", 1) == 1;
}

/* In the child: parse, write the records, exit. */
static void parse_key(int fd, const authn_hmac_secret_t *key)
{
    BIO *bio = BIO_new_mem_buf(key->data, (int)key->len);
    EVP_PKEY *pkey = NULL;
    OSSL_PARAM *params = NULL, *q;
    char err[256] = "unreadable";
    int ok = 0;

    /* NB: no core dump of this process, whose heap the decoders fill. */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* NB: the empty pass phrase: an encrypted key is refused, never
     * prompted for. */
    if (bio)
        pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)(uintptr_t) "");
    if (pkey && EVP_PKEY_todata(pkey, EVP_PKEY_KEYPAIR, &params) == 1) {
        const char *type = EVP_PKEY_get0_type_name(pkey);

        ok = type && put_record(fd, 'T', type, 0, NULL, 0);
        for (q = params; ok && q->key; q++)
            ok = q->data_size <= KEY_PARAMS_MAX &&
                 put_record(fd, 'P', q->key, q->data_type, q->data,
                            (uint32_t)q->data_size);
        /* NB: the end: a child that died mid-way left none. */
        ok = ok && put_record(fd, 'Z', "end", 0, NULL, 0);
    }
    if (!ok) {
        unsigned long e = ERR_peek_last_error();

        if (e)
            ERR_error_string_n(e, err, sizeof(err));
        (void)put_record(fd, 'E', err, 0, NULL, 0);
    }
    /* NB: freed, for valgrind's count at this process's exit. */
    OSSL_PARAM_free(params);
    EVP_PKEY_free(pkey);
    BIO_free(bio);
    close(fd);
    _exit(ok ? 0 : 1);
}

/* The key made from the child's records in buf (len bytes, in the secure
 * heap), or NULL and *why. */
static EVP_PKEY *make_key(unsigned char *buf, size_t len, unsigned char *store,
                          const char **why, apr_pool_t *p)
{
    OSSL_PARAM params[KEY_PARAMS_N + 1];
    const char *type = NULL;
    EVP_PKEY_CTX *ctx;
    EVP_PKEY *pkey = NULL;
    size_t at = 0, kept = 0;
    int n = 0, end = 0;

    *why = "the key's parameters are malformed";
    while (at < len && !end) {
        char kind = (char)buf[at++];
        const char *name = (const char *)buf + at;
        size_t nl = strnlen(name, len - at);
        uint32_t dtype, size;

        if (nl == len - at || len - at - nl - 1 < 8)
            return NULL;
        at += nl + 1;
        memcpy(&dtype, buf + at, 4);
        memcpy(&size, buf + at + 4, 4);
        at += 8;
        if (size >= len - at || buf[at + size] != '\0')
            return NULL;
        if (kind == 'E') {
            *why = apr_pstrcat(p,
                               "no private key in it (a PEM key, not "
                               "encrypted): ",
                               name, NULL);
            return NULL;
        }
        if (kind == 'T')
            type = name;
        else if (kind == 'Z')
            end = 1;
        else if (kind == 'P' && n < KEY_PARAMS_N) {
            /* NB: copied where a number is aligned for its type, as
             * OpenSSL reads it (store: KEY_PARAMS_STORE bytes). */
            memcpy(store + kept, buf + at, (size_t)size + 1);
            params[n++] = (OSSL_PARAM){name, dtype, store + kept, size, 0};
            kept += ((size_t)size + 1 + 15) & ~(size_t)15;
        }
        else
            return NULL;
        at += size + 1;
    }
    params[n] = OSSL_PARAM_construct_end();
    if (!type || !end || at != len)
        return NULL;
    ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (!ctx || EVP_PKEY_fromdata_init(ctx) != 1 ||
        EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_KEYPAIR, params) != 1) {
        *why = apr_pstrcat(p, "the key cannot be made again: ",
                           ssl_error("unusable", p), NULL);
        pkey = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    return pkey;
}

/* How long the child that parses the key may take. */
#define KEY_CHILD_TIME apr_time_from_sec(10)

/* The client key, from its PEM text in a secret page, parsed in a child
 * process; NULL and *why if it is not one. */
static EVP_PKEY *load_key(const authn_hmac_secret_t *key, const char **why,
                          apr_pool_t *p)
{
    unsigned char *buf = OPENSSL_secure_malloc(KEY_PARAMS_MAX);
    unsigned char *store = OPENSSL_secure_malloc(KEY_PARAMS_STORE);
    EVP_PKEY *pkey = NULL;
    size_t len = 0;
    ssize_t n = 1;
    int fds[2], status = -1, waited = 1; /* NB: not reaped: not exited well */
    apr_time_t deadline;
    pid_t pid;

    *why = "out of memory";
    if (!buf || !store || pipe(fds) != 0) {
        if (buf && store)
            *why = "cannot make a pipe";
        OPENSSL_secure_free(buf);
        OPENSSL_secure_free(store);
        return NULL;
    }
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        parse_key(fds[1], key);
    }
    close(fds[1]);
    /* NB: under a deadline: httpd's start is never held by it (a parse
     * takes milliseconds; a child that does not answer is killed). */
    deadline = authn_hmac_monotonic() + KEY_CHILD_TIME;
    while (pid > 0 && len < KEY_PARAMS_MAX &&
           (waited = authn_hmac_redis_wait_fd(fds[0], POLLIN, deadline)) == 1 &&
           ((n = read(fds[0], buf + len, KEY_PARAMS_MAX - len)) > 0 ||
            (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    close(fds[0]);
    if (pid > 0 && waited != 1)
        kill(pid, SIGKILL);
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (pid < 0)
        *why = "cannot start a process to read it";
    else if (waited != 1)
        *why = "the process that read it did not answer in time";
    else if (len >= KEY_PARAMS_MAX)
        *why = "the key is too large";
    else
        pkey = make_key(buf, len, store, why, p);
    /* NB: a child that did not end well made no key, whatever it wrote. */
    if (pkey && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        EVP_PKEY_free(pkey);
        pkey = NULL;
        *why = "the process that read it failed";
    }
    OPENSSL_secure_clear_free(buf, KEY_PARAMS_MAX);
    OPENSSL_secure_clear_free(store, KEY_PARAMS_STORE);
    return pkey;
}

/* The client key, from its PEM text in a secret page. */
static const char *use_key(SSL_CTX *ctx, const authn_hmac_secret_t *key,
                           apr_pool_t *p)
{
    EVP_PKEY *pkey;
    const char *why = NULL;

    /* NB: before the key is made, so that its numbers go there; best
     * effort (already set up by another module, or no memory to lock). */
    if (!CRYPTO_secure_malloc_initialized())
        (void)CRYPTO_secure_malloc_init(SECURE_HEAP, SECURE_HEAP_MIN);
    pkey = load_key(key, &why, p);
    if (!pkey)
        return why;
    if (SSL_CTX_use_PrivateKey(ctx, pkey) != 1) {
        EVP_PKEY_free(pkey);
        return apr_pstrcat(p, "it does not match the certificate: ",
                           ssl_error("unusable", p), NULL);
    }
    EVP_PKEY_free(pkey);
    if (SSL_CTX_check_private_key(ctx) != 1)
        return apr_pstrcat(p, "it does not match the certificate: ",
                           ssl_error("mismatch", p), NULL);
    return NULL;
}

const char *authn_hmac_redis_tls_create(authn_hmac_redis_tls_t **out,
                                        const authn_hmac_redis_tls_conf_t *tc,
                                        const char *host,
                                        authn_hmac_tls_part *part,
                                        apr_pool_t *p)
{
    authn_hmac_redis_tls_t *t = apr_pcalloc(p, sizeof(*t));
    X509_VERIFY_PARAM *param;
    const char *err;

    *part = AUTHN_HMAC_TLS_OTHER;
    ERR_clear_error();
    t->peer = authn_hmac_redis_tls_peer(tc->server_name, host, &t->peer_is_ip);
    if (!t->peer) {
        *part = AUTHN_HMAC_TLS_NAME;
        return "no name to check the server's certificate against";
    }
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx)
        return ssl_error("cannot make a TLS context", p);
    pthread_mutex_init(&t->lock, NULL);
    apr_pool_cleanup_register(p, t, tls_cleanup, apr_pool_cleanup_null);
    if (SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) != 1)
        return ssl_error("cannot require TLS 1.2", p);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    /* NB: the server's name, or address, is checked as part of the chain's
     * verification: a certificate for another name does not verify. */
    param = SSL_CTX_get0_param(t->ctx);
    X509_VERIFY_PARAM_set_hostflags(param,
                                    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if ((t->peer_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, t->peer)
                       : X509_VERIFY_PARAM_set1_host(param, t->peer, 0)) != 1) {
        *part = AUTHN_HMAC_TLS_NAME;
        return apr_psprintf(p, "'%s' is not a host name or address", t->peer);
    }
    if (tc->ca_file) {
        if (SSL_CTX_load_verify_locations(t->ctx, tc->ca_file, NULL) != 1) {
            *part = AUTHN_HMAC_TLS_CA;
            return apr_psprintf(p, "no CA certificate in '%s' (PEM): %s",
                                tc->ca_file, ssl_error("unreadable", p));
        }
    }
    else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1)
        return ssl_error("cannot load OpenSSL's default CA store", p);
    if (tc->cert_file &&
        SSL_CTX_use_certificate_chain_file(t->ctx, tc->cert_file) != 1) {
        *part = AUTHN_HMAC_TLS_CERT;
        return apr_psprintf(p, "no certificate in '%s' (PEM): %s",
                            tc->cert_file, ssl_error("unreadable", p));
    }
    if (tc->key && (err = use_key(t->ctx, tc->key, p)) != NULL) {
        *part = AUTHN_HMAC_TLS_KEY;
        return err;
    }
    /* NB: sessions are kept by new_session, one per process, not in the
     * context's cache (which would grow with every connection). */
    SSL_CTX_set_session_cache_mode(
        t->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(t->ctx, new_session);
    *out = t;
    return NULL;
}

/* After an SSL call returned r: waits for what it wants before the
 * deadline (1: try again), or says why it failed (0, *rc set). */
static int again(SSL *ssl, int fd, int r, apr_time_t deadline,
                 const char *doing, authn_hmac_redis_rc *rc, const char **why,
                 apr_pool_t *p)
{
    int e = SSL_get_error(ssl, r), ready;
    long v;

    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        ready = authn_hmac_redis_wait_fd(
            fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
        if (ready > 0)
            return 1;
        *rc = authn_hmac_redis_io_fail(
            why, doing, ready ? strerror(errno) : "timed out", p);
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        *rc = authn_hmac_redis_io_fail(why, doing, "connection closed", p);
        return 0;
    case SSL_ERROR_SYSCALL:
        *rc = authn_hmac_redis_io_fail(why, doing,
                                       ERR_peek_error()
                                           ? ssl_error("TLS error", p)
                                       : errno ? strerror(errno)
                                               : "connection closed",
                                       p);
        return 0;
    default:
        v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK)
            *rc = authn_hmac_redis_io_fail(
                why, doing,
                apr_psprintf(p, "the server's certificate does not verify: %s",
                             X509_verify_cert_error_string(v)),
                p);
        else
            *rc = authn_hmac_redis_io_fail(why, doing,
                                           ssl_error("TLS error", p), p);
        ERR_clear_error();
        return 0;
    }
}

/* ------------------------------------------------------- the transport */

/* The pieces go in one record (a record each would cost a seal each). The
 * longest command is a few hundred bytes, AUTH with a password of up to
 * AUTHN_HMAC_SECRET_MAX. NB: the buffer holds AUTH's password for as long
 * as the write takes, and is wiped then. */
static authn_hmac_redis_rc tls_write(authn_hmac_redis_sock_t *s,
                                     struct iovec *iov, int n,
                                     apr_time_t deadline, const char *doing,
                                     const char **why, apr_pool_t *p)
{
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_OK;
    char buf[4096];
    size_t len = 0;
    int i, r;

    for (i = 0; i < n; i++) {
        if (iov[i].iov_len > sizeof(buf) - len) {
            explicit_bzero(buf, len);
            return authn_hmac_redis_io_fail(why, doing, "command too long", p);
        }
        memcpy(buf + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    /* NB: a write that must wait is retried with the same bytes, as
     * OpenSSL requires; without partial writes it returns all or none. */
    ERR_clear_error();
    while ((r = SSL_write(s->ctx, buf, (int)len)) <= 0)
        if (!again(s->ctx, s->fd, r, deadline, doing, &rc, why, p))
            break; /* rc says why */
    explicit_bzero(buf, len);
    return rc;
}

static authn_hmac_redis_rc tls_read(authn_hmac_redis_sock_t *s, void *buf,
                                    size_t len, size_t *got,
                                    apr_time_t deadline, const char *doing,
                                    const char **why, apr_pool_t *p)
{
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_ERROR;
    int r;

    ERR_clear_error();
    while ((r = SSL_read(s->ctx, buf, (int)len)) <= 0)
        if (!again(s->ctx, s->fd, r, deadline, doing, &rc, why, p))
            return rc;
    *got = (size_t)r;
    return AUTHN_HMAC_REDIS_OK;
}

static int tls_idle_ok(authn_hmac_redis_sock_t *s)
{
    char b;
    int r;

    /* NB: what came while the connection was idle may be TLS's own (TLS
     * 1.3 session tickets): read without waiting, so that OpenSSL takes
     * those. Application data, a close or an error means it is out of
     * step or gone. */
    if (SSL_pending(s->ctx) > 0)
        return 0;
    ERR_clear_error();
    r = SSL_read(s->ctx, &b, 1);
    if (r > 0)
        return 0;
    r = SSL_get_error(s->ctx, r);
    ERR_clear_error();
    return r == SSL_ERROR_WANT_READ;
}

/* Frees the session, without waiting for anything. */
static void free_ssl(SSL *ssl)
{
    if (!ssl)
        return;
    /* NB: no close_notify (it could block, or meet a dead peer), but not
     * "bad" either: OpenSSL would make its session unresumable. */
    SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(ssl);
}

static void tls_close(authn_hmac_redis_sock_t *s)
{
    free_ssl(s->ctx);
    s->ctx = NULL;
}

static const authn_hmac_redis_transport_t tls_transport = {
    tls_write, tls_read, tls_idle_ok, tls_close};

/* A peer of its own (a Sentinel, or the primary a Sentinel named) in place
 * of the context's name or address, both of them: OpenSSL checks each that
 * is set. */
static const char *set_peer(SSL *ssl, const char *peer, int *is_ip,
                            apr_pool_t *p)
{
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);

    (void)authn_hmac_redis_tls_peer(peer, NULL, is_ip);
    if (X509_VERIFY_PARAM_set1_host(param, NULL, 0) != 1 ||
        X509_VERIFY_PARAM_set1_ip(param, NULL, 0) != 1 ||
        (*is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, peer)
                : X509_VERIFY_PARAM_set1_host(param, peer, 0)) != 1)
        return apr_psprintf(p, "'%s' is not a host name or address", peer);
    return NULL;
}

authn_hmac_redis_rc
authn_hmac_redis_tls_start(authn_hmac_redis_tls_t *t, const char *peer,
                           authn_hmac_redis_sock_t *s, apr_time_t deadline,
                           int *resumed, const char **why, apr_pool_t *p)
{
    authn_hmac_redis_rc rc = AUTHN_HMAC_REDIS_ERROR;
    char cur[AUTHN_HMAC_REDIS_HOST_MAX];
    int r, is_ip = t->peer_is_ip;
    const char *err;
    SSL *ssl;

    *resumed = 0;
    ERR_clear_error();
    ssl = SSL_new(t->ctx);
    if (!ssl || SSL_set_fd(ssl, s->fd) != 1) {
        SSL_free(ssl);
        return authn_hmac_redis_io_fail(why, "TLS",
                                        ssl_error("out of memory", p), p);
    }
    SSL_set_app_data(ssl, t);
    if (peer && peer != t->peer) {
        if ((err = set_peer(ssl, peer, &is_ip, p)) != NULL) {
            SSL_free(ssl);
            return authn_hmac_redis_io_fail(why, "TLS", err, p);
        }
    }
    else
        peer = t->peer;
    /* NB: SNI is a host name; an address is not sent (RFC 6066). What
     * SSL_set_tlsext_host_name expands to, but for the cast: clang's
     * -Wcast-qual (unlike gcc's) sees its (void *) drop the const. */
    if (!is_ip)
        (void)SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME,
                       TLSEXT_NAMETYPE_host_name, (void *)(uintptr_t)peer);
    /* NB: the last session only for the name it was made for: a resumed
     * session skips the certificate, and with it the name's check. */
    peer_of(ssl, cur);
    pthread_mutex_lock(&t->lock);
    if (t->last && strcmp(t->last_peer, cur) == 0)
        (void)SSL_set_session(ssl, t->last);
    pthread_mutex_unlock(&t->lock);
    SSL_set_connect_state(ssl);
    while ((r = SSL_do_handshake(ssl)) != 1)
        if (!again(ssl, s->fd, r, deadline, "TLS handshake", &rc, why, p)) {
            free_ssl(ssl);
            return rc;
        }
    *resumed = SSL_session_reused(ssl);
    s->tr = &tls_transport;
    s->ctx = ssl;
    return AUTHN_HMAC_REDIS_OK;
}
