"""SQL through mod_dbd on PostgreSQL (AuthHMACDBDUserPWQuery, DBDriver
pgsql), against a private cluster: the shape of test_backends' SQLite
tests. The module reads the stored hash once per user per AuthHMACRecheck
(1 s) for the farm and verifies it itself; the hash is in the credential's
key, so an UPDATE is refused within the recheck and a request, on every
child and on a second server sharing Redis; a database that does not
answer serves, for AuthHMACOfflineGrace, only the credentials it confirmed,
and is a 500 for anything else, never a grant."""
import pytest

from conftest import MPMS
from harness import Httpd, changed_default, hmac_location
from harness.postgres import Postgres, available
import time

from test_backends import (GRACE_0, RECHECK_0, bcrypt, page, queries_under_load,
                           removal_reaches_the_farm, rows_behind_the_cache, sql_farm,
                           update_reaches_the_farm)
from test_redis import finish

pytestmark = pytest.mark.skipif(
    not available(), reason="postgresql or libaprutil1-dbd-pgsql is not installed")

QUERY = 'AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"'


@pytest.fixture
def pg():
    db = Postgres()
    try:
        yield db.start()
    finally:
        db.cleanup()


@pytest.fixture
def pg_logged():
    """A cluster that logs every statement (log_statement = all): the
    queries are counted in its log."""
    db = Postgres(log_statements=True)
    try:
        yield db.start()
    finally:
        db.cleanup()


def dbd_conf(pg):
    return 'DBDriver pgsql\nDBDParams "%s"\n' % pg.params


def pg_server(pg, name="pg", mpm=None, section=""):
    srv = Httpd(mpm=mpm, name=name, modules=["dbd"], global_conf=dbd_conf(pg))
    srv.body = hmac_location("/s/", None, "sql", QUERY, *([section] if section else []))
    srv.write_config()
    page(srv)
    return srv


@pytest.mark.mpm
@pytest.mark.parametrize("mpm", MPMS)
def test_postgres_through_mod_dbd_behind_the_cache(mpm, pg):
    pg.add_user("alice", bcrypt("alice pg pass"))
    pg.add_user("bob", bcrypt("bob pg pass"))
    pg.add_user("carol", "!" + bcrypt("carol pg pass"))
    rows_behind_the_cache(
        pg_server(pg, mpm=mpm, section=RECHECK_0), "pg",
        lambda h: pg.sql("UPDATE users SET hash = %s WHERE name = %s", h, "bob"),
        lambda: pg.sql("DELETE FROM users WHERE name = %s", "bob"))


def test_pg_update_reaches_a_second_server_sharing_redis(pg):
    """Two servers over one database and one Redis: a grant on A is a Redis
    hit on B; after an UPDATE of the hash, the old password is refused on
    both within the recheck (1 s) and one request."""
    pg.add_user("dora", bcrypt("dora pg pass"))
    update_reaches_the_farm(dbd_conf(pg), "pg", "dora pg pass",
                            lambda h: pg.sql("UPDATE users SET hash = %s WHERE name = %s", h,
                                             "dora"))


DBD_DOWN = r"\[dbd:error\].*(AH00629|AH00633|AH00639|AH02655)"  # mod_dbd's own lines
LOOKUP = r"AHMAC0033: could not look up user (erin|frank) with AuthHMACDBDUserPWQuery: "


@pytest.mark.parametrize("change", ["delete", "lock"])
def test_pg_removal_and_lock_reach_a_second_server_sharing_redis(pg, change):
    """A DELETE of dora's row, or a lock ('!' before her hash): refused on
    both servers within the recheck (1 s) and one request."""
    pg.add_user("dora", bcrypt("dora pg pass"))
    if change == "delete":
        removal_reaches_the_farm(dbd_conf(pg), "pgdel", "dora pg pass",
                                 lambda: pg.sql("DELETE FROM users WHERE name = %s", "dora"),
                                 "unknown-user")
    else:
        removal_reaches_the_farm(
            dbd_conf(pg), "pglock", "dora pg pass",
            lambda: pg.sql("UPDATE users SET hash = '!' || hash WHERE name = %s", "dora"),
            "denied")


