"""Backends, --backends: a cached user's requests through hmac in front of
a DBM file (AuthHMACUserDBMFile), SQL (AuthHMACDBDUserPWQuery, SQLite
through mod_dbd, and PostgreSQL, a private cluster, when installed) and
LDAP (AuthHMACProvider ldap, a private slapd), each against a section with
no auth and against the stock provider in the same run (mod_authn_dbm,
mod_authn_dbd, mod_authnz_ldap), at bcrypt cost
--backends-cost. For SQL, the database's queries per 1,000 hits too (the
module's rechecks for SQLite; the statements in PostgreSQL's log, which
logs them all), under the shipped AuthHMACRecheck (1 s). util_ldap's
search cache is off (LDAPCacheTTL 0, which AuthHMACProvider ldap needs:
AHMAC0040), so the stock LDAP row binds at every request.

One event httpd serves one small file under every section; ab -k -c 8
for --backends-seconds per section (the stock DBM and SQL providers, which
run bcrypt for every request, get --backends-stock-requests requests).
Prints a markdown table of req/s, the ratio to no auth and to the stock
provider, and the goals; exits 1 if a goal is missed.
"""

import os
import shutil
import sqlite3
import subprocess

from harness import S, Httpd, ab
from harness import postgres
from harness.slapd import SUFFIX, Slapd, available

from .common import die, log, with_tmp

USER, PASSWORD = "alice", "alice backend pass"
GOALS = {"dbm": 0.8, "dbd": 0.95, "pg": 0.95, "ldap": 0.9}  # of no auth
# Times the stock provider's rate, where it runs bcrypt for every request
# (LDAP's stock row binds at every request: there the ratio is only
# reported).
STOCK_FACTOR = 100
STOCK_GOAL = ("dbm", "dbd", "pg")
BACKENDS = ("dbm", "dbd", "pg", "ldap")


def add_args(p):
    p.add_argument("--backends", action="store_true",
                   help="only the backends part: hmac in front of DBM, SQL (SQLite) and LDAP "
                        "against no auth and the stock providers; exits 1 if a goal is missed")
    p.add_argument("--backends-seconds", type=int, default=8,
                   help="ab's time per cached section in the backends part (default: 8)")
    p.add_argument("--backends-cost", type=int, default=12,
                   help="bcrypt cost of the backends part's user (default: 12)")
    p.add_argument("--backends-stock-requests", type=int, default=24,
                   help="requests to each stock provider that runs bcrypt per request "
                        "(default: 24)")


def run(a):
    return with_tmp(a, body)


