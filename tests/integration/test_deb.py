"""The Debian package: built from this tree with dpkg-buildpackage, installed
with apt-get, enabled with a2enmod, served by the system's apache2, purged.

It installs a package and runs the system's httpd, so it runs as root only,
where dpkg-buildpackage is (tools/deps --test installs it), and it leaves the
system as it found it: apache2 stopped again, the package purged.
"""
import base64
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from harness import S, exited, free_port, hmac_location, htpasswd, run_user
from harness.httpd import read_log, read_pid
from harness.proc import wait_exited

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("top_srcdir") or os.path.dirname(os.path.dirname(HERE))
PKG = "libapache2-mod-authn-hmac"
APACHE2 = "/usr/sbin/apache2"
PEPPER = "/etc/apache2/authn_hmac.pepper"
# What the package installs, and what must be gone after a purge.
FILES = [os.path.join(S["moddir"], "mod_authn_hmac.so"),
         "/etc/apache2/mods-available/authn_hmac.load",
         "/etc/apache2/mods-available/authn_hmac.conf",
         "/usr/sbin/authn-hmac-pepper", "/usr/bin/authn-hmac-stat"]
ENABLED = ["/etc/apache2/mods-enabled/authn_hmac.load",
           "/etc/apache2/mods-enabled/authn_hmac.conf"]
STATE = "/var/lib/libapache2-mod-authn-hmac"  # the postinst's marker
EXAMPLE = "/usr/share/doc/%s/examples/mediawiki-vhost.conf.example" % PKG
# The Prometheus alerting rules and their tests (conf/prometheus/).
PROMETHEUS = "/usr/share/doc/%s/examples/prometheus" % PKG
# An enabled site that uses the module, while the test removes the package.
SITE = "/etc/apache2/conf-enabled/zz-authn-hmac-test-site.conf"
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
APT = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=120"]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="installs a package: runs as root only"),
    pytest.mark.skipif(bool(os.environ.get("AUTHN_HMAC_IN_DEB_BUILD")),
                       reason="inside a package build"),
    pytest.mark.skipif(not shutil.which("dpkg-buildpackage"),
                       reason="no dpkg-buildpackage (tools/deps --test installs dpkg-dev)"),
    pytest.mark.skipif(bool(S.get("preload")),
                       reason="the package is built and tested from the plain build's run"),
    pytest.mark.plain,
    # Not a memory test: skipped under valgrind (make check-valgrind).
    pytest.mark.slow,
]


def dpkg_status():
    """The package's dpkg status; '' when it is neither installed nor
    leaves conffiles (dpkg may remember a purged package as not-installed)."""
    p = subprocess.run(["dpkg-query", "-W", "-f=${Status}", PKG], capture_output=True,
                       text=True)
    status = p.stdout.strip() if p.returncode == 0 else ""
    return "" if status.endswith(" not-installed") else status


def run(cmd, **kw):
    """Runs cmd; its exit code and its output, stdout and stderr together."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    return p.returncode, p.stdout


def copy_source(dest):
    """The tree's sources without build products: git's files (tracked, and
    new ones not ignored) in a checkout, else the tree minus build dirs."""
    p = subprocess.run(["git", "-C", SRC, "ls-files", "-z", "--cached", "--others",
                        "--exclude-standard"], capture_output=True)
    if p.returncode == 0 and p.stdout:
        for rel in p.stdout.decode().split("\0"):
            src = os.path.join(SRC, rel)
            if rel and os.path.isfile(src):  # a deleted tracked file is not
                os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
                shutil.copy2(src, os.path.join(dest, rel))
        return
    shutil.copytree(SRC, dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        ".git", "build", "build-*", "autom4te.cache", "config.status", "config.log",
        "Makefile", "libtool", ".libs", ".deps", "*.o", "*.lo", "*.la", "__pycache__"))


def build_deb(work):
    """dpkg-buildpackage -us -uc -b in a copy of the tree; the .deb's path."""
    src = os.path.join(work, "src")
    os.makedirs(src)
    copy_source(src)
    # NB: the build runs the unit tests; should it ever run this suite,
    # this test must not build a package inside a package build.
    rc, out = run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src,
                  env=dict(os.environ, AUTHN_HMAC_IN_DEB_BUILD="1"))
    with open(os.path.join(work, "build.log"), "w") as f:
        f.write(out)
    assert rc == 0, "dpkg-buildpackage failed (exit %d):\n%s" % (rc, out[-6000:])
    debs = glob.glob(os.path.join(work, "%s_*.deb" % PKG))
    assert len(debs) == 1, "expected one %s .deb in %s, found %s" % (PKG, work, debs)
    with open(os.path.join(SRC, "configure.ac")) as f:
        version = re.search(r"AC_INIT\(\[[^]]*\],\s*\[([^]]+)\]", f.read()).group(1)
    name = os.path.basename(debs[0])
    assert name.startswith("%s_%s-" % (PKG, version)), \
        "%s: its version is not configure.ac's %s (update debian/changelog)" % (name, version)
    return debs[0]


