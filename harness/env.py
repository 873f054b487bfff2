"""What the harness takes from configure and the environment."""
import grp
import json
import os
import pwd
import socket

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_SRCDIR = os.path.dirname(HERE)


def settings():
    """Paths found by configure (tests/integration/settings.json in the
    build directory: $top_builddir, else <tree>/build)."""
    builddir = os.environ.get("top_builddir") or os.path.join(TOP_SRCDIR, "build")
    path = os.path.join(builddir, "tests", "integration", "settings.json")
    with open(path) as f:
        return json.load(f)


S = settings()
IS_ROOT = os.geteuid() == 0
# make check-valgrind: httpd -X under memcheck, with these suppressions.
VALGRIND = os.environ.get("AUTHN_HMAC_VALGRIND")
# bcrypt cost of test users (lowered under valgrind, where cost 12 takes ~10 s).
COST = int(os.environ.get("AUTHN_HMAC_TEST_COST", "12"))


# AUTHN_HMAC_PORTS="lo-hi": the ports this run takes its servers' from, in
# turn. CI runs two suites at once, each with a range of its own below the
# kernel's ephemeral ports: a port one suite was given (free, then closed
# until its server binds it) is never the next port of the other, as it
# can be where both ask the kernel.
_PORTS = os.environ.get("AUTHN_HMAC_PORTS")
_next_port = None


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port():
    """A port free now: the next free one of AUTHN_HMAC_PORTS's range, or
    one the kernel picks."""
    global _next_port
    if not _PORTS:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    lo, hi = (int(x) for x in _PORTS.split("-"))
    if _next_port is None:
        _next_port = lo
    for _ in range(hi - lo + 1):
        port, _next_port = _next_port, lo + (_next_port + 1 - lo) % (hi - lo + 1)
        if _bindable(port):
            return port
    raise RuntimeError("no free port in AUTHN_HMAC_PORTS=" + _PORTS)


def run_user():
    """The account httpd's children use when the tests run as root."""
    for name in ("www-data", "nobody"):
        try:
            pw = pwd.getpwnam(name)
            return name, grp.getgrgid(pw.pw_gid).gr_name
        except KeyError:
            continue
    raise RuntimeError("no www-data or nobody account")
