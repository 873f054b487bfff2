"""The writer rule, with the real tool: `htpasswd -b` and `htpasswd -D`
change a 40-user file in place (htpasswd truncates the file and writes it
whole, holding it a few milliseconds) while client threads ask for users
that every version holds. Not one of them gets a 401; a password changed
or a user removed is refused from the moment htpasswd has exited, and the
old password is never taken more than a second after the run began."""
import http.client
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import MPMS
from harness import S, Httpd, Workers, basic, client_address, get, hmac_location, \
    htpasswd_line

COST = 5
N_STAY = 37  # users in every version; with flip, gone and a spare: 40
ROUNDS = 24  # htpasswd runs per server
CLIENTS = 6


def stay_users():
    return [("stay%02d" % i, "stay pass %02d" % i) for i in range(N_STAY)]


def timed_get(srv, user, password, conn):
    """One GET of /w/index.html on conn (None: a new connection): (start,
    end, status, the connection to reuse or None); status 0 for no answer,
    and the connection closed after any answer but a 200."""
    t0 = time.monotonic()
    try:
        r, conn = get(srv.port, "/w/index.html", basic(user, password), conn=conn, timeout=30)
        status = r.status
    except (OSError, http.client.HTTPException):
        status, conn = 0, None
    t1 = time.monotonic()
    if status != 200 and conn:
        conn.close()
        conn = None
    return t0, t1, status, conn


class Clients(Workers):
    """Threads asking all the time for users present in every version,
    each on a kept-alive connection (a new one after each 401 or error).
    users: [(user, password)], or a function that gives the one to ask for.
    results: [(start, end, user, status)], status 0 for no answer (with
    a function, user is the password asked with)."""
    join_timeout = 60

    def __init__(self, srv, users, barrier):
        self.srv, self.users, self.barrier = srv, users, barrier
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(CLIENTS)]

    def run(self, i):
        rnd = random.Random(i)
        conn = None
        self.barrier.wait(timeout=60)
        while not self.stop.is_set():
            user, pw = self.users() if callable(self.users) else rnd.choice(self.users)
            t0, t1, status, conn = timed_get(self.srv, user, pw, conn)
            with self.lock:
                self.results.append((t0, t1, user if not callable(self.users) else pw, status))
        if conn:
            conn.close()


def run_htpasswd(path, user, password=None):
    """One run of the real htpasswd on path: sets user's password, or
    removes user (password None). Returns (start, end) on the monotonic
    clock, start taken before the process is made."""
    if password is None:
        args = [S["htpasswd"], "-D", path, user]
    else:
        args = [S["htpasswd"], "-B", "-C", str(COST), "-b", path, user, password]
    t0 = time.monotonic()
    subprocess.run(args, check=True, capture_output=True)
    return t0, time.monotonic()


def codes(srv, user, password, n=4, source=None):
    """n answers for user, each on a new connection (prefork: other children
    too), from source (else 127.0.0.1)."""
    return [srv.status_code("/w/index.html", user, password, source=source) for _ in range(n)]


def writer_server(mpm, name):
    """An httpd (not started) with a page at /w/ behind the user file
    `users` in its directory, which the test writes."""
    srv = Httpd(mpm=mpm, name=name + "_" + mpm)
    srv.body = ('Alias /w/ "%s/htdocs/"\n' % srv.dir
                + hmac_location("/w/", srv.path("users"), "writer"))
    srv.write_config()
    with open(srv.path("htdocs", "index.html"), "w") as f:
        f.write("<html><body>hello</body></html>\n")
    return srv


