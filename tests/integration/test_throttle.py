"""The throttle on guessing: a client's distinct wrong passwords stop
costing verifications at the limit, for one user and over all users, in a
server and across a farm; refused attempts stay 401s that fail2ban's
apache-auth filter counts, and the module's own lines match the filter it
ships."""
import re

import pytest

from conftest import MPMS, make_server
from harness import FarmFiles, Redis, basic, changed_default, check_log, cleanup, client_address, \
    get, htpasswd
from harness.fail2ban import APACHE_AUTH, BANS as FILTER, fail2ban_matched as matched

MAX, MAX_CLIENT = 5, 20
THROTTLE = changed_default("limits below the defaults: fewer guesses reach them",
                           AuthHMACMaxFailures=MAX, AuthHMACMaxClientFailures=MAX_CLIENT,
                           AuthHMACFailureWindow="10m", AuthHMACBanTime="10m")
CHEAP = 5  # bcrypt cost where the tests count verifications, not time them
BAN = r"\[authn_hmac:warn\] \[pid [^]]*\] \[client %s:\d+\] AHMAC0029: user %s: "


def guesses(srv, user, n, source, tag):
    """n distinct wrong passwords for user from source, on one kept-alive
    connection: their status codes and the notes they got."""
    codes, conn = [], None
    for i in range(n):
        r, conn = get(srv.port, "/a/index.html", basic(user, "%s guess %d" % (tag, i)),
                      conn=conn, source=source)
        codes.append(r.status)
    if conn:
        conn.close()
    srv.sent[user] = srv.sent.get(user, 0) + n
    return codes, srv.notes(user)[-n:]


def one(srv, user, password, source):
    r, conn = get(srv.port, "/a/index.html", basic(user, password), source=source)
    if conn:
        conn.close()
    srv.sent[user] = srv.sent.get(user, 0) + 1
    return r.status, srv.notes(user)[-1]


@pytest.mark.mpm
@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_guessing_stops_at_the_limit(mpm):
    srv = make_server(mpm, global_conf=THROTTLE)
    # NB: verifications are counted here, not timed: cheap hashes (the
    # unknown users' dummies take theirs).
    htpasswd(srv.path("a.htpasswd"), "alice", "correct horse", cost=CHEAP)
    htpasswd(srv.path("a.htpasswd"), "bob", "bob's pass", cost=CHEAP)
    try:
        srv.start()
        # alice and bob logged in before the attack: cached.
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.status_code("/a/index.html", "bob", "bob's pass") == 200
        before = srv.status()
        # 200 distinct wrong passwords for bob from 127.0.0.1: MAX cost a
        # verification each, then every one is refused without one.
        codes, notes = guesses(srv, "bob", 200, "127.0.0.1", "first")
        assert codes == [401] * 200
        assert notes == ["denied"] * MAX + ["throttled"] * (200 - MAX), notes
        st = srv.status()
        assert st["verifications"] - before["verifications"] == MAX, st
        assert st["throttled"] - before["throttled"] == 200 - MAX, st
        assert st["bans"] - before["bans"] == 1, st
        # The banned client's other user, cached: served, no verification.
        assert one(srv, "alice", "correct horse", "127.0.0.1") == (200, "hit")
        # bob from another address: served from the cache; a new password
        # (the file changed) verified there. From the banned address, bob
        # is refused before the caches, his cached password too: else its
        # guesses would be checked against the cache at the server's speed.
        assert one(srv, "bob", "bob's pass", "127.0.0.2") == (200, "hit")
        assert one(srv, "bob", "bob's pass", "127.0.0.1") == (401, "throttled")
        htpasswd(srv.path("a.htpasswd"), "bob", "bob's new pass", cost=CHEAP)
        assert one(srv, "bob", "bob's new pass", "127.0.0.1") == (401, "throttled")
        assert one(srv, "bob", "bob's new pass", "127.0.0.2") == (200, "verified")
        st = srv.status()
        assert st["verifications"] - before["verifications"] == MAX + 1, st
        # A stale client repeating one wrong password is not guessing.
        stale = []
        for _ in range(20):
            stale.append(one(srv, "alice", "an old password", "127.0.0.4"))
        assert stale == [(401, "denied")] + [(401, "negative-hit")] * 19, stale
        # Spraying: one wrong password each for 200 users (unknown ones,
        # behind the dummy) from 127.0.0.3 stops at the client's limit.
        before = srv.status()
        sprayed = [one(srv, "spray%d" % i, "spring2026", "127.0.0.3") for i in range(200)]
        assert [c for c, _ in sprayed] == [401] * 200
        assert [n for _, n in sprayed] == (["unknown-user"] * MAX_CLIENT
                                           + ["throttled"] * (200 - MAX_CLIENT)), sprayed
        st = srv.status()
        assert st["dummy_verifications"] - before["dummy_verifications"] == MAX_CLIENT, st
        assert st["bans"] - before["bans"] == 1, st
        # Each ban told once, with its client and user.
        log = srv.error_log()
        assert len(re.findall(BAN % (r"127\.0\.0\.1", "bob"), log)) == 1, log
        assert len(re.findall(BAN % (r"127\.0\.0\.3", r"spray\d+"), log)) == 1, log
        assert len(re.findall(r"AHMAC0029", log)) == 2, log
        srv.expect_log(r"AHMAC0029")
        # fail2ban's apache-auth filter counts every refused attempt, the
        # throttled ones too (mod_auth_basic's AH01617 and AH01618); the
        # module's filter matches its ban lines.
        refused = 200 + 2 + 20 + 200
        assert matched(APACHE_AUTH, srv.path("logs", "error_log")) == refused
        assert matched(FILTER, srv.path("logs", "error_log")) == 2
        srv.stop()  # NB: memcheck's report is complete once httpd is done
        check_log(srv)
    finally:
        srv.cleanup()