@pytest.mark.slow  # load- or timing-bound (sleeps past the recheck, the grace)
def test_pg_farm_under_load_queries_once_per_user_per_recheck(pg_logged):
    """5 s of dora's cached requests on two servers sharing Redis: the
    queries of dora in PostgreSQL's log (log_statement = all) are at most
    one per second (the shipped AuthHMACRecheck) and one for the farm, and
    every request is served."""
    pg_logged.add_user("dora", bcrypt("dora sql pass"))
    hits, queries = queries_under_load(dbd_conf(pg_logged), "pgload",
                                       lambda a, b: pg_logged.queries("dora"))
    print("PostgreSQL farm, 5 s: hits %s, queries %d" % (hits, queries))


def recovered(srv, user, password):
    """After PostgreSQL is back: requests (connections of their own) may
    be 500s while mod_dbd's pooled sessions (one or more in each child)
    reconnect, never a 401 of a user that is there; within 200 requests,
    20 in a row are granted."""
    codes = []
    while len(codes) < 200 and codes[-20:] != [200] * 20:
        codes.append(srv.status_code("/s/", user, password))
    assert set(codes) <= {200, 500} and codes[-20:] == [200] * 20, (codes, srv.notes(user))


def test_postgres_down_is_a_500_never_a_grant(pg):
    """With no offline grace, stopped: a 500 and AHMAC0033 for every user,
    even one whose grant is cached, once the recheck (1 s) is due; started
    again: granted."""
    pg.add_user("erin", bcrypt("erin pg pass"))
    srv = pg_server(pg, name="pgdown", section=GRACE_0)
    try:
        srv.start()
        assert srv.status_code("/s/", "erin", "erin pg pass") == 200
        pg.stop()
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        codes = [srv.status_code("/s/", "frank", "frank's pass") for _ in range(5)]
        assert codes == [500] * 5, (codes, srv.notes("frank"))
        assert srv.notes("frank") == ["error"] * 5
        assert "AHMAC0033: could not look up user frank with " in srv.error_log()
        codes = [srv.status_code("/s/", "erin", "erin pg pass") for _ in range(5)]
        assert codes == [500] * 5, (codes, srv.notes("erin"))
        pg.start()
        recovered(srv, "erin", "erin pg pass")
    finally:
        finish(srv, LOOKUP, DBD_DOWN)


def test_a_restart_of_postgres_between_requests(pg):
    """A restart (a fast shutdown: mod_dbd's pooled sessions are ended)
    while no request came: the users are still there at the next ones. A
    query that fails while mod_dbd reconnects is an outage: erin, confirmed
    a moment before, is served from the cache (AHMAC0041, then AHMAC0042
    at the first answer)."""
    pg.add_user("erin", bcrypt("erin pg pass"))
    srv = pg_server(pg, name="pgrestart")
    try:
        srv.start()
        assert [srv.status_code("/s/", "erin", "erin pg pass") for _ in range(20)] == [200] * 20
        pg.stop()
        pg.start()
        recovered(srv, "erin", "erin pg pass")
        notes = srv.notes("erin")
        if "offline-hit" in notes:
            assert "AHMAC0041" in srv.error_log() and "AHMAC0042" in srv.error_log()
    finally:
        finish(srv, LOOKUP, DBD_DOWN, r"AHMAC004[12]")


