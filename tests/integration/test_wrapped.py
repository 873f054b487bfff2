"""Where a wrapped provider's grant counts (AuthHMACProvider, here `file`,
whose configuration a request takes whole from one section, as ldap's):
only where the same configuration of the provider answers. Each test is
an attacker's review's case, where a grant once counted against another
configuration: two virtual hosts from one file included twice, an <If> at
the top of the server, a configuration changed across a restart."""
import base64
import os
import subprocess

import pytest

from harness import S, VALGRIND, Httpd, htpasswd
from test_redis import finish


def code(srv, path, user, password, host=None, method="GET"):
    raw = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    cmd = [S["curl"], "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30",
           "-X", method, "-H", "Authorization: Basic " + raw]
    if host:
        cmd += ["-H", "Host: " + host]
    srv.secrets.add(password)
    srv.sent[user] = srv.sent.get(user, 0) + 1  # notes() waits for its log line
    return int(subprocess.run(cmd + [srv.url + path], capture_output=True,
                              text=True).stdout or 0)


def files(srv):
    a, b = srv.path("a.htpasswd"), srv.path("b.htpasswd")
    htpasswd(a, "alice", "alice pass", cost=4, create=True)
    htpasswd(b, "bob", "bob pass", cost=4, create=True)
    with open(srv.path("htdocs", "index.html"), "w") as f:
        f.write("page\n")
    return a, b


def r_location(srv, users):
    """A <Location /r/> with a page, through the file provider on users."""
    os.makedirs(srv.path("htdocs", "r"))
    with open(srv.path("htdocs", "r", "index.html"), "w") as f:
        f.write("page\n")
    return '<Location /r/>\n%s    AuthUserFile "%s"\n</Location>\n' % (AUTH, users)


AUTH = ("    AuthType Basic\n    AuthName site\n    AuthBasicProvider hmac\n"
        "    AuthHMACProvider file\n    Require valid-user\n")


def test_two_virtual_hosts_from_one_file_are_apart():
    srv = Httpd(name="wrapvh")
    a, b = files(srv)
    with open(srv.path("site.conf"), "w") as f:
        f.write('<VirtualHost 127.0.0.1:%d>\n    ServerName ${SITE}.test\n'
                '    DocumentRoot "%s"\n    <Location />\n%s'
                '        AuthUserFile "${USERS}"\n    </Location>\n</VirtualHost>\n'
                % (srv.port, srv.path("htdocs"), AUTH))
    srv.body = ('Define SITE a\nDefine USERS "%s"\nInclude "%s"\nUnDefine SITE\n'
                'UnDefine USERS\nDefine SITE b\nDefine USERS "%s"\nInclude "%s"\n'
                % (a, srv.path("site.conf"), b, srv.path("site.conf")))
    srv.write_config()
    try:
        srv.start()
        assert code(srv, "/", "alice", "alice pass", host="a.test") == 200
        assert code(srv, "/", "alice", "alice pass", host="b.test") == 401
        assert code(srv, "/", "bob", "bob pass", host="b.test") == 200
        assert code(srv, "/", "bob", "bob pass", host="a.test") == 401
    finally:
        finish(srv, r"AH01617|AH01618")


def test_an_if_at_the_top_of_the_server_is_a_section_of_its_own():
    srv = Httpd(name="wrapif")
    a, b = files(srv)
    srv.body = ('<If "%%{REQUEST_METHOD} == \'GET\'">\n    AuthUserFile "%s"\n</If>\n'
                '<Else>\n    AuthUserFile "%s"\n</Else>\n<Location />\n%s</Location>\n'
                % (a, b, AUTH))
    srv.write_config()
    try:
        srv.start()
        for _ in range(2):
            assert code(srv, "/index.html", "alice", "alice pass") == 200
            assert code(srv, "/index.html", "alice", "alice pass", method="POST") in (401,)
            assert code(srv, "/index.html", "bob", "bob pass", method="POST") != 401
            assert code(srv, "/index.html", "bob", "bob pass") == 401
        assert srv.notes("alice")[-2:] == ["hit", "negative-hit"], srv.notes("alice")
    finally:
        finish(srv, r"AH01617|AH01618")


@pytest.mark.skipif(bool(VALGRIND), reason="httpd -X under valgrind cannot restart")
def test_a_grant_does_not_outlive_a_change_of_the_configuration():
    srv = Httpd(name="wraprestart")
    a, b = files(srv)
    srv.body = r_location(srv, a)
    srv.write_config()
    try:
        srv.start()
        assert code(srv, "/r/", "alice", "alice pass") == 200
        assert code(srv, "/r/", "alice", "alice pass") == 200
        assert srv.notes("alice") == ["verified", "hit"]
        srv.body = srv.body.replace(a, b)
        srv.write_config()
        srv.restart()
        assert code(srv, "/r/", "alice", "alice pass") == 401
        assert code(srv, "/r/", "bob", "bob pass") == 200
    finally:
        finish(srv, r"AH01617|AH01618")


@pytest.mark.skipif(bool(VALGRIND), reason="httpd -X under valgrind cannot restart")
def test_a_pepper_rotation_keeps_the_providers_grants():
    """A grant kept under the pepper that a graceful restart makes the
    previous one is a hit, counted as such: the provider is not asked again
    (found by review: the previous pepper's user id was made of the section,
    not of the provider on its server as the current one's is, so every
    cached directory user was asked again after the flip)."""
    srv = Httpd(name="wraprot")
    a, _ = files(srv)
    old, new = srv.path("pepper.old"), srv.path("pepper.new")
    for path in (old, new):
        with open(path, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(path, 0o600)
    srv.global_conf = "AuthHMACPepperFile %s\n" % old
    srv.body = r_location(srv, a)
    srv.write_config()
    try:
        srv.start()
        assert code(srv, "/r/", "alice", "alice pass") == 200
        asked = srv.status()["verifications"]
        srv.global_conf = "AuthHMACPepperFile %s %s\n" % (new, old)
        srv.write_config()
        srv.restart()
        assert code(srv, "/r/", "alice", "alice pass") == 200
        assert code(srv, "/r/", "alice", "alice pass") == 200
        st = srv.status()
        assert srv.notes("alice") == ["verified", "hit", "hit"], srv.notes("alice")
        assert st["previous_hits"] == 1 and st["verifications"] == asked, st
    finally:
        finish(srv, r"AH01617|AH01618")
