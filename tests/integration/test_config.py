"""Bad configuration stops `httpd -t` with a message naming the directive;
good configuration starts."""
import os
import re
import subprocess

import pytest

from harness import IS_ROOT, VALGRIND, Httpd, S, hmac_location, htpasswd


@pytest.fixture
def srv():
    s = Httpd(name="conf")
    yield s
    s.cleanup()


def configure(srv, global_conf="", ttl=""):
    srv.global_conf = global_conf
    srv.body = hmac_location("/a/", srv.path("a.htpasswd"), "a", ttl)
    srv.write_config()
    return srv.configtest()


def pepper(srv, size=32, mode=0o600, name="pepper"):
    path = srv.path(name)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    os.chmod(path, mode)
    return path


def test_defaults_pass(srv):
    rc, out = configure(srv)
    assert rc == 0, out


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_pepper_readable_by_others_is_refused(srv, mode):
    rc, out = configure(srv, "AuthHMACPepperFile %s" % pepper(srv, mode=mode))
    assert rc != 0
    assert "AuthHMACPepperFile" in out and "accessible by group or others" in out


def test_short_pepper_is_refused(srv):
    rc, out = configure(srv, "AuthHMACPepperFile %s" % pepper(srv, size=31))
    assert rc != 0
    assert "AuthHMACPepperFile" in out and "holds 31 bytes" in out and "32 to" in out


def test_missing_pepper_is_refused(srv):
    rc, out = configure(srv, "AuthHMACPepperFile %s" % srv.path("nope"))
    assert rc != 0
    assert "AuthHMACPepperFile" in out and "cannot open" in out


def test_pepper_never_printed(srv):
    path = srv.path("pepper")
    with open(path, "w") as f:
        f.write("PEPPER-TEXT-" * 2)  # 24 bytes: too short
    os.chmod(path, 0o600)
    rc, out = configure(srv, "AuthHMACPepperFile %s" % path)
    assert rc != 0 and "PEPPER-TEXT" not in out


@pytest.mark.parametrize("value", ["lots", "-1", "4MB", "1K", "2G", "4 M", "99999999999999999999"])
def test_bad_cache_size_is_refused(srv, value):
    rc, out = configure(srv, 'AuthHMACCacheSize "%s"' % value)
    assert rc != 0
    assert "AuthHMACCacheSize" in out and "16K to 1G" in out


@pytest.mark.parametrize("value", ["forever", "-5", "1.5", "8d", "10y", "300 s"])
def test_bad_ttl_is_refused(srv, value):
    rc, out = configure(srv, ttl='AuthHMACCacheTTL "%s"' % value)
    assert rc != 0
    assert "AuthHMACCacheTTL" in out and "seconds from 0 to" in out


@pytest.mark.parametrize("directive,value,accepts", [
    ("AuthHMACMaxVerifications", "0", "from 1 to 64"),
    ("AuthHMACMaxVerifications", "65", "from 1 to 64"),
    ("AuthHMACMaxVerifications", "many", "from 1 to 64"),
    ("AuthHMACVerifyBacklog", "-1", "from 0 to 192"),
    ("AuthHMACVerifyBacklog", "193", "from 0 to 192"),
])
def test_bad_queue_settings_are_refused(srv, directive, value, accepts):
    rc, out = configure(srv, '%s "%s"' % (directive, value))
    assert rc != 0
    assert directive in out and accepts in out, out


@pytest.mark.parametrize("directive,value,accepts", [
    ("AuthHMACMaxFailures", "-1", "from 1 to 100000; 0 turns this limit off"),
    ("AuthHMACMaxFailures", "100001", "from 1 to 100000; 0 turns this limit off"),
    ("AuthHMACMaxClientFailures", "lots", "from 1 to 100000; 0 turns this limit off"),
    ("AuthHMACFailureWindow", "0", "seconds from 1 to 86400"),
    ("AuthHMACFailureWindow", "soon", "seconds from 1 to 86400"),
    ("AuthHMACBanTime", "2d", "seconds from 1 to 86400"),
])
def test_bad_throttle_settings_are_refused(srv, directive, value, accepts):
    rc, out = configure(srv, '%s "%s"' % (directive, value))
    assert rc != 0
    assert directive in out and accepts in out, out


