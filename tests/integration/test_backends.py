"""Sources of users other than the htpasswd file, behind the same cache:
a DBM file as htdbm writes it (AuthHMACUserDBMFile, AuthHMACUserDBMType) and
SQL through mod_dbd (AuthHMACDBDUserPWQuery, SQLite here). The module reads
the stored hash and verifies it itself: the hash is in the credential's key,
so a changed or removed password is refused at the next request, on every
child. Unknown and locked users take a known user's path (a dummy
verification)."""
import base64
import contextlib
import http.client
import math
import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import MPMS
from harness import changed_default, COST, Httpd, Redis, free_port, hmac_location, htpasswd
from test_redis import Shared, farm_server, finish

HTDBM = shutil.which("htdbm")
SQLITE_DRIVER = "/usr/lib/x86_64-linux-gnu/apr-util-1/apr_dbd_sqlite3-1.so"


def htdbm(path, user, password, dbm_type, create=False, delete=False):
    """htdbm as an admin runs it: bcrypt of the tests' cost."""
    if delete:
        args = [HTDBM, "-x", "-T" + dbm_type, path, user]
    else:
        args = [HTDBM, "-b" + ("c" if create else "") + "B", "-C", str(COST),
                "-T" + dbm_type, path, user, password]
    subprocess.run(args, check=True, capture_output=True)
    for f in os.listdir(os.path.dirname(path)):
        if f.startswith(os.path.basename(path)):
            os.chmod(os.path.join(os.path.dirname(path), f), 0o644)


