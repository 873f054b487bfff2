"""The Redis tier: one bcrypt per credential for a farm, and Redis trouble
never turning into a 500 or a grant without a check."""
import functools
import os
import re
import threading
import time

import pytest

import harness
from harness import COST, VALGRIND, FarmFiles, Httpd, Redis, hmac_location, htpasswd, \
    htpasswd_line, read_status
from harness import last_note as note_of_last

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wiki(srv, users):
    return 'Alias /w/ "%s/htdocs/"\n' % srv.dir + hmac_location("/w/", users, "wiki")


OUTAGE = r"\[authn_hmac:warn\].*Redis at .* is unavailable"


Shared = FarmFiles


def farm_server(shared, redis, extra="", name="farm", mpm=None, auth=True, **kw):
    srv = Httpd(mpm=mpm, name=name, **kw)
    lines = ["AuthHMACPepperFile %s" % shared.pepper,
             "AuthHMACRedisServer %s" % redis.address]
    # NB: the default 50 ms is about what a loaded 2-core machine can take
    # for a child's first connect, AUTH and GET (a full run once saw a
    # timeout there); these tests are about what Redis answers, and the
    # ones about time set their own, after this. Valgrind is 20-50x slower.
    lines.append("AuthHMACRedisTimeout %d" % (2000 if VALGRIND else 1000))
    if auth and redis.password:
        lines.append("AuthHMACRedisAuthFile %s"
                     % redis.auth_file(srv.path("redis.auth"), redis.password))
    srv.global_conf = "\n".join(lines) + "\n" + extra
    srv.body = wiki(srv, shared.users)
    srv.write_config()
    with open(srv.path("htdocs", "index.html"), "w") as f:
        f.write("wiki page\n")
    if redis.password:
        srv.secrets.add(redis.password)
    return srv


def delta(srv, before):
    after = srv.status()
    # NB: the numbers; the Redis tier's words (redis_primary...) are text.
    return {k: after[k] - before[k] for k in before if isinstance(before[k], (int, float))}


def farm_done(shared, redis, *servers):
    """A farm fixture's end: the servers stopped and removed, then Redis
    and the files; no error log line that no test expected, in any."""
    problems = []
    for s in servers:
        s.stop()
        problems += s.log_problems()
        s.cleanup()
    redis.cleanup()
    shared.cleanup()
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def farm():
    shared, redis = Shared(), Redis().start()
    a = farm_server(shared, redis, name="farmA").start()
    b = farm_server(shared, redis, name="farmB").start()
    yield shared, redis, a, b
    farm_done(shared, redis, a, b)


def test_a_refused_password_again_never_asks_redis(farm):
    """A repeat of a refused password is a negative hit before Redis is
    asked: an unknown user's repeat never asks it either, so a round trip
    there would tell the names apart."""
    shared, redis, a, b = farm
    htpasswd(shared.users, "rita", "rita's farm pass")
    assert a.status_code("/w/", "rita", "rita guessed wrong") == 401
    assert note_of_last(a, "rita") == "denied"
    before = a.status()
    assert a.status_code("/w/", "rita", "rita guessed wrong") == 401
    assert note_of_last(a, "rita") == "negative-hit"
    d = delta(a, before)
    assert d["redis_misses"] == 0 and d["redis_hits"] == 0, d
    assert d["verifications"] == 0, d


def test_verified_on_one_server_is_a_hit_on_the_other(farm):
    shared, redis, a, b = farm
    htpasswd(shared.users, "sam", "sam's farm pass")
    before = b.status()
    assert a.status_code("/w/", "sam", "sam's farm pass") == 200
    assert note_of_last(a, "sam") == "verified"
    assert b.status_code("/w/", "sam", "sam's farm pass") == 200
    assert note_of_last(b, "sam") == "redis-hit"
    assert b.status_code("/w/", "sam", "sam's farm pass") == 200
    assert note_of_last(b, "sam") == "hit"  # now in B's shared memory too
    d = delta(b, before)
    assert d["verifications"] == 0
    assert d["redis_hits"] == 1 and d["hits"] == 1
    assert b.status()["redis"] == 1 and b.status()["redis_connections"] >= 1