def interpreters_depended_on(deb):
    """The package names in the .deb's Depends (alternatives included)."""
    rc, out = run(["dpkg-deb", "-f", deb, "Depends"])
    assert rc == 0, out
    return {re.split(r"[\s(:]", d.strip())[0] for d in re.split(r"[,|]", out) if d.strip()}


def interpreter_package(path):
    """The package a script's #! line needs, None for a binary or for an
    interpreter that is Essential (sh, bash)."""
    with open(path, "rb") as f:
        first = f.readline()
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode().split()
    prog = os.path.basename(words[1] if os.path.basename(words[0]) == "env" else words[0])
    if prog in ("sh", "bash", "dash"):
        return None
    # /usr/bin/python3 is the python3 package's (python3-minimal's file,
    # but a script needs the standard library that python3 brings).
    return "python3" if prog.startswith("python3") else prog


def purge():
    """apt-get purge, whatever state the package is in; (exit code, output)."""
    if not dpkg_status():
        return 0, "not installed"
    return run(APT + ["purge", PKG], env=APT_ENV)


CONF = """ServerRoot "/etc/apache2"
Include /etc/apache2/mods-enabled/*.load
Include /etc/apache2/mods-enabled/*.conf
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile "{w}/run/apache2.pid"
DefaultRuntimeDir "{w}/run"
Mutex default:{w}/run
ErrorLog "{w}/logs/error.log"
LogLevel warn authn_hmac:info
User {user}
Group {group}
DocumentRoot "{w}/htdocs"
<Directory "{w}/htdocs">
    Require all granted
</Directory>
{private}"""
# The shipped conf's commented example, for this host as the scraper.
STATUS = """<Location /authn-hmac-status>
    SetHandler authn-hmac-status
    Require ip 127.0.0.1
</Location>
"""


class SystemApache:
    """The system's apache2 binary with the modules enabled in /etc/apache2,
    on a free loopback port, with everything else in the test's directory."""

    def __init__(self, work):
        self.dir = os.path.join(work, "httpd")
        for d in ("run", "logs", "htdocs"):
            os.makedirs(os.path.join(self.dir, d))
        os.chmod(work, 0o755)
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        user, group = run_user()
        self.conf = os.path.join(self.dir, "apache2.conf")
        self.user, self.group = user, group
        self.write_conf()
        # What Debian's /etc/apache2/envvars sets, for mods-enabled/*.conf.
        self.env = dict(os.environ, APACHE_RUN_USER=user, APACHE_RUN_GROUP=group,
                        APACHE_RUN_DIR=self.path("run"), APACHE_LOCK_DIR=self.path("run"),
                        APACHE_PID_FILE=self.path("run", "apache2.pid"),
                        APACHE_LOG_DIR=self.path("logs"))
        self.started = False

    def write_conf(self, more=""):
        """The server's configuration, with more (sections) at its end."""
        with open(self.conf, "w") as f:
            private = hmac_location("/private/", self.dir + "/users.htpasswd", "deb")
            f.write(CONF.format(port=self.port, w=self.dir, user=self.user, group=self.group,
                                private=private) + more)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def _cmd(self, *args):
        return run([APACHE2, "-d", "/etc/apache2", "-f", self.conf] + list(args), env=self.env)

    def pid(self):
        return read_pid(self.path("run", "apache2.pid"))

    def error_log(self):
        return read_log(self.path("logs", "error.log"))

    def start(self):
        self.started = True
        rc, out = self._cmd("-k", "start")
        assert rc == 0, "apache2 -k start failed:\n%s\n%s" % (out, self.error_log())
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    if self.pid():
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("apache2 did not come up:\n" + self.error_log())

    def stop(self):
        if not self.started:
            return
        pid = self.pid()
        self._cmd("-k", "stop")
        if wait_exited(pid):
            return
        # Did not stop: kill it and its children, never anything else.
        for p in [pid] + children(pid):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass

    def get(self, path, user=None, password=None):
        """(status, body) of a GET, with Basic credentials if given."""
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path))
        if user is not None:
            raw = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
            req.add_header("Authorization", "Basic " + raw)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, ""


