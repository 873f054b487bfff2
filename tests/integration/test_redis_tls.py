"""Redis over TLS: results shared through a redis-server that speaks only
TLS, its certificate verified (another CA's, another name's or an expired
one is refused, logged, and the site keeps answering from shared memory
and bcrypt), a client certificate where Redis requires one, sessions
resumed on reconnect, the same bounded waits as plain connections, and
bad TLS directives stopping httpd at start."""
import os
import re
import shutil
import ssl
import subprocess
import time

import pytest

from conftest import MPMS
from fake_redis import FakeRedis
from harness import VALGRIND, FarmFiles, Httpd, Redis, TestCA, finish, hmac_location, htpasswd, \
    last_note
from test_status import check_follows_redis

OUTAGE = r"\[authn_hmac:warn\].*AHMAC0004: Redis at .* is unavailable"
ACL = ("farm", "farm-acl-pass-over-tls")
# NB: a TLS handshake under memcheck, beside CI's other lane and two busy
# loops, once took more than 2 s (a server's first lookup timed out and it
# verified by itself).
TIMEOUT = 5000 if VALGRIND else 1000

# One child: its sessions are the ones a reconnect offers.
ONE_CHILD = {
    "prefork": "StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\nServerLimit 1\n"
               "MaxRequestWorkers 1",
    "worker": "StartServers 1\nServerLimit 1\nThreadsPerChild 8\nMinSpareThreads 1\n"
              "MaxSpareThreads 8\nMaxRequestWorkers 8",
}
ONE_CHILD["event"] = ONE_CHILD["worker"]


class Farm(FarmFiles):
    """What the servers of a farm share: a pepper, an htpasswd file, and
    the CA that signed their Redis's certificate."""

    def __init__(self):
        super().__init__(prefix="authn_hmac_tlsfarm_", password="alice tls pass", cost=4)
        self.ca = TestCA(dir=os.path.join(self.dir, "ca"))

    def redis(self, cert=None, auth_clients=False, client=None):
        bad = cert is not None
        cert, key = cert or self.ca.issue()
        return Redis(password=None, acl_user=ACL, extra=["user default off"],
                     tls={"cert": cert, "key": key, "ca": self.ca.cert,
                          "auth_clients": auth_clients, "client": client,
                          "insecure": bad}).start()

    def server(self, address, extra="", name="tls", mpm=None, mpm_conf=None, ca=None,
               auth=ACL):
        srv = Httpd(name=name, mpm=mpm, mpm_conf=mpm_conf)
        lines = ["AuthHMACPepperFile %s" % self.pepper,
                 "AuthHMACRedisServer %s" % address,
                 "AuthHMACRedisTimeout %d" % TIMEOUT,
                 "AuthHMACRedisTLS on",
                 "AuthHMACRedisTLSCACertificateFile %s" % (ca or self.ca.cert)]
        if auth:
            path = srv.path("redis.auth")
            with open(path, "w") as f:
                f.write("%s %s\n" % auth)
            os.chmod(path, 0o600)
            lines.append("AuthHMACRedisAuthFile %s" % path)
            srv.secrets.add(auth[1])
        srv.global_conf = "\n".join(lines) + "\n" + extra
        srv.body = ('Alias /w/ "%s/htdocs/"\n' % srv.dir
                    + hmac_location("/w/", self.users, "wiki"))
        srv.write_config()
        with open(srv.path("htdocs", "index.html"), "w") as f:
            f.write("wiki page\n")
        return srv


@pytest.fixture
def farm():
    f = Farm()
    yield f
    f.cleanup()


def new_user(farm, n):
    user, pw = "user%d" % n, "pass of user %d" % n
    htpasswd(farm.users, user, pw, cost=4)
    return user, pw


