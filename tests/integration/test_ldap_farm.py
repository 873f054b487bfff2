"""A wrapped provider (AuthHMACProvider ldap) on a farm of two servers
sharing Redis, against a real slapd with the password policy overlay,
under a steady load of cached requests on both servers (issue 39):
- a user deleted, locked (pwdAccountLockedTime) or whose password changed
  is refused on both servers within AuthHMACRecheck plus one request, and
  the directory sees at most one bind per user per recheck for the whole
  farm (counted in slapd's stats log);
- slapd stopped: once the directory has failed for two distinct users
  (here a new login, which gets a 500 at once), users it confirmed keep
  200 (offline-hit) for AuthHMACOfflineGrace and then get today's answer
  (a 500); before that, a first user's requests get today's answer, no request waits longer than the provider's
  timeout; slapd back: AHMAC0042 in the log, offline_since_seconds 0."""
import os
import threading
import time

import pytest

from harness import VALGRIND
from harness.slapd import Slapd, available
from test_ldap import section
from test_redis import Shared, Redis, farm_done, farm_server

pytestmark = [pytest.mark.skipif(not available(), reason="slapd and ldap-utils are not installed"),
              pytest.mark.skipif(bool(VALGRIND), reason="libldap's allocations at exit; restarts")]

RECHECK = 2  # a 2 s recheck (shipped: 60 s) keeps the test short
GRACE = 8    # an 8 s offline grace (shipped: 1 h) keeps the test short
TIMEOUT = 3  # LDAPConnectionTimeout: what a request may wait at most
USERS = ("alice", "bob", "carol", "dave", "erin", "frank")


@pytest.fixture(scope="module")
def ldap_farm():
    ldap = Slapd(ppolicy=True).start()
    for user in USERS:
        ldap.add_user(user, "%s ldap pass" % user)
    shared, redis = Shared(), Redis().start()
    servers = []
    for name in ("ldapA", "ldapB"):
        srv = farm_server(shared, redis, name=name, mpm="event",
                          modules=["ldap", "authnz_ldap"],
                          extra="LDAPCacheTTL 0\nLDAPOpCacheEntries 0\n"
                                "LDAPConnectionTimeout %d\n" % TIMEOUT)
        srv.body = section("/w/", ldap, "AuthHMACRecheck %d" % RECHECK,
                           "AuthHMACOfflineGrace %d" % GRACE)
        srv.write_config()
        os.makedirs(srv.path("htdocs", "w"), exist_ok=True)
        with open(srv.path("htdocs", "w", "index.html"), "w") as f:
            f.write("page\n")
        servers.append(srv.start())
    yield ldap, servers
    ldap.cleanup()
    farm_done(shared, redis, *servers)


class Load(threading.Thread):
    """Requests of user's credential on both servers in turn, each
    recorded as (start, end, server, status)."""

    def __init__(self, servers, user, password):
        super().__init__(daemon=True)
        self.servers, self.user, self.password = servers, user, password
        self.seen, self.done = [], threading.Event()

    def run(self):
        i = 0
        while not self.done.is_set():
            srv = self.servers[i % 2]
            t0 = time.monotonic()
            code = srv.status_code("/w/", self.user, self.password)
            self.seen.append((t0, time.monotonic(), srv.name, code))
            i += 1
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.join()


def test_leavers_are_refused_on_both_servers_within_the_recheck(ldap_farm):
    ldap, servers = ldap_farm
    a, b = servers
    changes = {"bob": lambda: ldap.delete("bob"),
               "carol": lambda: ldap.lock("carol"),
               "dave": lambda: ldap.passwd("dave", "dave's new pass")}
    before = {srv.name: srv.status()["rechecks"] for srv in servers}
    loads = {u: Load(servers, u, "%s ldap pass" % u) for u in changes}
    start = time.monotonic()
    for load in loads.values():
        load.start()
    # A steady load for three rechecks: one bind per user per recheck for
    # the whole farm (and the first).
    time.sleep(3 * RECHECK + 0.5)
    steady = time.monotonic() - start
    binds = {u: ldap.binds(u) for u in changes}
    for u, load in loads.items():
        assert [c for _, _, _, c in load.seen] == [200] * len(load.seen), (u, load.seen)
        assert len(load.seen) >= 20, (u, len(load.seen))
        assert 2 <= binds[u] <= int(steady / RECHECK) + 2, (u, binds[u], steady, a.notes(u), b.notes(u))
    rechecks = sum(srv.status()["rechecks"] - before[srv.name] for srv in servers)
    assert 3 * 2 <= rechecks <= sum(binds.values()), rechecks
    done = {}
    for u, change in changes.items():
        change()
        done[u] = time.monotonic()
    time.sleep(RECHECK + 1.5)
    for load in loads.values():
        load.stop()
    for u, load in loads.items():
        for srv in servers:
            mine = [(t0, t1, c) for t0, t1, name, c in load.seen if name == srv.name]
            first = next(i for i, (_, _, c) in enumerate(mine) if c == 401)
            # Within the recheck after the change, plus one request; and
            # refused from then on.
            assert mine[first][0] <= done[u] + RECHECK + 0.5, (u, srv.name, mine[first], done[u])
            assert [c for _, _, c in mine[first:]] == [401] * (len(mine) - first), (u, srv.name)
            assert all(c == 200 for _, _, c in mine[:first])
    # dave's new password works at once.
    assert a.status_code("/w/", "dave", "dave's new pass") == 200
    assert b.status_code("/w/", "dave", "dave's new pass") in (200,)