def test_throttle_settings_are_server_wide(srv):
    rc, out = configure(srv, "<VirtualHost 127.0.0.1:%d>\n AuthHMACMaxFailures 3\n"
                             "</VirtualHost>" % srv.port)
    assert rc != 0
    assert "AuthHMACMaxFailures" in out and "VirtualHost" in out


def test_queue_settings_are_server_wide(srv):
    rc, out = configure(srv, "<VirtualHost 127.0.0.1:%d>\n AuthHMACMaxVerifications 2\n"
                             "</VirtualHost>" % srv.port)
    assert rc != 0
    assert "AuthHMACMaxVerifications" in out and "VirtualHost" in out


@pytest.mark.parametrize("value", ["never", "-1", "2.5", "8d"])
def test_bad_negative_ttl_is_refused(srv, value):
    rc, out = configure(srv, ttl='AuthHMACNegativeTTL "%s"' % value)
    assert rc != 0
    assert "AuthHMACNegativeTTL" in out and "0 turns the negative cache off" in out


@pytest.mark.parametrize("value", ["0", "31d", "2592001", "forever", "-1", "1.5", "8 h"])
def test_bad_max_age_is_refused(srv, value):
    rc, out = configure(srv, ttl='AuthHMACCacheMaxAge "%s"' % value)
    assert rc != 0
    assert "AuthHMACCacheMaxAge" in out and "seconds from 1 to 2592000" in out, out


@pytest.mark.parametrize("value", ["1", "300", "5m", "8h", "1d", "30d"])
def test_good_max_age_passes(srv, value):
    rc, out = configure(srv, ttl="AuthHMACCacheMaxAge %s" % value)
    assert rc == 0, out


def test_server_wide_directives_refused_in_vhost(srv):
    rc, out = configure(srv, "<VirtualHost 127.0.0.1:%d>\n AuthHMACCacheSize 8M\n</VirtualHost>"
                        % srv.port)
    assert rc != 0
    assert "AuthHMACCacheSize" in out and "VirtualHost" in out


def test_good_values_start_and_serve(srv):
    htpasswd(srv.path("a.htpasswd"), "alice", "pw for alice", create=True)
    rc, out = configure(srv, "AuthHMACPepperFile %s\nAuthHMACCacheSize 64K" % pepper(srv),
                        ttl="AuthHMACCacheTTL 10m")
    assert rc == 0, out
    srv.start()
    assert srv.status_code("/a/", "alice", "pw for alice") in (200, 404)
    assert srv.status_code("/a/", "alice", "pw for alice") in (200, 404)
    st = srv.status()
    assert st["verifications"] == 1 and st["hits"] == 1
    assert st["cache_bytes"] <= 64 * 1024 and st["slots"] > 0
    assert "random pepper" not in srv.error_log()
    srv.stop()
    assert not srv.log_problems()


