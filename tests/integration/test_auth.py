"""What a user sees: the right password in, everything else out, and bcrypt
run once per credential."""
import os
import threading
import time

import pytest

from harness import client_address, htpasswd, read_status

PW = "correct horse"


def counters_delta(server, before):
    after = server.status()
    # NB: the numbers; the Redis tier's words (redis_primary...) are text.
    return {k: after[k] - before[k] for k in before if isinstance(before[k], (int, float))}


def test_right_password_gives_200(server):
    assert server.status_code("/a/index.html", "alice", PW) == 200


def test_everything_else_gives_401(server):
    s = server.status_code
    assert s("/a/index.html") == 401
    assert s("/a/index.html", "alice", "wrong") == 401
    assert s("/a/index.html", "nobody-here", PW) == 401
    assert s("/a/index.html", "alice", "") == 401
    assert s("/a/index.html", "alice", PW + "x") == 401
    assert s("/a/index.html", "alice", PW[:-1]) == 401
    assert s("/a/index.html", "alice", "x" + PW) == 401
    assert s("/a/index.html", "alice", PW.upper()) == 401
    assert s("/a/index.html", "", PW) == 401
    # Another user's password: bob exists with his own.
    htpasswd(server.path("a.htpasswd"), "bob", "bobs password")
    assert s("/a/index.html", "bob", PW) == 401
    assert s("/a/index.html", "alice", "bobs password") == 401
    assert s("/a/index.html", "bob", "bobs password") == 200
    # After all that, the right one still works (a hit).
    assert s("/a/index.html", "alice", PW) == 200


@pytest.mark.mpm
def test_second_request_is_a_hit(server):
    htpasswd(server.path("a.htpasswd"), "hannah", "hit me")
    before = server.status()
    assert server.status_code("/a/index.html", "hannah", "hit me") == 200
    for _ in range(5):
        assert server.status_code("/a/page.css", "hannah", "hit me") == 200
    d = counters_delta(server, before)
    assert d["verifications"] == 1
    assert d["hits"] == 5
    assert server.notes("hannah") == ["verified"] + ["hit"] * 5


def test_notes_name_what_happened(server):
    server.status_code("/a/index.html", "alice", "wrong password")
    server.status_code("/a/index.html", "no-such-user", "unknown users pass")
    assert server.notes("alice")[-1] == "denied"
    assert server.notes("no-such-user") == ["unknown-user"]


@pytest.mark.mpm
def test_failed_verification_is_never_cached_as_a_grant(server):
    """A refused credential is refused again: the first time by bcrypt, then
    from the negative cache, and never from the positive one."""
    before = server.status()
    for _ in range(3):
        assert server.status_code("/a/index.html", "alice", "not it") == 401
    d = counters_delta(server, before)
    assert d["verifications"] == 1 and d["denied"] == 1 and d["hits"] == 0
    assert d["negative_hits"] == 2
    assert server.notes("alice")[-3:] == ["denied", "negative-hit", "negative-hit"]


@pytest.mark.mpm
@pytest.mark.slow
def test_repeated_wrong_password_runs_bcrypt_once(server):
    htpasswd(server.path("a.htpasswd"), "rex", "rex's real password")
    before = server.status()
    assert server.status_code("/a/index.html", "rex", "rex guess") == 401
    complete, failed, non2xx, out = server.ab("/a/index.html", "rex", "rex guess", n=999, c=8)
    assert complete == 999 and non2xx == 999, out
    d = counters_delta(server, before)
    assert d["verifications"] == 1 and d["negative_hits"] == 999, d
    # The right password is not affected, and a password set to what was
    # refused works at once (the stored hash is in the key).
    assert server.status_code("/a/index.html", "rex", "rex's real password") == 200
    htpasswd(server.path("a.htpasswd"), "rex", "rex guess")
    assert server.status_code("/a/index.html", "rex", "rex guess") == 200
    assert server.notes("rex")[-1] == "verified"


def test_negative_ttl_zero_verifies_every_wrong_password(server):
    before = server.status()
    for _ in range(2):
        assert server.status_code("/noneg/index.html", "alice", "again wrong") == 401
    d = counters_delta(server, before)
    assert d["verifications"] == 2 and d["negative_hits"] == 0


@pytest.mark.mpm
def test_password_change_takes_effect_on_next_request(server):
    f = server.path("a.htpasswd")
    htpasswd(f, "carol", "old secret")
    assert server.status_code("/a/index.html", "carol", "old secret") == 200
    assert server.status_code("/a/index.html", "carol", "old secret") == 200  # cached
    htpasswd(f, "carol", "new secret")
    assert server.status_code("/a/index.html", "carol", "old secret") == 401
    assert server.status_code("/a/index.html", "carol", "new secret") == 200
    assert server.status_code("/a/index.html", "carol", "old secret") == 401