def test_the_defaults():
    """With no throttle directive: 10 distinct wrong passwords for one user
    from one client, then refused for 10 minutes."""
    srv = make_server(MPMS[0])
    htpasswd(srv.path("a.htpasswd"), "alice", "correct horse", cost=CHEAP)
    try:
        srv.start()
        codes, notes = guesses(srv, "alice", 12, "127.0.0.1", "defaults")
        assert codes == [401] * 12
        assert notes == ["denied"] * 10 + ["throttled"] * 2, notes
        log = srv.error_log()
        assert re.search(BAN % (r"127\.0\.0\.1", "alice") + r"client refused for 600 s "
                         r"without a verification: too many failures for this user "
                         r"\(AuthHMACMaxFailures 10 within 600 s\)", log), log
        srv.expect_log(r"AHMAC0029")
        srv.stop()  # NB: memcheck's report is complete once httpd is done
        check_log(srv)
    finally:
        srv.cleanup()


def test_limits_off():
    """0 turns both limits off: every distinct guess verifies."""
    srv = make_server(MPMS[0], global_conf=changed_default(
        "the limits off is what this test checks",
        AuthHMACMaxFailures=0, AuthHMACMaxClientFailures=0))
    # NB: what counts is how many guesses verify (40, past both defaults),
    # not what each costs: a cheap hash.
    htpasswd(srv.path("a.htpasswd"), "alice", "correct horse", cost=CHEAP)
    try:
        srv.start()
        before = srv.status()
        codes, notes = guesses(srv, "alice", 40, "127.0.0.1", "off")
        assert codes == [401] * 40 and notes == ["denied"] * 40, notes
        st = srv.status()
        assert st["verifications"] - before["verifications"] == 40
        assert st["throttled"] == 0 and st["bans"] == 0
    finally:
        srv.cleanup()


