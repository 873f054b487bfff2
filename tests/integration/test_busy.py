"""The answer to a login that finds no turn to verify: a 503 with
Retry-After, whose body is the admin's ErrorDocument 503 when there is one
(a text, a local document, or a URL, which httpd answers with a redirect),
as for any other 503, and never the ErrorDocument 500 that mod_auth_basic's
error would otherwise get. A local document under the same configuration
(which httpd serves without checking the user again) does not run as the
user whose password was never checked, and sees no name: neither as
REMOTE_USER nor as REDIRECT_REMOTE_USER (the user of the request it
stands in for), in an SSI page or a CGI script."""
import os
import threading
import time

import pytest

from harness import Httpd, basic, get, hmac_location, htpasswd

SITE = """
Alias /errors/ "{d}/errors/"
Alias /plain/ "{d}/htdocs/"
Alias /text/ "{d}/htdocs/"
Alias /doc/ "{d}/htdocs/"
Alias /url/ "{d}/htdocs/"
Alias /same/ "{d}/same/"
Alias /cgi/ "{d}/same/"
<Directory "{d}/same">
    Options +Includes +ExecCGI
</Directory>
AddOutputFilter INCLUDES .shtml
AddHandler cgi-script .cgi
RewriteEngine On
RewriteRule ^/down - [R=503]
<Location /down>
    ErrorDocument 503 /errors/busy.html
</Location>
"""
TEXT = "Sorry: too busy / try again"  # read as a URL, then a path, if unquoted
DOC = "<html><body>the admin's own busy page</body></html>\n"
URL = "http://elsewhere.example/busy"
SSI = ('user=[<!--#echo var="REMOTE_USER" -->] '
       'redirect=[<!--#echo var="REDIRECT_REMOTE_USER" -->]\n')
CGI = """#!/bin/sh
printf 'Content-Type: text/plain\\n\\nuser=[%s] redirect=[%s]\\n' \\
    "${REMOTE_USER-(none)}" "${REDIRECT_REMOTE_USER-(none)}"
"""
NONE = "user=[(none)] redirect=[(none)]\n"
LOCS = ("/plain/", "/text/", "/doc/", "/url/", "/same/", "/cgi/")
OURS = b"Too many logins are being checked right now."


def logged(srv, paths):
    """The access log's lines (split, without the time the request began)
    for paths, once there is one for each: the log is written after the
    response."""
    for _ in range(100):
        lines = [l[:4] for l in map(str.split, srv.access_log()) if l[3] in paths]
        if {l[3] for l in lines} >= set(paths):
            break
        time.sleep(0.02)
    return lines


@pytest.mark.mpm
@pytest.mark.slow
@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_busy_answer_uses_error_document_503(mpm):
    # One verification at a time and no place to wait: while a slow one
    # runs, every other miss is refused at once.
    srv = Httpd(mpm=mpm, name="busy_" + mpm, modules=["include", "rewrite", "cgi"],
                global_conf="AuthHMACMaxVerifications 1\nAuthHMACVerifyBacklog 0")
    users = srv.path("users.htpasswd")
    srv.body = SITE.format(d=srv.dir) + "".join([
        hmac_location("/plain/", users, "r", 'ErrorDocument 500 "a server error"'),
        hmac_location("/text/", users, "r", 'ErrorDocument 503 "%s"' % TEXT),
        hmac_location("/doc/", users, "r", "ErrorDocument 503 /errors/busy.html"),
        hmac_location("/url/", users, "r", "ErrorDocument 503 " + URL),
        hmac_location("/same/", users, "r", "ErrorDocument 503 /same/busy.shtml"),
        hmac_location("/cgi/", users, "r", "ErrorDocument 503 /cgi/busy.cgi"),
    ])
    srv.write_config()
    srv.expect_log(r"AHMAC0007")
    srv.expect_log(r"AHMAC0030")  # each 503, with its client
    os.makedirs(srv.path("errors"))
    os.makedirs(srv.path("same"))
    for name, text in (("htdocs/index.html", "hello\n"), ("errors/busy.html", DOC),
                       ("same/index.html", "hello\n"), ("same/busy.shtml", SSI),
                       ("same/busy.cgi", CGI)):
        with open(srv.path(name), "w") as f:
            f.write(text)
    os.chmod(srv.path("same", "busy.cgi"), 0o755)
    htpasswd(users, "alice", "correct horse", create=True)
    htpasswd(users, "slow", "slow pass", cost=16)  # about 4 s of bcrypt
    slow = {}

    def hold():
        slow["r"], _ = get(srv.port, "/plain/", basic("slow", "not the slow pass"))

    try:
        srv.start()
        holder = threading.Thread(target=hold)
        holder.start()
        for _ in range(300):
            if srv.status()["verifying"] == 1:
                break
            time.sleep(0.01)
        answers = {}
        for i, loc in enumerate(LOCS):
            answers[loc], conn = get(srv.port, loc, basic("alice", "wrong %d" % i))
            if conn:
                conn.close()
        still = srv.status()["verifying"]
        holder.join()
        log = {l[3]: l[:3] for l in logged(srv, LOCS) if l[0] != "slow"}
        print({loc: (r.status, r.getheader("Retry-After"), r.body[:60])
               for loc, r in answers.items()})
        # The probes ran while the slow verification held the only turn.
        assert still == 1 and slow["r"].status == 401, (still, slow["r"].status)

        plain, text, doc, url, same, cgi = (answers[k] for k in LOCS)
        for r in (plain, text, doc, same, cgi):
            assert r.status == 503, (r.status, r.body)
            retry = r.getheader("Retry-After")
            assert retry and retry.isdigit() and 1 <= int(retry) <= 60, retry
        # No ErrorDocument 503: our page, not the location's ErrorDocument 500.
        assert OURS in plain.body and b"a server error" not in plain.body, plain.body
        # A text, as httpd keeps it, even one that looks like a URL or a path.
        assert text.body.decode() == TEXT, text.body
        # A local document, with the 503 and not the 500 httpd redirected with.
        assert doc.body.decode() == DOC, doc.body
        # A URL: httpd's answer to any ErrorDocument URL, a redirect.
        assert url.status == 302 and url.getheader("Location") == URL, \
            (url.status, url.getheader("Location"))
        # A document under the same configuration: httpd would hand it the
        # name mod_auth_basic set before asking (as the request's user, or
        # as the user of the request it stands in for), but alice was never
        # verified.
        assert same.body.decode() == NONE, same.body
        assert cgi.body.decode() == NONE, cgi.body
        # The access log tells the admin the final status and the note. A
        # local document's request has no user.
        assert log == {"/plain/": ["alice", "503", "busy"], "/text/": ["alice", "503", "busy"],
                       "/doc/": ["-", "503", "busy"], "/url/": ["alice", "302", "busy"],
                       "/same/": ["-", "503", "busy"], "/cgi/": ["-", "503", "busy"]}, log
        # Another module's 503, with a local document, is not made busy.
        r, conn = get(srv.port, "/down")
        if conn:
            conn.close()
        assert r.status == 503 and r.getheader("Retry-After") is None, r.status
        assert r.body.decode() == DOC, r.body
        down = logged(srv, ["/down"])
        assert down == [["-", "503", "-", "/down"]], down
        # Afterwards the queue is free: the right password verifies.
        srv.sent["alice"] = 3  # lines with her name: not the document's
        assert srv.status_code("/doc/", "alice", "correct horse") == 200
        assert srv.notes("alice")[-1] == "verified"
        problems = srv.log_problems()
        assert not problems, problems
    finally:
        srv.cleanup()