@pytest.mark.slow
@pytest.mark.mpm
@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_real_htpasswd_in_place(mpm):
    if mpm not in MPMS:
        pytest.skip("AUTHN_HMAC_MPMS")
    srv = writer_server(mpm, "writer")
    path = srv.path("users")
    stay = stay_users()
    flip_pw = ["flip pass %d" % i for i in range(ROUNDS + 1)]
    gone_pw = "gone's pass"
    lines = [htpasswd_line(u, pw, COST) for u, pw in stay]
    lines += [htpasswd_line("flip", flip_pw[0], COST), htpasswd_line("gone", gone_pw, COST),
              htpasswd_line("spare", "spare pass", COST)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o644)
    for _, pw in stay:
        srv.secrets.add(pw)
    for pw in flip_pw + [gone_pw, "spare pass"]:
        srv.secrets.add(pw)
    runs = []  # (start, end)
    refused = []  # what was taken after a run that should not have been
    try:
        srv.start()
        time.sleep(1.1)  # the file is past its racy second
        for u, pw in stay[:3] + [("flip", flip_pw[0]), ("gone", gone_pw)]:
            assert srv.status_code("/w/index.html", u, pw) == 200, u
        barrier = threading.Barrier(CLIENTS + 1)
        rnd = random.Random(27)
        with Clients(srv, stay, barrier) as clients:
            barrier.wait(timeout=60)
            present = True
            for i in range(ROUNDS):
                time.sleep(rnd.uniform(0.3, 0.8))
                if i % 3 == 2:  # gone removed, or put back
                    if present:
                        runs.append(run_htpasswd(path, "gone"))
                        # NB: each refusal a client of its own: one client
                        # that sent every old password would be refused
                        # after 10 (AuthHMACMaxFailures), its right ones too.
                        got = codes(srv, "gone", gone_pw, source=client_address())
                        if got != [401] * len(got):
                            refused.append(("gone removed", i, got))
                    else:
                        runs.append(run_htpasswd(path, "gone", gone_pw))
                    present = not present
                else:  # flip's password changed
                    old, new = flip_pw[i], flip_pw[i + 1]
                    runs.append(run_htpasswd(path, "flip", new))
                    got = codes(srv, "flip", old, source=client_address())
                    if got != [401] * len(got):
                        refused.append(("flip's old password", i, got))
                    got = codes(srv, "flip", new, 1)
                    if got != [200]:
                        refused.append(("flip's new password", i, got))
            time.sleep(0.3)
        results = clients.results
        srv.stop()
        problems = srv.log_problems()
    finally:
        srv.cleanup()
    during = [r for r in results if any(r[0] <= e and r[1] >= s for s, e in runs)]
    bad = [r for r in results if r[3] != 200]
    print("%s: %d htpasswd runs of %.0f-%.0f ms; %d requests, %d of them during a run; "
          "401 for users in every version: %d; other failures: %d; old or removed "
          "passwords taken after a run: %d" % (
              mpm, len(runs), 1000 * min(e - s for s, e in runs),
              1000 * max(e - s for s, e in runs), len(results), len(during),
              sum(1 for r in bad if r[3] == 401), sum(1 for r in bad if r[3] != 401),
              len(refused)))
    assert all(e - s < 1 for s, e in runs), runs  # so "after the run" is within its second
    assert results and during, (len(results), len(during))
    assert not bad, bad[:20]
    assert not refused, refused
    assert not problems, problems


@pytest.mark.slow
@pytest.mark.mpm
@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_new_password_sent_while_htpasswd_sets_it(mpm):
    """A user sends the new password continuously while `htpasswd -b` sets
    it. Before htpasswd writes, the file holds the old hash: 401, rightly.
    Once htpasswd has exited, every request is 200 (asserted). Within the
    run, a request whose lookup read the old hash is refused unless that
    reading was unsettled (the file changed less than a second before, as
    by the touch made here 0.3 s before each run): its deny then waits for
    the file to be quiet and, htpasswd's write having changed the hash, is
    checked again, and granted. So no 401 for a request whose deny came
    after htpasswd began writing; but one that was refused (from the quiet
    file still holding the old hash) before htpasswd's write began may
    still be in flight when htpasswd starts: a 401 that started before the
    write is right, and is printed, not asserted."""
    if mpm not in MPMS:
        pytest.skip("AUTHN_HMAC_MPMS")
    srv = writer_server(mpm, "newpw")
    path = srv.path("users")
    pws = ["newbie pass %d" % i for i in range(6)]
    lines = [htpasswd_line(u, pw, COST) for u, pw in stay_users()]
    lines.append(htpasswd_line("newbie", pws[0], COST))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o644)
    for pw in pws:
        srv.secrets.add(pw)
    target = [pws[0]]
    runs = []  # (start, end, password set, the file's change on the monotonic clock)
    try:
        srv.start()
        time.sleep(1.1)
        assert srv.status_code("/w/index.html", "newbie", pws[0]) == 200
        barrier = threading.Barrier(CLIENTS + 1)
        with Clients(srv, lambda: ("newbie", target[0]), barrier) as clients:
            barrier.wait(timeout=60)
            for new in pws[1:]:
                target[0] = new  # 401s now: the file has the old hash
                time.sleep(0.2)
                os.utime(path)
                time.sleep(0.3)
                t0, t1 = run_htpasswd(path, "newbie", new)
                changed = os.stat(path).st_ctime - time.time() + time.monotonic()
                runs.append((t0, t1, new, changed))
                time.sleep(0.5)
            time.sleep(0.1)
        results = clients.results
        srv.stop()
        problems = srv.log_problems()
    finally:
        srv.cleanup()
    after, within, before, late = [], [], [], []
    for t0, t1, new, changed in runs:
        mine = [r for r in results if r[2] == new]
        after += [r for r in mine if r[0] >= t1]
        within += [r for r in mine if r[0] < t1 and r[1] > t0]
        before += [r for r in mine if r[1] <= t0]
        late += [r for r in mine if r[0] < t1 and r[1] > changed and r[3] == 401]
    print("%s: %d htpasswd runs; new password: %d requests after a run (%d not 200), "
          "%d overlapping a run (%d 401; %d of them ended after the file's last change), "
          "%d before a run (%d 401)" % (
              mpm, len(runs), len(after), sum(1 for r in after if r[3] != 200),
              len(within), sum(1 for r in within if r[3] == 401), len(late),
              len(before), sum(1 for r in before if r[3] == 401)))
    assert after and within, (len(after), len(within))
    assert all(r[3] == 200 for r in after), [r for r in after if r[3] != 200][:20]
    assert all(r[3] in (200, 401) for r in within + before)
    assert not problems, problems