def children(parent):
    kids = []
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                    kids.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def test_package_builds_installs_serves_and_purges():
    """The .deb installs the module, its .load/.conf and a 0600 root pepper
    that httpd uses; a2enmod and apache2ctl configtest pass; the system's
    apache2 answers 401 without credentials and 200 with an htpasswd -B
    user's; a purge leaves none of it."""
    status = dpkg_status()
    if status:
        pytest.skip("%s is on this system (%s): the test would purge it" % (PKG, status))
    present = [p for p in FILES + ENABLED + [PEPPER, STATE, SITE] if os.path.lexists(p)]
    if present:
        pytest.skip("the purge would remove files that are here already: %s" % present)

    work = tempfile.mkdtemp(prefix="authn_hmac_deb_")
    os.chmod(work, 0o755)  # apt's _apt user reads the .deb
    try:
        t0 = time.monotonic()
        deb = build_deb(work)
        built = time.monotonic() - t0
        try:
            rc, out = run(APT + ["install", deb], env=APT_ENV)
            assert rc == 0, "apt-get install %s failed:\n%s" % (deb, out)
            assert dpkg_status() == "install ok installed", dpkg_status()
            for p in FILES:
                assert os.path.isfile(p), "%s not installed by the package" % p
            assert os.path.isfile(EXAMPLE), "%s not installed by the package" % EXAMPLE
            # The alerting rules, uncompressed (Prometheus reads them as
            # they are), and their tests pass where they are installed.
            for f in ("authn-hmac-rules.yml", "authn-hmac-rules.test.yml"):
                path = os.path.join(PROMETHEUS, f)
                assert os.path.isfile(path), "%s not installed by the package" % path
            if shutil.which("promtool"):
                rc, out = run(["promtool", "test", "rules", "authn-hmac-rules.test.yml"],
                              cwd=PROMETHEUS)
                assert rc == 0, "the installed rules' tests:\n" + out
            # What the installed scripts run is in Depends: on a clean
            # system apt-get brings it.
            depends = interpreters_depended_on(deb)
            for p in FILES:
                need = interpreter_package(p)
                assert need is None or need in depends, \
                    "%s runs %s, which the package does not depend on (Depends: %s)" % (
                        p, need, sorted(depends))

            # The postinst made the pepper: 32 bytes, 0600, root's.
            st = os.lstat(PEPPER)
            assert (oct(st.st_mode), st.st_uid, st.st_size) == (oct(0o100600), 0, 32), \
                "pepper: mode %o, uid %d, %d bytes" % (st.st_mode, st.st_uid, st.st_size)
            with open(PEPPER, "rb") as f:
                pepper = f.read()
            # ... and neither the tool nor a second run of the postinst
            # replaces it.
            rc, out = run(["/usr/sbin/authn-hmac-pepper", PEPPER])
            assert rc != 0 and "not replacing" in out, out
            rc, out = run(["dpkg-reconfigure", "-f", "noninteractive", PKG], env=APT_ENV)
            assert rc == 0, "dpkg-reconfigure (the postinst again) failed:\n" + out
            with open(PEPPER, "rb") as f:
                assert f.read() == pepper, "the pepper was replaced"
            # A pepper the admin removed is not made again (as by an
            # upgrade, which runs the postinst with the old version), but
            # while authn_hmac.conf names it, the postinst says apache2
            # will not start without it (issue 37: no <IfFile> that would
            # run it on a random pepper).
            os.rename(PEPPER, os.path.join(work, "pepper.aside"))
            rc, out = run(["dpkg-reconfigure", "-f", "noninteractive", PKG], env=APT_ENV)
            assert rc == 0 and not os.path.lexists(PEPPER), out
            assert "WARNING: %s is missing" % PEPPER in out and \
                "authn-hmac-pepper %s" % PEPPER in out, out
            os.rename(os.path.join(work, "pepper.aside"), PEPPER)

            rc, out = run(["a2enmod", "authn_hmac"])
            assert rc == 0, "a2enmod authn_hmac failed:\n" + out
            for p in ENABLED:
                assert os.path.islink(p) and os.path.exists(p), "%s is not enabled" % p
            for dep in ("auth_basic", "authn_core"):
                assert os.path.exists("/etc/apache2/mods-enabled/%s.load" % dep), dep
            rc, out = run(["apache2ctl", "configtest"])
            assert rc == 0 and "Syntax OK" in out, "apache2ctl configtest:\n" + out

            srv = SystemApache(work)
            with open(srv.path("htdocs", "index.html"), "w") as f:
                f.write("hello from the package\n")
            os.makedirs(srv.path("htdocs", "private"))
            with open(srv.path("htdocs", "private", "index.html"), "w") as f:
                f.write("private page\n")
            htpasswd(srv.path("users.htpasswd"), "debian", "packaged secret", cost=5,
                     create=True)
            try:
                srv.start()
                assert srv.get("/")[0] == 200
                assert srv.get("/private/")[0] == 401
                assert srv.get("/private/", "debian", "wrong secret")[0] == 401
                assert srv.get("/private/", "nobody", "packaged secret")[0] == 401
                for _ in range(2):  # verified, then from the cache
                    assert srv.get("/private/", "debian", "packaged secret") == \
                        (200, "private page\n")
                # The shipped authn_hmac.conf is in force, and serves no
                # counters: a local client may be anyone behind a proxy.
                code, body = srv.get("/authn-hmac-status?json")
                assert code == 404, (code, body)
                # Enabled as its example says, for the scraper's address
                # (here, this host): the status page counts the second
                # login as a hit...
                srv.stop()
                srv.write_conf(STATUS)
                srv.start()
                for _ in range(2):
                    assert srv.get("/private/", "debian", "packaged secret") == \
                        (200, "private page\n")
                code, body = srv.get("/authn-hmac-status?json")
                assert code == 200, (code, body)
                assert json.loads(body)["hits"] >= 1, body
                # The package's pepper file, not a random one (issue 37).
                assert json.loads(body)["pepper_random"] == 0, body
                # ... which the packaged tool reads.
                rc, out = run(["/usr/bin/authn-hmac-stat",
                               "http://127.0.0.1:%d/authn-hmac-status" % srv.port])
                assert rc == 0 and re.search(r"^hits +[1-9]", out, re.M), out
            finally:
                srv.stop()
            log = srv.error_log()
            # ... and its pepper file: no random pepper was made.
            assert "random pepper" not in log, log
            assert "authentication failure" in log, "the wrong password was not logged:\n" + log
            assert srv.pid() is None or exited(srv.pid()), \
                "apache2 still runs"
            # A site that still uses the module: removing the package
            # warns, naming its file, before apache2 is left unable to start.
            with open(SITE, "w") as f:
                f.write(hmac_location("/still-hmac/", srv.path("users.htpasswd"), "site"))
            try:
                rc, out = run(APT + ["remove", PKG], env=APT_ENV)
            finally:
                os.unlink(SITE)
            assert rc == 0, "apt-get remove %s failed:\n%s" % (PKG, out)
            assert "WARNING: these Apache files still use" in out and SITE in out, out
        finally:
            purge_rc, purge_out = purge()
            # None of these was here before the test: what a purge left goes
            # too, or the next run would skip.
            left = [p for p in FILES + ENABLED + [PEPPER, STATE] if os.path.lexists(p)]
            if not dpkg_status():
                for p in left:
                    shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
        assert purge_rc == 0, "apt-get purge %s failed:\n%s" % (PKG, purge_out)
        assert dpkg_status() == "", "dpkg still knows %s: %s" % (PKG, dpkg_status())
        assert not left, "left after the purge: %s" % left

        # A pepper the admin made before installing (a farm's) is theirs:
        # the package neither replaces nor purges it.
        rc, out = run([os.path.join(SRC, "tools", "authn-hmac-pepper"), PEPPER])
        assert rc == 0, out
        try:
            with open(PEPPER, "rb") as f:
                admins = f.read()
            rc, out = run(APT + ["install", deb], env=APT_ENV)
            assert rc == 0, "apt-get install %s failed:\n%s" % (deb, out)
            purge_rc, purge_out = purge()
            assert purge_rc == 0, "apt-get purge %s failed:\n%s" % (PKG, purge_out)
            # Nothing uses it now: no warning.
            assert "still use" not in purge_out, purge_out
            with open(PEPPER, "rb") as f:
                assert f.read() == admins, "the admin's pepper was replaced"
            left = [p for p in FILES + ENABLED + [STATE] if os.path.lexists(p)]
            assert not left, "left after the purge: %s" % left

            # A pepper the admin put in place of the package's (a rotation,
            # or a farm's copy) is theirs too: a purge keeps it.
            os.unlink(PEPPER)
            rc, out = run(APT + ["install", deb], env=APT_ENV)
            assert rc == 0 and os.path.isfile(PEPPER), "apt-get install %s:\n%s" % (deb, out)
            os.unlink(PEPPER)
            rc, out = run(["/usr/sbin/authn-hmac-pepper", PEPPER])
            assert rc == 0, out
            with open(PEPPER, "rb") as f:
                rotated = f.read()
            purge_rc, purge_out = purge()
            assert purge_rc == 0, "apt-get purge %s failed:\n%s" % (PKG, purge_out)
            with open(PEPPER, "rb") as f:
                assert f.read() == rotated, "the rotated pepper was removed"
            assert "keeping %s" % PEPPER in purge_out, purge_out
        finally:
            if not dpkg_status():
                if os.path.lexists(PEPPER):
                    os.unlink(PEPPER)
                if os.path.isdir(STATE):
                    shutil.rmtree(STATE)
        print("deb test: built in %.0f s, %.0f s in all" % (built, time.monotonic() - t0))
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare (util-linux)")
def test_prerm_names_each_file_as_it_is():
    """The prerm's warning lists each file that uses the module once, as
    named: a site file with a space or a '*' in its name is one line, not
    split into words or expanded as a pattern; a line that only mentions
    the module in a comment does not count; and the files of a Debian
    multi-instance setup (/etc/apache2-NAME) are listed too. Run from the
    tree against a private /etc (a tmpfs in a mount namespace of its own,
    holding a copy of the test's apache2 and apache2-www)."""
    etc = tempfile.mkdtemp(prefix="authn_hmac_prerm_")
    try:
        for conf in ("apache2", "apache2-www"):
            for d in ("sites-enabled", "conf-enabled", "mods-enabled"):
                os.makedirs(os.path.join(etc, conf, d))
        for name in ("my site.conf", "*", "plain.conf"):
            with open(os.path.join(etc, "apache2", "sites-enabled", name), "w") as f:
                f.write("<Location />\n    AuthBasicProvider hmac\n</Location>\n")
        with open(os.path.join(etc, "apache2", "sites-enabled", "other.conf"), "w") as f:
            f.write("<Location />\n    AuthBasicProvider file\n</Location>\n")
        with open(os.path.join(etc, "apache2", "sites-enabled", "comment.conf"), "w") as f:
            f.write("# Was: AuthBasicProvider hmac, AuthHMACUserFile ...\n"
                    "<Location />\n    AuthBasicProvider file\n</Location>\n")
        with open(os.path.join(etc, "apache2", "mods-enabled", "authn_hmac.conf"), "w") as f:
            f.write("AuthHMACCacheSize 4M\n")
        with open(os.path.join(etc, "apache2-www", "sites-enabled", "www.conf"), "w") as f:
            f.write("<Location />\n    AuthHMACUserFile /etc/apache2-www/users\n</Location>\n")
        prerm = os.path.join(SRC, "debian", "%s.prerm" % PKG)
        rc, out = run(["unshare", "-m", "sh", "-c",
                       'mount -t tmpfs tmpfs /etc && cp -a "$0"/. /etc/ && exec sh "$1" remove',
                       etc, prerm])
        assert rc == 0, out
        listed = [l.strip() for l in out.splitlines() if l.startswith("    ")]
        assert sorted(listed) == sorted(
            ["/etc/apache2/sites-enabled/" + n for n in ("my site.conf", "*", "plain.conf")]
            + ["/etc/apache2-www/sites-enabled/www.conf"]), out
    finally:
        shutil.rmtree(etc)


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare (util-linux)")
def test_prerm_names_a_site_included_from_elsewhere():
    """A site that /etc/apache2's configuration pulls in with Include from
    outside it (here, from the test's directory) is found too: the prerm
    greps every file that `apache2ctl -t -D DUMP_INCLUDES` lists, besides
    the enabled ones. Run from the tree with a private /etc/apache2 (bound
    over it in a mount namespace of its own) that loads the built module."""
    work = tempfile.mkdtemp(prefix="authn_hmac_prerm_inc_")
    try:
        etc = os.path.join(work, "apache2")
        for d in ("sites-enabled", "conf-enabled", "mods-enabled"):
            os.makedirs(os.path.join(etc, d))
        elsewhere = os.path.join(work, "srv", "wiki")
        os.makedirs(elsewhere)
        htpasswd(os.path.join(elsewhere, "users"), "alice", "alice pass", cost=4, create=True)
        vhost = os.path.join(elsewhere, "wiki vhost.conf")
        with open(vhost, "w") as f:
            f.write(hmac_location("/", os.path.join(elsewhere, "users"), "wiki"))
        mods = ["mpm_event", "authn_core", "authz_core", "authz_user", "auth_basic"]
        with open(os.path.join(etc, "apache2.conf"), "w") as f:
            f.write("".join("LoadModule %s_module %s/mod_%s.so\n" % (m, S["moddir"], m)
                            for m in mods))
            f.write('LoadModule authn_hmac_module %s\nServerName 127.0.0.1\n'
                    'Listen 127.0.0.1:%d\nIncludeOptional %s/*.conf\n'
                    % (S["module"], free_port(), elsewhere))
        prerm = os.path.join(SRC, "debian", "%s.prerm" % PKG)
        rc, out = run(["unshare", "-m", "sh", "-c",
                       'mount --bind "$0" /etc/apache2 && exec sh "$1" remove', etc, prerm])
        assert rc == 0, out
        listed = [l.strip() for l in out.splitlines() if l.startswith("    ")]
        assert vhost in listed, out
        # apache2ctl failing before the Include (a module it cannot load,
        # read as the Include is, before the directives run): the enabled
        # files are still searched.
        with open(os.path.join(etc, "apache2.conf")) as f:
            conf = f.read()
        with open(os.path.join(etc, "apache2.conf"), "w") as f:
            f.write("LoadModule gone_module %s/gone.so\n" % work + conf)
        with open(os.path.join(etc, "sites-enabled", "site.conf"), "w") as f:
            f.write("<Location />\n    AuthBasicProvider hmac\n</Location>\n")
        rc, out = run(["unshare", "-m", "sh", "-c",
                       'mount --bind "$0" /etc/apache2 && exec sh "$1" remove', etc, prerm])
        assert rc == 0, out
        listed = [l.strip() for l in out.splitlines() if l.startswith("    ")]
        assert "/etc/apache2/sites-enabled/site.conf" in listed and vhost not in listed, out
    finally:
        shutil.rmtree(work)