def test_a_wrong_password_is_not_shared(farm):
    """A wrong password that another server refused is verified again: the
    refusal, posted for that verification's waiters (2 s), came before this
    request, which counts it in farm_late."""
    shared, redis, a, b = farm
    before = b.status()
    started = time.monotonic()
    assert a.status_code("/w/", "alice", "not alice's") == 401
    assert b.status_code("/w/", "alice", "not alice's") == 401
    took = time.monotonic() - started
    d = delta(b, before)
    assert d["verifications"] == 1 and d["denied"] == 1 and d["redis_hits"] == 0
    # NB: A posted its refusal after this test sent its request, and B
    # claimed before it answered: within the refusal's 2 s if both took
    # less (a loaded machine may take more: B then found no marker).
    print("both took %.2f s; B: %s" % (took, {k: v for k, v in d.items() if v}))
    assert d["farm_timeouts"] == 0, d
    if took < 1.9:
        assert d["farm_late"] == 1, d


def test_revocation_reaches_every_server(farm):
    shared, redis, a, b = farm
    htpasswd(shared.users, "rita", "rita old pass")
    assert a.status_code("/w/", "rita", "rita old pass") == 200
    assert b.status_code("/w/", "rita", "rita old pass") == 200
    htpasswd(shared.users, "rita", "rita new pass")
    assert a.status_code("/w/", "rita", "rita old pass") == 401
    assert b.status_code("/w/", "rita", "rita old pass") == 401
    assert a.status_code("/w/", "rita", "rita new pass") == 200
    assert b.status_code("/w/", "rita", "rita new pass") == 200
    assert note_of_last(b, "rita") == "redis-hit"
    htpasswd(shared.users, "rita", None, delete=True)
    assert a.status_code("/w/", "rita", "rita new pass") == 401
    assert b.status_code("/w/", "rita", "rita new pass") == 401


def test_redis_holds_only_macs_times_and_tags(farm):
    shared, redis, a, b = farm
    htpasswd(shared.users, "mac", "mac only pass")
    assert a.status_code("/w/", "mac", "mac only pass") == 200
    keys = redis.cli("--scan", "--pattern", "*").split()
    assert keys
    for k in keys:
        if k.startswith("authn_hmac:f:"):
            # A verification's marker: running (its claim's random token),
            # or its tagged result, for seconds.
            assert re.fullmatch(r"authn_hmac:f:[0-9a-f]{64}", k), k
            assert re.fullmatch(r"R[0-9a-f]{32}|F[01]:[0-9a-f]{16}:[0-9a-f]{64}",
                                redis.cli("GET", k) or "R" + "0" * 32)
            assert int(redis.cli("PTTL", k)) <= 30000
            continue
        if re.match(r"authn_hmac:[gtb]:", k):
            # The throttle's (on at the defaults; the module's earlier tests
            # sent wrong passwords): a guess's mark (g:, the pair's id and
            # the guess's fingerprint), a count (t:) or a ban (b:), of ids
            # only, for the window or the ban (600 s) at most.
            assert re.fullmatch(r"authn_hmac:(g:[0-9a-f]{80}|[tb]:[0-9a-f]{64})", k), k
            # A g: mark is "1"; a count or a ban carries a tag.
            assert re.fullmatch(r"1|C:[0-9a-f]{16}:[0-9a-f]{8}:[0-9a-f]{16}:[0-9a-f]{64}|"
                                r"B:[0-9a-f]{16}:[0-9a-f]{64}", redis.cli("GET", k) or "1"), k
            assert int(redis.cli("PTTL", k)) <= 601000
            continue
        assert re.fullmatch(r"authn_hmac:[0-9a-f]{64}", k), k
        # Version 4, one or two entries (MAC, verified, last used), their
        # tag; kept until the newest verification is the max age old (the
        # default, 8 hours): each section applies its own idle timeout.
        assert re.fullmatch(r"4(:[0-9a-f]{96}){1,2}:[0-9a-f]{64}", redis.cli("GET", k))
        assert 0 < int(redis.cli("PTTL", k)) <= 8 * 3600 * 1000
    dump = " ".join(keys + [redis.cli("GET", k) for k in keys])
    for secret in ("mac", "mac only pass", "alice", "$2y$"):
        assert secret not in dump.replace("authn_hmac:", "")


def reading(srv):
    """Workers of srv reading a request now (R in mod_status's scoreboard)."""
    import urllib.request

    with urllib.request.urlopen(srv.url + "/server-status?auto", timeout=30) as r:
        text = r.read().decode()
    board = re.search(r"^Scoreboard: (\S*)$", text, re.M)
    return board.group(1).count("R") if board else 0