@pytest.mark.slow
def test_the_limit_counts_across_the_farm():
    """Guesses spread over two servers that share Redis: the farm counts
    them all, and both refuse at the limit."""
    from test_redis import farm_server

    # NB: counts are the point, not what a verification costs: cheap
    # hashes (carol's, and alice's, which unknown users' dummies take).
    shared, redis = FarmFiles(cost=CHEAP), Redis().start()
    htpasswd(shared.users, "carol", "carol's pass", cost=CHEAP)
    a = farm_server(shared, redis, name="thrA", extra=THROTTLE).start()
    b = farm_server(shared, redis, name="thrB", extra=THROTTLE).start()
    try:
        codes, notes = [], []
        for i in range(20):
            srv = (a, b)[i % 2]
            r, conn = get(srv.port, "/w/", basic("carol", "farm guess %d" % i))
            if conn:
                conn.close()
            srv.sent["carol"] = srv.sent.get("carol", 0) + 1
            codes.append(r.status)
            notes.append(srv.notes("carol")[-1])
        assert codes == [401] * 20
        assert notes == ["denied"] * MAX + ["throttled"] * (20 - MAX), notes
        sa, sb = a.status(), b.status()
        assert sa["verifications"] + sb["verifications"] == MAX, (sa, sb)
        # The ban is told once by the server whose guess started it, and
        # once by the other when it takes it from the farm (its origin).
        for srv in (a, b):
            srv.expect_log(r"AHMAC0029")
        log = a.error_log() + b.error_log()
        assert len(re.findall(BAN % (r"127\.0\.0\.1", "carol"), log)) == 2, log
        assert len(re.findall(BAN % (r"127\.0\.0\.1", "carol") +
                              r".*\(from the farm's Redis\)", log)) == 1, log
        assert sa["bans"] + sb["bans"] == 2, (sa, sb)
        # Another client is not affected, in either server.
        for srv in (a, b):
            r, conn = get(srv.port, "/w/", basic("carol", "carol's pass"), source="127.0.0.2")
            srv.sent["carol"] += 1
            assert r.status == 200
        # Spraying over the farm: one wrong password for 40 names from one
        # client, spread over both servers, costs the client's limit of
        # verifications in all.
        before = [srv.status() for srv in (a, b)]
        sprayer = client_address()
        for i in range(40):
            srv = (a, b)[i % 2]
            r, conn = get(srv.port, "/w/", basic("fspray%d" % i, "Autumn2026"),
                          source=sprayer)
            if conn:
                conn.close()
            srv.sent["fspray%d" % i] = 1
            assert r.status == 401
        after = [srv.status() for srv in (a, b)]
        dummies = sum(x["dummy_verifications"] - y["dummy_verifications"]
                      for x, y in zip(after, before))
        assert dummies == MAX_CLIENT, (before, after)
        check_log(a, b)
    finally:
        cleanup(a, b, redis, shared)


@pytest.mark.slow
def test_concurrent_guesses_across_the_farm_are_all_counted():
    """Two servers that count a guess of one pair at the same moment both
    count it (the counts in Redis are compare-and-set): rounds of two
    distinct wrong passwords, one to each server, released together, cost
    at most one verification past the limit (the other server's, in flight
    when the ban started). Counted read-then-write, both servers could
    write n + 1 over the same n, and a round's two guesses count one."""
    from test_redis import STATUS, farm_server, split_burst

    limit = 20
    shared, redis = FarmFiles(), Redis().start()
    # NB: a fast hash (bcrypt's least cost): a round's two verifications
    # end together, so that their counts meet in Redis.
    htpasswd(shared.users, "carol", "carol's pass", cost=4)
    tc = changed_default("twice the default: ten rounds of two guesses at once, "
                         "each a chance for two servers' counts to cross",
                         AuthHMACMaxFailures=limit)
    a, b = (farm_server(shared, redis, name=n, extra=tc + STATUS, modules=["status"]).start()
            for n in ("casA", "casB"))
    try:
        rounds = []
        for i in range(limit):
            codes = split_burst((a, b), "carol", ["cas %d a" % i, "cas %d b" % i])
            notes = [srv.notes("carol")[-1] for srv in (a, b)]
            rounds.append((codes, notes))
            assert codes == [401, 401], rounds
            if notes == ["throttled", "throttled"]:
                break
        assert rounds[-1][1] == ["throttled", "throttled"], rounds
        sa, sb = a.status(), b.status()
        assert sa["verifications"] + sb["verifications"] <= limit + 1, (len(rounds), sa, sb)
        for srv in (a, b):
            srv.expect_log(r"AHMAC0029")
        # The right password from another client: served, on both.
        for srv in (a, b):
            r, conn = get(srv.port, "/w/", basic("carol", "carol's pass"), source="127.0.0.2")
            if conn:
                conn.close()
            srv.sent["carol"] += 1
            assert r.status == 200
        check_log(a, b)
    finally:
        cleanup(a, b, redis, shared)