def bcrypt(password):
    """A bcrypt hash of password, as htpasswd -B makes it, for SQL rows."""
    out = subprocess.run([shutil.which("htpasswd"), "-nbB", "-C", str(COST), "x", password],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split(":", 1)[1]


def page(srv):
    """The page each section guards (/d/, /s/, /x/)."""
    for sub in ("d", "s", "x"):
        os.makedirs(srv.path("htdocs", sub), exist_ok=True)
        with open(srv.path("htdocs", sub, "index.html"), "w") as f:
            f.write("page\n")


def delta(srv, before):
    after = srv.status()
    return {k: after[k] - before[k] for k in before if isinstance(before[k], (int, float))}


def dbm_section(path, dbm_type, *extra):
    return hmac_location("/d/", None, "dbm", 'AuthHMACUserDBMFile "%s"' % path,
                         "AuthHMACUserDBMType %s" % dbm_type, *extra)


def revocation(srv, prefix, user, old, change, new, remove):
    """The old password refused at once after change(), on every child
    (connections of their own), the new one granted; then remove()."""
    assert srv.status_code(prefix, user, old) == 200
    assert srv.notes(user)[-1] == "verified"
    assert [srv.status_code(prefix, user, old) for _ in range(20)] == [200] * 20
    change()
    codes = [srv.status_code(prefix, user, old) for _ in range(20)]
    assert codes == [401] * 20, codes
    assert srv.status_code(prefix, user, new) == 200
    remove()
    assert srv.status_code(prefix, user, new) == 401


@pytest.mark.skipif(not HTDBM, reason="htdbm (apache2-utils) is not installed")
@pytest.mark.parametrize("mpm", MPMS)
@pytest.mark.parametrize("dbm_type", ["GDBM", "DB"])
def test_dbm_file_behind_the_cache(mpm, dbm_type):
    srv = Httpd(mpm=mpm, name="dbm")
    users = srv.path("users.dbm")
    htdbm(users, "alice", "alice dbm pass", dbm_type, create=True)
    htdbm(users, "bob", "bob dbm pass", dbm_type)
    srv.body = dbm_section(users, dbm_type.lower())
    srv.write_config()
    page(srv)
    try:
        srv.start()
        before = srv.status()
        assert srv.status_code("/d/", "alice", "alice dbm pass") == 200
        assert [srv.status_code("/d/", "alice", "alice dbm pass") for _ in range(50)] == [200] * 50
        d = delta(srv, before)
        assert d["verifications"] == 1 and d["hits"] == 50, d
        assert srv.notes("alice") == ["verified"] + ["hit"] * 50
        # A wrong password, an unknown user: 401, each after one verification
        # (the unknown user's against a dummy: a known user's path).
        before = srv.status()
        assert srv.status_code("/d/", "alice", "not alice's") == 401
        assert srv.status_code("/d/", "mallory", "a guess") == 401
        d = delta(srv, before)
        assert d["verifications"] == 1 and d["dummy_verifications"] == 1, d
        assert d["denied"] == 1 and d["unknown_user"] == 1, d
        assert srv.notes("mallory") == ["unknown-user"]
        # NB: each process keeps what the file answered once the file is a
        # second old (a hit then costs a stat(), not an open): bob's answer
        # is kept before htdbm changes it, and the change must still count.
        time.sleep(1.1)
        revocation(srv, "/d/", "bob", "bob dbm pass",
                   lambda: htdbm(users, "bob", "bob's new pass", dbm_type),
                   "bob's new pass", lambda: htdbm(users, "bob", None, dbm_type, delete=True))
        assert srv.notes("bob")[-1] == "unknown-user"
    finally:
        finish(srv)


@pytest.mark.skipif(not HTDBM, reason="htdbm (apache2-utils) is not installed")
def test_a_missing_dbm_file_is_a_500_and_a_log_line():
    srv = Httpd(name="dbmgone")
    users = srv.path("nowhere.dbm")
    srv.body = dbm_section(users, "gdbm")
    srv.write_config()
    try:
        srv.start()
        assert srv.status_code("/d/", "alice", "alice dbm pass") == 500
        assert srv.notes("alice") == ["error"]
    finally:
        finish(srv, r"AHMAC0034: could not open the DBM file %s \(AuthHMACUserDBMType gdbm\) "
                    r"to look up user alice" % users,
               r"AH01617|AH01618|AH01614")


SOURCES = {"file": 'AuthHMACUserFile "{d}/users"',
           "dbm": 'AuthHMACUserDBMFile "{d}/users.dbm"',
           "dbd": 'AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"'}


@pytest.mark.parametrize("first,second", [("file", "dbm"), ("dbm", "dbd"), ("dbd", "file")])
def test_one_source_per_section(first, second):
    srv = Httpd(name="sources", modules=["dbd"],
                global_conf='DBDriver sqlite3\nDBDParams "%s"\n' % "/nonexistent.db")
    lines = [SOURCES[first].format(d=srv.dir), SOURCES[second].format(d=srv.dir)]
    srv.body = hmac_location("/x/", None, "x", *lines)
    srv.write_config()
    rc, out = srv.configtest()
    names = {k: v.split()[0] for k, v in SOURCES.items()}
    assert rc != 0, out
    assert ("%s: this section has %s already: one source of users per section "
            "(AuthHMACUserFile, AuthHMACUserDBMFile, AuthHMACDBDUserPWQuery or AuthHMACProvider)"
            % (names[second], names[first])) in out, out
    srv.cleanup()


@pytest.mark.parametrize("line,message", [
    ("AuthHMACUserDBMType tdb", "AuthHMACUserDBMType: 'tdb' is not a DBM type this apr-util "
                                "can open (default, db, gdbm, ndbm or sdbm, where built in)"),
    ('AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"',
     "AuthHMACDBDUserPWQuery: mod_dbd is not loaded"),
])
def test_bad_source_directives_are_refused(line, message):
    srv = Httpd(name="badsource")
    srv.body = hmac_location("/x/", None, "x", line)
    srv.write_config()
    rc, out = srv.configtest()
    assert rc != 0 and message in out, out
    srv.cleanup()


# ------------------------------------------------------------------ SQL

@pytest.fixture
def db_dir():
    """A directory for a database that httpd's children can read."""
    d = tempfile.mkdtemp(prefix="authn_hmac_db_")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def sqlite_db(path, rows):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (name TEXT PRIMARY KEY, hash TEXT NOT NULL)")
    con.executemany("INSERT INTO users VALUES (?, ?)", rows)
    con.commit()
    con.close()
    os.chmod(path, 0o644)


def sql(path, statement, *args):
    con = sqlite3.connect(path)
    con.execute(statement, args)
    con.commit()
    con.close()


# The SQL tests that assert what a query at every request gives (an UPDATE
# refused at the next request), and what no offline grace gives (a 500).
RECHECK_0 = changed_default("an UPDATE refused at the next request: the query at each",
                            AuthHMACRecheck="0")
GRACE_0 = changed_default("a failed query is a 500 for everyone: no offline grace",
                          AuthHMACOfflineGrace="0")


def dbd_server(db, name="dbd", mpm=None, extra="", section=""):
    srv = Httpd(mpm=mpm, name=name, modules=["dbd"],
                global_conf='DBDriver sqlite3\nDBDParams "%s"\n%s' % (db, extra))
    srv.body = hmac_location(
        "/s/", None, "sql", 'AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"',
        *([section] if section else []))
    srv.write_config()
    page(srv)
    return srv


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
@pytest.mark.parametrize("mpm", MPMS)
def test_sqlite_through_mod_dbd_behind_the_cache(mpm, db_dir):
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("alice", bcrypt("alice sql pass")), ("bob", bcrypt("bob sql pass")),
                   ("carol", "!" + bcrypt("carol sql pass"))])
    rows_behind_the_cache(
        dbd_server(db, mpm=mpm, section=RECHECK_0), "sql",
        lambda h: sql(db, "UPDATE users SET hash = ? WHERE name = ?", h, "bob"),
        lambda: sql(db, "DELETE FROM users WHERE name = ?", "bob"))