def page(srv, query=""):
    return subprocess.run([S["curl"], "-s", "--max-time", "10",
                           srv.url + "/authn-hmac-status" + query],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(bool(VALGRIND), reason="httpd -X cannot restart")
def test_random_pepper_said_at_notice_and_shown(srv):
    """Issue 37: with no pepper configured at all, the random pepper is
    said once at start (notice: logged whatever LogLevel, as httpd's own
    start-up lines are; not again at a graceful restart, which keeps it),
    and shown on the status page: text, JSON and the Prometheus gauge
    authn_hmac_pepper_random (alert rules use that name). A pepper file
    shows 0."""
    htpasswd(srv.path("a.htpasswd"), "alice", "pw for alice", create=True)
    srv.log_level = "warn"
    rc, out = configure(srv)
    assert rc == 0, out
    srv.start()
    srv.restart()
    assert srv.status()["pepper_random"] == 1
    assert re.search(r"(?m)^pepper_random: 1$", page(srv)), page(srv)
    prom = page(srv, "?prometheus")
    assert re.search(r"(?m)^# TYPE authn_hmac_pepper_random gauge\n"
                     r"authn_hmac_pepper_random 1$", prom), prom
    srv.stop()
    said = re.findall(r"(?m)^.*AHMAC0014.*$", srv.error_log())
    assert len(said) == 1 and "[authn_hmac:notice]" in said[0], said
    assert "random pepper" in said[0] and "AuthHMACPepperFile" in said[0], said
    assert not srv.log_problems()
    rc, out = configure(srv, "AuthHMACPepperFile %s" % pepper(srv))
    assert rc == 0, out
    srv.start()
    assert srv.status()["pepper_random"] == 0
    assert "authn_hmac_pepper_random 0\n" in page(srv, "?prometheus")
    srv.stop()


def test_cache_size_zero_still_authenticates(srv):
    htpasswd(srv.path("a.htpasswd"), "alice", "pw for alice", create=True)
    rc, out = configure(srv, "AuthHMACCacheSize 0")
    assert rc == 0, out
    srv.start()
    for _ in range(2):
        assert srv.status_code("/a/", "alice", "pw for alice") in (200, 404)
        assert srv.status_code("/a/", "alice", "wrong") == 401
    st = srv.status()
    assert st["verifications"] == 4 and st["hits"] == 0 and st["slots"] == 0
    srv.stop()
    assert not srv.log_problems()


@pytest.mark.skipif(not IS_ROOT, reason="needs root to chown the pepper to someone else")
def test_pepper_owned_by_another_user_is_refused(srv):
    path = pepper(srv)
    os.chown(path, 65534, 65534)
    rc, out = configure(srv, "AuthHMACPepperFile %s" % path)
    assert rc != 0 and "must be owned by root" in out


SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                       "authn_hmac.conf")
# The status page every harness server has (see harness/httpd.py).
HARNESS_STATUS = """<Location /authn-hmac-status>
    SetHandler authn-hmac-status
    Require local
</Location>
"""


def test_shipped_conf_is_valid_and_serves_no_counters(srv):
    """conf/authn_hmac.conf (what a2enmod enables, in every virtual host)
    parses, names its pepper file outside any <IfFile>, and leaves the
    status handler off: the counters tell unknown
    users from wrong passwords, and behind a reverse proxy on the same host
    `Require local` admits every client. It sends the admin to the virtual
    host for it (a status section here gets a virtual host's login
    `Require` after it: test_status serves the example's, in its place)."""
    with open(SHIPPED) as f:
        text = f.read()
    active = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
    assert "    AuthHMACPepperFile /etc/apache2/authn_hmac.pepper" in active, active
    assert not any("IfFile" in l for l in active), active
    assert not any("authn-hmac-status" in l for l in active), active
    assert not any("Require local" in l for l in active), active
    assert re.search(r"Not here: in\s*#\s*the <VirtualHost> that serves them, after any "
                     r"<Location />", text), text
    # A server with the shipped file and nothing else (its pepper here):
    # no counters, and the pepper file's.
    shipped = srv.path("authn_hmac.conf")
    with open(shipped, "w") as f:
        f.write(text.replace("/etc/apache2/authn_hmac.pepper", srv.path("authn_hmac.pepper")))
    pepper(srv, name="authn_hmac.pepper")
    srv.global_conf = "Include %s" % shipped
    srv.body = hmac_location("/a/", srv.path("a.htpasswd"), "a")
    plain = srv.config_text()
    assert HARNESS_STATUS in plain
    with open(srv.conf, "w") as f:
        f.write(plain.replace(HARNESS_STATUS, ""))
    rc, out = srv.configtest()
    assert rc == 0, out
    srv.start()
    assert srv.status_code("/authn-hmac-status") == 404
    assert srv.status_code("/authn-hmac-status?json") == 404
    srv.stop()
    assert "random pepper" not in srv.error_log()
    # Issue 37: the file missing (an old rotation's file removed), httpd
    # -t fails naming it and the tool that makes one; no <IfFile> skips
    # the line for a random pepper of this server's own.
    os.unlink(srv.path("authn_hmac.pepper"))
    rc, out = srv.configtest()
    assert rc != 0, out
    assert "AuthHMACPepperFile: cannot open '%s'" % srv.path("authn_hmac.pepper") in out, out
    assert "authn-hmac-pepper %s" % srv.path("authn_hmac.pepper") in out, out


