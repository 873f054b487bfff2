"""Never refuse a right password: the throttle under the shipped defaults
(AuthHMACMaxFailures 10, AuthHMACMaxClientFailures 30, a window and a ban
of 10 minutes), as users run it. A cold burst of one right password, an
office behind one address where someone sprays, a user retrying typos
across a password change, and bans in Redis that no server made."""
import re
import subprocess
import time
import threading

import pytest

from conftest import MPMS, make_server
from harness import COST, FarmFiles, Redis, basic, check_log, cleanup, client_address, get, \
    htpasswd
from test_backends import db_dir  # noqa: F401 (a fixture)

BAN = r"AHMAC0029: user %s: "
PREFORK_64 = ("StartServers 64\nMinSpareServers 64\nMaxSpareServers 64\n"
              "ServerLimit 64\nMaxRequestWorkers 64")


def once(srv, path, user, password, source):
    """One request on a connection of its own: (status, note)."""
    r, conn = get(srv.port, path, basic(user, password), source=source)
    if conn:
        conn.close()
    srv.sent[user] = srv.sent.get(user, 0) + 1
    return r.status, srv.notes(user)[-1]


def burst(port, path, user, password, n, source="127.0.0.1"):
    """n requests with one credential, each on a connection of its own,
    released together: their status codes."""
    gate, codes, lock = threading.Barrier(n), [], threading.Lock()
    auth = basic(user, password)

    def one():
        gate.wait()
        r, conn = get(port, path, auth, source=source)
        if conn:
            conn.close()
        with lock:
            codes.append(r.status)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


@pytest.mark.mpm
@pytest.mark.slow  # NB: valgrind's httpd -X takes one request at a time
@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_a_cold_burst_is_one_guess(mpm):
    """64 requests with one right password at once, nothing cached: all
    served, after one verification (the others wait for it: one guess)."""
    # NB: prefork with 64 children (8 by default here), so that 64 are at once.
    srv = make_server(mpm, mpm_conf=PREFORK_64 if mpm == "prefork" else None)
    htpasswd(srv.path("a.htpasswd"), "dana", "dana's pass", cost=COST)
    try:
        srv.start()
        codes = burst(srv.port, "/a/index.html", "dana", "dana's pass", 64)
        srv.sent["dana"] = 64
        assert codes == [200] * 64, codes
        st = srv.status()
        assert st["verifications"] == 1, st
        assert st["throttled"] == 0 and st["bans"] == 0, st
        srv.stop()
        check_log(srv)
    finally:
        srv.cleanup()


