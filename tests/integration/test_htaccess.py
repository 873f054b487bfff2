"""Basic auth in .htaccess under AllowOverride AuthConfig, as many MediaWiki
installs keep it: AuthHMACUserFile and AuthHMACCacheTTL work there; the
directives that belong to the server or its sections do not."""
import os
import re
import shutil

import pytest

from conftest import MPMS, serve
from harness import Httpd, hmac_auth, htpasswd

SITE = """
Alias /wiki/ "{d}/wiki/"
<Directory "{d}/wiki">
    AllowOverride AuthConfig
</Directory>
"""


def htaccess(users):
    return hmac_auth(users, "wiki", "AuthHMACCacheTTL 5m")


# Each with a value it would accept in the server configuration.
NOT_IN_HTACCESS = [
    "AuthHMACCacheMaxAge 1h", "AuthHMACNegativeTTL 30", "AuthHMACHideUnknownUsers Off",
    "AuthHMACPepperFile /etc/hostname", "AuthHMACCacheSize 1M",
    "AuthHMACRedisServer 127.0.0.1:6379", "AuthHMACRedisTimeout 50",
    "AuthHMACRedisAuthFile /etc/hostname", "AuthHMACRedisPrefix x:",
    "AuthHMACRedisDatabase 1", "AuthHMACMaxVerifications 2", "AuthHMACVerifyBacklog 3",
]


def site(srv, name, text):
    os.makedirs(srv.path("wiki", name), exist_ok=True)
    with open(srv.path("wiki", name, "index.html"), "w") as f:
        f.write("wiki page\n")
    with open(srv.path("wiki", name, ".htaccess"), "w") as f:
        f.write(text)


@pytest.fixture(scope="module", params=MPMS)
def srv(request):
    s = Httpd(mpm=request.param, name="htaccess")
    s.body = SITE.format(d=s.dir)
    s.write_config()
    htpasswd(s.path("users"), "wendy", "wendy's wiki pass", create=True)
    site(s, "main", htaccess(s.path("users")))
    for i, line in enumerate(NOT_IN_HTACCESS):
        site(s, "bad%d" % i, line + "\n")
    yield from serve(s)


@pytest.mark.mpm
def test_htaccess_auth_caches_and_revokes(srv):
    url = "/wiki/main/index.html"
    assert srv.status_code(url) == 401
    assert srv.status_code(url, "wendy", "wrong") == 401
    before = srv.status()
    assert srv.status_code(url, "wendy", "wendy's wiki pass") == 200
    assert srv.status_code(url, "wendy", "wendy's wiki pass") == 200
    after = srv.status()
    assert after["verifications"] - before["verifications"] == 1
    assert after["hits"] - before["hits"] == 1
    assert srv.notes("wendy")[-2:] == ["verified", "hit"]
    # A password change takes effect on the next request.
    htpasswd(srv.path("users"), "wendy", "wendy's new pass")
    assert srv.status_code(url, "wendy", "wendy's wiki pass") == 401
    assert srv.status_code(url, "wendy", "wendy's new pass") == 200


@pytest.mark.mpm
@pytest.mark.slow
def test_htaccess_under_concurrent_requests(srv):
    htpasswd(srv.path("users"), "walt", "walt's wiki pass")
    assert srv.status_code("/wiki/main/index.html", "walt", "walt's wiki pass") == 200
    before = srv.status()
    complete, failed, non2xx, out = srv.ab("/wiki/main/index.html", "walt",
                                           "walt's wiki pass", n=2000, c=8)
    assert complete == 2000 and failed == 0 and non2xx == 0, out
    assert srv.status()["verifications"] == before["verifications"]


@pytest.mark.parametrize("i", range(len(NOT_IN_HTACCESS)))
def test_server_directives_are_refused_in_htaccess(srv, i):
    name = NOT_IN_HTACCESS[i].split()[0]
    srv.expect_log(r"\[core:alert\].*bad%d/\.htaccess: %s not allowed here" % (i, name))
    assert srv.status_code("/wiki/bad%d/index.html" % i) == 500
    assert re.search(r"bad%d/\.htaccess: %s not allowed here" % (i, name), srv.error_log())