def rows_behind_the_cache(srv, tag, update, delete):
    """The body of the SQL tests (SQLite, PostgreSQL), over a table of
    alice, bob and carol (locked: '!' before her hash), each's password
    '<name> <tag> pass': alice's 51 requests are one verification and 50
    hits; a wrong password, an unknown user and a locked one are 401, each
    after one verification (the last two against a dummy); update(hash)
    of bob's row refuses his old password at once, and delete() his new
    one (revocation)."""
    try:
        srv.start()
        before = srv.status()
        assert [srv.status_code("/s/", "alice", "alice %s pass" % tag)
                for _ in range(51)] == [200] * 51
        d1 = delta(srv, before)
        assert d1["verifications"] == 1 and d1["hits"] == 50, d1
        assert srv.notes("alice") == ["verified"] + ["hit"] * 50
        before = srv.status()
        assert srv.status_code("/s/", "alice", "not alice's") == 401
        assert srv.status_code("/s/", "mallory", "a guess") == 401
        assert srv.status_code("/s/", "carol", "carol %s pass" % tag) == 401  # locked
        d2 = delta(srv, before)
        assert d2["verifications"] == 1 and d2["dummy_verifications"] == 2, d2
        assert d2["denied"] == 2 and d2["unknown_user"] == 1, d2
        assert srv.notes("carol") == ["denied"] and srv.notes("mallory") == ["unknown-user"]
        new = bcrypt("bob's new pass")
        revocation(srv, "/s/", "bob", "bob %s pass" % tag, lambda: update(new),
                   "bob's new pass", delete)
        assert srv.notes("bob")[-1] == "unknown-user"
    finally:
        finish(srv)


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
def test_sql_update_reaches_a_second_server_sharing_redis(db_dir):
    """Two servers over one database and one Redis: a grant on A is a Redis
    hit on B; after an UPDATE of the hash, the old password is refused on
    both within AuthHMACRecheck (1 s) and one request."""
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("dora", bcrypt("dora sql pass"))])
    update_reaches_the_farm('DBDriver sqlite3\nDBDParams "%s"\n' % db, "sql", "dora sql pass",
                            lambda h: sql(db, "UPDATE users SET hash = ? WHERE name = ?", h,
                                          "dora"))


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
@pytest.mark.parametrize("change", ["delete", "lock"])
def test_sql_removal_and_lock_reach_a_second_server_sharing_redis(db_dir, change):
    """A DELETE of dora's row, or a lock ('!' before her hash): refused on
    both servers within the recheck (1 s) and one request."""
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("dora", bcrypt("dora sql pass"))])
    if change == "delete":
        removal_reaches_the_farm(
            'DBDriver sqlite3\nDBDParams "%s"\n' % db, "sqldel", "dora sql pass",
            lambda: sql(db, "DELETE FROM users WHERE name = ?", "dora"), "unknown-user")
    else:
        removal_reaches_the_farm(
            'DBDriver sqlite3\nDBDParams "%s"\n' % db, "sqllock", "dora sql pass",
            lambda: sql(db, "UPDATE users SET hash = '!' || hash WHERE name = ?", "dora"),
            "denied")


