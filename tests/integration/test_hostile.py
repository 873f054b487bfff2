"""What attackers send. Every answer must be the one stock httpd gives with
mod_authn_file on the same htpasswd file: never a grant it would refuse, no
crash, and no password in the error log."""
import base64
import re
import socket
import threading

import pytest

from conftest import serve
from harness import Httpd, client_address, hmac_location, htpasswd

BURST = 10000


def site(d):
    """/hmac/ and /file/: the same users and realm through hmac and stock
    mod_authn_file."""
    aliases = "".join('Alias /%s/ "%s/htdocs/"\n' % (p, d)
                      for p in ("hmac", "file", "other", "burst"))
    return aliases + hmac_location("/hmac/", d + "/users", "r") \
        + hmac_location("/file/", d + "/users", "r", provider="file") \
        + hmac_location("/other/", d + "/other", "other") \
        + hmac_location("/burst/", d + "/burst", "burst")


@pytest.fixture(scope="module")
def srv():
    s = Httpd(name="hostile", global_conf="AuthHMACCacheSize 16K")
    s.body = site(s.dir)
    s.write_config()
    with open(s.path("htdocs", "index.html"), "w") as f:
        f.write("ok\n")
    htpasswd(s.path("users"), "alice", "alice:colon\r\npass", create=True)
    htpasswd(s.path("users"), "bob", "b\u00e9b pass")
    # Lines as people write them by hand: a field after the hash, a doubled
    # separator. mod_authn_file reads the hash up to the next ':' after the
    # run of ':' that follows the user (ap_getword).
    htpasswd(s.path("users"), "carol", "carol pass")
    htpasswd(s.path("users"), "dave", "dave pass")
    with open(s.path("users")) as f:
        text = f.read()
    text = re.sub(r"^carol:(.*)$", r"carol:\1:extra field", text, flags=re.M)
    text = re.sub(r"^dave:(.*)$", r"dave::\1", text, flags=re.M)
    # As ap_cfg_getline reads them (found by review): a comment ending in a
    # backslash swallows the next line; a NUL ends its line, and a user so
    # named has no hash, which hides the user's later lines.
    htpasswd(s.path("users"), "frank", "frank pass")
    htpasswd(s.path("users"), "gina", "gina pass")
    frank = re.search(r"^frank:.*$", open(s.path("users")).read(), re.M).group(0)
    gina = re.search(r"^gina:.*$", open(s.path("users")).read(), re.M).group(0)
    text += "# a comment that goes on \\\n" + frank + "\n"
    text += "gina\0tail:" + gina.split(":", 1)[1] + "\n" + gina + "\n"
    with open(s.path("users"), "w") as f:
        f.write(text)
    htpasswd(s.path("other"), "alice", "alice other pass", create=True)
    # 10,000 users sharing one cost-4 hash (the index does not care; making
    # 10,000 bcrypt hashes would take hours at cost 12).
    htpasswd(s.path("burst"), "u0", "burst pass", cost=4, create=True)
    with open(s.path("burst")) as f:
        hash_ = f.read().split(":", 1)[1].strip()
    with open(s.path("burst"), "w") as f:
        f.writelines("u%d:%s\n" % (i, hash_) for i in range(BURST))
    s.expect_log(r"\[authn_hmac:warn\].*users line \d+ contains a NUL byte; the rest of the line is ignored")
    yield from serve(s)


def raw_get(srv, path, auth_value, source=None):
    """Sends a request with a raw Authorization value, from source (else
    srv.source, else 127.0.0.1); returns the status code, or 0 if the
    connection closed without one."""
    req = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    if auth_value is not None:
        req += b"Authorization: " + auth_value + b"\r\n"
    req += b"\r\n"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30, source_address=(
            source or srv.source or "127.0.0.1", 0)) as c:
        c.sendall(req)
        data = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def basic(user, password):
    raw = user + b":" + password
    return b"Basic " + base64.b64encode(raw)