@pytest.mark.parametrize("value,says", [
    ("redis://127.0.0.1:6379", "a URL is not accepted: write 127.0.0.1:6379"),
    ("redis://redis.example.org:6380/2", "a URL is not accepted: write "
     "redis.example.org:6380, and AuthHMACRedisDatabase 2 (host:port"),
    ("unix:/run/redis/redis.sock", "a URL is not accepted: write /run/redis/redis.sock"),
    ("rediss://redis.example.org:6380", "a URL is not accepted: write "
     "redis.example.org:6380, and AuthHMACRedisTLS on (host:port"),
])
def test_redis_url_is_refused_with_the_form(srv, value, says):
    rc, out = configure(srv, "AuthHMACPepperFile %s\nAuthHMACRedisServer %s"
                        % (pepper(srv), value))
    assert rc != 0
    assert "AuthHMACRedisServer: '%s': %s" % (value, says) in out, out
    assert "(host:port, [IPv6]:port or /path/to/redis.sock)" in out, out
    assert "IPv6 address needs" not in out, out


def test_redis_url_password_is_not_repeated(srv):
    rc, out = configure(srv, "AuthHMACPepperFile %s\n"
                        "AuthHMACRedisServer redis://app:S3CRET-PW@10.0.0.5:6379"
                        % pepper(srv))
    assert rc != 0
    assert "a URL is not accepted; its user and password go in AuthHMACRedisAuthFile" \
        in out, out
    assert "S3CRET" not in out, out


@pytest.mark.parametrize("value,says", [
    ("unix:///run/redis.sock?db=0&password=S3CRET-PW", "write /run/redis.sock"),
    ("redis://10.0.0.5:6379/0?password=S3CRET-PW", "write 10.0.0.5:6379, and "
     "AuthHMACRedisDatabase 0"),
    ("rediss://10.0.0.5:6380?password=S3CRET-PW", "write 10.0.0.5:6380, and "
     "AuthHMACRedisTLS on"),
    ("10.0.0.5:6379?password=S3CRET-PW", "bad port"),
])
def test_redis_url_password_in_query_is_not_repeated(srv, value, says):
    """redis-py and others take the password in the query too: a value with
    '?' is not repeated either (httpd's message names the file and line)."""
    rc, out = configure(srv, "AuthHMACPepperFile %s\nAuthHMACRedisServer %s"
                        % (pepper(srv), value))
    assert rc != 0
    assert "AuthHMACRedisServer: " in out and says in out, out
    assert "S3CRET" not in out, out


@pytest.mark.parametrize("directive", ["AuthHMACPepperFile", "AuthHMACRedisAuthFile"])
def test_symlinked_secret_is_refused_with_the_reason(srv, directive):
    real = pepper(srv)
    link = srv.path("pepper-link")
    os.symlink(real, link)
    rc, out = configure(srv, "%s %s" % (directive, link))
    assert rc != 0
    assert ("%s: '%s' is a symbolic link, and those are refused: the owner and mode "
            "checks would apply to its target, which whoever may change the link could "
            "repoint; name the file itself ('%s')" % (directive, link, real)) in out, out
    assert "Too many levels of symbolic links" not in out, out


@pytest.mark.parametrize("directive", ["AuthHMACCacheTTL", "AuthHMACCacheMaxAge",
                                       "AuthHMACNegativeTTL", "AuthHMACFailureWindow",
                                       "AuthHMACBanTime"])
def test_duration_in_two_words_says_what_is_accepted(srv, directive):
    """httpd answers a directive of one argument given two with its usage
    text alone: that text says how to write a duration, not "in seconds"."""
    if directive in ("AuthHMACFailureWindow", "AuthHMACBanTime"):
        rc, out = configure(srv, "%s 5 min" % directive)
    else:
        rc, out = configure(srv, ttl="%s 5 min" % directive)
    assert rc != 0
    assert directive in out and "a number of seconds, or one with a unit s, m, h or d and no " \
        "space (90, 5m, 8h)" in out, out