@pytest.mark.slow  # load- or timing-bound (sleeps past the recheck, the grace)
@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
def test_sql_farm_under_load_queries_once_per_user_per_recheck(db_dir):
    """5 s of dora's cached requests on two servers sharing Redis: the
    rechecks (the queries of a user whose memo is stale) of both servers
    together are at most one per second (the shipped AuthHMACRecheck) and
    one, and every request is served."""
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("dora", bcrypt("dora sql pass"))])
    hits, queries = queries_under_load(
        'DBDriver sqlite3\nDBDParams "%s"\n' % db, "sqlload",
        lambda a, b: a.status()["rechecks"] + b.status()["rechecks"])
    print("SQLite farm, 5 s: hits %s, queries %d" % (hits, queries))


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
def test_a_memo_altered_in_redis_is_no_memo(db_dir):
    """dora's memo in Redis (what SQL said of her, tagged) rewritten to say
    "no such user" (a Redis that would end her grant), or moved to erin's
    key (one that would lend erin dora's answer): past the recheck, each is
    counted forged and ignored: the database is asked, and answers as
    ever."""
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("dora", bcrypt("dora sql pass")), ("erin", bcrypt("erin sql pass"))])
    with sql_farm('DBDriver sqlite3\nDBDParams "%s"\n' % db, "sqlforged") as (a, b):
        redis = a.shared_redis
        assert a.status_code("/s/", "dora", "dora sql pass") == 200
        dora = redis.cli("--scan", "--pattern", "*:m:*").split()
        assert len(dora) == 1, dora
        assert a.status_code("/s/", "erin", "erin sql pass") == 200
        erin = [k for k in redis.cli("--scan", "--pattern", "*:m:*").split() if k != dora[0]]
        value = redis.cli("GET", dora[0])
        assert value.startswith("m1:1"), value
        redis.cli("SET", dora[0], "m1:2" + value[4:], "PX", "60000")
        redis.cli("SET", erin[0], value, "PX", "60000")
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        before = b.status()["redis_forged"]
        assert b.status_code("/s/", "dora", "dora sql pass") == 200
        assert b.status_code("/s/", "erin", "erin sql pass") == 200
        assert b.status()["redis_forged"] >= before + 2
        assert b.status()["rechecks"] >= 2
        # The query's answers replaced the forged values.
        assert redis.cli("GET", dora[0]).startswith("m1:1")
        assert redis.cli("GET", erin[0]) != value


@contextlib.contextmanager
def sql_farm(dbd_conf, tag, section="", allowed=()):
    """Two servers (mod_dbd with dbd_conf, the shipped defaults but for
    section's lines) over one database and one Redis (each's .shared_redis):
    yields (a, b); allowed: the error log's expected lines at the end."""
    shared, redis = Shared(), Redis().start()
    servers = []
    try:
        for name in ("A", "B"):
            srv = farm_server(shared, redis, name=tag + name, modules=["dbd"])
            srv.global_conf += dbd_conf
            srv.body = hmac_location(
                "/s/", None, "sql",
                'AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"',
                *([section] if section else []))
            srv.write_config()
            page(srv)
            srv.shared_redis = redis
            servers.append(srv.start())
        yield tuple(servers)
    finally:
        for s in servers:
            finish(s, *allowed)
        redis.cleanup()
        shared.cleanup()


def update_reaches_the_farm(dbd_conf, tag, old, update):
    """Two servers (mod_dbd with dbd_conf) over one database and one Redis:
    dora's grant on A (password old) is a Redis hit on B; after update(a
    new hash), the old password is refused on both within the recheck (the
    shipped 1 s) and one request, and the new one is granted (and shared)."""
    with sql_farm(dbd_conf, tag) as (a, b):
        assert a.status_code("/s/", "dora", old) == 200
        assert b.status_code("/s/", "dora", old) == 200
        assert a.notes("dora") == ["verified"] and b.notes("dora") == ["redis-hit"]
        update(bcrypt("dora's new pass"))
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        assert a.status_code("/s/", "dora", old) == 401
        assert b.status_code("/s/", "dora", old) == 401
        assert b.status_code("/s/", "dora", "dora's new pass") == 200
        assert a.status_code("/s/", "dora", "dora's new pass") == 200
        assert a.notes("dora")[-1] == "redis-hit", a.notes("dora")


def removal_reaches_the_farm(dbd_conf, tag, password, change, note):
    """The farm of sql_farm: dora's grant on A is a Redis hit on B; after
    change() (a DELETE, or a lock: '!' before the hash), her password is
    refused on both within the recheck (the shipped 1 s) and one request,
    with note (unknown-user, locked) on each."""
    with sql_farm(dbd_conf, tag) as (a, b):
        assert a.status_code("/s/", "dora", password) == 200
        assert b.status_code("/s/", "dora", password) == 200
        assert a.notes("dora") == ["verified"] and b.notes("dora") == ["redis-hit"]
        change()
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        assert a.status_code("/s/", "dora", password) == 401
        assert b.status_code("/s/", "dora", password) == 401
        assert a.notes("dora")[-1] == note and b.notes("dora")[-1] == note, (
            a.notes("dora"), b.notes("dora"))