# ------------------------------------------------ in-place writes and a flood

FLOOD_COST = 9  # the flood's user: ~30 ms of bcrypt a guess, enough to keep
# the only turn taken
N_BULK = 3000  # cost-5 users (one hash, repeated): ~200 KB, written in chunks
FLOOD_SOURCES = ["127.0.0.%d" % i for i in range(2, 202)]


class CachedClients(Workers):
    """Threads asking as alice, whose credential is cached, all the time,
    each on a kept-alive connection from 127.0.0.1 (a new one after an
    answer that is not a 200), 2 ms apart. results: [(start, end, status)],
    status 0 for no answer."""
    join_timeout = 60

    def __init__(self, srv, password, n=2):
        self.srv, self.password = srv, password
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(n)]

    def run(self):
        conn = None
        while not self.stop.is_set():
            t0, t1, status, conn = timed_get(self.srv, "alice", self.password, conn)
            with self.lock:
                self.results.append((t0, t1, status))
            self.stop.wait(0.002)  # a modest load
        if conn:
            conn.close()


class SpreadFlood(Workers):
    """A flood of new wrong passwords for user, each request on a new
    connection from the next of FLOOD_SOURCES (127.0.0.2 and up), so that
    no client reaches the throttle's limits (10 wrong per user and client,
    30 per client); a 503 is waited on 20 ms only, not its Retry-After.
    codes counts the answers."""
    join_timeout = 60

    def __init__(self, srv, user, n=3):
        self.srv, self.user = srv, user
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.codes = {}
        self.k = 0
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]

    def run(self, i):
        while not self.stop.is_set():
            with self.lock:
                self.k += 1
                k = self.k
            source = FLOOD_SOURCES[k % len(FLOOD_SOURCES)]
            try:
                r, conn = get(self.srv.port, "/w/index.html",
                              basic(self.user, "flood guess %d %d" % (i, k)), source=source,
                              timeout=30)
                if conn:
                    conn.close()
                status = r.status
            except (OSError, http.client.HTTPException):
                status = 0
            with self.lock:
                self.codes[status] = self.codes.get(status, 0) + 1
            if status == 503:
                self.stop.wait(0.02)  # a modest load: the turn is taken again soon