@pytest.mark.slow
@pytest.mark.skipif("prefork" not in MPMS, reason="needs prefork")
def test_files_named_in_htaccess_are_bounded_per_process():
    """One process keeps the index of at most 256 files named only in
    .htaccess; the next is read for each request, as mod_authn_file does:
    it still answers right, and the files kept still work."""
    one = "StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\nServerLimit 1\n" \
          "MaxRequestWorkers 1"
    s = Httpd(mpm="prefork", name="htbound", global_conf=one)
    s.body = SITE.format(d=s.dir)
    s.write_config()
    htpasswd(s.path("users0"), "wendy", "wendy's wiki pass", create=True)
    for i in range(258):
        if i:
            shutil.copy(s.path("users0"), s.path("users%d" % i))
        site(s, "w%d" % i, htaccess(s.path("users%d" % i)))
    s.expect_log(r"\[mpm_prefork:error\].*AH00161")  # one worker, as meant
    s.start()
    try:
        pw = "wendy's wiki pass"
        for i in range(256):
            assert s.status_code("/wiki/w%d/index.html" % i) == 401, i
        for i in (256, 257):
            url = "/wiki/w%d/index.html" % i
            assert s.status_code(url) == 401
            assert s.status_code(url, "wendy", pw) == 200
            assert s.status_code(url, "wendy", pw) == 200  # a hit all the same
            assert s.status_code(url, "wendy", "wrong") == 401
        htpasswd(s.path("users257"), "wendy", "wendy's new pass")
        assert s.status_code("/wiki/w257/index.html", "wendy", pw) == 401
        assert s.status_code("/wiki/w257/index.html", "wendy", "wendy's new pass") == 200
        assert s.status_code("/wiki/w0/index.html", "wendy", pw) == 200
        assert s.status_code("/wiki/w0/index.html", "wendy", pw) == 200
        assert s.notes("wendy") == ["verified", "hit", "denied", "verified", "hit", "denied",
                                    "denied", "verified", "verified", "hit"]
        s.stop()
        problems = s.log_problems()
        assert not problems, "\n".join(problems)
    finally:
        s.cleanup()


def padded(path, size):
    """Makes path (a real `htpasswd -B` file) `size` bytes long with more
    users, each a copy of its first line under another name."""
    with open(path) as f:
        first = f.readline()
    line = first.split(":", 1)[1]
    with open(path, "a") as f:
        n = os.path.getsize(path)
        i = 0
        while n < size:
            extra = "filler%07d:%s" % (i, line)
            if n + 2 * len(extra) > size:  # the last user takes what is left
                extra = "f" * (size - n - len(line) - 1) + ":" + line
            f.write(extra)
            n += len(extra)
            i += 1
    assert os.path.getsize(path) == size


@pytest.mark.slow
@pytest.mark.skipif("prefork" not in MPMS, reason="needs prefork")
def test_files_named_in_htaccess_are_bounded_in_size():
    """A file named only in .htaccess may hold 1 MiB, and those of one
    process 16 MiB together (an index takes up to ~15 times its file): past
    either, a 500 and AHMAC0009, never a grant. Named in the server
    configuration too, a big file works from .htaccess."""
    one = "StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\nServerLimit 1\n" \
          "MaxRequestWorkers 1"
    s = Httpd(mpm="prefork", name="htsize", global_conf=one)
    pw = "wendy's wiki pass"
    mib = 1 << 20
    htpasswd(s.path("big"), "wendy", pw, create=True)
    padded(s.path("big"), mib + 1)
    shutil.copy(s.path("big"), s.path("named"))
    site(s, "big", htaccess(s.path("big")))
    site(s, "named", htaccess(s.path("named")))
    for i in range(17):  # 17 files just under 1 MiB: 16 fit the budget
        htpasswd(s.path("u%d" % i), "wendy", pw, create=True)
        padded(s.path("u%d" % i), mib - 4096)
        site(s, "u%d" % i, htaccess(s.path("u%d" % i)))
    # The server configuration names "named" (in a section never requested).
    s.body = SITE.format(d=s.dir) + """
<Location "/never/">
    AuthType Basic
    AuthName "never"
    AuthBasicProvider hmac
    AuthHMACUserFile "{named}"
    Require valid-user
</Location>
""".format(named=s.path("named"))
    s.write_config()
    s.expect_log(r"\[mpm_prefork:error\].*AH00161")  # one worker, as meant
    s.expect_log(r"AHMAC0009: password file too large")
    s.start()
    try:
        assert s.status_code("/wiki/big/index.html", "wendy", pw) == 500
        assert s.status_code("/wiki/big/index.html", "wendy", "wrong") == 500
        assert s.status_code("/wiki/named/index.html", "wendy", pw) == 200
        for i in range(16):
            assert s.status_code("/wiki/u%d/index.html" % i, "wendy", pw) == 200, i
        assert s.status_code("/wiki/u16/index.html", "wendy", pw) == 500
        # Those kept still work, and still revoke.
        assert s.status_code("/wiki/u0/index.html", "wendy", pw) == 200
        htpasswd(s.path("u0"), "wendy", "wendy's new pass")
        assert s.status_code("/wiki/u0/index.html", "wendy", pw) == 401
        log = s.error_log()
        assert len(re.findall(r"AHMAC0009: password file too large: %s " % re.escape(
            s.path("big")), log)) == 2, log
        assert len(re.findall(r"AHMAC0009: .*u16 ", log)) == 1, log
        s.stop()
        problems = s.log_problems()
        assert not problems, "\n".join(problems)
    finally:
        s.cleanup()
