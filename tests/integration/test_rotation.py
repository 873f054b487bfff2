"""A pepper rotation (AuthHMACPepperFile current [previous]) on a farm, as
docs/operations.md gives it: every server learns the new file as previous,
then the order flips, then the old file goes; by graceful restarts under
load, with no verification of a cached user and no failed request. And a
Redis value made with a pepper that is neither current nor previous grants
nothing."""
import http.client
import os
import re
import threading
import time

import pytest

from harness import VALGRIND, Httpd, Redis, Workers, basic, hmac_location, htpasswd
from harness.farm import FarmFiles
from test_redis import farm_server

USERS = ["user%02d" % i for i in range(50)]


def password(user):
    return "pass of %s" % user


def pepper_file(path):
    with open(path, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(path, 0o600)
    return path


def use_peppers(srv, *files):
    """The server's AuthHMACPepperFile line: current, then previous."""
    srv.global_conf = re.sub(r"(?m)^AuthHMACPepperFile .*$",
                             "AuthHMACPepperFile " + " ".join(files), srv.global_conf)
    srv.write_config()


class Load(Workers):
    """Each server in a loop over the 50 cached users, on keep-alive
    connections: every status; an exception only on a fresh connection (a
    kept one that the server closed, as a graceful restart's old child does,
    is opened again and the request sent again, as browsers do)."""
    join_timeout = 60

    def __init__(self, servers):
        self.statuses, self.errors = [], []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(s,)) for s in servers]

    def run(self, srv):
        conn, reused, i = None, False, 0
        while not self.stop.is_set():
            user = USERS[i % len(USERS)]
            try:
                if conn is None:
                    conn, reused = http.client.HTTPConnection("127.0.0.1", srv.port,
                                                              timeout=30), False
                conn.request("GET", "/w/", headers={
                    "Authorization": basic(user, password(user))})
                r = conn.getresponse()
                r.read()
                self.statuses.append(r.status)
                i += 1
                reused = True
                if r.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                if not reused:
                    self.errors.append(repr(e))
                    i += 1
                conn = None


def redis_user_keys(redis):
    """The user entries' keys (prefix and a user id in hex)."""
    return {k for k in redis.cli("--scan").split()
            if re.fullmatch(r".*[0-9a-f]{64}", k) and ":f:" not in k}


@pytest.mark.slow
def test_rotation_on_a_farm_under_load():
    redis = Redis(password=None).start()
    shared = FarmFiles(prefix="authn_hmac_rotation_")
    for user in USERS + ["zed"]:
        htpasswd(shared.users, user, password(user), cost=4)
    old = shared.pepper
    new = pepper_file(os.path.join(shared.dir, "pepper.new"))
    rogue = pepper_file(os.path.join(shared.dir, "pepper.rogue"))
    a = farm_server(shared, redis, name="rotA")
    b = farm_server(shared, redis, name="rotB")
    c = None
    try:
        for s in (a, b):
            s.start()
        # 50 users cached on both servers: verified on A, from Redis on B.
        for user in USERS:
            assert a.status_code("/w/", user, password(user)) == 200
            assert b.status_code("/w/", user, password(user)) == 200
        assert b.status()["verifications"] == 0
        before = {s: s.status()["verifications"] for s in (a, b)}
        with Load([a, b]) as load:
            time.sleep(1)
            # 1. Every server learns the new file as previous.
            for s in (a, b):
                use_peppers(s, old, new)
                s.restart()
            time.sleep(1)
            # 2. The order flips, one server after the other: B reads what
            # A now writes under the new pepper as its previous one's.
            use_peppers(a, new, old)
            a.restart()
            time.sleep(1)
            use_peppers(b, new, old)
            b.restart()
            time.sleep(1)
            hits = {s: s.status()["previous_hits"] for s in (a, b)}

            # A value made with a pepper that is neither current nor
            # previous, put under zed's key: nothing. (C is a server of that
            # pepper, on the same Redis: its value for zed's right password,
            # copied.) Zed is no user of the load.
            keys0 = redis_user_keys(redis)
            assert a.status_code("/w/", "zed", password("zed")) == 200
            (zed_key,) = redis_user_keys(redis) - keys0
            c = farm_server(shared, redis, name="rotC")
            use_peppers(c, rogue)
            c.start()
            assert c.status_code("/w/", "zed", password("zed")) == 200
            (rogue_key,) = redis_user_keys(redis) - keys0 - {zed_key}
            redis.cli("SET", zed_key, redis.cli("GET", rogue_key))
            st0 = b.status()
            assert b.status_code("/w/", "zed", "not zed's") == 401
            assert b.status_code("/w/", "zed", password("zed")) == 200
            st = b.status()
            assert st["redis_hits"] == st0["redis_hits"], (st0, st)
            assert st["redis_forged"] > st0["redis_forged"], (st0, st)
            assert st["verifications"] == st0["verifications"] + 2, (st0, st)
            assert st["previous_hits"] == st0["previous_hits"], (st0, st)

            # 3. The old file goes.
            for s in (a, b):
                use_peppers(s, new)
                s.restart()
            time.sleep(1)
        assert load.errors == [], load.errors[:5]
        assert load.statuses and set(load.statuses) == {200}, \
            {c_: load.statuses.count(c_) for c_ in set(load.statuses)}
        # No verification of a cached user on either server (but zed's
        # on each, and the rogue value's two on B), through the three steps.
        for s, more in ((a, 1), (b, 2)):
            st = s.status()
            assert st["verifications"] == before[s] + more, (s.name, st)
            assert hits[s] >= 1, (s.name, hits)
            print("%s: previous_hits %d, hits %d, verifications %d"
                  % (s.name, hits[s], st["hits"], st["verifications"]))
        print("%d requests under load through the three steps, all 200"
              % len(load.statuses))
        # Every user once more, fresh from Redis on a server whose memory
        # holds nothing: B's, stopped and started (a new segment; a restart,
        # even a full one, keeps it), finds the values stored again under
        # the new pepper.
        b.stop()
        b.start()
        for user in USERS:
            assert b.status_code("/w/", user, password(user)) == 200
        st = b.status()
        assert st["verifications"] == 0 and st["redis_hits"] == len(USERS), st
        for s in (a, b):
            assert "AuthHMACPepperFile" not in s.error_log()
        # Nothing else went wrong through the steps: no index that would not
        # verify or was kept apart (AHMAC0026), no forged value but the
        # rogue one, no warning the harness does not expect.
        problems = []
        for s in (a, b, c):
            s.stop()
            problems += ["%s: %s" % (s.name, p) for p in s.log_problems()]
        assert not [p for p in problems if "AHMAC0006" not in p], problems
        for s in (a, b):
            assert "AHMAC0026" not in s.error_log(), s.error_log()[-3000:]
    finally:
        for s in (a, b, c):
            if s:
                s.stop()
                s.cleanup()
        redis.cleanup()
        shared.cleanup()