@pytest.mark.parametrize("directive,value,says", [
    ("AuthHMACCacheTTL", "300.5", "no smaller unit makes it whole: round it"),
    ("AuthHMACCacheTTL", "1.5h", "write 90m"),
    ("AuthHMACCacheTTL", "2.5m", "write 150s"),
    ("AuthHMACNegativeTTL", "0.5m", "write 30s"),
    ("AuthHMACCacheMaxAge", "1.5d", "write 36h"),
    ("AuthHMACCacheSize", "1.5M", "write 1536K"),
])
def test_fraction_is_refused_with_a_whole_number(srv, directive, value, says):
    if directive == "AuthHMACCacheSize":
        rc, out = configure(srv, "%s %s" % (directive, value))
    else:
        rc, out = configure(srv, ttl="%s %s" % (directive, value))
    assert rc != 0
    assert "%s: '%s' is a fraction, which is not accepted" % (directive, value) in out, out
    assert says in out and "unknown unit" not in out, out


@pytest.mark.parametrize("directive,value,says", [
    ("AuthHMACMaxVerifications", "2.5", "'2.5' is a fraction, which is not accepted "
     "(verifications at once in the server, from 1 to 64)"),
    ("AuthHMACMaxVerifications", "0", "'0' is too small (verifications"),
    ("AuthHMACRedisTimeout", "20000", "'20000' is too large (milliseconds from 1 to 10000)"),
    ("AuthHMACRedisDatabase", "one", "'one' is not a number (a database number"),
])
def test_bad_number_says_why(srv, directive, value, says):
    rc, out = configure(srv, "%s %s" % (directive, value))
    assert rc != 0
    assert "%s: %s" % (directive, says) in out, out


def auth_section(kind, where, *lines):
    return "<%s %s>\n%s</%s>\n" % (kind, where, "".join("    %s\n" % l for l in lines), kind)


def basic(*extra):
    return ("AuthType Basic", 'AuthName "a"', "AuthBasicProvider hmac") + extra + \
        ("Require valid-user",)


def line_of(path, text):
    with open(path) as f:
        return 1 + f.read().split(text)[0].count("\n")


def test_authuserfile_instead_of_hmac_userfile_is_refused_at_start(srv):
    """AuthBasicProvider hmac with AuthUserFile, and no AuthHMACUserFile
    anywhere that could apply: every request would be a 500 (AHMAC0003), so
    httpd does not start, naming the section, its file:line and the hint."""
    users = srv.path("a.htpasswd")
    htpasswd(users, "alice", "pw for alice", create=True)
    srv.body = auth_section("Location", "/a/", *basic('AuthUserFile "%s"' % users))
    srv.write_config()
    rc, out = srv.configtest()
    assert rc != 0, out
    provider = line_of(srv.conf, "AuthBasicProvider hmac")
    authuserfile = line_of(srv.conf, "AuthUserFile")
    assert ("AHMAC0019: AuthBasicProvider hmac in <Location /a/> (%s:%d) has no "
            "AuthHMACUserFile, and none could apply to it" % (srv.conf, provider)) in out, out
    assert ("AuthUserFile is set; did you mean AuthHMACUserFile? (AuthUserFile at %s:%d)"
            % (srv.conf, authuserfile)) in out, out


def test_provider_without_any_user_file_is_refused_at_start(srv):
    srv.body = "<VirtualHost 127.0.0.1:%d>\n%s</VirtualHost>\n" % (
        srv.port, auth_section("Directory", srv.path("htdocs"), *basic()))
    # A file in another virtual host never applies to this one's requests.
    srv.body += "<VirtualHost 127.0.0.2:%d>\n%s</VirtualHost>\n" % (
        srv.port, auth_section("Location", "/", 'AuthHMACUserFile "%s"' % srv.path("x")))
    srv.write_config()
    rc, out = srv.configtest()
    assert rc != 0, out
    assert "AHMAC0019: AuthBasicProvider hmac in <Directory %s>" % srv.path("htdocs") in out
    assert "did you mean" not in out, out