def test_a_burst_past_the_recheck_binds_once(ldap_farm):
    """Concurrent requests whose grant is past its recheck, on both
    servers: one bind for the farm (the server's flight, the farm's
    marker), the others take its answer."""
    ldap, servers = ldap_farm
    for srv in servers:
        assert srv.status_code("/w/", "erin", "erin ldap pass") == 200
    time.sleep(RECHECK + 0.3)
    before = ldap.binds("erin")
    codes = []

    def one(srv):
        codes.append(srv.status_code("/w/", "erin", "erin ldap pass"))

    threads = [threading.Thread(target=one, args=(servers[i % 2],)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 16, codes
    assert ldap.binds("erin") - before == 1
    notes = servers[0].notes("erin")[1:] + servers[1].notes("erin")[1:]
    assert notes.count("verified") == 1, notes
    assert set(notes) <= {"verified", "coalesced", "redis-hit", "hit"}, notes


def test_an_outage_logs_no_one_out(ldap_farm):
    """(After the leavers: it stops slapd.)"""
    ldap, servers = ldap_farm
    a, b = servers
    for srv in servers:
        assert srv.status_code("/w/", "alice", "alice ldap pass") == 200
        srv.expect_log(r"AHMAC0041: a source of users fails")
        srv.expect_log(r"Can't contact LDAP server")
        srv.expect_log(r"AH01(695|697|702)")
    load = Load(servers, "alice", "alice ldap pass")
    load.start()
    time.sleep(RECHECK + 0.5)
    ldap.stop()
    stopped = time.monotonic()
    # A new login: today's answer at once; a second user's error (after
    # alice's, or before it), it makes the error an outage of the source.
    confirmed = {}
    for srv in servers:
        t0 = time.monotonic()
        assert srv.status_code("/w/", "frank", "frank ldap pass") == 500
        confirmed[srv.name] = time.monotonic()
        assert confirmed[srv.name] - t0 < TIMEOUT + 1
        assert srv.notes("frank")[-1] == "error"
    time.sleep(GRACE + 1.5)
    load.stop()
    for srv in servers:
        seen = [(t0, t1, c) for t0, t1, name, c in load.seen if name == srv.name]
        # Before frank's error: alice's 500s, the first user's (an error
        # of one account is no outage of the source).
        assert {c for t0, _, c in seen if t0 < confirmed[srv.name]} <= {200, 500}
        mine = [x for x in seen if x[0] >= confirmed[srv.name]]
        first = next(i for i, (_, _, c) in enumerate(mine) if c != 200)
        # 200 for the grace from alice's last confirmation (at most a
        # recheck before the stop), then a 500, as without the module.
        assert mine[first][0] >= stopped + GRACE - RECHECK - 0.5, (srv.name, mine[first], stopped)
        assert mine[first][0] <= stopped + GRACE + 0.5, (srv.name, mine[first], stopped)
        assert [c for _, _, c in mine[first:]] == [500] * (len(mine) - first), srv.name
        assert max(t1 - t0 for t0, t1, _ in mine) < TIMEOUT + 1
        notes = srv.notes("alice")
        assert "offline-hit" in notes, notes
        st = srv.status()
        assert st["offline_hits"] > 0 and st["offline_since_seconds"] > 0, st
    # slapd back: each server's next ask ends its outage, in the log and
    # on the page (alice asked on A; frank, never cached, on B).
    ldap.start()
    assert a.status_code("/w/", "alice", "alice ldap pass") == 200
    assert a.notes("alice")[-1] == "verified", a.notes("alice")
    assert b.status_code("/w/", "frank", "frank ldap pass") == 200
    assert b.notes("frank")[-1] == "verified", b.notes("frank")
    for srv in servers:
        assert srv.status()["offline_since_seconds"] == 0
        assert "AHMAC0042: a source of users answers again" in srv.error_log()