@pytest.mark.slow
def test_a_cold_burst_over_a_farm_is_one_guess():
    """The same burst over two servers sharing Redis: all served, one
    verification in the farm."""
    from test_redis import farm_server

    shared, redis = FarmFiles(), Redis().start()
    htpasswd(shared.users, "erin", "erin's pass", cost=COST)
    a = farm_server(shared, redis, name="burstA").start()
    b = farm_server(shared, redis, name="burstB").start()
    try:
        out = {}
        ts = [threading.Thread(target=lambda s=s: out.__setitem__(
            s.name, burst(s.port, "/w/", "erin", "erin's pass", 32))) for s in (a, b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        a.sent["erin"] = b.sent["erin"] = 32
        assert out["burstA"] == [200] * 32 and out["burstB"] == [200] * 32, out
        sa, sb = a.status(), b.status()
        assert sa["verifications"] + sb["verifications"] == 1, (sa, sb)
        assert sa["throttled"] + sb["throttled"] == 0, (sa, sb)
        check_log(a, b)
    finally:
        cleanup(a, b, redis, shared)


def test_an_office_keeps_its_logged_in_users_through_a_spray():
    """24 users logged in from one address; someone there sprays one
    password over 60 names: the address is banned for all users, and its
    logged-in users are still served. A user from another address logs in;
    the banned address, sending the right password of a user cached from
    elsewhere, is refused (no oracle), and so is a new login there."""
    srv = make_server(MPMS[0])
    office, home, elsewhere = client_address(), client_address(), client_address()
    users = ["staff%02d" % i for i in range(24)]
    with open(srv.path("a.htpasswd"), "a") as f:
        for u in users + ["frank", "newcomer", "grace"]:
            # NB: cost 4: 27 logins; what is tested is who is served.
            f.write(subprocess_line(u, "pass of " + u))
    try:
        srv.start()
        for u in users:
            assert once(srv, "/a/index.html", u, "pass of " + u, office) == (200, "verified")
        assert once(srv, "/a/index.html", "frank", "pass of frank", home) == (200, "verified")
        # The spray: one password over 60 names (unknown ones), from the
        # office; the 30th refusal bans the address for all users.
        sprayed = [once(srv, "/a/index.html", "spray%d" % i, "Winter2026", office)[1]
                   for i in range(60)]
        assert sprayed == ["unknown-user"] * 30 + ["throttled"] * 30, sprayed
        st = srv.status()
        assert st["bans"] == 1, st
        before = st["verifications"]
        # The office's logged-in users: served from the cache.
        for u in users:
            assert once(srv, "/a/index.html", u, "pass of " + u, office) == (200, "hit")
        # frank's right password, cached from home: not from the office.
        assert once(srv, "/a/index.html", "frank", "pass of frank", office) == \
            (401, "throttled")
        assert once(srv, "/a/index.html", "newcomer", "pass of newcomer", office) == \
            (401, "throttled")
        # Elsewhere: frank served, grace logs in.
        assert once(srv, "/a/index.html", "frank", "pass of frank", home) == (200, "hit")
        assert once(srv, "/a/index.html", "grace", "pass of grace", elsewhere) == \
            (200, "verified")
        st = srv.status()
        assert st["verifications"] - before == 1, st
        assert len(re.findall(BAN % r"spray\d+", srv.error_log())) == 1
        srv.expect_log(r"AHMAC0029")
        srv.stop()
        check_log(srv)
    finally:
        srv.cleanup()


def subprocess_line(user, password):
    from harness.httpd import htpasswd_line
    return htpasswd_line(user, password, cost=4) + "\n"


def test_retried_typos_are_not_new_guesses():
    """Six different wrong passwords, in three rounds, the admin changing
    the password between rounds (each typo is verified again: the stored
    hash changed): counted six times, not eighteen; then the new password
    is served."""
    srv = make_server(MPMS[0])
    htpasswd(srv.path("a.htpasswd"), "hugo", "old pass", cost=4)
    source = client_address()
    try:
        srv.start()
        notes = []
        for rnd in range(3):
            htpasswd(srv.path("a.htpasswd"), "hugo", "pass %d" % rnd, cost=4)
            for i in range(6):
                for _ in range(2):
                    notes.append(once(srv, "/a/index.html", "hugo", "typo %d" % i, source))
        assert [c for c, _ in notes] == [401] * 36, notes
        assert [n for _, n in notes] == ["denied", "negative-hit"] * 18, notes
        st = srv.status()
        assert st["throttled"] == 0 and st["bans"] == 0, st
        assert once(srv, "/a/index.html", "hugo", "pass 2", source) == (200, "verified")
        srv.stop()
        check_log(srv)
    finally:
        srv.cleanup()


def test_a_ban_in_redis_that_no_server_made_is_ignored():
    """A value under a client's ban key that does not verify (written by
    anything else that can write the prefix), and a real ban's value copied
    under another key: no ban, counted (redis_forged) and told; a real ban
    is taken by the other server (told there, from the farm)."""
    from test_redis import farm_server

    shared, redis = FarmFiles(), Redis().start()
    for u in ("ivan", "judy", "kim"):
        htpasswd(shared.users, u, u + "'s pass", cost=4)
    a = farm_server(shared, redis, name="forgeA").start()
    b = farm_server(shared, redis, name="forgeB").start()
    victim, guesser = client_address(), client_address()
    try:
        # The victim guesses twice for one user and once for another on a:
        # its client count (3) is the largest of the counts in Redis.
        for user, pw in (("ivan", "x1"), ("ivan", "x2"), ("judy", "x3")):
            assert once(a, "/w/", user, pw, victim)[0] == 401
        # NB: a count is "C:" start ":" count (hex) ":" tag.
        counts = {k: int(redis.cli("GET", k).split(":")[2], 16) for k in
                  redis.cli("KEYS", "authn_hmac:t:*").split()}
        client_key = max(counts, key=counts.get)
        assert counts[client_key] == 3, counts
        ban_key = client_key.replace("t:", "b:", 1)
        redis.cli("SET", ban_key, "1", "EX", "600")
        # b has not seen the victim: its miss reads the forged ban.
        assert once(b, "/w/", "kim", "kim's pass", victim) == (200, "verified")
        st = b.status()
        assert st["redis_forged"] == 1 and st["bans"] == 0, st
        b.expect_log(r"AHMAC0038: Redis returned a ban or a count of the throttle that "
                     r"does not verify")
        # A real ban: the guesser's ten wrong passwords for ivan, on a.
        for i in range(10):
            assert once(a, "/w/", "ivan", "guess %d" % i, guesser)[0] == 401
        a.expect_log(r"AHMAC0029")
        real = [k for k in redis.cli("KEYS", "authn_hmac:b:*").split() if k != ban_key]
        assert len(real) == 1, real
        value = redis.cli("GET", real[0])
        assert value.startswith("B:"), value
        # Its value copied under the victim's key is no ban either.
        redis.cli("SET", ban_key, value, "EX", "600")
        assert once(b, "/w/", "judy", "judy's pass", victim) == (200, "verified")
        st = b.status()
        assert st["redis_forged"] == 2 and st["bans"] == 0, st
        # A count raised by whatever writes Redis (its tag cannot verify):
        # no count, so no ban at the victim's next wrong password.
        forged = "C:%016x:%08x:%s" % (int(time.time() * 1e6), 99, "0" * 64)
        redis.cli("SET", client_key, forged, "PX", "600000")
        redis.cli("DEL", ban_key)
        assert once(b, "/w/", "kim", "kim typo", victim) == (401, "denied")
        st = b.status()
        assert st["redis_forged"] == 3 and st["bans"] == 0, st
        # The real one: b takes it (told there, from the farm) and refuses.
        assert once(b, "/w/", "ivan", "ivan's pass", guesser) == (401, "throttled")
        st = b.status()
        assert st["bans"] == 1, st
        assert re.search(BAN % "ivan" + r".*\(from the farm's Redis\)", b.error_log())
        b.expect_log(r"AHMAC0029")
        for srv in (a, b):
            srv.stop()  # NB: memcheck's report is complete once httpd is done
            check_log(srv)
    finally:
        cleanup(a, b, redis, shared)


@pytest.mark.slow  # NB: ten bcrypts at cost 12: minutes under valgrind
def test_name_variants_share_one_count_behind_sql(db_dir):
    """SQL whose collation matches names whatever their case (NOCASE):
    wrong passwords sent as "Ann", "ann " and "ANN" from one client count
    for one account, so the tenth distinct one bans it there, not the
    thirtieth. ("ann " is no row for SQLite: an unknown user's refusal,
    counted for the same folded name.)"""
    from test_backends import SQLITE_DRIVER, bcrypt, dbd_server, sqlite_db

    import os
    if not os.path.exists(SQLITE_DRIVER):
        pytest.skip("libaprutil1-dbd-sqlite3 is not installed")
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("ann", bcrypt("ann's pass"))])
    srv = dbd_server(db, name="sqlfold")
    srv.body = srv.body.replace("WHERE name = %s", "WHERE name = %s COLLATE NOCASE")
    srv.write_config()
    source = client_address()
    try:
        srv.start()
        names = ["Ann", "ann ", "ANN"]
        notes = [once(srv, "/s/", names[i % 3], "wrong %d" % i, source)[1] for i in range(12)]
        assert notes == ["denied", "unknown-user", "denied"] * 3 + ["denied"] + \
            ["throttled"] * 2, notes
        assert once(srv, "/s/", "ann", "ann's pass", source) == (401, "throttled")
        assert once(srv, "/s/", "ANN", "ann's pass", client_address()) == (200, "verified")
        st = srv.status()
        assert st["bans"] == 1, st
        srv.expect_log(r"AHMAC0029")
        srv.stop()
        check_log(srv)
    finally:
        srv.cleanup()