def bcrypt_hash(cost):
    out = subprocess.run([S["htpasswd"], "-nbB", "-C", str(cost), USER, PASSWORD],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split(":", 1)[1]


def sections(tmp, ldap):
    """Each section's lines, by name."""
    url = 'AuthLDAPURL "%s/ou=people,%s?uid"' % (ldap.url, SUFFIX) if ldap else None
    dbm = 'AuthDBMUserFile "%s/users.dbm"\nAuthDBMType gdbm' % tmp
    query = '"SELECT hash FROM users WHERE name = %s"'
    out = {"noauth": None,
           "dbm-stock": "AuthBasicProvider dbm\n" + dbm,
           "dbm": 'AuthBasicProvider hmac\nAuthHMACUserDBMFile "%s/users.dbm"\n'
                  "AuthHMACUserDBMType gdbm" % tmp,
           "dbd-stock": "AuthBasicProvider dbd\nAuthDBDUserPWQuery " + query,
           "dbd": "AuthBasicProvider hmac\nAuthHMACDBDUserPWQuery " + query}
    if ldap:
        out["ldap-stock"] = "AuthBasicProvider ldap\n" + url
        out["ldap"] = "AuthBasicProvider hmac\nAuthHMACProvider ldap\n" + url
    return out


def location(name, lines):
    if lines is None:
        return "<Location /%s/>\n    Require all granted\n</Location>\n" % name
    inside = ["AuthType Basic", 'AuthName "%s"' % name] + lines.split("\n") + \
             ["Require valid-user"]
    return "<Location /%s/>\n%s</Location>\n" % (name, "".join("    %s\n" % l for l in inside))


def body(a, tmp):
    print("# mod_authn_hmac benchmark: backends behind the cache")
    print()
    os.chmod(tmp, 0o755)
    hashed = bcrypt_hash(a.backends_cost)
    subprocess.run([shutil.which("htdbm") or "htdbm", "-bcB", "-C", str(a.backends_cost),
                    "-TGDBM", os.path.join(tmp, "users.dbm"), USER, PASSWORD],
                   check=True, capture_output=True)
    os.chmod(os.path.join(tmp, "users.dbm"), 0o644)
    db = os.path.join(tmp, "users.db")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (name TEXT PRIMARY KEY, hash TEXT NOT NULL)")
    con.execute("INSERT INTO users VALUES (?, ?)", (USER, hashed))
    con.commit()
    con.close()
    os.chmod(db, 0o644)
    ldap = None
    if available():
        ldap = Slapd().start()
        ldap.add_user(USER, PASSWORD)
    else:
        log("no slapd: the LDAP rows are left out")
    secs = sections(tmp, ldap)
    srv = Httpd(mpm="event", name="backends", directory=os.path.join(tmp, "httpd"),
                modules=["dbd", "authn_dbm", "authn_dbd", "ldap", "authnz_ldap"],
                log_requests=False, log_level="warn")
    srv.global_conf = 'DBDriver sqlite3\nDBDParams "%s"\nLDAPCacheTTL 0\n' % db
    srv.body = "".join(location(n, l) for n, l in secs.items())
    srv.write_config()
    for n in secs:
        os.makedirs(srv.path("htdocs", n), exist_ok=True)
        with open(srv.path("htdocs", n, "index.html"), "w") as f:
            f.write("page\n")
    pg = pg_srv = None
    try:
        srv.start()
        rows = measure(a, srv, secs, ("dbm", "dbd", "ldap"), lambda: srv.status()["rechecks"])
        if postgres.available():
            pg = postgres.Postgres(log_statements=True).start()
            pg.add_user(USER, hashed)
            pg_srv = pg_server(tmp, pg)
            rows.update(measure(a, pg_srv, pg_sections(), ("pg",), lambda: pg.queries(USER)))
        else:
            log("no PostgreSQL: its row is left out")
    finally:
        srv.stop()
        if pg_srv:
            pg_srv.stop()
        if pg:
            pg.cleanup()
        if ldap:
            ldap.cleanup()
    return report(a, rows)


def pg_sections():
    query = '"SELECT hash FROM users WHERE name = %s"'
    return {"noauth": None,
            "pg-stock": "AuthBasicProvider dbd\nAuthDBDUserPWQuery " + query,
            "pg": "AuthBasicProvider hmac\nAuthHMACDBDUserPWQuery " + query}


def pg_server(tmp, pg):
    """A second httpd (mod_dbd has one database per server) over pg."""
    secs = pg_sections()
    srv = Httpd(mpm="event", name="backends-pg", directory=os.path.join(tmp, "httpd-pg"),
                modules=["dbd", "authn_dbd"], log_requests=False, log_level="warn")
    srv.global_conf = 'DBDriver pgsql\nDBDParams "%s"\n' % pg.params
    srv.body = "".join(location(n, l) for n, l in secs.items())
    srv.write_config()
    for n in secs:
        os.makedirs(srv.path("htdocs", n), exist_ok=True)
        with open(srv.path("htdocs", n, "index.html"), "w") as f:
            f.write("page\n")
    return srv.start()


def rate(a, srv, name, secs, auth, full=False):
    url = srv.url + "/%s/" % name
    who = None if secs[name] is None else auth
    slow = name in ("dbm-stock", "dbd-stock", "pg-stock")
    r = ab(url, who, n=a.backends_stock_requests if slow else 5000000, c=8,
           seconds=None if slow else a.backends_seconds)
    if r["failed"] or r["non2xx"] or not r["complete"]:
        die("/%s/: ab failed: %s" % (name, r["err"] or r["out"][-400:]))
    log("%-10s %10.1f req/s" % (name, r["rps"]))
    return r if full else r["rps"]


def measure(a, srv, secs, backends, queries):
    """Each of backends' rates; each cached backend's between two runs of
    no auth, whose mean is its own base (the machine's pace drifts); for
    SQL, queries() (the database's queries so far) per 1,000 hits."""
    auth = "%s:%s" % (USER, PASSWORD)
    for name in secs:
        who = [USER, PASSWORD] if secs[name] else []
        if srv.status_code("/%s/" % name, *who) != 200:
            die("/%s/ does not answer 200: see %s" % (name, srv.error_log()))
    rows = {}
    for b in backends:
        if b not in secs:
            continue
        before = rate(a, srv, "noauth", secs, auth)
        asked = queries()
        r = rate(a, srv, b, secs, auth, full=True)
        rows[b] = r["rps"]
        if b in ("dbd", "pg"):
            rows[b + "-qpk"] = 1000.0 * (queries() - asked) / r["complete"]
        rows[b + "-base"] = (before + rate(a, srv, "noauth", secs, auth)) / 2
        rows[b + "-stock"] = rate(a, srv, b + "-stock", secs, auth)
    return rows


def report(a, rows):
    missed = []
    print("bcrypt cost %d; ab -k -c 8, %d s per cached section" % (
        a.backends_cost, a.backends_seconds))
    print()
    print("| backend | hmac req/s | no auth req/s | hmac / no auth | stock req/s | "
          "hmac / stock | queries / 1,000 hits | goal |")
    print("|---|---|---|---|---|---|---|---|")
    for b in BACKENDS:
        if b not in rows:
            continue
        hmac, stock, base = rows[b], rows[b + "-stock"], rows[b + "-base"]
        goal = GOALS.get(b)
        ok = (goal is None or hmac / base >= goal) and \
            (b not in STOCK_GOAL or hmac / stock >= STOCK_FACTOR)
        if not ok:
            missed.append(b)
        goals = (["%g of no auth" % goal] if goal else ["measured"]) + \
            (["%dx stock" % STOCK_FACTOR] if b in STOCK_GOAL else [])
        qpk = rows.get(b + "-qpk")
        print("| %s | %.0f | %.0f | %.3f | %.1f | %.2f | %s | %s%s |" % (
            {"dbd": "sql (SQLite)", "pg": "sql (PostgreSQL)"}.get(b, b), hmac, base,
            hmac / base, stock, hmac / stock, "-" if qpk is None else "%.3f" % qpk,
            ", ".join(goals), "" if ok else ": MISSED"))
    print()
    print("No auth: the mean of a run just before and one just after the backend's (the "
          "same server's: PostgreSQL's sections are on a second httpd, mod_dbd having one "
          "database per server). The stock LDAP provider binds at every request "
          "(LDAPCacheTTL 0, which AuthHMACProvider ldap needs); "
          "the stock DBM and SQL providers run bcrypt for every request. Queries: the "
          "rechecks of the shipped AuthHMACRecheck (1 s), one per user per second.")
    return 1 if missed else 0
