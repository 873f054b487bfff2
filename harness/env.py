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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_user():
    """The account httpd's children use when the tests run as root."""
    for name in ("www-data", "nobody"):
        try:
            pw = pwd.getpwnam(name)
            return name, grp.getgrgid(pw.pw_gid).gr_name
        except KeyError:
            continue
    raise RuntimeError("no www-data or nobody account")