@pytest.mark.mpm
def test_removed_user_is_refused_on_next_request(server):
    f = server.path("a.htpasswd")
    htpasswd(f, "dave", "dave's secret")
    assert server.status_code("/a/index.html", "dave", "dave's secret") == 200
    assert server.status_code("/a/index.html", "dave", "dave's secret") == 200
    htpasswd(f, "dave", None, delete=True)
    assert server.status_code("/a/index.html", "dave", "dave's secret") == 401


def test_scopes_are_kept_apart(server):
    # The same user in two files with two passwords: each realm takes only
    # its own, even once the other is cached.
    assert server.status_code("/a/index.html", "alice", PW) == 200
    assert server.status_code("/b/index.html", "alice", PW) == 401
    assert server.status_code("/b/index.html", "alice", "battery staple") == 200
    assert server.status_code("/a/index.html", "alice", "battery staple") == 401


@pytest.mark.slow
def test_ttl_bounds_an_entry(server):
    htpasswd(server.path("a.htpasswd"), "tess", "ttl pass")
    assert server.status_code("/short/index.html", "tess", "ttl pass") == 200
    before = server.status()
    assert server.status_code("/short/index.html", "tess", "ttl pass") == 200
    assert counters_delta(server, before)["verifications"] == 0
    time.sleep(2.2)
    before = server.status()
    assert server.status_code("/short/index.html", "tess", "ttl pass") == 200
    assert counters_delta(server, before)["verifications"] == 1