def test_a_failing_query_is_a_500_never_a_grant(pg):
    pg.add_user("erin", bcrypt("erin pg pass"))
    srv = pg_server(pg, name="pgfail", section=GRACE_0)
    try:
        srv.start()
        assert srv.status_code("/s/", "erin", "erin pg pass") == 200
        # NB: a column, not the table: the prepared plan names the table by
        # its OID and would follow a renamed one.
        pg.psql("ALTER TABLE users RENAME COLUMN hash TO gone")
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        assert srv.status_code("/s/", "frank", "frank's pass") == 500
        assert srv.status_code("/s/", "erin", "erin pg pass") == 500
        assert srv.notes("frank") == ["error"] and srv.notes("erin")[-1] == "error"
    finally:
        finish(srv, LOOKUP)


@pytest.mark.slow  # load- or timing-bound (sleeps past the recheck, the grace)
def test_postgres_down_serves_confirmed_users_for_the_grace(pg):
    """Stopped: erin, verified before, keeps 200 (offline-hit) for the grace
    (3 s here) and then gets a 500; frank, a new login, a 500 at once; back:
    AHMAC0042 in the log and offline_since_seconds cleared."""
    pg.add_user("erin", bcrypt("erin pg pass"))
    srv = pg_server(pg, name="pggrace", section=changed_default(
        "a grace of seconds, to see it end within the test", AuthHMACOfflineGrace="3"))
    try:
        srv.start()
        assert srv.status_code("/s/", "erin", "erin pg pass") == 200
        pg.stop()
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        assert srv.status_code("/s/", "frank", "frank's pass") == 500
        assert srv.status_code("/s/", "erin", "erin pg pass") == 200
        assert srv.notes("erin")[-1] == "offline-hit"
        assert "AHMAC0041" in srv.error_log()
        assert srv.status()["offline_since_seconds"] > 0
        time.sleep(2.5)  # past the grace, counted from erin's last confirmation
        assert srv.status_code("/s/", "erin", "erin pg pass") == 500
        pg.start()
        recovered(srv, "erin", "erin pg pass")
        assert "AHMAC0042" in srv.error_log()
        assert srv.status()["offline_since_seconds"] == 0
    finally:
        finish(srv, LOOKUP, DBD_DOWN, r"AHMAC0041")


@pytest.mark.slow  # load- or timing-bound (sleeps past the recheck, the grace)
def test_postgres_down_on_a_farm_serves_confirmed_users_for_the_grace(pg):
    """Two servers sharing Redis, PostgreSQL stopped: erin, verified on A (a
    Redis hit on B), keeps 200 on both (offline-hit) for the grace (3 s
    here) and then gets a 500; frank, a new login, a 500 at once on both; no
    request waits out another server's claim (a stopped database refuses at
    once); back: AHMAC0042 and offline_since_seconds 0 on both."""
    pg.add_user("erin", bcrypt("erin pg pass"))
    grace = changed_default("a grace of seconds, to see it end within the test",
                            AuthHMACOfflineGrace="3")
    with sql_farm(dbd_conf(pg), "pgdown", section=grace,
                  allowed=(LOOKUP, DBD_DOWN, r"AHMAC004[12]")) as (a, b):
        assert a.status_code("/s/", "erin", "erin pg pass") == 200
        assert b.status_code("/s/", "erin", "erin pg pass") == 200
        assert b.notes("erin") == ["redis-hit"]
        pg.stop()
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        for srv in (a, b):
            t0 = time.monotonic()
            assert srv.status_code("/s/", "frank", "frank's pass") == 500
            assert srv.status_code("/s/", "erin", "erin pg pass") == 200
            assert time.monotonic() - t0 < 2, "a request waited"
            assert srv.notes("erin")[-1] == "offline-hit", srv.notes("erin")
            assert srv.status()["offline_since_seconds"] > 0
        time.sleep(2.5)  # past the grace, counted from erin's last confirmation
        assert [s.status_code("/s/", "erin", "erin pg pass") for s in (a, b)] == [500, 500]
        pg.start()
        for srv in (a, b):
            recovered(srv, "erin", "erin pg pass")
            assert "AHMAC0042" in srv.error_log()
            assert srv.status()["offline_since_seconds"] == 0