def split_burst(servers, user, passwords):
    """One request per password, each on its own connection, spread over
    the servers in turn, all released at once: each connection sends its
    request but the last CRLF, and once every server has a worker reading
    each of its connections (the scoreboard's R), all send it together:
    every request is already inside its server, and only the last CRLF is
    left to read (a request that came once its credential's verification
    was over would run its own, by design). Returns the status codes in
    order."""
    import base64
    import socket

    ready = threading.Barrier(len(passwords) + 1)
    go = threading.Barrier(len(passwords) + 1)
    codes = [None] * len(passwords)

    def one(i, pw):
        srv = servers[i % len(servers)]
        raw = base64.b64encode(("%s:%s" % (user, pw)).encode()).decode()
        req = ("GET /w/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic %s\r\n"
               "Connection: close\r\n" % raw).encode()
        try:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as c:
                c.sendall(req)
                ready.wait(timeout=120)
                go.wait(timeout=120)
                c.sendall(b"\r\n")
                codes[i] = read_status(c)
        except threading.BrokenBarrierError:
            codes[i] = 0

    threads = [threading.Thread(target=one, args=(i, pw)) for i, pw in enumerate(passwords)]
    for t in threads:
        t.start()
    try:
        ready.wait(timeout=120)
        want = [len(passwords[i::len(servers)]) for i in range(len(servers))]
        # NB: a generous deadline for the workers to take the connections.
        for _ in range(600):
            got = [reading(srv) for srv in servers]
            if all(g >= w for g, w in zip(got, want)):
                break
            time.sleep(0.1)
        assert all(g >= w for g, w in zip(got, want)), (got, want)
        go.wait(timeout=120)
    except BaseException:
        go.abort()
        raise
    finally:
        for t in threads:
            t.join()
    for i, srv in enumerate(servers):
        srv.sent[user] = srv.sent.get(user, 0) + len(passwords[i::len(servers)])
    return codes


STATUS = """
<Location /server-status>
    SetHandler server-status
    Require local
</Location>
"""
# NB: more workers than a burst's connections on each server (32), and the
# scoreboard's request besides.
BURST_EVENT = ("StartServers 2\nServerLimit 2\nThreadsPerChild 32\nThreadLimit 32\n"
               "MinSpareThreads 1\nMaxSpareThreads 64\nMaxRequestWorkers 64")


@pytest.fixture(scope="module")
def burst_farm():
    """Two servers sharing Redis, as in production: connections warm, and a
    timeout that a burst of 64 on a small, busy test machine stays within
    (the tests here are about coalescing, not about Redis timeouts).
    NB: a server's waiters wait for about twice its usual verification
    time and a second (at most 3 s across the farm); each server has first
    verified one hash of cost COST + 3 (eight times the cost of COST), so
    that a burst's verification, slowed by a busy machine or by the others
    running beside it (room for all at once: no queue), ends well within
    its waiters' wait."""
    shared, redis = Shared(), Redis().start()
    servers = [farm_server(shared, redis, name=n, mpm="event",
                           extra="AuthHMACRedisTimeout 1000\nAuthHMACMaxVerifications 8\n"
                                 + STATUS, modules=["status"],
                           mpm_conf=BURST_EVENT).start()
               for n in ("burstA", "burstB")]
    for srv in servers:
        # NB: a user of its own on each: a result in Redis is no verification.
        slow = "slow" + srv.name
        htpasswd(shared.users, slow, "slow pass", cost=COST + 3)
        srv.ab("/w/", "alice", "alice farm pass", n=400, c=32, keepalive=False)
        assert srv.status_code("/w/", slow, "slow pass") == 200
        assert srv.notes(slow) == ["verified"]
    yield (shared, redis) + tuple(servers)
    farm_done(shared, redis, *servers)


@pytest.mark.slow
def test_cold_burst_over_two_servers_runs_one_verification(burst_farm):
    """64 first requests for one credential, split over two servers that
    share Redis: all 200, one bcrypt in the farm."""
    shared, redis, a, b = burst_farm
    htpasswd(shared.users, "bursty", "bursty farm pass")
    before = (a.status(), b.status())
    codes = split_burst([a, b], "bursty", ["bursty farm pass"] * 64)
    assert codes == [200] * 64, codes
    da, db = delta(a, before[0]), delta(b, before[1])
    print("farm burst: verifications %d + %d, coalesced %d + %d" % (
        da["verifications"], db["verifications"], da["coalesced"], db["coalesced"]))
    assert da["verifications"] + db["verifications"] == 1, (da, db)
    notes = a.notes("bursty") + b.notes("bursty")
    assert notes.count("verified") == 1, notes
    assert set(notes) <= {"verified", "coalesced", "hit", "redis-hit"}, notes