def run_postrm_purge(etc, marker):
    """The tree's postrm purge against a private /etc/apache2 (etc) and a
    private /var/lib holding the postinst's marker with marker in it, in a
    mount namespace of its own; (exit code, output)."""
    postrm = os.path.join(SRC, "debian", "%s.postrm" % PKG)
    return run(["unshare", "-m", "sh", "-c",
                'mount --bind "$0" /etc/apache2 && mount -t tmpfs tmpfs /var/lib && '
                'mkdir "$2" && printf "%s" "$3" > "$2/pepper-made-by-package" && '
                'exec sh "$1" purge', etc, postrm, STATE,
                marker(os.path.join(etc, os.path.basename(PEPPER)))])


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare (util-linux)")
def test_postrm_knows_its_pepper_by_inode_and_time():
    """The purge tells the package's pepper by its inode and modification
    time. Not by its device number too: that of an LVM or device-mapper
    volume, or of an overlay, may differ after a reboot, and the pepper the
    package made would then be kept. A rotated one (another time) stays."""
    etc = tempfile.mkdtemp(prefix="authn_hmac_postrm_")
    pepper = os.path.join(etc, os.path.basename(PEPPER))

    def stat(path, fmt):
        return subprocess.run(["stat", "-c", fmt, path], capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        for marker, gone in [
                # As this postinst records it.
                (lambda p: stat(p, "%i %.9Y"), True),
                # As the first record did, on a device numbered otherwise now.
                (lambda p: "4242 " + stat(p, "%i %.9Y"), True),
                # Rotated since: another modification time.
                (lambda p: stat(p, "%i") + " 1.000000000", False)]:
            with open(pepper, "wb") as f:
                f.write(os.urandom(32))
            rc, out = run_postrm_purge(etc, marker)
            assert rc == 0, out
            assert os.path.exists(pepper) != gone, (marker(pepper), out)
            assert ("keeping" in out) != gone, out
        # A rotation's previous pepper (docs/operations.md's .new, or an
        # .old kept) is never the package's: it stays, and the purge names it.
        rotated = pepper + ".old"
        with open(rotated, "wb") as f:
            f.write(os.urandom(32))
        rc, out = run_postrm_purge(etc, lambda p: stat(p, "%i %.9Y"))
        assert rc == 0 and os.path.exists(rotated), out
        assert "keeping /etc/apache2/authn_hmac.pepper.old: a rotation's pepper" in out, out
    finally:
        shutil.rmtree(etc)