@pytest.mark.parametrize("lines,who", [
    # mod_authn_file answers the users of its file; only the others would
    # reach hmac (and get a 500).
    (("AuthType Basic", 'AuthName "a"', "AuthBasicProvider file hmac",
      'AuthUserFile "{users}"', "Require valid-user"), "alice"),
    # No AuthType Basic here: nothing asks for a password.
    (("AuthType None", "AuthBasicProvider hmac", "Require all granted"), None),
], ids=["file-before-hmac", "authtype-none"])
def test_section_that_may_not_reach_hmac_starts_with_a_warning(srv, lines, who):
    """A section with AuthBasicProvider hmac and no AuthHMACUserFile that
    may never authenticate through hmac started before the check existed:
    it still starts (an upgrade must not stop apache2), with a warning that
    names it, and serves as before."""
    users = srv.path("a.htpasswd")
    htpasswd(users, "alice", "pw for alice", create=True)
    os.makedirs(srv.path("htdocs", "a"), exist_ok=True)
    with open(srv.path("htdocs", "a", "index.html"), "w") as f:
        f.write("a\n")
    srv.body = auth_section("Location", "/a/", *[l.format(users=users) for l in lines])
    srv.write_config()
    rc, out = srv.configtest()
    warning = ("AHMAC0020: AuthBasicProvider hmac in <Location /a/> (%s:%d) has no "
               "AuthHMACUserFile there nor in an enclosing section (and none could apply"
               % (srv.conf, line_of(srv.conf, "AuthBasicProvider")))
    assert rc == 0 and warning in out and "AHMAC0019" not in out, out
    srv.expect_log(r"AHMAC0020: AuthBasicProvider hmac in <Location /a/>")
    srv.start()
    if who:
        assert srv.status_code("/a/", who, "pw for alice") == 200
        assert srv.status_code("/a/", who, "wrong") == 401
    else:
        assert srv.status_code("/a/") == 200


def test_user_file_from_another_section_still_starts(srv):
    """A <Location> may get its AuthHMACUserFile from a <Directory> (not a
    section enclosing it): that works, so httpd starts, serves and says
    nothing."""
    users = srv.path("a.htpasswd")
    htpasswd(users, "alice", "pw for alice", create=True)
    os.makedirs(srv.path("htdocs", "a"), exist_ok=True)
    with open(srv.path("htdocs", "a", "index.html"), "w") as f:
        f.write("a\n")
    srv.body = auth_section("Directory", srv.path("htdocs", "a"),
                            'AuthHMACUserFile "%s"' % users) + \
        auth_section("Location", "/a/", *basic())
    srv.write_config()
    rc, out = srv.configtest()
    assert rc == 0 and "AHMAC" not in out, out
    srv.start()
    assert srv.status_code("/a/", "alice", "pw for alice") == 200
    assert srv.status_code("/a/", "alice", "wrong") == 401
    srv.stop()
    assert not srv.log_problems()


def test_authuserfile_where_a_user_file_may_apply_warns(srv):
    """The same, with AuthUserFile left in the <Location>: it works (the
    <Directory>'s file applies), so a warning only, once per start, naming
    the section."""
    users = srv.path("a.htpasswd")
    htpasswd(users, "alice", "pw for alice", create=True)
    os.makedirs(srv.path("htdocs", "a"), exist_ok=True)
    with open(srv.path("htdocs", "a", "index.html"), "w") as f:
        f.write("a\n")
    srv.body = auth_section("Directory", srv.path("htdocs", "a"),
                            'AuthHMACUserFile "%s"' % users) + \
        auth_section("Location", "/a/", *basic('AuthUserFile "%s"' % users))
    srv.write_config()
    warning = ("AHMAC0020: AuthBasicProvider hmac in <Location /a/> (%s:%d) has no "
               "AuthHMACUserFile there nor in an enclosing section; AuthUserFile is set; "
               "did you mean AuthHMACUserFile?" % (srv.conf,
                                                   line_of(srv.conf, "AuthBasicProvider")))
    rc, out = srv.configtest()
    assert rc == 0 and warning in out, out
    srv.expect_log(r"AHMAC0020: AuthBasicProvider hmac in <Location /a/>")
    srv.start()
    assert srv.status_code("/a/", "alice", "pw for alice") == 200
    # NB: under valgrind httpd runs -X, which cannot restart.
    if not VALGRIND:
        srv.restart()
        assert srv.status_code("/a/", "alice", "pw for alice") == 200
    srv.stop()
    starts = 1 if VALGRIND else 2  # start (+ restart)
    assert srv.error_log().count(warning) == starts, srv.error_log()
    assert not srv.log_problems()