@pytest.mark.slow
def test_burst_over_two_servers_mixing_passwords(burst_farm):
    """Right and wrong passwords for one user at once, over two servers:
    exactly the right 200s and 401s, one verification per password."""
    shared, redis, a, b = burst_farm
    # NB: a request that comes once its password's verification is over
    # finds a grant in Redis, but verifies a wrong password by itself (by
    # design: a wrong password is not shared outside a burst): split_burst
    # releases the requests only once every server reads each of its
    # connections, and a hash of one cost more (about twice the time, well
    # within the waiters' wait: see burst_farm) is more room still.
    # NB: and a burst counts only where every request came in time: a
    # "redis-hit" note is a server's runner that found the grant already
    # stored, a "negative-hit" a request that came after its server's
    # verification of that password had ended, farm_late a server's runner
    # that came after the other server's refusal was posted, farm_timeouts
    # one that waited for it in vain: late (a loaded CI machine stalled one
    # server's threads for over half a second, and its wrong passwords, late
    # too, were verified again; once only its runner's, farm_late). Such a
    # burst proves nothing either way: it is run again, at most three times,
    # with a user of its own.
    for attempt in range(3):
        user = "mixy%d" % attempt
        pws = ["%s right" % user, "%s wrong" % user, "%s other" % user] * 8
        htpasswd(shared.users, user, pws[0], cost=COST + 1)
        before = (a.status(), b.status())
        codes = split_burst([a, b], user, pws)
        assert codes == [200 if p == pws[0] else 401 for p in pws], codes
        da, db = delta(a, before[0]), delta(b, before[1])
        notes = (a.notes(user), b.notes(user))
        print("farm burst %d: %s; %s" % (attempt, {k: v for k, v in da.items() if v},
                                        {k: v for k, v in db.items() if v}))
        print("notes: %s; %s" % notes)
        late = sum(d["farm_late"] + d["farm_timeouts"] for d in (da, db))
        if not late and not {"redis-hit", "negative-hit"} & set(notes[0] + notes[1]):
            break
    else:
        pytest.fail("no burst of three came in time on both servers")
    assert da["verifications"] + db["verifications"] == 3, (da, db)


@pytest.fixture
def shared():
    s = Shared()
    yield s
    s.cleanup()


def finish(srv, *extra_expected):
    """harness.finish, and the server's files removed."""
    try:
        harness.finish(srv, *extra_expected)
    finally:
        srv.cleanup()


def running_marker(redis):
    """The farm marker of a verification under way: (key, value)."""
    for k in redis.cli("--scan", "--pattern", "authn_hmac:f:*").split():
        v = redis.cli("GET", k)
        if re.fullmatch(r"R([0-9a-f]{32})?", v):
            return k, v
    return None, None


@functools.lru_cache(maxsize=None)
def slow_line(user, password, cost):
    """user's htpasswd line, made once for the module: a cost-16 hash takes
    htpasswd 3-5 s, and each test that adds it has a file, a pepper and a
    Redis of its own (shared is per test)."""
    return htpasswd_line(user, password, cost) + "\n"