@pytest.mark.mpm
@pytest.mark.parametrize("mpm", MPMS)
def test_two_servers_share_results_over_tls_with_an_acl_user(farm, mpm):
    """A Redis that speaks only TLS, its default user off: a credential
    verified on A (which names it by host name) is a Redis hit on B (by
    IP address, checked against the certificate's IP SAN); B runs no
    verification."""
    redis = farm.redis()
    a = farm.server("localhost:%d" % redis.port, name="tlsA", mpm=mpm)
    b = farm.server("127.0.0.1:%d" % redis.port, name="tlsB", mpm=mpm)
    try:
        assert redis.cli("ACL", "WHOAMI") == ACL[0]
        a.start()
        b.start()
        assert a.status_code("/w/", "alice", "alice tls pass") == 200
        assert last_note(a, "alice") == "verified"
        before = b.status()
        assert b.status_code("/w/", "alice", "alice tls pass") == 200
        assert last_note(b, "alice") == "redis-hit", (b.status(), b.error_log_tail())
        assert b.status_code("/w/", "alice", "alice wrong") == 401
        st = b.status()
        assert st["verifications"] - before["verifications"] == 1  # the wrong one
        assert st["redis_hits"] == 1 and st["redis_errors"] == 0, st
        assert st["redis_tls_handshakes"] >= 1, st
        assert a.status()["redis_tls_handshakes"] >= 1
        assert int(redis.cli("DBSIZE")) >= 1
        # NB: what crosses the wire is TLS: a plain client gets nothing.
        plain = subprocess.run(["redis-cli", "-p", str(redis.port), "--user", ACL[0],
                                "--pass", ACL[1], "--no-auth-warning", "PING"],
                               capture_output=True, text=True, timeout=10)
        assert "PONG" not in plain.stdout
        finish(a)
        finish(b)
    finally:
        a.cleanup()
        b.cleanup()
        redis.cleanup()


def test_the_check_probes_redis_over_tls_on_a_quiet_server(farm):
    """Over TLS, with an ACL user: --check is CRITICAL at the first check
    after Redis dies, OK at the first after it is back, with no request in
    between (test_status.check_follows_redis)."""
    redis = farm.redis()
    srv = farm.server("127.0.0.1:%d" % redis.port, name="tlscheck")
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice tls pass") == 200
        check_follows_redis(srv, redis)
        finish(srv)
    finally:
        srv.stop()
        srv.cleanup()
        redis.cleanup()


@pytest.mark.mpm
@pytest.mark.parametrize("mpm", MPMS)
def test_a_reconnect_resumes_the_tls_session(farm, mpm):
    """Connections dropped by Redis (CLIENT KILL, as a restart of the
    proxy in front of it or an idle timeout would): the child's next
    connection resumes its session instead of a full handshake."""
    redis = farm.redis()
    srv = farm.server("localhost:%d" % redis.port, mpm=mpm, mpm_conf=ONE_CHILD[mpm])
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice tls pass") == 200
        st = srv.status()
        assert st["redis_tls_handshakes"] >= 1 and st["redis_tls_resumed"] == 0, st
        for n in range(3):
            redis.cli("CLIENT", "KILL", "TYPE", "normal")
            time.sleep(0.2)
            user, pw = new_user(farm, n)
            assert srv.status_code("/w/", user, pw) == 200
            assert last_note(srv, user) == "verified"
        st2 = srv.status()
        assert st2["redis_tls_handshakes"] > st["redis_tls_handshakes"], st2
        assert st2["redis_tls_resumed"] >= 1, st2
        assert st2["redis_errors"] + st2["redis_timeouts"] <= 1, st2
        finish(srv)
    finally:
        srv.cleanup()
        redis.cleanup()


