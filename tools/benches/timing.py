"""Timing, --timing: what a try tells an attacker.

In the form of the seed's timing-safe benchmark: each class of try, its
Avg/P50/P95/P99 on the wire, and the gap of each class's P50 to a known
user's. A first try (a new password) costs a verification at the file's
cost for every name; a repeat is refused from the negative cache for every
name. The classes are taken in turns, so that the machine's drift weighs
on all alike. Exits 1 if a repeat's P50 differs from a known user's by more than
TIMING_GAP_US.
"""

import os
import secrets
import statistics
import time

from harness import DelayProxy, Redis, basic, get, htpasswd

from .common import (FILE, USER, die, make_httpd, pct, prepare_tmp, redis_version, run_alone,
                     site, start)

TIMING_GAP_US = 50        # a repeat's P50, any name against a known user's

TIMING_CLASSES = (("known", "known user, wrong password"),
                  ("unknown", "unknown user"),
                  ("carol", "locked user (carol:)"),
                  ("dave", "locked user (dave:!)"))


def add_args(p):
    p.add_argument("--timing", action="store_true",
                   help="only the timing part: first tries and repeats of a known "
                        "user's wrong password, an unknown user and locked users, with "
                        "and without Redis; exits 1 if a repeat's P50 differs from a "
                        "known user's by more than %d µs" % TIMING_GAP_US)
    p.add_argument("--timing-tries", type=int, default=None,
                   help="first tries per class in the timing part (default: 30, "
                        "--quick: 10); repeats are 20 times as many")


def check_args(a, p):
    if a.timing_tries is None:
        a.timing_tries = 10 if a.quick else 30


def run(a):
    return run_alone(a, "timing", part)


def timing_httpd(a, tmp, name, userfile, server_extra=""):
    srv = make_httpd(a, tmp, name, server_extra=server_extra)
    srv.body = site(os.path.join(tmp, "htdocs"), userfile)
    srv.write_config()
    return srv


def timing_try(srv, user, password, conn=None):
    """Seconds for one 401; the connection, kept alive, for the next."""
    t0 = time.perf_counter()
    r, conn = get(srv.port, "/hmac/" + FILE, basic(user, password), conn=conn)
    dt = time.perf_counter() - t0
    if r.status != 401:
        die("timing: %s got %d, not 401" % (user, r.status))
    return dt, conn


def timing_run(a, srv, tag):
    """{(phase, class): [seconds]} for first tries (each on a new
    connection, a new password each) and repeats (one kept-alive connection
    per class, the same wrong password again)."""
    t = {}
    users = {"known": USER, "carol": "carol", "dave": "dave"}
    n = len(TIMING_CLASSES)
    for i in range(a.timing_tries):
        # NB: each round starts with the next class, so that a class's
        # place in the round (after a bcrypt, after a pause) is no bias.
        for k in range(n):
            c = TIMING_CLASSES[(i + k) % n][0]
            user = users.get(c) or "nobody-%s-%d" % (tag, i)
            dt, conn = timing_try(srv, user, "first %s %d %s" % (tag, i, secrets.token_hex(4)))
            conn.close()
            t.setdefault(("first", c), []).append(dt)
    conns, pw = {}, "repeat %s %s" % (tag, secrets.token_hex(4))
    for c, _ in TIMING_CLASSES:
        _, conns[c] = timing_try(srv, users.get(c) or "nobody-" + tag, pw)
    for i in range(a.timing_tries * 20):
        for k in range(n):
            c = TIMING_CLASSES[(i + k) % n][0]
            dt, conns[c] = timing_try(srv, users.get(c) or "nobody-" + tag, pw, conns[c])
            t.setdefault(("repeat", c), []).append(dt)
    for conn in conns.values():
        conn.close()
    return t


def timing_report(title, t):
    """Prints the table and the gaps; returns the largest repeat gap (µs)."""
    print()
    print("### " + title)
    print()
    print("| try | class | Avg | P50 | P95 | P99 |")
    print("|---|---|---|---|---|---|")
    for phase in ("first", "repeat"):
        for c, label in TIMING_CLASSES:
            xs = t[(phase, c)]
            print("| %s | %s | %s |" % (
                "first try" if phase == "first" else "repeat", label,
                " | ".join("%.0f µs" % (v * 1e6) for v in (
                    statistics.mean(xs), statistics.median(xs), pct(xs, 0.95),
                    pct(xs, 0.99)))))
    print()
    worst = 0.0
    for phase in ("first", "repeat"):
        known = statistics.median(t[(phase, "known")])
        for c, label in TIMING_CLASSES[1:]:
            gap = (statistics.median(t[(phase, c)]) - known) * 1e6
            if phase == "repeat":
                worst = max(worst, abs(gap))
                verdict = " (threshold %d µs) %s" % (
                    TIMING_GAP_US, "PASS" if abs(gap) <= TIMING_GAP_US else "FAIL")
            else:
                verdict = " (%.1f%% of a known user's first try)" % (100 * gap / (known * 1e6))
            print("- %s gap at P50, %s − known user: %+.1f µs%s" % (
                "first-try" if phase == "first" else "repeat", label, gap, verdict))
    return worst


def part(a, tmp):
    """The timing part: one httpd with shared memory only, and one with
    Redis (if there is one). Returns the exit status."""
    prepare_tmp(tmp)
    userfile = os.path.join(tmp, "users-timing.htpasswd")
    htpasswd(userfile, USER, secrets.token_urlsafe(12), cost=a.cost, create=True)
    with open(userfile, "a") as f:
        f.write("carol:\ndave:!\n")  # locked lines
    past = time.time() - 60
    os.utime(userfile, (past, past))
    print()
    print("## Timing: what a try tells an attacker")
    print()
    print("bcrypt cost %d; %d first tries and %d repeats per class, in turns; MPM %s"
          % (a.cost, a.timing_tries, a.timing_tries * 20, a.mpm))
    worst, servers, redis, proxy = 0.0, [], None, None
    try:
        setups = [("shared memory only", "")]
        if not a.redis_skip:
            redis = Redis(password=secrets.token_hex(16), binary=a.redis_server).start()
            pepper = os.path.join(redis.dir, "pepper")
            fd = os.open(pepper, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
            # NB: and 1 ms away (each chunk delayed, both ways), as a
            # farm's Redis on another host is: a call more or less shows.
            proxy = DelayProxy(redis.port, 0.001).start()
            auth = redis.auth_file(os.path.join(redis.dir, "redis-auth"), redis.password)
            for title, address in (("loopback", redis.address), ("1 ms away", proxy.address)):
                setups.append(("with Redis (%s, %s)" % (title, redis_version(a)),
                               "AuthHMACPepperFile \"%s\"\nAuthHMACRedisServer %s\n"
                               "AuthHMACRedisAuthFile \"%s\"\n" % (pepper, address, auth)))
        for i, (title, extra) in enumerate(setups):
            srv = timing_httpd(a, tmp, "timing%d" % i, userfile, extra)
            servers.append(srv)
            start(a, srv, 3)
            worst = max(worst, timing_report(title, timing_run(a, srv, "t%d" % i)))
            srv.stop()
    finally:
        for srv in servers:
            srv.stop()
        if proxy:
            proxy.stop()
        if redis:
            redis.stop()
            redis.cleanup()
    print()
    print("- largest repeat gap: %.1f µs (threshold %d µs): %s"
          % (worst, TIMING_GAP_US, "PASS" if worst <= TIMING_GAP_US else "FAIL"))
    return 0 if worst <= TIMING_GAP_US else 1