class Load:
    """A thread per server sending user's cached requests over a kept-alive
    connection until stop(): counts the answers by status."""

    def __init__(self, servers, path, user, password):
        self.codes, self.done, self.user = [], threading.Event(), user
        header = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        for srv in servers:
            srv.secrets.add(password)
        self.threads = [threading.Thread(target=self._run, args=(srv, path, header))
                        for srv in servers]
        for t in self.threads:
            t.start()

    def _run(self, srv, path, header):
        host, port = srv.url.split("//")[1].split(":")
        conn, codes = http.client.HTTPConnection(host, int(port), timeout=30), {}
        while not self.done.is_set():
            conn.request("GET", path, headers={"Authorization": header})
            r = conn.getresponse()
            r.read()
            codes[r.status] = codes.get(r.status, 0) + 1
        conn.close()
        srv.sent[self.user] = srv.sent.get(self.user, 0) + sum(codes.values())
        self.codes.append(codes)

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join()
        return self.codes


def queries_under_load(dbd_conf, tag, queries_of, seconds=5.0):
    """The farm of sql_farm, dora granted on both; then seconds of her
    cached requests on both servers, a thread each: queries_of(a, b) (the
    database's queries of dora so far) grows by at most one per recheck
    (the shipped 1 s) for the whole farm, plus one, while both serve hits.
    Returns (hits, queries)."""
    with sql_farm(dbd_conf, tag) as (a, b):
        assert a.status_code("/s/", "dora", "dora sql pass") == 200
        assert b.status_code("/s/", "dora", "dora sql pass") == 200
        before = queries_of(a, b)
        load = Load((a, b), "/s/", "dora", "dora sql pass")
        time.sleep(seconds)
        codes = load.stop()
        queries = queries_of(a, b) - before
        assert all(set(c) == {200} for c in codes), codes
        hits = [c[200] for c in codes]
        assert min(hits) >= 50, hits  # both served meanwhile
        assert 1 <= queries <= math.ceil(seconds / 1.0) + 1, (queries, hits)
        return hits, queries


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
def test_a_failing_query_is_a_500_never_a_grant(db_dir):
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("erin", bcrypt("erin sql pass"))])
    srv = dbd_server(db, section=GRACE_0)
    try:
        srv.start()
        assert srv.status_code("/s/", "erin", "erin sql pass") == 200
        sql(db, "ALTER TABLE users RENAME TO gone")
        time.sleep(1.05)  # the recheck: the shipped AuthHMACRecheck, 1 s
        # NB: erin's grant is cached, but past the recheck a hit needs the
        # database's answer, and with no grace a failed query is a 500.
        assert srv.status_code("/s/", "frank", "frank's pass") == 500
        assert srv.notes("frank") == ["error"]
        assert srv.status_code("/s/", "erin", "erin sql pass") == 500
        assert srv.notes("erin")[-1] == "error"
    finally:
        finish(srv, r"AHMAC0033: could not look up user (frank|erin) with AuthHMACDBDUserPWQuery: ",
               r"AH01617|AH01618|AH01614")


# ------------------------------------------------ unknown users, timed

QUERY = 'AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"'
# NB: a window wide enough to be deterministic (at the shipped 1 s the
# attack exists too: the other host's memo refreshed just before).
RECHECK_30 = changed_default("a window wide enough to be deterministic",
                             AuthHMACRecheck="30")


def status_at(port, path, user, password):
    """The status of a request to 127.0.0.1:port (another virtual host)."""
    raw = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        con.request("GET", path, headers={"Authorization": "Basic " + raw})
        return con.getresponse().status
    finally:
        con.close()