def test_the_previous_file_gets_the_same_checks():
    """The second file is read as the first is: mode, owner, size; an error
    names it; the same pepper twice is refused."""
    shared = FarmFiles(prefix="authn_hmac_rotation_")
    redis = Redis(password=None).start()
    try:
        srv = farm_server(shared, redis, name="rotcheck")
        loose = pepper_file(os.path.join(shared.dir, "pepper.loose"))
        os.chmod(loose, 0o644)
        use_peppers(srv, shared.pepper, loose)
        rc, out = srv.configtest()
        assert rc != 0 and "AuthHMACPepperFile: the previous pepper: " in out, out
        assert "pepper.loose" in out, out
        use_peppers(srv, shared.pepper, shared.pepper)
        rc, out = srv.configtest()
        assert rc != 0 and "hold the same pepper" in out, out
        short = os.path.join(shared.dir, "pepper.short")
        with open(short, "wb") as f:
            f.write(b"x" * 8)
        os.chmod(short, 0o600)
        use_peppers(srv, shared.pepper, short)
        rc, out = srv.configtest()
        assert rc != 0 and "the previous pepper: " in out, out
        use_peppers(srv, shared.pepper, pepper_file(os.path.join(shared.dir, "p2")))
        rc, out = srv.configtest()
        assert rc == 0, out
    finally:
        redis.cleanup()
        shared.cleanup()


@pytest.mark.skipif(bool(VALGRIND), reason="httpd -X cannot restart")
def test_a_missing_pepper_file_stops_httpd_naming_it(tmp_path):
    """Issue 37: a pepper file named in AuthHMACPepperFile that is gone
    (the rotation's old file removed while it is still the second path, or
    the current one) stops a restart and `httpd -t`, with a message that
    names the directive, the file and what to do: never a silent random
    pepper (each server its own, the farm no longer sharing). The running
    generation keeps serving."""
    srv = Httpd(name="rotgone")
    try:
        old = pepper_file(srv.path("pepper.old"))
        new = pepper_file(srv.path("pepper"))
        srv.global_conf = "AuthHMACPepperFile %s %s" % (new, old)
        srv.body = hmac_location("/w/", srv.path("users"), "w")
        htpasswd(srv.path("users"), "alice", "alice pass", cost=4, create=True)
        srv.write_config()
        srv.start()
        assert srv.status_code("/w/", "alice", "alice pass") in (200, 404)
        # Step 3 done in the wrong order: the old file goes first.
        os.unlink(old)
        rc, out = srv.configtest()
        assert rc != 0, out
        assert "AuthHMACPepperFile: the previous pepper: cannot open '%s'" % old in out, out
        assert "remove '%s' from AuthHMACPepperFile" % old in out, out
        p = srv._run("-k", "graceful")
        assert p.returncode != 0 and "cannot open '%s'" % old in p.stdout + p.stderr, p
        # The running server was not touched: same pepper, a hit.
        assert srv.status_code("/w/", "alice", "alice pass") in (200, 404)
        assert srv.status()["pepper_random"] == 0
        # The current pepper gone: the message says how to make one.
        use_peppers(srv, srv.path("pepper.none"))
        rc, out = srv.configtest()
        assert rc != 0, out
        assert "AuthHMACPepperFile: cannot open '%s'" % srv.path("pepper.none") in out, out
        assert "authn-hmac-pepper %s" % srv.path("pepper.none") in out, out
        # Done in the documented order: the second path first, then the file.
        use_peppers(srv, new)
        srv.restart()
        assert srv.status_code("/w/", "alice", "alice pass") in (200, 404)
        assert srv.status()["pepper_random"] == 0
        srv.stop()
        assert "random pepper" not in srv.error_log()
        assert not srv.log_problems()
    finally:
        srv.cleanup()
