"""Redis over TLS, --tls, against plain Redis, in the same run: four httpds, each
/hmac/ with its own AuthHMACRedisServer: redis only (AuthHMACCacheSize 0,
a GET+PTTL through Redis on every request) and shared memory in front of
Redis, each once over a plain redis-server and once over one that speaks
only TLS (a test CA's certificate, verified, with SNI and requirepass).
ab -k runs in interleaved rounds, each column's httpd CPU per request from
/proc, and the TLS/plain ratio of each round (the rounds' median).
Then the reconnect storm: load on the TLS redis-only httpd so that every
child holds pooled TLS connections, redis-server killed and restarted on
the same port with the same certificate, and the handshakes (full and
resumed) counted from the status pages while a new credential verified on
one server is looked up on the other until it is a Redis hit: TLS
handshakes (and how many resumed a session) per second, and the time until
sharing resumed. Target: redis only's TLS/plain CPU <= TARGET_TLS_CPU.
About 4 minutes; --quick about 1.
"""

import os
import secrets
import statistics
import subprocess
import sys
import threading
import time

from harness import Redis, TestCA, ab, basic, get, htpasswd

from .common import (FILE, LABEL, USER, delta_sum, die, error_log_report, fmt, log, make_httpd,
                     med, prepare_tmp, ratio, redis_version, run_ab, run_alone, site, start,
                     warm_up_redis)

SECONDS = 4       # --seconds
ROUNDS = 8        # --rounds; NB: the ratios are of rounds side by side:
QUICK_ROUNDS = 2  # 2 at least

TLS_COLUMNS = ("redisonly", "tlsredisonly", "redis", "tlsredis")
TLS_PAIRS = (("redisonly", "tlsredisonly"), ("redis", "tlsredis"))
TLS_COUNTERS = ("verifications", "redis_hits", "redis_misses", "redis_errors",
                "redis_timeouts", "redis_tls_handshakes", "redis_tls_resumed")
TARGET_TLS_CPU = 1.20  # redis only TLS / redis only, httpd CPU per request
STORM_DOWN = 1.0       # s redis-server stays down
STORM_SETTLE = 1.5     # s without a new handshake: the storm is over
STORM_WAIT = 30.0      # s at most from Redis back up to sharing resumed
STORM_USER = "stormuser"
PROBE_USERS = 400      # fresh names for the sharing probes


def add_args(p):
    p.add_argument("--tls", action="store_true",
                   help="only the TLS part: redis only and hmac+redis, each over plain "
                        "and TLS Redis, ab -k in interleaved rounds (httpd CPU per "
                        "request, TLS/plain; exits 1 if redis only's ratio is over "
                        "%.2f), then the reconnect storm (default --seconds 4, "
                        "--rounds 8; about 4 minutes)" % TARGET_TLS_CPU)
    p.add_argument("--storm-rounds", type=int, default=None,
                   help="restarts of redis-server in the TLS part's reconnect storm "
                        "(default: 3, --quick: 1; 0 skips it)")


def check_args(a, p):
    if a.storm_rounds is None:
        a.storm_rounds = 1 if a.quick else 3


def run(a):
    return run_alone(a, "Redis over TLS", part, machine=True, timed=True)


def tls_delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in TLS_COUNTERS}


def tls_userfile(a, tmp):
    """The bench user at --cost; the storm's load user and the probes at
    cost 4 (with redis only, every request verifies while Redis is down:
    at cost 12 two cores would do nothing else, and the recovery would be
    measured through a saturated machine). Returns (path, bench password,
    storm password)."""
    path = os.path.join(tmp, "users-tls.htpasswd")
    password, cheap = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
    htpasswd(path, USER, password, cost=a.cost, create=True)
    htpasswd(path, STORM_USER, cheap, cost=4)
    with open(path) as f:
        bhash = [l for l in f.read().splitlines() if l.startswith(STORM_USER + ":")][0]
    with open(path, "a") as f:
        for i in range(PROBE_USERS):
            f.write("probe%03d:%s\n" % (i, bhash.split(":", 1)[1]))
    os.chmod(path, 0o644)
    past = time.time() - 60
    os.utime(path, (past, past))
    return path, password, cheap


def tls_rows(a, servers, redises, password):
    """ab -k on no-auth and the four columns, interleaved; {col: [run]}."""
    cred = USER + ":" + password
    runs = {c: [] for c in ("noauth",) + TLS_COLUMNS}
    cols = ["noauth"] + list(TLS_COLUMNS)
    for i in range(a.rounds):
        log("TLS rows, round %d of %d" % (i + 1, a.rounds))
        # Alternate the order so that drift favours no column.
        for col in (cols if i % 2 == 0 else cols[::-1]):
            srv = servers[col]
            before = srv.status() if col != "noauth" else None
            res = run_ab(a, srv, col, cred, True, seconds=a.seconds,
                         redis=redises.get(col))
            if before is not None:
                res["delta"] = tls_delta(before, srv.status())
            runs[col].append(res)
    return runs


