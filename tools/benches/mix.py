"""A day's mix on prefork and on event, --mix: how many requests each MPM
answers with the busy 503 under the same load, in the same run.

For each MPM in turn (Debian's default MPM settings, the module at
AuthHMACMaxVerifications 2 and AuthHMACVerifyBacklog 8, a Redis tier, bcrypt
at --mix-cost): 8 browsers that each open a kept-alive connection as a
random one of 40 users and fetch 10 pages; 16 guessers that each send a new
wrong password for a random user on a new connection and honour a 503's
Retry-After; every 5 s one user's password changes (htpasswd), every 20 s a
graceful restart, and Redis is down for 10 s of every 30 s. Prints each
MPM's answers (browsers' and guessers' apart), its busy counter and
verifications, and the ratio of their busy 503s per verification.
"""

import http.client
import os
import random
import secrets
import threading
import time

from harness import Redis, basic, htpasswd

from .common import FILE, log, make_httpd, prepare_tmp, run_alone, site

USERS, BROWSERS, GUESSERS, PAGES = 40, 8, 16, 10
# Debian's apache2 defaults (mods-available/mpm_*.conf).
DEBIAN_MPM = {
    "prefork": "StartServers 5\nMinSpareServers 5\nMaxSpareServers 10\n"
               "MaxRequestWorkers 150\nMaxConnectionsPerChild 0\n",
    "event": "StartServers 2\nMinSpareThreads 25\nMaxSpareThreads 75\nThreadLimit 64\n"
             "ThreadsPerChild 25\nMaxRequestWorkers 150\nMaxConnectionsPerChild 0\n",
}


def add_args(p):
    p.add_argument("--mix", action="store_true",
                   help="only the mix: %d browsers, %d guessers honouring Retry-After, "
                        "password changes, graceful restarts and Redis outages against "
                        "prefork and then event (cap 2, backlog 8): each MPM's busy 503s"
                        % (BROWSERS, GUESSERS))
    p.add_argument("--mix-seconds", type=int, default=60,
                   help="how long each MPM takes the mix (default: 60)")
    p.add_argument("--mix-cost", type=int, default=10,
                   help="bcrypt cost of the mix's users (default: 10)")


def run(a):
    return run_alone(a, "a day's mix on prefork and event", part)


def part(a, tmp):
    if a.redis_skip:
        print("- skipped: the mix needs Redis (%s)" % a.redis_skip)
        return 0
    prepare_tmp(tmp)
    results = {mpm: one(a, tmp, mpm) for mpm in ("prefork", "event")}
    print()
    print("### %d s each: %d browsers (%d users, %d pages a visit), %d guessers, bcrypt "
          "cost %d, AuthHMACMaxVerifications 2, AuthHMACVerifyBacklog 8" % (
              a.mix_seconds, BROWSERS, USERS, PAGES, GUESSERS, a.mix_cost))
    print()
    print("| MPM | browsers: 200 / 401 / 503 / no answer | guessers: 401 / 503 / no answer "
          "| verifications | busy | busy per verification |")
    print("|---|---|---|---|---|---|")
    for mpm, r in results.items():
        b, g = r["browser"], r["guesser"]
        print("| %s | %d / %d / %d / %d | %d / %d / %d | %d | %d | %.2f |" % (
            mpm, b.get(200, 0), b.get(401, 0), b.get(503, 0), b.get(0, 0),
            g.get(401, 0), g.get(503, 0), g.get(0, 0), r["verifications"], r["busy"],
            r["busy"] / max(r["verifications"], 1)))
    print()
    print("- events on each: %d password changes, %d graceful restarts, %d Redis outages "
          "(a browser's 401: its user's password changed during the visit; no answer: a "
          "kept-alive connection a graceful restart closed as the next request left)" % (
              results["prefork"]["changes"], results["prefork"]["restarts"],
              results["prefork"]["outages"]))
    return 0