def two_vhosts(db_dir, extra=""):
    """One server: its main host asks one.db (alice), a virtual host on
    another port two.db (bob), with the same query text (DBDParams is per
    virtual host). Returns the server (not started) and the second port."""
    db1, db2 = os.path.join(db_dir, "one.db"), os.path.join(db_dir, "two.db")
    sqlite_db(db1, [("alice", bcrypt("alice pass one"))])
    sqlite_db(db2, [("bob", bcrypt("bob pass two"))])
    port2 = free_port()
    srv = Httpd(name="vhosts", modules=["dbd"],
                global_conf='DBDriver sqlite3\nDBDParams "%s"\n' % db1)
    srv.body = (hmac_location("/s/", None, "sql", QUERY, *([extra] if extra else [])) +
                "Listen 127.0.0.1:%d\n<VirtualHost 127.0.0.1:%d>\n"
                "DBDriver sqlite3\nDBDParams \"%s\"\n%s</VirtualHost>\n"
                % (port2, port2, db2,
                   hmac_location("/s/", None, "sql", QUERY, *([extra] if extra else []))))
    srv.write_config()
    page(srv)
    return srv, port2


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
@pytest.mark.parametrize("recheck", ["shipped", "30"])
def test_sql_one_vhosts_database_never_grants_on_another(db_dir, recheck):
    """alice is only in the main host's database: her grant there (its
    memo: the shared memory's, the flight, the claim) is never a grant on
    the virtual host, whose database has no alice, the same query text."""
    srv, port2 = two_vhosts(db_dir, RECHECK_30 if recheck == "30" else "")
    try:
        srv.start()
        grants = 0
        for _ in range(5):
            time.sleep(1.1 if recheck == "shipped" else 0)  # a recheck each time
            assert srv.status_code("/s/", "alice", "alice pass one") == 200
            grants += status_at(port2, "/s/", "alice", "alice pass one") == 200
        assert grants == 0, "alice of database one granted on host two %d times" % grants
        assert status_at(port2, "/s/", "bob", "bob pass two") == 200
    finally:
        finish(srv, r"AH01618: user alice not found")


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
def test_sql_one_vhosts_no_such_user_never_refuses_on_another(db_dir):
    """The converse: the virtual host's "no such user" (its database)
    never refuses alice's right password on the main host."""
    srv, port2 = two_vhosts(db_dir)
    try:
        srv.start()
        assert status_at(port2, "/s/", "alice", "alice pass one") == 401
        assert srv.status_code("/s/", "alice", "alice pass one") == 200, srv.notes("alice")
    finally:
        finish(srv, r"AH01618: user alice not found")


def sql_farm_server(site, fake, db, name):
    srv = site.server(fake.address, name=name,
                      extra='DBDriver sqlite3\nDBDParams "%s"\n' % db)
    srv.modules.append("dbd")
    srv.body = hmac_location("/s/", None, "sql", QUERY)
    srv.write_config()
    page(srv)
    return srv.start()


@pytest.mark.slow  # load- or timing-bound (sleeps past the recheck, the grace)
@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
@pytest.mark.parametrize("replay", [False, True])
def test_sql_a_replayed_memo_cannot_extend_an_old_password_through_an_outage(db_dir, replay):
    """alice's password changes (A sees it: Redis's memo says the new
    hash), then the database fails. On B (no memo of its own) her old
    password is never served offline: an honest Redis holds the new memo,
    and a Redis that replays the memo and entry it held before the change
    can neither extend a grant."""
    from fake_redis import FakeRedis
    from test_trust import Site
    site, fake = Site(), FakeRedis().start()
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("alice", bcrypt("alice old pass"))])
    servers = []
    try:
        a = sql_farm_server(site, fake, db, "replayA")
        servers.append(a)
        assert a.status_code("/s/", "alice", "alice old pass") == 200
        time.sleep(0.2)
        saved = {k: v for k, v in fake.store.items() if b":f:" not in k}
        assert any(b":m:" in k for k in saved), list(fake.store)
        sql(db, "UPDATE users SET hash = ? WHERE name = ?", bcrypt("alice new pass"), "alice")
        time.sleep(1.1)  # the shipped recheck
        assert a.status_code("/s/", "alice", "alice old pass") == 401
        assert a.status_code("/s/", "alice", "alice new pass") == 200
        time.sleep(0.2)
        if replay:
            with fake.lock:
                fake.store.update(saved)
        sql(db, "ALTER TABLE users RENAME TO gone")  # the outage
        b = sql_farm_server(site, fake, db, "replayB")
        servers.append(b)
        got = b.status_code("/s/", "alice", "alice old pass")
        assert got != 200, (b.notes("alice"), "the old password served offline")
    finally:
        for s in servers:
            finish(s, r"AHMAC0033|AHMAC0041|AH0161[478]|AH0063[236]")
        fake.stop()
        site.cleanup()