def test_bans_are_listed_and_lifted():
    """The status page lists the bans in force (client, user or all users,
    seconds left, the farm key); a POST lifts one, and the user is served
    again from there."""
    srv = make_server(MPMS[0])
    # NB: cost 4 for most of the file: the spray's dummies cost its median.
    for u in ("lena", "lena2", "lena3"):
        htpasswd(srv.path("a.htpasswd"), u, u + "'s pass", cost=4)
    guesser, sprayer = client_address(), client_address()
    try:
        srv.start()
        for i in range(10):
            assert once(srv, "/a/index.html", "lena", "guess %d" % i, guesser)[0] == 401
        for i in range(30):
            assert once(srv, "/a/index.html", "sp%d" % i, "Spring", sprayer)[0] == 401
        st = srv.status()
        assert st["bans_active"] == 2, st
        bans = sorted(st["bans_in_force"], key=lambda b: b["client"])
        assert [(b["client"], b["user"], b["all_users"]) for b in bans] == \
            [(guesser, "lena", False), (sprayer, "", True)], bans
        assert all(0 < b["seconds_left"] <= 600 for b in bans), bans
        assert all(re.fullmatch(r"b:[0-9a-f]{64}", b["redis_key"]) for b in bans), bans
        text = subprocess.run(["curl", "-s", srv.url + "/authn-hmac-status"],
                              capture_output=True, text=True).stdout
        assert re.search(r"^ban: %s user \"lena\" \d+ s left" % re.escape(guesser), text,
                         re.M), text
        assert re.search(r"^ban: %s all users \d+ s left" % re.escape(sprayer), text, re.M), text
        prom = subprocess.run(["curl", "-s", srv.url + "/authn-hmac-status?prometheus"],
                              capture_output=True, text=True).stdout
        assert re.search(r"^authn_hmac_bans_active 2$", prom, re.M), prom
        assert once(srv, "/a/index.html", "lena", "lena's pass", guesser) == (401, "throttled")
        # Lifted: the guesser's ban for lena. A cross-site form (no header)
        # lifts nothing: 403.
        lift = srv.url + "/authn-hmac-status?lift=%s&user=lena" % guesser
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X",
                              "POST", "-H", "Origin: https://evil.example", "-H",
                              "Content-Type: application/x-www-form-urlencoded", "--data",
                              "", lift], capture_output=True, text=True).stdout
        assert out == "403", out
        srv.expect_log(r"a POST to the status handler without the header X-Authn-HMAC-Lift")
        assert srv.status()["bans_active"] == 2
        out = subprocess.run(["curl", "-s", "-X", "POST", "-H", "X-Authn-HMAC-Lift: 1", lift],
                             capture_output=True, text=True).stdout
        assert out == "lifted: 1\n", out
        assert once(srv, "/a/index.html", "lena", "lena's pass", guesser) == (200, "verified")
        st = srv.status()
        assert st["bans_active"] == 1 and st["bans_in_force"][0]["client"] == sprayer, st
        srv.expect_log(r"AHMAC0029")
        srv.expect_log(r"AHMAC0037: 1 ban\(s\) of client %s for user lena lifted"
                       % re.escape(guesser))
        srv.stop()
        check_log(srv)
    finally:
        srv.cleanup()