def test_htaccess_may_set_the_user_file_so_no_refusal(srv):
    """With AllowOverride AuthConfig, a .htaccess may name the file: httpd
    starts; a .htaccess that names AuthUserFile instead gets a 500 whose log
    line has the hint."""
    users = srv.path("a.htpasswd")
    htpasswd(users, "alice", "pw for alice", create=True)
    os.makedirs(srv.path("htdocs", "a"), exist_ok=True)
    with open(srv.path("htdocs", "a", "index.html"), "w") as f:
        f.write("a\n")
    with open(srv.path("htdocs", "a", ".htaccess"), "w") as f:
        f.write("\n".join(basic('AuthUserFile "%s"' % users)) + "\n")
    srv.body = auth_section("Directory", srv.path("htdocs"), "AllowOverride AuthConfig")
    srv.write_config()
    rc, out = srv.configtest()
    assert rc == 0 and "AHMAC" not in out, out
    srv.expect_log(r"AHMAC0003: AuthBasicProvider hmac needs AuthHMACUserFile \(AuthUserFile "
                   r"is set; did you mean AuthHMACUserFile\?\)")
    srv.start()
    assert srv.status_code("/a/", "alice", "pw for alice") == 500
    assert "AHMAC0003: AuthBasicProvider hmac needs AuthHMACUserFile (AuthUserFile is set; " \
        "did you mean AuthHMACUserFile?)" in srv.error_log()
    srv.stop()
    assert not srv.log_problems()


def userfile_section(srv, users):
    """/a/ asks for a login against the user file users, and serves a page:
    `httpd -t`'s (exit code, output)."""
    srv.body = auth_section("Location", "/a/", 'AuthHMACUserFile "%s"' % users, *basic())
    srv.write_config()
    os.makedirs(srv.path("htdocs", "a"), exist_ok=True)
    with open(srv.path("htdocs", "a", "index.html"), "w") as f:
        f.write("a\n")
    return srv.configtest()


def test_user_file_that_cannot_be_opened_is_reported_at_start(srv):
    """A misspelled AuthHMACUserFile passed `apachectl -t` silently, and
    every login got a 500. It is reported, in `-t` and at each start, with
    the path and where it is named; the server still starts (a file made
    later works from then on), and the login is the 500 it says."""
    missing = srv.path("wiki.htpaswd")
    rc, out = userfile_section(srv, missing)
    warning = ("AHMAC0031: AuthHMACUserFile %s (%s:%d) cannot be opened: each login it is "
               "to answer gets a 500 until it can" % (missing, srv.conf,
                                                       line_of(srv.conf, "AuthHMACUserFile")))
    assert rc == 0 and warning in out and "No such file or directory" in out, out
    srv.expect_log(r"AHMAC0031: AuthHMACUserFile .*wiki\.htpaswd .* cannot be opened")
    srv.expect_log(r"AHMAC0002: could not open password file")
    srv.start()
    assert warning in srv.error_log()
    assert srv.status_code("/a/", "alice", "pw for alice") == 500
    htpasswd(missing, "alice", "pw for alice", create=True)
    assert srv.status_code("/a/", "alice", "pw for alice") == 200


@pytest.mark.skipif(not IS_ROOT, reason="needs root: the children's User differs from root")
def test_user_file_the_children_cannot_read_is_reported_at_start(srv):
    """Root reads a file of mode 0600 that the children's User cannot: the
    check is for them (found by review: opening it as root passed), in
    `-t` and at the start; the login is the 500 it says, 200 once they can
    read it."""
    users = srv.path("private.htpasswd")
    htpasswd(users, "alice", "pw for alice", create=True)
    os.chmod(users, 0o600)
    rc, out = userfile_section(srv, users)
    warning = ("AHMAC0031: AuthHMACUserFile %s (%s:%d) cannot be opened by the children's "
               "User (mode 0600, owner uid 0)" % (users, srv.conf,
                                                   line_of(srv.conf, "AuthHMACUserFile")))
    assert rc == 0 and warning in out, out
    srv.expect_log(r"AHMAC0031: AuthHMACUserFile .*private\.htpasswd .* cannot be opened")
    srv.expect_log(r"AHMAC0002: could not open password file")
    srv.start()
    assert srv.status_code("/a/", "alice", "pw for alice") == 500
    os.chmod(users, 0o644)
    assert srv.status_code("/a/", "alice", "pw for alice") == 200
