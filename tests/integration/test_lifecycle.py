"""Restarts, shared-memory hygiene, and running as an ordinary user."""
import os
import subprocess

import pytest

from conftest import make_server
from harness import IS_ROOT, VALGRIND

# NB: httpd -X (under valgrind) cannot restart: SIGUSR1 ends it under
# prefork, and is ignored under event (Debian's 2.4.71).
NO_RESTART = pytest.mark.skipif(bool(VALGRIND), reason="httpd -X cannot restart")


def ipc_count(kind):
    out = subprocess.run(["ipcs", kind], capture_output=True, text=True).stdout
    return sum(1 for l in out.splitlines() if l[:2] == "0x")


def shm_files():
    return sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []


@NO_RESTART
@pytest.mark.parametrize("mpm", ["prefork", "worker", "event"])
def test_graceful_and_full_restarts_keep_the_cache(mpm):
    """A restart keeps the cache, even with the random pepper (no pepper
    file): after each, the right password is a hit and the wrong one a
    negative hit. Nothing is left behind at stop."""
    before = (ipc_count("-m"), ipc_count("-s"), shm_files())
    srv = make_server(mpm)
    try:
        srv.start()
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.status_code("/a/index.html", "alice", "wrong") == 401
        for graceful in (True, True, False, True, False):
            srv.restart(graceful=graceful)
            assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
            assert srv.notes("alice")[-1] == "hit"
            assert srv.status_code("/a/index.html", "alice", "wrong") == 401
            assert srv.notes("alice")[-1] == "negative-hit"
        st = srv.status()
        # One bcrypt for the right password, one for the wrong one, in all.
        assert st["verifications"] == 2 and st["hits"] == 5, st
        srv.stop()
        assert (ipc_count("-m"), ipc_count("-s"), shm_files()) == before
        problems = srv.log_problems()
        assert not problems, problems
        assert "Segmentation fault" not in srv.error_log()
        assert "exit signal" not in srv.error_log()
        # A full stop empties it.
        srv.start()
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.notes("alice")[-1] == "verified"
    finally:
        srv.cleanup()


@NO_RESTART
def test_a_new_pepper_or_size_starts_a_fresh_cache():
    srv = make_server("event")
    pepper = srv.path("pepper")

    def write_pepper():
        with open(pepper, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(pepper, 0o600)
    write_pepper()
    srv.global_conf = "AuthHMACPepperFile %s" % pepper
    srv.write_config()
    try:
        srv.start()
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        srv.restart(graceful=True)
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.notes("alice")[-1] == "hit"
        write_pepper()
        srv.restart(graceful=True)
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.notes("alice")[-1] == "verified"
        srv.global_conf += "\nAuthHMACCacheSize 8M"
        srv.write_config()
        srv.restart(graceful=True)
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.notes("alice")[-1] == "verified"
        assert srv.status()["cache_bytes"] > 4 << 20
        srv.stop()
        assert not srv.log_problems()
    finally:
        srv.cleanup()


@pytest.mark.skipif(not IS_ROOT, reason="the whole suite already runs as an ordinary user")
def test_runs_as_an_ordinary_user():
    srv = make_server("event", as_user="nobody")
    try:
        srv.start()
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.status_code("/a/index.html", "alice", "wrong") == 401
        st = srv.status()
        assert st["verifications"] == 2 and st["hits"] == 1
        owner = os.stat("/proc/%d" % srv.pid()).st_uid
        assert owner == 65534 or owner != 0
        srv.stop()
        assert not srv.log_problems()
    finally:
        srv.cleanup()