def one(a, tmp, mpm):
    """The mix against a new httpd of mpm; returns its counts."""
    rnd = random.Random(20261127)
    users = os.path.join(tmp, "users-mix-%s.htpasswd" % mpm)
    pw = {}
    for i in range(USERS):
        pw["mix%d" % i] = "mix pass %d" % i
        htpasswd(users, "mix%d" % i, pw["mix%d" % i], cost=a.mix_cost, create=i == 0)
    redis = Redis(password=secrets.token_hex(16), binary=a.redis_server).start()
    pepper = os.path.join(redis.dir, "pepper")
    fd = os.open(pepper, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    a.mpm = mpm
    srv = make_httpd(a, tmp, "mix-" + mpm, server_extra=(
        "AuthHMACPepperFile \"%s\"\nAuthHMACRedisServer %s\nAuthHMACRedisAuthFile \"%s\"\n"
        "AuthHMACMaxVerifications 2\nAuthHMACVerifyBacklog 8\n" % (
            pepper, redis.address,
            redis.auth_file(os.path.join(redis.dir, "redis-auth"), redis.password))))
    srv.mpm_conf = DEBIAN_MPM[mpm]
    srv.body = site(os.path.join(tmp, "htdocs"), users)
    srv.write_config()
    counts = {"browser": {}, "guesser": {}}
    lock, stop = threading.Lock(), threading.Event()
    path = "/hmac/" + FILE

    def note(who, code):
        with lock:
            counts[who][code] = counts[who].get(code, 0) + 1

    def browser(seed):
        r = random.Random(seed)
        while not stop.is_set():
            user = "mix%d" % r.randrange(USERS)
            auth, conn = basic(user, pw[user]), None
            for _ in range(PAGES):
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
                    conn.request("GET", path, headers={"Authorization": auth})
                    resp = conn.getresponse()
                    resp.read()
                    note("browser", resp.status)
                    if resp.will_close:
                        conn.close()
                        conn = None
                except (OSError, http.client.HTTPException):
                    note("browser", 0)
                    conn = None
            if conn:
                conn.close()

    def guesser(seed):
        r, k = random.Random(seed), 0
        while not stop.is_set():
            k += 1
            auth = basic("mix%d" % r.randrange(USERS), "guess %d %d" % (seed, k))
            try:
                conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
                conn.request("GET", path, headers={"Authorization": auth})
                resp = conn.getresponse()
                resp.read()
                conn.close()
                note("guesser", resp.status)
                if resp.status == 503:
                    after = resp.getheader("Retry-After") or ""
                    stop.wait(int(after) if after.isdigit() else 1)
            except (OSError, http.client.HTTPException):
                note("guesser", 0)

    threads = [threading.Thread(target=browser, args=(i,)) for i in range(BROWSERS)]
    threads += [threading.Thread(target=guesser, args=(100 + i,)) for i in range(GUESSERS)]
    changes = restarts = outages = 0
    srv.start()
    before = srv.status()
    log("mix: %s for %d s" % (mpm, a.mix_seconds))
    try:
        for t in threads:
            t.start()
        t0, tick = time.monotonic(), 0
        while time.monotonic() - t0 < a.mix_seconds:
            time.sleep(5)
            tick += 1
            user = "mix%d" % rnd.randrange(USERS)
            pw[user] = "mix pass %s %d" % (user, tick)
            htpasswd(users, user, pw[user], cost=a.mix_cost)
            changes += 1
            if tick % 4 == 0:
                srv.restart(graceful=True)
                restarts += 1
            if tick % 6 == 3:
                redis.stop()
                outages += 1
            elif tick % 6 == 5:
                redis.start()
        stop.set()
        for t in threads:
            t.join()
        after = srv.status()
    finally:
        stop.set()
        srv.stop()
        redis.stop()
        redis.cleanup()
    return dict(counts, changes=changes, restarts=restarts, outages=outages,
                verifications=after["verifications"] - before["verifications"],
                busy=after["busy"] - before["busy"])