@pytest.mark.slow
@pytest.mark.skipif(bool(VALGRIND), reason="races a bcrypt against the marker's hold")
@pytest.mark.parametrize("password", ["right", "wrong"])
def test_a_late_runner_leaves_another_servers_marker_alone(shared, password):
    """A server whose verification outlasted its marker's hold (the marker
    expired, and another server claimed the credential since) neither
    overwrites the new owner's marker with its result (the right password)
    nor deletes it (a wrong one, in a section that keeps no refusal, has no
    result to share): the other server's waiters would run bcrypt too."""
    redis = Redis().start()
    # One turn and no backlog: once a quick verification has made the
    # usual time 10 ms, the marker is held about 2 s, and a cost-16 bcrypt
    # takes 3 s or more.
    srv = farm_server(shared, redis, name="late", extra="AuthHMACMaxVerifications 1\n"
                      "AuthHMACVerifyBacklog 0\nAuthHMACNegativeTTL 0")
    htpasswd(shared.users, "quick", "quick pass", cost=4)
    with open(shared.users, "a") as f:
        f.write(slow_line("slow", "slow farm pass", 16))
    sent = "slow farm pass" if password == "right" else "slow farm guess"
    answer = {}

    def login():
        answer["code"] = srv.status_code("/w/", "slow", sent)
        answer["at"] = time.monotonic()

    try:
        srv.start()
        assert srv.status_code("/w/", "quick", "quick pass") == 200
        t = threading.Thread(target=login)
        t.start()
        key = None
        for _ in range(500):
            key, claim = running_marker(redis)
            if key or "code" in answer:
                break
            time.sleep(0.01)
        assert key, "no marker while the slow verification ran"
        # The marker expires while the runner still verifies...
        while redis.cli("GET", key) == claim and "code" not in answer:
            time.sleep(0.01)
        assert "code" not in answer, "the verification was not late: no test"
        # ... and another server claims the credential, as a server does.
        other = "R" + os.urandom(16).hex()
        assert redis.cli("SET", key, other, "NX", "PX", "60000") == "OK"
        claimed = time.monotonic()
        t.join()
        assert answer["at"] > claimed, "the verification was not late: no test"
        assert answer["code"] == (200 if password == "right" else 401), answer
        assert redis.cli("GET", key) == other, (redis.cli("GET", key), other)
        st = srv.status()
        assert st["redis_errors"] == 0 and st["verifications"] == 2, st
        if password == "wrong":
            # A wrong password again (no negative cache here): the other
            # server's claim still runs, and this one waits for its result
            # in vain (at most 3 s), then verifies by itself.
            assert srv.status_code("/w/", "slow", sent) == 401
            st2 = srv.status()
            assert st2["farm_timeouts"] - st["farm_timeouts"] == 1, (st, st2)
            assert st2["verifications"] == 3 and st2["farm_late"] == 0, st2
    finally:
        finish(srv)
        redis.cleanup()


@pytest.mark.slow
def test_hits_on_one_server_keep_the_entry_alive_for_the_farm(shared):
    """Under a 3-second idle timeout, hits on A extend the entry in Redis
    too: B finds it (a redis-hit, no bcrypt) well after the TTL from its
    verification has passed."""
    redis = Redis().start()
    # NB: B's lookup is its first use of Redis (a connect and AUTH): a
    # timeout that a sanitized build on a busy machine stays within; this
    # test is about the refresh, not about timeouts.
    conf = "AuthHMACCacheTTL 3\nAuthHMACRedisTimeout 1000"
    a = farm_server(shared, redis, extra=conf, name="idleA").start()
    b = farm_server(shared, redis, extra=conf, name="idleB").start()
    try:
        htpasswd(shared.users, "kim", "kim keeps working")
        start = time.monotonic()
        for i in range(7):
            time.sleep(max(0.0, start + i - time.monotonic()))
            assert a.status_code("/w/", "kim", "kim keeps working") == 200
        assert a.notes("kim") == ["verified"] + ["hit"] * 6
        st = a.status()
        assert st["refreshes"] >= 2 and st["redis_errors"] == 0, st
        before = b.status()
        assert b.status_code("/w/", "kim", "kim keeps working") == 200
        assert note_of_last(b, "kim") == "redis-hit"
        assert delta(b, before)["verifications"] == 0
    finally:
        finish(a)
        finish(b)
        redis.cleanup()


@pytest.mark.parametrize("kind", ["acl-user", "unix-socket"])
def test_acl_user_and_unix_socket(shared, kind):
    if kind == "acl-user":
        # The ACL docs/security.md gives, as it gives it: the module's keys,
        # and the commands it sends (EVAL for the farm marker's result and
        # the throttle's counts, MGET for the throttle's bans), with the
        # throttle on as the module's defaults have it.
        with open(os.path.join(TOP, "docs", "security.md")) as f:
            rules = re.search(r"ACL SETUSER authn-hmac on >LONG-RANDOM-PASSWORD (.*)",
                              f.read()).group(1)
        redis = Redis(password="default-user-pass", acl_user=("app", "app-user-pass"),
                      acl_rules=rules).start()
        srv = farm_server(shared, redis, auth=False,
                          extra="AuthHMACCacheSize 0\nAuthHMACRedisAuthFile %s" %
                          redis.auth_file(os.path.join(shared.dir, "auth"),
                                          "app app-user-pass"))
        srv.secrets.add("app-user-pass")
    else:
        redis = Redis(unix=True).start()
        srv = farm_server(shared, redis, extra="AuthHMACCacheSize 0")
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200
        assert note_of_last(srv, "alice") == "redis-hit"
        # A wrong password: the throttle's bans looked up, the guess
        # counted, the marker's result written.
        assert srv.status_code("/w/", "alice", "not alice's pass") == 401
        st = srv.status()
        assert st["verifications"] == 2 and st["redis_hits"] == 1
        assert st["redis_errors"] == 0 and st["redis_timeouts"] == 0, st
        finish(srv)
    finally:
        srv.cleanup()
        redis.cleanup()