@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
def test_sql_a_farm_takes_anothers_memo_and_counts_no_forgery(db_dir):
    """A's memo of dora, in Redis, is B's (a recheck shared by the farm):
    B's hit asks no query, and an honest farm counts no forgery
    (redis_forged feeds the critical alert AuthnHmacRedisForged)."""
    from fake_redis import FakeRedis
    from test_trust import Site
    site, fake = Site(), FakeRedis().start()
    db = os.path.join(db_dir, "users.db")
    sqlite_db(db, [("dora", bcrypt("dora pass"))])
    servers = []
    try:
        a = sql_farm_server(site, fake, db, "memoA")
        b = sql_farm_server(site, fake, db, "memoB")
        servers += [a, b]
        assert a.status_code("/s/", "dora", "dora pass") == 200
        assert b.status_code("/s/", "dora", "dora pass") == 200
        assert b.notes("dora") == ["redis-hit"]
        st = b.status()
        assert st["redis_forged"] == 0, st
        assert st["rechecks"] == 0, st
    finally:
        for s in servers:
            finish(s, r"AHMAC0006")
        fake.stop()
        site.cleanup()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(SQLITE_DRIVER),
                    reason="libaprutil1-dbd-sqlite3 is not installed")
@pytest.mark.parametrize("with_redis", [False, True], ids=["shm", "redis"])
def test_first_tries_of_sql_users_known_unknown_and_locked(db_dir, with_redis):
    """An SQL source's unknown user (no row) and locked users (an empty or
    a '!' hash) take a known user's path: the same Redis commands (what
    Redis sees, exactly), and without Redis the same time, in rounds taken
    in turns (paired differences under a fifth of a verification). With
    Redis 1 ms away the times are printed: the proxy's own jitter on a
    loaded machine is about a millisecond, a Redis call more or less two
    (test_timing holds that bound for the htpasswd file's path, which is
    this one past the lookup)."""
    from test_timing import COST as T_COST
    from test_timing import THROTTLE_OUT_OF_REACH, first_tries, monitor, show, timed
    from harness import DelayProxy
    db = os.path.join(db_dir, "users.db")
    real = subprocess.run([shutil.which("htpasswd"), "-nbB", "-C", str(T_COST), "x",
                           "alice's real pass"], check=True, capture_output=True,
                          text=True).stdout.strip().split(":", 1)[1]
    sqlite_db(db, [("alice", real), ("carol", ""), ("dave", "!" + real)])
    redis = proxy = None
    extra = THROTTLE_OUT_OF_REACH
    srv = Httpd(mpm="event", name="sqltiming", modules=["dbd"])
    if with_redis:
        redis = Redis().start()
        proxy = DelayProxy(redis.port, delay=0.001).start()
        pepper = srv.path("pepper")
        with open(pepper, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(pepper, 0o600)
        extra += ("AuthHMACPepperFile %s\nAuthHMACRedisServer %s\nAuthHMACRedisTimeout 1000\n"
                  "AuthHMACRedisAuthFile %s\n"
                  % (pepper, proxy.address,
                     redis.auth_file(srv.path("redis.auth"), redis.password)))
        srv.secrets.add(redis.password)
    srv.global_conf = 'DBDriver sqlite3\nDBDParams "%s"\n%s' % (db, extra)
    srv.body = ('Alias /t/ "%s/htdocs/"\n' % srv.dir + hmac_location(
        "/t/", None, "t", 'AuthHMACDBDUserPWQuery "SELECT hash FROM users WHERE name = %s"'))
    srv.write_config()
    with open(srv.path("htdocs", "index.html"), "w") as f:
        f.write("page\n")
    try:
        srv.start()
        for i in range(8):  # each child's connections, and its template, made
            timed(srv, "alice", "warm %d" % i)
        if with_redis:
            # A first try (each user's memo stale: past the 1 s recheck)
            # and a repeat (each's memo fresh): the same commands.
            for guess in ("first", "repeat"):
                if guess == "first":
                    time.sleep(1.1)
                if guess == "repeat":
                    timed(srv, "alice", "monitored repeat")
                known = monitor(redis, lambda g=guess: timed(srv, "alice", "monitored " + g))
                # NB: a repeat is a negative hit of shared memory: no command.
                assert (known and known[0][0] == "GET") if guess == "first" else not known, known
                for user in ("nobody-monitored", "carol", "dave"):
                    if guess == "first":
                        time.sleep(1.1)
                    else:
                        timed(srv, user, "monitored repeat")
                    seen = monitor(redis, lambda u=user, g=guess: timed(srv, u, "monitored " + g))
                    assert seen == known, (guess, user, seen, known)
        m = first_tries(srv, "sql-" + ("redis" if with_redis else "shm"), rounds=40,
                        paired=True)
        show("first tries, SQL%s" % (", Redis 1 ms away" if with_redis else ""), m)
        for k in ("unknown", "carol", "dave"):
            assert with_redis or abs(m[k + "-known"]) < 0.2 * m["known"], (k, m)
        assert srv.notes("carol")[-1] == "denied" and srv.notes("dave")[-1] == "denied"
    finally:
        finish(srv)
        if proxy:
            proxy.stop()
        if redis:
            redis.cleanup()


@pytest.mark.skipif(not HTDBM, reason="htdbm (apache2-utils) is not installed")
def test_an_unknown_users_repeat_is_a_negative_hit_whoever_came_between():
    """MD5-crypt users (htdbm's default): the dummy of an unknown user
    stays the same whichever known users come between, so the unknown
    user's repeat is a negative hit, as a known user's is (the dummy once
    kept the last user's salt: the repeat missed and was verified again,
    which told the names apart)."""
    srv = Httpd(name="dbmsalt")
    users = srv.path("users.dbm")
    for i, user in enumerate(("k1", "k2", "k3")):
        subprocess.run([HTDBM, "-b" + ("c" if i == 0 else "") + "m", "-TGDBM", users, user,
                        "%s pass" % user], check=True, capture_output=True)
    os.chmod(users, 0o644)
    srv.body = dbm_section(users, "gdbm")
    srv.write_config()
    page(srv)
    try:
        srv.start()
        for name, count in (("k3", "verifications"), ("x-unknown", "dummy_verifications")):
            assert srv.status_code("/d/", "k1", "wrong for %s" % name) == 401
            before = srv.status()
            assert srv.status_code("/d/", name, "a guess") == 401
            assert srv.status_code("/d/", "k2", "wrong for %s" % name) == 401
            assert srv.status_code("/d/", name, "a guess") == 401
            d = delta(srv, before)
            print(name, {k: v for k, v in d.items() if v})
            # name's first try (and k2's wrong password) verified; name's
            # repeat a negative hit.
            assert d["negative_hits"] == 1 and d[count] == (2 if count == "verifications"
                                                            else 1), d
    finally:
        finish(srv)


def test_a_wrapped_provider_answers_per_section_not_per_last_section():
    """AuthHMACProvider file: a <Files> in a <Directory> names another
    AuthUserFile; a <Location /> merged after both no longer hides it (a
    grant for the directory's file was a hit for the <Files>: bob got in
    where stock httpd refuses him)."""
    srv = Httpd(name="wrapfiles")
    every, admins = srv.path("all.htpasswd"), srv.path("admins.htpasswd")
    htpasswd(every, "bob", "bob pass", cost=4, create=True)
    htpasswd(every, "ann", "ann pass", cost=4)
    htpasswd(admins, "ann", "ann pass", cost=4, create=True)
    docs = srv.path("htdocs", "docs")
    os.makedirs(docs)
    for f in ("index.html", "secret.html"):
        with open(os.path.join(docs, f), "w") as fh:
            fh.write("page\n")
    srv.body = ('<Directory "%s">\n    AuthType Basic\n    AuthName docs\n'
                "    AuthBasicProvider hmac\n    AuthHMACProvider file\n"
                '    AuthUserFile "%s"\n    Require valid-user\n'
                '    <Files secret.html>\n        AuthUserFile "%s"\n    </Files>\n'
                "</Directory>\n<Location />\n    Options -Indexes\n</Location>\n"
                % (docs, every, admins))
    srv.write_config()
    try:
        srv.start()
        for _ in range(2):
            assert srv.status_code("/docs/index.html", "bob", "bob pass") == 200
            assert srv.status_code("/docs/secret.html", "bob", "bob pass") == 401
            assert srv.status_code("/docs/index.html", "ann", "ann pass") == 200
            assert srv.status_code("/docs/secret.html", "ann", "ann pass") == 200
        assert srv.notes("bob") == ["verified", "denied", "hit", "negative-hit"], srv.notes("bob")
        assert srv.notes("ann") == ["verified", "verified", "hit", "hit"], srv.notes("ann")
        # Another URL of the same section's configuration: a hit.
        assert srv.status_code("/docs/", "ann", "ann pass") in (200, 403)
        assert srv.notes("ann")[-1] == "hit"
    finally:
        finish(srv, r"AH01617: user bob: authentication failure for \"/docs/secret.html\"",
               r"AH01276")