@pytest.mark.slow
@pytest.mark.mpm
@pytest.mark.parametrize("mpm", ["event"])
def test_cached_user_is_never_busy_while_the_file_is_written_in_place_beside_a_flood(mpm):
    """A writer rewrites a 3,000-user file in place (O_TRUNC, then 16 KB
    chunks 10 ms apart: htpasswd too writes a file of that size in pieces,
    without the pauses), 12 times, while a flood of wrong passwords from 200 other
    addresses keeps the only turn to verify taken (AuthHMACMaxVerifications
    1, no backlog; the throttle on, with the module's defaults). alice,
    cached, asks all the time: not one 503, not one 401. A reading of the
    half-written file lacks her, so her request takes the dummy
    verification's way, which the full queue answered busy: the writer rule
    now covers that answer too, waits for the file to be quiet, and the
    quiet file holds her line (a hit). Before: 503s."""
    if mpm not in MPMS:
        pytest.skip("AUTHN_HMAC_MPMS")
    srv = Httpd(mpm=mpm, name="writer_flood_" + mpm,
                global_conf="AuthHMACMaxVerifications 1\nAuthHMACVerifyBacklog 0")
    path = srv.path("users")
    # NB: no negative cache: else the first of alice's dummy verifications
    # that finds a turn is remembered, and her later readings of a
    # half-written file are refused without one (a 401, then a hit): the
    # flood's queue would be tested only until then.
    srv.body = ('Alias /w/ "%s/htdocs/"\n' % srv.dir +
                hmac_location("/w/", path, "writer", "AuthHMACNegativeTTL 0"))
    srv.write_config()
    srv.expect_log(r"AHMAC0007")  # the flood's 503s
    srv.expect_log(r"AHMAC0030")
    srv.expect_log(r"AHMAC0029")  # a flood address banned, if one ever is
    with open(srv.path("htdocs", "index.html"), "w") as f:
        f.write("<html><body>hello</body></html>\n")
    alice_pw, target_pw = "alice's cached pass", "target's pass"
    bulk_hash = htpasswd_line("u", "bulk pass", COST).split(":", 1)[1]
    head = [htpasswd_line("target", target_pw, FLOOD_COST) + "\n"]
    bulk = ["bulk%05d:%s\n" % (i, bulk_hash) for i in range(N_BULK)]
    # alice near the end, with one hash in both versions: a file cut short
    # lacks her; two versions (another user's password changed) so that
    # each write changes the file.
    alice = htpasswd_line("alice", alice_pw, COST) + "\n"
    versions = ["".join(head + bulk[:-50] + [alice] +
                        [htpasswd_line("flip", "flip pass %d" % v, COST) + "\n"] +
                        bulk[-50:]).encode() for v in range(2)]
    with open(path, "wb") as f:
        f.write(versions[0])
    os.chmod(path, 0o644)
    for pw in (alice_pw, target_pw, "bulk pass"):
        srv.secrets.add(pw)
    writes = []  # (open, close) on the monotonic clock

    def write(v):
        data = versions[v]
        t0 = time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            for off in range(0, len(data), 16384):
                if off:
                    time.sleep(0.01)
                os.write(fd, data[off:off + 16384])
        finally:
            os.close(fd)
        writes.append((t0, time.monotonic()))

    try:
        srv.start()
        time.sleep(1.1)  # the file is past its racy second
        assert srv.status_code("/w/index.html", "alice", alice_pw) == 200
        assert srv.notes("alice")[-1] == "verified"
        assert srv.status_code("/w/index.html", "alice", alice_pw) == 200
        assert srv.notes("alice")[-1] == "hit"
        rnd = random.Random(31)
        with SpreadFlood(srv, "target") as flood:
            time.sleep(1)
            with CachedClients(srv, alice_pw) as cached:
                time.sleep(0.3)
                for i in range(12):
                    write((i + 1) % 2)
                    time.sleep(rnd.uniform(0.3, 0.5))
            results = cached.results
        codes = dict(flood.codes)
        status = srv.status()
        srv.stop()
        problems = srv.log_problems()
    finally:
        srv.cleanup()
    during = [r for r in results if any(r[0] <= e and r[1] >= s for s, e in writes)]
    busy = [r for r in results if r[2] == 503]
    refused = [r for r in results if r[2] == 401]
    other = [r for r in results if r[2] not in (200, 401, 503)]
    print("%s: %d writes of %d bytes, %.2f-%.2f s each; flood answers %s; alice: %d "
          "requests (%d during a write), 503: %d, 401: %d, other failures: %d, slowest "
          "%.2f s; the server's busy count: %s" % (
              mpm, len(writes), len(versions[0]), min(e - s for s, e in writes),
              max(e - s for s, e in writes), sorted(codes.items()), len(results), len(during),
              len(busy), len(refused), len(other), max(r[1] - r[0] for r in results),
              status.get("busy")))
    # The flood kept the queue full: it was answered busy, and verified too.
    assert codes.get(503) and codes.get(401), codes
    assert all(e - s < 1 for s, e in writes), writes
    assert results and during, (len(results), len(during))
    assert not busy, ["%.3f-%.3f after write %d" % next(
        (r[0] - s, r[1] - s, i) for i, (s, e) in reversed(list(enumerate(writes))) if s <= r[1])
        for r in busy[:20]]
    assert not refused, refused[:20]
    assert not other, other[:20]
    assert not problems, problems