BAD = {
    "another CA": "unable to get local issuer certificate",
    "another name": "hostname mismatch",
    "another address": "IP address mismatch",
    "expired": "certificate has expired",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_certificate_that_does_not_verify_is_refused(farm, case):
    """A Redis whose certificate does not verify gets no command (not even
    AUTH: the password never goes to it), counts as a failure for the
    breaker, is logged once with OpenSSL's reason, and the site keeps
    answering: 200 for the right password, 401 for a wrong one."""
    address = "localhost"
    if case == "another CA":
        other = TestCA(name="other CA", dir=os.path.join(farm.dir, "other"))
        cert = other.issue()
    elif case == "another name":
        cert = farm.ca.issue(cn="redis.example", dns=("redis.example",), ips=())
    elif case == "another address":
        cert = farm.ca.issue(cn="redis", dns=("localhost",), ips=("127.0.0.2",))
        address = "127.0.0.1"
    else:
        cert = farm.ca.issue(days=-1)
    redis = farm.redis(cert=cert)
    srv = farm.server("%s:%d" % (address, redis.port))
    try:
        srv.start()
        for i in range(4):
            user, pw = new_user(farm, i)
            assert srv.status_code("/w/", user, pw + " wrong") == 401
            assert srv.status_code("/w/", user, pw) == 200
            assert last_note(srv, user) == "verified"
        assert srv.status_code("/w/", "user0", "pass of user 0") == 200
        assert last_note(srv, "user0") == "hit"
        st = srv.status()
        assert st["redis_hits"] == 0 and st["redis_errors"] >= 3, st
        assert st["redis_breaker_open"] == 1, st
        assert st["redis_tls_handshakes"] == 0, st
        assert redis.cli("DBSIZE") == "0"
        log = srv.error_log()
        outages = re.findall(OUTAGE + r".*", log)
        assert len(outages) == 1, log
        assert "TLS handshake: the server's certificate does not verify: " + BAD[case] \
            in outages[0], outages
        finish(srv, OUTAGE)
    finally:
        srv.cleanup()
        redis.cleanup()


# NB: timing-bound: its last assertion needs the breaker open (three failures
# within 10 s), which the requests of httpd -X under valgrind on a busy
# machine can take longer to make; the sanitized run covers these paths.
@pytest.mark.slow
def test_mutual_tls_works_with_the_client_certificate_only(farm):
    """A Redis with tls-auth-clients yes: a server with the client
    certificate and its key shares results; one without gets no answer
    and keeps serving from bcrypt."""
    client = farm.ca.issue(cn="web", dns=(), ips=(), client=True)
    redis = farm.redis(auth_clients=True, client=client)
    cert, key = client
    with_cert = farm.server("localhost:%d" % redis.port, name="mtls", extra=(
        "AuthHMACRedisTLSCertificateFile %s\nAuthHMACRedisTLSKeyFile %s\n" % (cert, key)))
    without = farm.server("localhost:%d" % redis.port, name="nomtls")
    try:
        with_cert.start()
        without.start()
        assert with_cert.status_code("/w/", "alice", "alice tls pass") == 200
        assert without.status_code("/w/", "alice", "alice tls pass") == 200
        assert last_note(without, "alice") == "verified"  # no Redis hit
        st = with_cert.status()
        assert st["redis_errors"] == 0 and st["redis_tls_handshakes"] >= 1, st
        assert int(redis.cli("DBSIZE")) >= 1
        before = with_cert.status()["verifications"]
        with_cert2 = farm.server("localhost:%d" % redis.port, name="mtls2", extra=(
            "AuthHMACRedisTLSCertificateFile %s\nAuthHMACRedisTLSKeyFile %s\n" % (cert, key)))
        try:
            with_cert2.start()
            assert with_cert2.status_code("/w/", "alice", "alice tls pass") == 200
            assert last_note(with_cert2, "alice") == "redis-hit"
            finish(with_cert2)
        finally:
            with_cert2.cleanup()
        assert with_cert.status()["verifications"] == before
        for i in range(3):
            user, pw = new_user(farm, i)
            assert without.status_code("/w/", user, pw) == 200
        st = without.status()
        assert st["redis_hits"] == 0 and st["redis_errors"] >= 1, st
        finish(with_cert)
        finish(without, OUTAGE)
        # NB: with TLS 1.3 the client's handshake is over before Redis checks
        # for its certificate: the refusal comes with the first reply, as
        # an alert, or as a reset when Redis closes first.
        assert re.search(r"AHMAC0004.*AUTH: .*(certificate required|alert|reset by peer)",
                         without.error_log()), without.error_log()
    finally:
        with_cert.cleanup()
        without.cleanup()
        redis.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["trickle", "huge"])
def test_a_slow_or_endless_redis_over_tls_costs_at_most_the_timeout(farm, mode):
    """As over plain TCP (test_trust): a server that trickles its replies a
    byte at a time (a TLS record each) or answers GET with 10 MB costs
    each request the timeout at most, and the breaker then skips it."""
    cert, key = farm.ca.issue()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    fake = FakeRedis(tls=ctx).start()
    fake.gap = 0.5
    srv = farm.server(fake.address, auth=None, extra="AuthHMACRedisTimeout 100")
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice tls pass") == 200  # pool warm
        assert srv.status()["redis_errors"] == 0
        fake.mode = mode
        for i in range(5):
            user, pw = new_user(farm, i)
            t0 = time.monotonic()
            assert srv.status_code("/w/", user, pw) == 200
            took = time.monotonic() - t0
            assert took < 0.1 + 1.0, (i, took)
        st = srv.status()
        assert st["redis_breaker_open"] == 1 and st["redis_hits"] == 0, st
        if mode == "huge":
            assert "reply too long" in srv.error_log()
        else:
            assert st["redis_timeouts"] >= 1, st
        finish(srv, OUTAGE)
    finally:
        srv.cleanup()
        fake.stop()


# ------------------------------------------------------------ configuration

def configtest(farm, lines):
    srv = Httpd(name="tlsconf")
    try:
        srv.global_conf = "AuthHMACPepperFile %s\n%s\n" % (farm.pepper, "\n".join(lines))
        srv.body = hmac_location("/a/", farm.users, "a")
        srv.write_config()
        return srv.configtest()
    finally:
        srv.cleanup()