CREDENTIALS = [
    (b"alice", "alice:colon\r\npass".encode()),            # the right one
    ("bob".encode(), "b\u00e9b pass".encode()),            # right, UTF-8
    (b"alice", b"alice:colon\r\npas"),                     # one byte short
    (b"alice", b"alice:colon\r\npass\x00"),                # a NUL added
    (b"alice", b"alice:colon\r\npass\x00junk"),            # NUL then junk
    (b"ali\x00ce", "alice:colon\r\npass".encode()),        # NUL in the user
    (b"alice\x00", "alice:colon\r\npass".encode()),
    (b"alice\r\n", "alice:colon\r\npass".encode()),        # CR/LF in the user
    (b"alice", b"alice:colon\npass"),                      # CR missing
    (b"bob", "b\u00e9b pass".encode("latin-1")),           # same text, Latin-1
    (b"bob", b"b\xc3\x28b pass"),                          # invalid UTF-8
    (b"\xff\xfe", b"\xff\xfe"),
    (b"", b"alice:colon\r\npass"),                         # empty user
    (b"alice", b""),                                       # empty password
    (b"", b""),
    (b"alice:colon", b"\r\npass"),                         # split at the other ':'
    (b"carol", b"carol pass"),                             # user:hash:extra
    (b"carol", b"carol pass:extra field"),
    (b"dave", b"dave pass"),                               # user::hash
    (b"frank", b"frank pass"),                             # after "\\\n"
    (b"gina", b"gina pass"),                               # after "gina\0"
]


@pytest.mark.parametrize("user,password", CREDENTIALS)
def test_same_answer_as_mod_authn_file(srv, user, password):
    srv.secrets.update(p.decode("latin-1") for p in (password,) if len(password) >= 6)
    want = raw_get(srv, "/file/", basic(user, password))
    got = raw_get(srv, "/hmac/", basic(user, password))
    again = raw_get(srv, "/hmac/", basic(user, password))  # now possibly cached
    assert want in (200, 401), want
    assert got == want and again == want, (user, password, want, got, again)


def test_right_passwords_are_granted(srv):
    assert raw_get(srv, "/hmac/", basic(b"alice", "alice:colon\r\npass".encode())) == 200
    assert raw_get(srv, "/hmac/", basic(b"bob", "b\u00e9b pass".encode())) == 200


@pytest.mark.parametrize("value", [
    b"Basic",
    b"Basic ",
    b"Basic !!!not-base64!!!",
    b"Basic YWxpY2U",             # "alice" without ':' and padding
    b"Basic =====",
    b"Basic " + b"A" * 6000,
    b"Bearer abc",
    b"basic " + base64.b64encode(b"alice:x"),
])
def test_malformed_authorization_is_refused(srv, value):
    code = raw_get(srv, "/hmac/", value)
    assert code in (400, 401), code
    assert raw_get(srv, "/hmac/", basic(b"alice", "alice:colon\r\npass".encode())) == 200


def test_64k_header_is_refused_without_harm(srv):
    value = b"Basic " + base64.b64encode(b"alice:" + b"p" * 48000)
    assert len(value) > 64000
    assert raw_get(srv, "/hmac/", value) == 400  # LimitRequestFieldSize
    assert raw_get(srv, "/hmac/", basic(b"alice", "alice:colon\r\npass".encode())) == 200


def test_same_credential_on_another_realm(srv):
    good = basic(b"alice", "alice:colon\r\npass".encode())
    assert raw_get(srv, "/hmac/", good) == 200
    assert raw_get(srv, "/other/", good) == 401
    assert raw_get(srv, "/other/", basic(b"alice", b"alice other pass")) == 200
    assert raw_get(srv, "/hmac/", basic(b"alice", b"alice other pass")) == 401


@pytest.mark.slow
def test_burst_of_ten_thousand_users_through_a_small_cache(srv):
    """10,000 distinct users, 8 at a time, through a cache of 16 KB (~250
    entries): every right password 200, every wrong one 401, no crash."""
    before = srv.status()
    results = {}

    def worker(k):
        for i in range(k, BURST, 8):
            pw = b"burst pass" if i % 10 else b"wrong pass"
            # NB: each wrong password from a client of its own: 1,000 from
            # one would be refused after 30 (AuthHMACMaxClientFailures).
            results[i] = raw_get(srv, "/burst/", basic(b"u%d" % i, pw),
                                 source=None if i % 10 else client_address())
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wrong = [i for i in range(BURST) if results.get(i) != (401 if i % 10 == 0 else 200)]
    assert not wrong, "unexpected status for users %s" % [(i, results.get(i))
                                                          for i in wrong[:10]]
    after = srv.status()
    assert after["slots"] < BURST
    assert after["evictions"] - before["evictions"] > 0
    assert after["entries"] <= after["slots"]
    # The first users were evicted: they are verified again, and still work.
    assert raw_get(srv, "/burst/", basic(b"u1", b"burst pass")) == 200
    assert raw_get(srv, "/burst/", basic(b"u10", b"wrong pass")) == 401
    srv.secrets.update(["burst pass", "wrong pass"])