def probe(srv, user, password):
    r, conn = get(srv.port, "/hmac/" + FILE, basic(user, password), timeout=30)
    if conn:
        conn.close()
    return r.status


class Sampler:
    """The status counters of some httpds every 0.1 s, in a thread:
    samples is [(monotonic time, {name: status})]."""

    def __init__(self, servers):
        self.servers, self.samples = servers, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            t, snap = time.monotonic(), {}
            for name, srv in self.servers.items():
                try:
                    snap[name] = srv.status()
                except (subprocess.SubprocessError, ValueError, OSError):
                    snap = None
                    break
            if snap:
                self.samples.append((t, snap))
            self.stop.wait(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def total(self, key):
        """[(t, key summed over the servers)]."""
        return [(t, sum(s[n].get(key, 0) for n in s)) for t, s in self.samples]


def storm_round(a, redis, load_srv, other, cheap, probes):
    """One restart of redis-server under load; the figures of the recovery."""
    out = {}
    res = {}
    # NB: long enough for the load to outlast the recovery; ab -t cannot be
    # stopped early, so the round waits for it.
    load_s = int(2 + STORM_DOWN + 10)
    th = threading.Thread(target=lambda: res.update(ab(
        "%s/hmac/%s" % (load_srv.url, FILE), STORM_USER + ":" + cheap, n=10000000,
        c=a.concurrency, keepalive=True, seconds=load_s,
        prefix=["taskset", "-c", a.pin_cpu] if a.pin_cpu else ())), daemon=True)
    servers = {"A": load_srv, "B": other}
    with Sampler(servers) as sm:
        th.start()
        time.sleep(2)
        pre = {n: s.status() for n, s in servers.items()}
        out["conns"] = pre["A"].get("redis_connections")
        out["children"] = len(load_srv.pids()) - 1
        t_kill = time.monotonic()
        log("  redis-server killed at %s" % time.strftime("%H:%M:%S"))
        redis.stop()  # SIGKILL
        time.sleep(STORM_DOWN)
        t0 = time.monotonic()
        redis.start()
        t_up = time.monotonic()
        out["start_s"] = t_up - t0
        out["resumed_s"] = None
        tries = 0
        while time.monotonic() - t_up < STORM_WAIT and probes:
            user = probes.pop()
            tries += 1
            if probe(load_srv, user, cheap) != 200:
                continue
            b0 = other.status()
            code = probe(other, user, cheap)
            d = tls_delta(b0, other.status())
            if code == 200 and d["redis_hits"] >= 1 and d["verifications"] == 0:
                out["resumed_s"] = time.monotonic() - t_up
                break
            time.sleep(0.02)
        out["probes"] = tries
        # The storm is over when no handshake was made for STORM_SETTLE s.
        while th.is_alive():
            hs = sm.total("redis_tls_handshakes")
            if hs and hs[-1][0] - t_up > 1 and all(
                    v == hs[-1][1] for t, v in hs if t >= hs[-1][0] - STORM_SETTLE):
                break
            time.sleep(0.1)
    th.join()
    post = {n: s.status() for n, s in servers.items()}
    hs = [(t, v) for t, v in sm.total("redis_tls_handshakes") if t >= t_kill]
    rs = sm.total("redis_tls_resumed")
    base_hs = sum(pre[n]["redis_tls_handshakes"] for n in pre)
    base_rs = sum(pre[n]["redis_tls_resumed"] for n in pre)
    out["handshakes"] = sum(post[n]["redis_tls_handshakes"] for n in post) - base_hs
    out["resumed"] = sum(post[n]["redis_tls_resumed"] for n in post) - base_rs
    out["handshakes_A"] = post["A"]["redis_tls_handshakes"] - pre["A"]["redis_tls_handshakes"]
    out["resumed_A"] = post["A"]["redis_tls_resumed"] - pre["A"]["redis_tls_resumed"]
    # The busiest second, and the span from the first to the last new
    # handshake (0.1 s samples).
    peak, first, last = 0, None, None
    for i, (t, v) in enumerate(hs):
        if v > base_hs:
            first = first if first is not None else t
        if i and v > hs[i - 1][1]:
            last = t
        back = [w for u, w in hs if u <= t - 1.0]
        peak = max(peak, v - (back[-1] if back else base_hs))
    out["peak_per_s"] = peak
    out["span_s"] = (last - first) if first is not None and last is not None else None
    out["first_after_up_s"] = (first - t_up) if first is not None else None
    closed = [t for t, s in sm.samples if t >= t_up and not s["A"].get("redis_breaker_open")]
    out["breaker_closed_s"] = (closed[0] - t_up) if closed else None
    out["resumed_by_end"] = (rs[-1][1] - base_rs) if rs else None
    out["conns_after"] = post["A"].get("redis_connections")
    out["ab"] = {k: res.get(k) for k in ("rps", "complete", "failed", "non2xx", "rc")}
    out["errors_A"] = (post["A"].get("redis_errors", 0) - pre["A"].get("redis_errors", 0)
                       + post["A"].get("redis_timeouts", 0)
                       - pre["A"].get("redis_timeouts", 0))
    log("  storm: %d handshakes (%d resumed), peak %d/s, sharing resumed %s s after "
        "Redis was back; load ab: %s" % (
            out["handshakes"], out["resumed"], peak, fmt(out["resumed_s"], ".2f"), out["ab"]))
    return out


def tls_report(a, runs, storms, redis_ver):
    print()
    print("## Redis over TLS (median of %d rounds; ab -k -c %d, %d s runs; "
          "redis-server %s)" % (a.rounds, a.concurrency, a.seconds, redis_ver))
    print()
    print("| column | req/s | /no-auth | httpd CPU µs/req | redis-server CPU µs/req "
          "| req/s, each round | redis_hits | verifications | TLS handshakes "
          "| redis_errors + timeouts |")
    print("|:---|---:|---:|---:|---:|:---|---:|---:|---:|---:|")
    base = med(runs["noauth"], "rps")
    for col in ("noauth",) + TLS_COLUMNS:
        rs = runs[col]
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            LABEL[col], fmt(med(rs, "rps"), ".0f"),
            fmt(ratio(med(rs, "rps"), base), ".3f"), fmt(med(rs, "cpu_us"), ".1f"),
            fmt(med(rs, "redis_us"), ".1f"), ", ".join("%.0f" % r["rps"] for r in rs),
            fmt(delta_sum(rs, "redis_hits"), "d"), fmt(delta_sum(rs, "verifications"), "d"),
            fmt(delta_sum(rs, "redis_tls_handshakes"), "d"),
            fmt(None if delta_sum(rs, "redis_errors") is None else
                delta_sum(rs, "redis_errors") + delta_sum(rs, "redis_timeouts"), "d")))
    print()
    print("(counters: from each httpd's status page, summed over the measured runs; "
          "TLS handshakes 0\nmeans every request used a pooled connection; a "
          "command past AuthHMACRedisTimeout\n(50 ms) is a timeout, and its "
          "connection is closed. other load, max: %.2f cores.)"
          % max(r["other"] for rs in runs.values() for r in rs))
    print()
    checks = []
    for plain, tls in TLS_PAIRS:
        cpu = sorted(t["cpu_us"] / p["cpu_us"] for p, t in zip(runs[plain], runs[tls])
                     if p["cpu_us"] and t["cpu_us"] is not None)
        rps = sorted(t["rps"] / p["rps"] for p, t in zip(runs[plain], runs[tls]) if p["rps"])
        rc, rr = (statistics.median(cpu) if cpu else None,
                  statistics.median(rps) if rps else None)
        print("- %s / %s: httpd CPU per request **%s** (median of the rounds' %s), "
              "req/s %s" % (LABEL[tls], LABEL[plain], fmt(rc, ".3f"),
                            ", ".join("%.3f" % x for x in cpu), fmt(rr, ".3f")))
        if plain == "redisonly":
            checks.append((rc, "a TLS hit through Redis costs <= %.2fx the httpd CPU of "
                           "a plain one (redis only TLS / redis only)" % TARGET_TLS_CPU))
    if storms:
        print()
        print("### Reconnect storm (redis-server killed and restarted, same port and "
              "certificate)")
        print()
        print("Load: ab -k -c %d on the redis-only TLS httpd (A; user at bcrypt cost 4, "
              "so that\nthe outage's verifications do not saturate the machine); B is "
              "the hmac+redis TLS\nhttpd, idle but for the probes. Redis down %.1f s. "
              "\"Sharing resumed\": from redis-server\nanswering PING again until a new "
              "user's credential verified on A is a Redis hit on B\n(probes one after "
              "the other). Handshakes: A and B together, from their status pages\n"
              "(0.1 s samples). Breaker closed: the first sample after Redis was back in\n"
              "which A's breaker was closed (-: none seen; it may close and open again\n"
              "between samples)." % (a.concurrency, STORM_DOWN))
        print()
        print("| round | A's children | A's pooled connections before | handshakes "
              "| of which resumed | busiest second | first to last handshake "
              "| breaker closed after | sharing resumed after | probes "
              "| A's Redis errors + timeouts | load: failed + non-2xx |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for i, s in enumerate(storms):
            print("| %d | %d | %s | %d | %d | %d/s | %s s | %s s | **%s s** | %d | %d | %s |" % (
                i + 1, s["children"], s["conns"], s["handshakes"], s["resumed"],
                s["peak_per_s"], fmt(s["span_s"], ".2f"), fmt(s["breaker_closed_s"], ".2f"),
                fmt(s["resumed_s"], ".2f"), s["probes"], s["errors_A"],
                fmt(None if s["ab"]["failed"] is None else
                    s["ab"]["failed"] + s["ab"]["non2xx"], "d")))
        ok = [s["resumed_s"] for s in storms if s["resumed_s"] is not None]
        print()
        print("- sharing resumed after %s s (median of %d round(s)); redis-server took "
              "%s s to answer PING after its start" % (
                  fmt(statistics.median(ok) if ok else None, ".2f"), len(storms),
                  ", ".join("%.2f" % s["start_s"] for s in storms)))
        print("- handshakes resumed: %d of %d (a session from before the restart "
              "cannot be resumed: the new\nredis-server has new ticket keys; each "
              "process's first new session is offered by its next\nconnections)" % (
                  sum(s["resumed"] for s in storms), sum(s["handshakes"] for s in storms)))
    print()
    print("Targets:")
    for val, name in checks:
        print("  [%s] %s: %s" % ("ok" if val is not None and val <= TARGET_TLS_CPU
                                 else "MISS", name, fmt(val, ".3f")))
    return 0 if all(v is not None and v <= TARGET_TLS_CPU for v, _ in checks) else 1


def part(a, tmp):
    """The TLS part; returns the exit status (1: the CPU target missed)."""
    if a.redis_skip:
        die("--tls needs redis-server: " + a.redis_skip)
    prepare_tmp(tmp)
    userfile, password, cheap = tls_userfile(a, tmp)
    ca = TestCA(dir=os.path.join(tmp, "ca"))
    cert, key = ca.issue()
    pepper = os.path.join(tmp, "pepper")
    fd = os.open(pepper, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    plain = Redis(password=secrets.token_hex(16), binary=a.redis_server)
    tls = Redis(password=secrets.token_hex(16), binary=a.redis_server,
                tls={"cert": cert, "key": key, "ca": ca.cert})
    servers, running, storms = {}, [], []
    print("- TLS: redis-server with --port 0 --tls-port (a test CA's P-256 certificate "
          "for 127.0.0.1), AuthHMACRedisTLS on, AuthHMACRedisTLSCACertificateFile; "
          "plain: the same redis-server version on a TCP port; both requirepass; "
          "MPM %s" % a.mpm)
    sys.stdout.flush()
    try:
        for r in (plain, tls):
            log("starting redis-server on 127.0.0.1:%d%s" % (r.port, " (TLS)" if r.tls else ""))
            try:
                r.start()
            except RuntimeError as e:
                die(str(e))
        redises = {"redisonly": plain, "redis": plain, "tlsredisonly": tls, "tlsredis": tls}
        for col in TLS_COLUMNS:
            r = redises[col]
            conf = ("AuthHMACPepperFile \"%s\"\nAuthHMACRedisServer %s\n"
                    "AuthHMACRedisAuthFile \"%s\"\n" % (
                        pepper, r.address,
                        r.auth_file(os.path.join(tmp, "redis-auth-" + col), r.password)))
            if r.tls:
                conf += ("AuthHMACRedisTLS on\nAuthHMACRedisTLSCACertificateFile \"%s\"\n"
                         % ca.cert)
            if col.endswith("only"):
                conf += "AuthHMACCacheSize 0\n"
            srv = make_httpd(a, tmp, col, server_extra=conf)
            srv.body = site(os.path.join(tmp, "htdocs"), userfile)
            srv.write_config()
            running.append(srv)
            start(a, srv, 1)
            servers[col] = srv
        servers["noauth"] = servers["redisonly"]
        for col in TLS_COLUMNS:
            warm_up_redis(a, servers[col], col, password, redises[col])
        runs = tls_rows(a, servers, redises, password)
        probes = ["probe%03d" % i for i in range(PROBE_USERS)][::-1]
        for i in range(a.storm_rounds):
            log("reconnect storm, round %d of %d" % (i + 1, a.storm_rounds))
            storms.append(storm_round(a, tls, servers["tlsredisonly"], servers["tlsredis"],
                                      cheap, probes))
            time.sleep(1)
        rc = tls_report(a, runs, storms, redis_version(a))
        for srv in running:
            srv.stop()
        # NB: the storm's outage is logged when it begins and ends.
        error_log_report({c: servers[c] for c in TLS_COLUMNS}, a.keep, tls,
                         quiet=("AHMAC0004", "AHMAC0005", "Redis at"))
        return rc
    finally:
        while running:
            running.pop().stop()
        for r in (plain, tls):
            r.stop()
            if not a.keep:
                r.cleanup()
        if not a.keep:
            ca.cleanup()