def key_copy(farm, mode=0o600, name="client.key"):
    _, key = farm.ca.issue(cn="web", dns=(), ips=(), client=True)
    path = os.path.join(farm.dir, name)
    shutil.copy(key, path)
    os.chmod(path, mode)
    return path


def test_tls_configuration_that_works_passes(farm):
    cert, key = farm.ca.issue(cn="web", dns=(), ips=(), client=True)
    rc, out = configtest(farm, ["AuthHMACRedisServer localhost:6380", "AuthHMACRedisTLS on",
                                "AuthHMACRedisTLSCACertificateFile %s" % farm.ca.cert,
                                "AuthHMACRedisTLSServerName redis.example",
                                "AuthHMACRedisTLSCertificateFile %s" % cert,
                                "AuthHMACRedisTLSKeyFile %s" % key])
    assert rc == 0, out
    # The default store, and an address as the name.
    rc, out = configtest(farm, ["AuthHMACRedisServer [::1]:6380", "AuthHMACRedisTLS on"])
    assert rc == 0, out


def test_bad_tls_configuration_stops_httpd_naming_the_directive(farm):
    cert, key = farm.ca.issue(cn="web", dns=(), ips=(), client=True)
    other_cert, _ = farm.ca.issue(cn="other", dns=(), ips=(), client=True)
    notpem = os.path.join(farm.dir, "notpem")
    with open(notpem, "w") as f:
        f.write("not a certificate\n")
    link = os.path.join(farm.dir, "key-link")
    os.symlink(key, link)
    server = "AuthHMACRedisServer localhost:6380"
    on = "AuthHMACRedisTLS on"
    cases = [
        ([server, "AuthHMACRedisTLSCACertificateFile %s" % farm.ca.cert],
         "AuthHMACRedisTLSCACertificateFile needs AuthHMACRedisTLS on"),
        ([server, "AuthHMACRedisTLSServerName redis.example"],
         "AuthHMACRedisTLSServerName needs AuthHMACRedisTLS on"),
        ([on], "AuthHMACRedisTLS on needs AuthHMACRedisServer"),
        (["AuthHMACRedisServer /run/redis.sock", on], "not a unix socket"),
        ([server, on, "AuthHMACRedisTLSCACertificateFile %s" % os.path.join(farm.dir, "nope")],
         "AuthHMACRedisTLSCACertificateFile: cannot read"),
        ([server, on, "AuthHMACRedisTLSCACertificateFile %s" % notpem],
         "AuthHMACRedisTLSCACertificateFile: no CA certificate in"),
        ([server, on, "AuthHMACRedisTLSCertificateFile %s" % notpem,
          "AuthHMACRedisTLSKeyFile %s" % key],
         "AuthHMACRedisTLSCertificateFile: no certificate in"),
        ([server, on, "AuthHMACRedisTLSCertificateFile %s" % cert],
         "AuthHMACRedisTLSCertificateFile needs AuthHMACRedisTLSKeyFile"),
        ([server, on, "AuthHMACRedisTLSKeyFile %s" % key],
         "AuthHMACRedisTLSKeyFile needs AuthHMACRedisTLSCertificateFile"),
        ([server, on, "AuthHMACRedisTLSCertificateFile %s" % cert,
          "AuthHMACRedisTLSKeyFile %s" % key_copy(farm, 0o640)],
         "AuthHMACRedisTLSKeyFile: '%s' is accessible by group or others"
         % os.path.join(farm.dir, "client.key")),
        ([server, on, "AuthHMACRedisTLSCertificateFile %s" % cert,
          "AuthHMACRedisTLSKeyFile %s" % link],
         "AuthHMACRedisTLSKeyFile: '%s' is a symbolic link" % link),
        ([server, on, "AuthHMACRedisTLSCertificateFile %s" % other_cert,
          "AuthHMACRedisTLSKeyFile %s" % key],
         "AuthHMACRedisTLSKeyFile: it does not match the certificate"),
        ([server, on, "AuthHMACRedisTLSCertificateFile %s" % cert,
          "AuthHMACRedisTLSKeyFile %s" % notpem_key(farm)],
         "AuthHMACRedisTLSKeyFile: no private key in it"),
        ([server, on, "AuthHMACRedisTLSServerName bad/name"],
         "AuthHMACRedisTLSServerName: 'bad/name' is not valid"),
    ]
    for lines, want in cases:
        rc, out = configtest(farm, lines)
        assert rc != 0 and want in out, (lines, want, out)


def notpem_key(farm):
    path = os.path.join(farm.dir, "notpem.key")
    with open(path, "w") as f:
        f.write("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    os.chmod(path, 0o600)
    return path