def test_a_command_the_acl_refuses_is_logged(shared):
    """An ACL user without +del: the farm marker's script runs DEL only to
    clear a claim whose result is not shared (a wrong password where
    AuthHMACNegativeTTL is 0), lone failures that never open the breaker and
    were logged at debug only. They are logged at warn (AHMAC0032), with
    Redis's text, and the throttle's ban still holds on this server."""
    redis = Redis(password="default-user-pass", acl_user=("app", "app-user-pass"),
                  acl_rules="~authn_hmac:* -@all +get +set +eval +mget").start()
    srv = farm_server(shared, redis, auth=False,
                      extra="AuthHMACMaxFailures 2\nAuthHMACRedisAuthFile %s" %
                      redis.auth_file(os.path.join(shared.dir, "auth"), "app app-user-pass"))
    srv.secrets.add("app-user-pass")
    srv.body = 'Alias /w/ "%s/htdocs/"\n' % srv.dir + hmac_location(
        "/w/", shared.users, "wiki", "AuthHMACNegativeTTL 0")
    srv.write_config()
    try:
        srv.start()
        for i in range(3):
            assert srv.status_code("/w/", "alice", "guess %d" % i) == 401
        assert note_of_last(srv, "alice") == "throttled"
        log = srv.error_log()
        assert re.search(r"\[authn_hmac:warn\].*AHMAC0032: Redis at .* refused a command of the "
                         r"module \(EVAL.*ERR The user executing the script can't run "
                         r"this command", log), log
        assert srv.status()["redis_errors"] >= 1
        finish(srv, r"AHMAC0032: Redis at", r"AHMAC0029: user alice")
    finally:
        srv.cleanup()
        redis.cleanup()


# NB: timing-bound: the breaker opens on a third failure within 10 s, and
# against httpd -X under valgrind on a busy machine the requests that make
# them can span more (its failures were counted 4, the breaker still
# closed); the sanitized run covers these paths.
@pytest.mark.slow
@pytest.mark.parametrize("what", ["password", "database"])
def test_wrong_secret_or_database_falls_back(shared, what):
    redis = Redis(password="the-right-redis-pass").start()
    if what == "password":
        srv = farm_server(shared, redis, auth=False,
                          extra="AuthHMACRedisAuthFile %s" % redis.auth_file(
                              os.path.join(shared.dir, "auth"), "a-wrong-redis-pass"))
        srv.secrets.add("a-wrong-redis-pass")
        why = r"AUTH refused: (WRONGPASS|ERR invalid password).* \(the password in " \
              r"AuthHMACRedisAuthFile's file\)"
    else:
        srv = farm_server(shared, redis, extra="AuthHMACRedisDatabase 99")
        why = r"SELECT refused: ERR DB index is out of range"
    try:
        srv.start()
        for _ in range(3):
            assert srv.status_code("/w/", "alice", "alice farm pass") == 200
            assert srv.status_code("/w/", "alice", "wrong") == 401
        st = srv.status()
        assert st["redis_errors"] == 2 and st["redis_hits"] == 0
        # 1 right (then shm hits), 1 wrong (then the negative cache, before
        # Redis is asked).
        assert st["verifications"] == 2 and st["negative_hits"] == 2
        # A third failure within the window opens the breaker and logs it.
        for i in range(2):
            assert srv.status_code("/w/", "alice", "wrong %d" % i) == 401
        st = srv.status()
        assert st["redis_errors"] == 3 and st["redis_skipped"] >= 1
        log = srv.error_log()
        warnings = re.findall(OUTAGE + ".*", log)
        assert len(warnings) == 1, warnings
        assert re.search(why, warnings[0]), warnings[0]
        finish(srv, OUTAGE)
    finally:
        srv.cleanup()
        redis.cleanup()


@pytest.mark.skipif(VALGRIND is not None,
                    reason="graceful restarts: httpd -X under valgrind has no new generation")