@pytest.mark.slow
def test_ttl_is_an_idle_timeout_bounded_by_the_max_age(server):
    """The issue's figures: a request every second for 11 s (t = 0 to 11)
    under a 3-second TTL runs bcrypt once, the hits keeping the entry
    alive; with a 6-second max age as well, twice. The entry is written
    far less often than it is hit.
    NB: each user has a thread of its own. In one loop, the max-age user's
    second verification (idle class: seconds on a loaded machine) held up
    the other user's next hit past the 3 s idle timeout."""
    htpasswd(server.path("a.htpasswd"), "ida", "idle pass")
    htpasswd(server.path("a.htpasswd"), "max", "max age pass")
    before = server.status()
    start = time.monotonic() + 0.2
    codes = {"ida": [], "max": []}
    late = {"ida": 0.0, "max": 0.0}

    def every_second(path, user, password):
        for i in range(12):
            lag = time.monotonic() - (start + i)
            late[user] = max(late[user], lag)
            time.sleep(max(0.0, -lag))
            codes[user].append(server.status_code(path, user, password))

    threads = [threading.Thread(target=every_second, args=a) for a in
               (("/idle/index.html", "ida", "idle pass"),
                ("/maxage/index.html", "max", "max age pass"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = counters_delta(server, before)
    print("latest start past its second: %.2f s (ida), %.2f s (max); %s" % (
        late["ida"], late["max"], d))
    assert codes == {"ida": [200] * 12, "max": [200] * 12}, codes
    assert server.notes("ida").count("verified") == 1, server.notes("ida")
    assert server.notes("max").count("verified") == 2, server.notes("max")
    assert d["verifications"] == 3 and d["hits"] == 21, d
    # At most once per entry per half TTL (1.5 s): about 5 each in 11 s.
    assert 2 <= d["refreshes"] <= 12, d
    assert d["stores"] == 3, d


def test_ttl_zero_verifies_every_time(server):
    before = server.status()
    for _ in range(2):
        assert server.status_code("/nocache/index.html", "alice", PW) == 200
    assert counters_delta(server, before)["verifications"] == 2


def test_unreadable_file_is_a_500_and_no_cached_grant(server):
    f = server.path("gone.htpasswd")
    assert server.status_code("/gone/index.html", "gina", "gina's pass") == 200
    assert server.status_code("/gone/index.html", "gina", "gina's pass") == 200
    server.expect_log(r"\[authn_hmac:error\].*could not open password file: .*gone\.htpasswd")
    os.rename(f, f + ".away")
    try:
        assert server.status_code("/gone/index.html", "gina", "gina's pass") == 500
    finally:
        os.rename(f + ".away", f)
    assert server.status_code("/gone/index.html", "gina", "gina's pass") == 200
    # Unreadable to the children (never root: as root they run as www-data).
    os.chmod(f, 0)
    try:
        assert server.status_code("/gone/index.html", "gina", "gina's pass") == 500
    finally:
        os.chmod(f, 0o644)
    assert "could not open password file" in server.error_log()


def test_malformed_lines_warn_by_number_without_content(server):
    f = server.path("b.htpasswd")
    with open(f, "a") as out:
        out.write("this-line-is-secret-garbage\n")
    server.expect_log(r"\[authn_hmac:warn\].*b\.htpasswd line 2 has no ':' separator; the user it names cannot log in")
    assert server.status_code("/b/index.html", "alice", "battery staple") == 200
    log = server.error_log()
    assert "b.htpasswd line 2 has no ':' separator" in log
    assert "this-line-is-secret-garbage" not in log


@pytest.mark.mpm
@pytest.mark.slow
def test_cost12_hits_skip_bcrypt_under_ab(server):
    htpasswd(server.path("a.htpasswd"), "erin", "ab load pass", cost=12)
    before = server.status()
    complete, failed, non2xx, out = server.ab("/a/page.css", "erin", "ab load pass",
                                              n=2000, c=8)
    assert complete == 2000, out
    assert failed == 0 and non2xx == 0, out
    d = counters_delta(server, before)
    # A cold start may run one bcrypt per concurrent connection; then none.
    assert 1 <= d["verifications"] <= 8
    assert d["hits"] >= 2000 - 8
    assert d["hits"] + d["misses"] == 2000


@pytest.mark.mpm
def test_counters_sum_over_all_children(server):
    before = server.status()
    for _ in range(30):
        assert server.status_code("/a/index.html", "alice", PW) == 200
    d = counters_delta(server, before)
    assert d["hits"] + d["verifications"] == 30
    st = server.status()
    for k in ("hits", "misses", "verifications", "denied", "entries", "evictions"):
        assert isinstance(st[k], int)
    assert st["entries"] >= 3


def burst(server, path, user, passwords):
    """Sends one request per password, each on its own connection, all
    released at once by a barrier once every connection is open (ab sends
    its first request alone, which hides concurrent misses). Returns the
    status codes in order."""
    import base64
    import socket
    import threading

    barrier = threading.Barrier(len(passwords))
    codes = [None] * len(passwords)

    def one(i, pw):
        raw = base64.b64encode(("%s:%s" % (user, pw)).encode()).decode()
        req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic %s\r\n"
               "Connection: close\r\n\r\n" % (path, raw)).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=60,
                                      source_address=(server.source or "127.0.0.1", 0)) as c:
            barrier.wait()
            c.sendall(req)
            codes[i] = read_status(c)

    threads = [threading.Thread(target=one, args=(i, pw)) for i, pw in enumerate(passwords)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.sent[user] = server.sent.get(user, 0) + len(passwords)
    server.secrets.update(passwords)
    return codes


@pytest.mark.mpm
@pytest.mark.slow
def test_cold_burst_runs_one_verification(server):
    """64 first requests for one credential at once (cost 12): all 200, and
    one bcrypt, whichever process or thread each lands in."""
    htpasswd(server.path("a.htpasswd"), "burst", "burst password")
    before = server.status()
    codes = burst(server, "/a/index.html", "burst", ["burst password"] * 64)
    assert codes == [200] * 64, codes
    d = counters_delta(server, before)
    assert d["verifications"] == 1, d
    assert d["coalesced"] + d["hits"] == 63, d
    notes = server.notes("burst")
    assert notes.count("verified") == 1 and set(notes) <= {"verified", "coalesced", "hit"}


@pytest.mark.mpm
@pytest.mark.slow
def test_burst_mixing_right_and_wrong_passwords(server):
    """Right and wrong passwords for one user at once: exactly the right
    200s and 401s; one verification per distinct password."""
    htpasswd(server.path("a.htpasswd"), "mixer", "mixer right")
    before = server.status()
    pws = ["mixer right", "mixer wrong", "mixer other"] * 8
    codes = burst(server, "/a/index.html", "mixer", pws)
    assert codes == [200 if p == "mixer right" else 401 for p in pws], codes
    d = counters_delta(server, before)
    assert d["verifications"] == 3, d


def test_timing_does_not_tell_unknown_users(server):
    """30 unknown names and 30 wrong passwords of a known user, all
    distinct: each first try costs exactly one verification, a real one for
    the known user and a dummy (at the file's own cost) for the unknown
    name; the medians are printed, not asserted (durations are
    tools/bench's: a loaded machine moves them). The note still tells the
    admin the truth."""
    if server.mpm != "event":
        pytest.skip("timing: measured once, on the event MPM")
    import statistics
    import time as t

    # NB: each guess from a client of its own: 60 from one would be refused
    # by the throttle on guessing after 10 (AuthHMACMaxFailures).
    def timed(user, pw):
        source = client_address()
        t0 = t.monotonic()
        assert server.status_code("/a/index.html", user, pw, source=source) == 401
        return t.monotonic() - t0

    before = server.status()
    known, unknown = [], []
    for i in range(30):
        known.append(timed("alice", "wrong timing %d" % i))
        unknown.append(timed("nobody%d" % i, "wrong timing %d" % i))
    d = counters_delta(server, before)
    st = server.status()
    bcrypt = st["verify_seconds"] / st["verifications"]
    print("median: known user, wrong password %.1f ms; unknown user %.1f ms; "
          "one bcrypt %.1f ms" % (statistics.median(known) * 1e3,
                                  statistics.median(unknown) * 1e3, bcrypt * 1e3))
    assert d["verifications"] == 30 and d["dummy_verifications"] == 30, d
    assert d["denied"] == 30 and d["unknown_user"] == 30, d
    assert d["throttled"] == 0 and d["coalesced"] == 0, d
    assert server.notes("nobody0") == ["unknown-user"]


def test_hide_unknown_users_off(server):
    before = server.status()
    assert server.status_code("/showunknown/index.html", "nobody-shown", "shown pass") == 401
    assert counters_delta(server, before)["dummy_verifications"] == 0
