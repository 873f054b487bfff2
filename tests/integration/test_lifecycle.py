"""Restarts, shared-memory hygiene, and running as an ordinary user."""
import os
import time

import pytest

from conftest import make_server
from harness import IS_ROOT, VALGRIND

# NB: httpd -X (under valgrind) cannot restart: SIGUSR1 ends it under
# prefork, and is ignored under event (Debian's 2.4.71).
NO_RESTART = pytest.mark.skipif(bool(VALGRIND), reason="httpd -X cannot restart")


def sysv_ids(kind):
    """The ids of the SysV objects of kind (shm, sem) there are now."""
    try:
        with open("/proc/sysvipc/" + kind) as f:
            return {int(line.split()[1]) for line in list(f)[1:]}
    except OSError:
        return set()


def held(pids):
    """The /dev/shm files and the SysV segments that the processes pids
    have open or mapped now: (set of paths, set of shm ids)."""
    files, segments = set(), set()
    for pid in pids:
        try:
            with open("/proc/%d/maps" % pid) as f:
                for line in f:
                    fields = line.split(None, 5)
                    name = fields[5].strip() if len(fields) > 5 else ""
                    if name.startswith("/dev/shm/"):
                        files.add(name.replace(" (deleted)", ""))
                    elif name.startswith("/SYSV"):
                        segments.add(int(fields[4]))  # the inode is the id
            for fd in os.listdir("/proc/%d/fd" % pid):
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                if target.startswith("/dev/shm/"):
                    files.add(target.replace(" (deleted)", ""))
        except OSError:
            continue  # a child that just ended
    return files, segments


def left_behind(ours, sems_before):
    """What of ours (held(): what the server's processes held while it ran)
    is still there, and SysV semaphores made since sems_before and still
    there 10 s on (no process names its semaphores; another program's on
    this machine come and go). NB: only the server's own: the machine's
    /dev/shm and IPC tables are shared with whatever else runs."""
    files, segments = ours
    sems = set()
    for _ in range(100):
        sems = sysv_ids("sem") - sems_before
        if not sems:
            break
        time.sleep(0.1)
    return (sorted(f for f in files if os.path.exists(f)),
            sorted(segments & sysv_ids("shm")), sorted(sems))


@NO_RESTART
@pytest.mark.mpm
@pytest.mark.parametrize("mpm", ["prefork", "worker", "event"])
def test_graceful_and_full_restarts_keep_the_cache(mpm):
    """A restart keeps the cache, even with the random pepper (no pepper
    file): after each, the right password is a hit and the wrong one a
    negative hit. Nothing is left behind at stop."""
    sems_before = sysv_ids("sem")
    ours = (set(), set())
    srv = make_server(mpm)

    def note_held():
        for mine, now in zip(ours, held(srv.pids())):
            mine.update(now)
    try:
        srv.start()
        note_held()
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.status_code("/a/index.html", "alice", "wrong") == 401
        for graceful in (True, True, False, True, False):
            srv.restart(graceful=graceful)
            note_held()
            assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
            assert srv.notes("alice")[-1] == "hit"
            assert srv.status_code("/a/index.html", "alice", "wrong") == 401
            assert srv.notes("alice")[-1] == "negative-hit"
        st = srv.status()
        # One bcrypt for the right password, one for the wrong one, in all.
        assert st["verifications"] == 2 and st["hits"] == 5, st
        srv.stop()
        assert left_behind(ours, sems_before) == ([], [], []), ours
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