def test_a_restart_with_new_redis_settings_starts_the_tier_afresh(shared):
    """A wrong Redis password opens the breaker, and the outage is logged
    with its reason. A graceful restart with other settings (the right
    password, a database Redis refuses) starts the tier afresh: the new
    error is logged with its own reason, not hidden by the old outage;
    and a restart with working settings shares through Redis at once, not
    after the old breaker's backoff."""
    redis = Redis(password="the-right-redis-pass").start()
    wrong = redis.auth_file(os.path.join(shared.dir, "wrong-auth"), "a-wrong-redis-pass")
    right = redis.auth_file(os.path.join(shared.dir, "right-auth"), "the-right-redis-pass")
    srv = farm_server(shared, redis, auth=False,
                      extra="AuthHMACCacheSize 0\nAuthHMACRedisAuthFile %s" % wrong)
    srv.secrets.update({"a-wrong-redis-pass", "the-right-redis-pass"})
    base = srv.global_conf

    def outages():
        return re.findall(OUTAGE + ".*", srv.error_log())
    try:
        srv.start()
        # Three failures within the window open the breaker.
        for i in range(3):
            assert srv.status_code("/w/", "alice", "wrong %d" % i) == 401
        assert len(outages()) == 1 and "AUTH refused" in outages()[0], outages()
        srv.global_conf = base.replace(wrong, right) + "\nAuthHMACRedisDatabase 99\n"
        srv.write_config()
        srv.restart(graceful=True)
        for i in range(3):
            assert srv.status_code("/w/", "alice", "still wrong %d" % i) == 401
        assert len(outages()) == 2 and "SELECT refused" in outages()[1], outages()
        srv.global_conf = base.replace(wrong, right)
        srv.write_config()
        srv.restart(graceful=True)
        before = srv.status()
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200
        assert note_of_last(srv, "alice") == "redis-hit"
        assert delta(srv, before)["redis_errors"] == 0
        finish(srv, OUTAGE, r"AHMAC0005: Redis at .* is available again")
    finally:
        srv.cleanup()
        redis.cleanup()


@pytest.mark.slow
def test_outage_under_load_never_fails_a_request(shared):
    """kill -9 the Redis server during 20 s of ab -k -c 16, then start it
    again. Shared memory is off so that every request goes to Redis."""
    redis = Redis().start()
    # NB: a fixed set of children. While Redis is down every request runs
    # bcrypt and the MPM would start more children, then retire them when it
    # is back; a retiring child closes its idle keep-alive connections, and
    # ab counts a request it had just sent on one as a failed "Length". That
    # is httpd's process management, not this module: keep it out.
    # NB: and a 1 s timeout. The outage here is a kill, which Redis's
    # clients see at once (a reset, then a refused connect). Under this
    # load ab, 64 threads, bcrypt and redis-server share 2 cores, and
    # redis-server is sometimes not run for over 50 ms: with the default
    # timeout that stall was logged as an outage of its own (CI, 3 runs
    # in 10). Timeouts have their own test (the hung Redis below).
    srv = farm_server(shared, redis, mpm="event",
                      extra="AuthHMACCacheSize 0\nStartServers 2\nThreadsPerChild 32\n"
                            "MinSpareThreads 1\nMaxSpareThreads 128\nMaxRequestWorkers 128\n"
                            "AuthHMACRedisTimeout 1000")
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200  # warm
        # NB: and every thread's Redis connection made, as on a server that
        # has been running: a connect under a cold start's load may miss
        # the 50 ms once, which is not the outage measured here.
        srv.ab("/w/", "alice", "alice farm pass", n=3200, c=16)
        mark = len(srv.error_log())
        children = set(srv.children())
        result = {}

        def load():
            result["ab"] = srv.ab("/w/", "alice", "alice farm pass", n=10000000, c=16,
                                  seconds=20)
        t = threading.Thread(target=load)
        t.start()
        time.sleep(5)
        redis.kill9()
        time.sleep(5)
        redis.start()
        t.join()
        complete, failed, non2xx, out = result["ab"]
        assert set(srv.children()) == children  # none started or retired
        assert complete > 100, out
        assert failed == 0 and non2xx == 0, (
            out + "\n".join(l for l in srv.access_log() if not l.startswith("alice 200 "))
            + srv.error_log()[mark:][-4000:])
        st = srv.status()
        assert st["redis_errors"] + st["redis_timeouts"] >= 1
        assert st["redis_hits"] > 0 and st["verifications"] >= 2
        log = srv.error_log()[mark:]
        assert len(re.findall(OUTAGE, log)) == 1, log
        assert len(re.findall(r"\[authn_hmac:notice\].*Redis at .* is back after", log)) == 1, log
        finish(srv, OUTAGE)
    finally:
        srv.cleanup()
        redis.cleanup()


@pytest.mark.slow
def test_hung_redis_costs_one_timeout_then_the_breaker_holds(shared):
    redis = Redis().start()
    srv = farm_server(shared, redis, extra="AuthHMACRedisTimeout 50")
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200  # pool warm
        st = srv.status()
        bcrypt = st["verify_seconds"] / st["verifications"]
        # Cost 4: the breaker's first wait is 2 s, and the requests after it
        # opens must all fall within it (at cost 12 two bcrypts on a slow
        # machine outlasted it, and a probe was counted as a wait; CI).
        for i in range(6):
            htpasswd(shared.users, "hung%d" % i, "hung pass %d" % i, cost=4)
        redis.pause()
        try:
            t0 = time.monotonic()
            assert srv.status_code("/w/", "hung0", "hung pass 0") == 200
            elapsed = time.monotonic() - t0
            # One 50 ms timeout plus one bcrypt, with room for a slow machine.
            assert elapsed < 0.05 + bcrypt * 1.5 + 0.3, (elapsed, bcrypt)
            for i in range(1, 4):
                assert srv.status_code("/w/", "hung%d" % i, "hung pass %d" % i) == 200
            st = srv.status()
            assert st["redis_breaker_open"] == 1, st
            waits = st["redis_timeouts"] + st["redis_errors"]
            assert 1 <= waits <= 3
            for i in range(4, 6):
                assert srv.status_code("/w/", "hung%d" % i, "hung pass %d" % i) == 200
            st = srv.status()
            assert st["redis_timeouts"] + st["redis_errors"] == waits  # no more waits
            assert st["redis_skipped"] >= 2
        finally:
            redis.resume()
        finish(srv, OUTAGE)
    finally:
        srv.cleanup()
        redis.cleanup()


def test_redis_down_at_start_is_not_an_error(shared):
    redis = Redis()  # never started
    srv = farm_server(shared, redis, auth=False)
    try:
        srv.start()
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200
        assert srv.status_code("/w/", "alice", "alice farm pass") == 200
        assert srv.status_code("/w/", "alice", "bad") == 401
        finish(srv, OUTAGE)
    finally:
        srv.cleanup()
        redis.cleanup()


CONFIG_ERRORS = [
    ("AuthHMACRedisServer 127.0.0.1:6379", False,
     "AuthHMACRedisServer needs AuthHMACPepperFile"),
    ("AuthHMACRedisServer 127.0.0.1:99999", True, "AuthHMACRedisServer: '127.0.0.1:99999': bad port"),
    ("AuthHMACRedisServer ::1:6379", True, "needs [brackets]"),
    ("AuthHMACRedisServer 127.0.0.1\nAuthHMACRedisTimeout 0", True,
     "AuthHMACRedisTimeout: '0' is too small (milliseconds from 1 to"),
    ("AuthHMACRedisServer 127.0.0.1\nAuthHMACRedisTimeout 50ms", True,
     "AuthHMACRedisTimeout: '50ms' is not a whole number (milliseconds"),
    ("AuthHMACRedisServer 127.0.0.1\nAuthHMACRedisDatabase -1", True,
     "AuthHMACRedisDatabase: '-1' is not a number (a database number"),
    ("AuthHMACRedisServer 127.0.0.1\nAuthHMACRedisPrefix \"a b\"", True,
     "AuthHMACRedisPrefix: 'a b' is not valid"),
]


@pytest.mark.parametrize("conf,with_pepper,message", CONFIG_ERRORS)
def test_bad_redis_configuration_is_refused(shared, conf, with_pepper, message):
    srv = Httpd(name="redisconf")
    try:
        srv.global_conf = (("AuthHMACPepperFile %s\n" % shared.pepper) if with_pepper else "") + conf
        srv.write_config()
        rc, out = srv.configtest()
        assert rc != 0 and message in out, out
    finally:
        srv.cleanup()


def test_redis_auth_file_permissions(shared):
    srv = Httpd(name="redisconf")
    try:
        path = srv.path("auth")
        with open(path, "w") as f:
            f.write("super secret redis pass\n")
        os.chmod(path, 0o644)
        srv.global_conf = "AuthHMACPepperFile %s\nAuthHMACRedisServer 127.0.0.1\n" \
                          "AuthHMACRedisAuthFile %s" % (shared.pepper, path)
        srv.write_config()
        rc, out = srv.configtest()
        assert rc != 0 and "AuthHMACRedisAuthFile" in out and "group or others" in out
        assert "super secret" not in out
    finally:
        srv.cleanup()
