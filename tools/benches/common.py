"""What the benchmarks share: the options every run has and the checks
before a run, the bench's httpd and its site, ab with the server's CPU time
per request, the warm-ups, the default run's header and user files (the
flood alone uses them too), the figures' helpers and the error logs' report.
The httpd, redis-server, htpasswd and ab drivers are the harness's
(harness/ at the tree's top, shared with the tests)."""

import argparse
import hashlib
import os
import platform
import random
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from harness import S, Httpd, ab, basic, busy_ticks, changed_default, cpu_ticks, get, \
    hmac_location, htpasswd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER = "benchuser"
FILE = "bench.bin"
FILE_SIZE = 25 * 1024
TIMED = ("noauth", "anon", "hmac")       # ab -t, interleaved rounds
SLOW = ("file", "socache")               # ab -n: bcrypt on every request
# Column keys; the Redis ones are /hmac/ on their own httpds.
LABEL = {"noauth": "no-auth", "anon": "anon", "file": "file",
         "socache": "socache+file", "hmac": "hmac", "redis": "hmac+redis",
         "redisonly": "redis only", "tlsredis": "hmac+redis TLS",
         "tlsredisonly": "redis only TLS"}
URL_PATH = {"redis": "hmac", "redisonly": "hmac", "tlsredis": "hmac", "tlsredisonly": "hmac"}
COUNTERS = ("verifications", "hits", "redis_hits", "redis_misses",
            "redis_errors", "redis_timeouts")
TARGET_RATIO = 0.97
TARGET_REDIS = 0.97       # hmac+redis/no-auth, -k
TARGET_REDIS_ONLY = 0.80  # redis only/no-auth, -k
TARGET_EXTRA_US = 3.0
TARGET_LARGE = 1.1


def log(msg):
    print("# " + msg, file=sys.stderr, flush=True)


def die(msg):
    print("tools/bench: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def first_line(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError as e:
        return "(%s: %s)" % (cmd[0], e)
    lines = (out.stdout + out.stderr).strip().splitlines()
    return lines[0] if lines else "(no output)"


def module_info(path):
    """The module's path, build time and hash, and the tree's commit."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(path)))
    info = "%s (built %s, sha256 %s" % (os.path.abspath(path), built, digest)
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            info += "; tree %s%s" % (head.stdout.strip(),
                                     " with uncommitted changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return info + ")"


def parser():
    """The parser with the options every run has; each benchmark adds its
    own (add_args), and add_keep the last one."""
    st = S
    p = argparse.ArgumentParser(
        description="Benchmark AuthBasicProvider hmac against no auth, anon, "
        "file and socache+file, and with Redis, with ab; prints a markdown table.",
        epilog="Example: make && tools/bench --quick")
    p.add_argument("--port", type=int, default=0,
                   help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--mpm", default="event", choices=("event", "worker", "prefork"),
                   help="httpd MPM (default: event)")
    p.add_argument("--module", default=st["module"],
                   help="the module to test (default: %(default)s)")
    p.add_argument("--httpd", default=st.get("httpd", "/usr/sbin/apache2"),
                   help="httpd binary (default: %(default)s)")
    p.add_argument("--moddir", default=st.get("moddir", "/usr/lib/apache2/modules"),
                   help="httpd modules directory (default: %(default)s)")
    p.add_argument("--ab", default=st.get("ab", shutil.which("ab") or "/usr/bin/ab"),
                   help="ab binary (default: %(default)s)")
    p.add_argument("--htpasswd",
                   default=st.get("htpasswd", shutil.which("htpasswd") or "/usr/bin/htpasswd"),
                   help="htpasswd binary (default: %(default)s)")
    p.add_argument("--cost", type=int, default=12,
                   help="bcrypt cost of the bench user's hash (default: 12)")
    p.add_argument("--users-large", type=int, default=100000,
                   help="users in the large htpasswd file (default: 100000)")
    p.add_argument("--concurrency", "-c", type=int, default=16,
                   help="ab -c (default: 16)")
    p.add_argument("--redis-server",
                   default=shutil.which("redis-server") or "/usr/bin/redis-server",
                   help="redis-server binary for the Redis columns (default: %(default)s)")
    p.add_argument("--no-redis", action="store_true",
                   help="skip the Redis columns")
    p.add_argument("--throttle", action="store_true",
                   help="the floods, logins and timings too with the module's throttle "
                   "on guessing at its defaults (default: off there, so that a flood "
                   "from one address measures the verification cap, not the throttle; "
                   "the default run's hits always run the shipped defaults)")
    p.add_argument("--no-throttle", action="store_true",
                   help="the default run's servers with the throttle off (default: on, "
                   "as shipped)")
    p.add_argument("--no-pin", action="store_true",
                   help="do not run ab under taskset -c 1 (default: pin it when "
                   "nproc >= 2 and taskset is installed)")
    p.add_argument("--seconds", type=int, default=None,
                   help="ab -t for the no-auth, anon, hmac and Redis runs "
                   "(default: 8, --quick: 2)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved no-auth/anon/hmac(/Redis) rounds; the median "
                   "is shown (default: 3, --quick: 1)")
    p.add_argument("--slow-requests", type=int, default=None,
                   help="ab -n for the file and socache runs, which run bcrypt "
                   "on every request (default: 48, --quick: 16)")
    p.add_argument("--quick", action="store_true",
                   help="short runs, for a smoke test")
    return p


def add_keep(p):
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory (config, error log)")


def check_args(a, p, bench):
    """The shared options' defaults (--seconds and --rounds: the benchmark
    that runs may set its own, SECONDS, ROUNDS and QUICK_ROUNDS) and checks."""
    quick = a.quick
    if a.seconds is None:
        a.seconds = 2 if quick else getattr(bench, "SECONDS", 8)
    if a.rounds is None:
        a.rounds = getattr(bench, "QUICK_ROUNDS", 1) if quick else getattr(bench, "ROUNDS", 3)
    if a.slow_requests is None:
        a.slow_requests = 16 if quick else 48
    if a.users_large < 2:
        p.error("--users-large must be at least 2")
    if a.seconds < 1 or a.rounds < 1 or a.slow_requests < 1 or a.concurrency < 1:
        p.error("--seconds, --rounds, --slow-requests and --concurrency must be positive")
    if not 4 <= a.cost <= 17:
        p.error("--cost must be from 4 to 17 (htpasswd -C)")


def setup(a):
    """Checks what the run needs, and has the harness run the binaries
    given. Sets a.pin_cpu and a.why_no_pin (ab's CPU, or why none), and
    a.redis_skip (why there is no Redis, or None)."""
    if not os.path.exists(a.module):
        die("%s not found; build the module first: make" % a.module)
    for tool in (a.httpd, a.ab, a.htpasswd):
        if not os.access(tool, os.X_OK):
            die("%s not found or not executable" % tool)
    if not os.path.exists(os.path.join(a.moddir, "mod_mpm_%s.so" % a.mpm)):
        die("%s/mod_mpm_%s.so not found (--moddir, --mpm)" % (a.moddir, a.mpm))
    if not os.path.exists(os.path.join(a.moddir, "mod_authn_anon.so")):
        die("%s/mod_authn_anon.so not found (--moddir)" % a.moddir)
    # The harness's Httpd, htpasswd and ab run these.
    S.update(httpd=a.httpd, moddir=a.moddir, ab=a.ab, htpasswd=a.htpasswd,
             module=os.path.abspath(a.module))
    a.pin_cpu, a.why_no_pin = pin_cpu(a)
    a.redis_skip = redis_available(a)


def with_tmp(a, body):
    """body(a, tmp) in a new temporary directory, removed after it (kept
    with --keep); 130 on ^C, else what body returns."""
    tmp = tempfile.mkdtemp(prefix="authn-hmac-bench-")
    try:
        return body(a, tmp)
    except KeyboardInterrupt:
        return 130
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def run_alone(a, title, part, machine=False, lines=(), timed=False):
    """A benchmark run alone (its run()): part(a, tmp) in a temporary
    directory (with_tmp), after its header: the title, with machine the
    machine's line, lines, the module's line; timed adds ab's pinning under
    the module's and the total time after the part. Returns what part
    returns."""
    def body(a, tmp):
        print("# mod_authn_hmac benchmark: " + title)
        print()
        if machine:
            print(machine_line())
        for line in lines:
            print(line)
        print("- module: %s" % module_info(a.module))
        if timed:
            print(pinned_line(a))
        t0 = time.time()
        rc = part(a, tmp)
        if timed:
            print()
            print(total_line(t0))
        return rc
    return with_tmp(a, body)


def stop_all(running):
    """Stops the servers started, the last first."""
    while running:
        running.pop().stop()


def interrupt_on_term():
    """SIGTERM ends a run as ^C does: its servers stopped, its files removed."""
    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def machine_line():
    return "- machine: nproc=%d; load average before the run: %s" % (
        len(os.sched_getaffinity(0)), loadavg())


def pinned_line(a):
    return "- ab pinned: " + ("yes, taskset -c %s" % a.pin_cpu if a.pin_cpu
                              else "no (%s)" % a.why_no_pin)


def total_line(t0):
    return "Total bench time: %.0f s; load average after the run: %s" % (
        time.time() - t0, loadavg())


def header(a):
    """The default run's header (the flood alone prints it too)."""
    redis_skip = a.redis_skip
    why_no_pin = a.why_no_pin
    print("# mod_authn_hmac benchmark")
    print()
    try:
        cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                          if l.startswith("model name")), "?")
    except OSError:
        cpu_model = "?"
    print("- machine: nproc=%d (%s), %s %s, Python %s" % (
        len(os.sched_getaffinity(0)), cpu_model, platform.system(),
        platform.release(), platform.python_version()))
    print("- load average before the run: %s" % " ".join(
        open("/proc/loadavg").read().split()[:3]))
    print("- httpd: %s (%s, MPM %s)" % (first_line([a.httpd, "-v"]), a.httpd, a.mpm))
    print("- ab: %s" % first_line([a.ab, "-V"]))
    print("- ab pinned: " + ("yes, taskset -c %s (httpd and redis-server not pinned)"
                             % a.pin_cpu if a.pin_cpu else "no (%s)" % why_no_pin))
    print("- module: %s" % module_info(a.module))
    print("- bcrypt cost %d; users: 1 and {:,}; ab -c {}; {} s runs x {} round(s) "
          "(no-auth, anon, hmac{}), -n {} (file, socache)".format(
              a.users_large, a.concurrency, a.seconds, a.rounds,
              "" if redis_skip else "; with -k also hmac+redis, redis only",
              a.slow_requests) % a.cost)
    print("- anon: AuthBasicProvider anon (mod_authn_anon, Anonymous %s, any "
          "password): mod_auth_basic with a provider that does no work" % USER)
    print("- Redis: " + ("skipped (%s)" % redis_skip if redis_skip else
                         "redis-server %s on 127.0.0.1 (no persistence, requirepass); "
                         "hmac+redis (AuthHMACCacheSize default, shared memory in "
                         "front of Redis) and redis only (AuthHMACCacheSize 0) are "
                         "each /hmac/ on their own httpd with AuthHMACRedisServer, "
                         "AuthHMACPepperFile and AuthHMACRedisAuthFile; keep-alive only"
                         % redis_version(a)))
    print("- targets: hmac/no-auth >= %.2f (with and without -k); extra CPU <= %g "
          "µs/req; {:,} users <= %gx of 1 user; hmac+redis/no-auth >= %.2f (-k); "
          "redis only/no-auth >= %.2f (-k)".format(a.users_large)
          % (TARGET_RATIO, TARGET_EXTRA_US, TARGET_LARGE, TARGET_REDIS,
             TARGET_REDIS_ONLY))
    sys.stdout.flush()


# ------------------------------------------------------------------ setup


def make_userfiles(a, tmp):
    """The 1-user file from htpasswd, and the large one made from its hash."""
    small = os.path.join(tmp, "users-1.htpasswd")
    password = secrets.token_urlsafe(12)
    log("htpasswd -B -C %d for %s" % (a.cost, USER))
    try:
        htpasswd(small, USER, password, cost=a.cost, create=True)
    except subprocess.CalledProcessError as e:
        die("htpasswd failed: " + (e.stderr or e.stdout or b"").decode().strip())
    with open(small) as f:
        line = f.read().strip()
    if not line.startswith(USER + ":$2y$"):
        die("unexpected htpasswd output: %r" % line)
    bhash = line.split(":", 1)[1]

    # Running htpasswd 100k times would take hours: the other users share the
    # bench user's hash, and the bench user sits in the middle of the file so
    # that mod_authn_file's linear scan reads half of it.
    large = os.path.join(tmp, "users-%d.htpasswd" % a.users_large)
    middle = a.users_large // 2
    with open(large, "w") as f:
        n = 0
        for i in range(a.users_large):
            if i == middle - 1:
                f.write(line + "\n")
            else:
                n += 1
                f.write("user%06d:%s\n" % (n, bhash))
    # The hmac module reads a file modified less than a second ago once more
    # later; backdate both files so that re-read cannot land in a measurement.
    past = time.time() - 60
    for path in (small, large):
        os.chmod(path, 0o644)
        os.utime(path, (past, past))
    return password, {1: small, a.users_large: large}


def mpm_conf(a):
    if a.mpm == "prefork":
        n = max(20, a.concurrency + 4)
        return ("StartServers %d\nServerLimit %d\nMinSpareServers 1\n"
                "MaxSpareServers %d\nMaxRequestWorkers %d\n"
                "MaxConnectionsPerChild 0\n" % (n, n, n, n))
    return ("StartServers 2\nServerLimit 2\nThreadsPerChild 25\nThreadLimit 25\n"
            "MinSpareThreads 1\nMaxSpareThreads 50\nMaxRequestWorkers 50\n"
            "MaxConnectionsPerChild 0\n")


def site(docs, userfile):
    """The five locations, each serving the same file."""
    cols = ("noauth", "anon", "file", "socache", "hmac")
    return "".join('Alias /%s/ "%s/"\n' % (c, docs) for c in cols) + """
<Directory "%s">
    Options None
</Directory>
<Location /noauth/>
    Require all granted
</Location>
""" % docs + hmac_location("/anon/", None, "bench", "Anonymous " + USER,
                          "Anonymous_NoUserID off", "Anonymous_MustGiveEmail off",
                          "Anonymous_VerifyEmail off", "Anonymous_LogEmail off",
                          provider="anon") \
        + hmac_location("/file/", userfile, "bench", provider="file") \
        + hmac_location("/socache/", userfile, "bench", "AuthnCacheProvideFor file",
                        "AuthnCacheTimeout 300", provider="socache file") \
        + hmac_location("/hmac/", userfile, "bench")


def make_httpd(a, tmp, name, port=None, server_extra="", throttle=None):
    """One httpd instance in <tmp>/<name>/; the documents and user files are
    shared. server_extra goes at server scope (the Redis directives). No
    access log, LogLevel warn: nothing but the request is measured. The
    throttle on guessing off unless throttle (by default --throttle)."""
    if throttle is None:
        throttle = getattr(a, "throttle", False)
    off = "" if throttle else changed_default(
        "a flood from one address measures the verification cap, not the throttle "
        "(--throttle keeps the defaults)", AuthHMACMaxFailures=0, AuthHMACMaxClientFailures=0)
    return Httpd(mpm=a.mpm, name=name, port=port, directory=os.path.join(tmp, name),
                 modules=("authn_anon", "authn_socache", "socache_shmcb"),
                 mpm_conf=mpm_conf(a), log_level="warn", log_requests=False,
                 global_conf="AddType application/octet-stream .bin\n"
                             "AuthnCacheSOCache shmcb\n" + off + server_extra)


def prepare_tmp(tmp):
    os.chmod(tmp, 0o755)  # www-data must reach htdocs and the user files
    os.mkdir(os.path.join(tmp, "htdocs"), 0o755)
    rnd = random.Random(20240601)
    path = os.path.join(tmp, "htdocs", FILE)
    with open(path, "wb") as f:
        f.write(bytes(rnd.getrandbits(8) for _ in range(FILE_SIZE)))
    os.chmod(path, 0o644)


def fetch(srv, path, password=None):
    """One GET on a new connection: the response, its body in .body."""
    r, conn = get(srv.port, path, basic(USER, password) if password else None, timeout=60)
    if conn:
        conn.close()
    return r


def start(a, srv, users):
    """Checks the config, starts srv, and waits until every child is up."""
    rc, out = srv.configtest()
    if rc:
        die("httpd config test failed for %s (%s):\n%s" % (srv.name, srv.conf, out.strip()))
    log("starting httpd ({}) for {:,} user(s) on 127.0.0.1:{}".format(srv.name, users, srv.port))
    try:
        srv.start()
        code = fetch(srv, "/noauth/" + FILE).status
    except (RuntimeError, OSError) as e:
        die("httpd (%s) did not start: %s\n%s" % (srv.name, e, srv.error_log_tail()))
    if code != 200:
        die("httpd (%s): /noauth/%s answered %d\n%s" % (srv.name, FILE, code,
                                                         srv.error_log_tail()))
    # Let every child come up before the process set is sampled.
    want = 1 + (max(20, a.concurrency + 4) if a.mpm == "prefork" else 2)
    deadline = time.time() + 10
    while len(srv.pids()) < want and time.time() < deadline:
        time.sleep(0.1)


# -------------------------------------------------------------------- ab


def run_ab(a, srv, col, auth, keepalive, seconds=None, n=None, warm=False, redis=None):
    """One ab run against column col of srv; redis (a harness Redis) is
    charged separately from httpd, and not counted as other load."""
    conc = a.concurrency if seconds else min(a.concurrency, n)  # ab needs c <= n
    url = "%s/%s/%s" % (srv.url, URL_PATH.get(col, col), FILE)
    tick = os.sysconf("SC_CLK_TCK")
    pids0 = srv.pids()
    t0 = cpu_ticks(pids0)
    r0 = cpu_ticks([redis.proc.pid]) if redis else 0
    b0, c0, w0 = busy_ticks(), os.times(), time.monotonic()
    res = ab(url, None if col == "noauth" else auth, n=n or 10000000, c=conc,
             keepalive=keepalive, seconds=seconds,
             prefix=["taskset", "-c", a.pin_cpu] if a.pin_cpu else ())
    b1, c1, w1 = busy_ticks(), os.times(), time.monotonic()
    pids1 = srv.pids()
    t1 = cpu_ticks(pids1)
    r1 = cpu_ticks([redis.proc.pid]) if redis else 0
    ab_cpu = (c1.children_user - c0.children_user +
              c1.children_system - c0.children_system)
    del res["out"]
    res.update(col=col, cpu_us=None, redis_us=None,
               # cores busy with something other than httpd, redis-server and ab (noise)
               other=max(0.0, ((b1 - b0) - (t1 - t0) - (r1 - r0)) / tick - ab_cpu)
               / (w1 - w0))
    if pids0 != pids1:
        res["err"] = (res["err"] + " httpd processes changed during the run "
                      "(%s -> %s)" % (pids0, pids1)).strip()
    if res["complete"]:
        res["cpu_us"] = (t1 - t0) / tick * 1e6 / res["complete"]
        if redis:
            res["redis_us"] = (r1 - r0) / tick * 1e6 / res["complete"]
    if not warm:
        log("  %-9s %-5s %8.1f req/s %7s us/req  n=%d failed=%d non2xx=%d "
            "other=%.2f%s" % (
                col, "-k" if keepalive else "no-k", res["rps"],
                "%.1f" % res["cpu_us"] if res["cpu_us"] is not None else "-",
                res["complete"], res["failed"], res["non2xx"], res["other"],
                ("  [" + res["err"] + "]") if res["err"] else ""))
    return res


def counter_delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}


def check_warm(srv, col, w):
    if w["rc"] or w["failed"] or w["non2xx"]:
        die("warm-up of %s (/%s/ on %s) failed: %s\n%s" % (
            LABEL[col], URL_PATH.get(col, col), srv.name, w, srv.error_log_tail()))


def warm_up(a, srv, auth):
    """One verification for hmac; then every child sees each column."""
    r = fetch(srv, "/hmac/" + FILE, auth)
    if r.status != 200 or len(r.body) != FILE_SIZE:
        die("warm-up: /hmac/%s answered %d (%d bytes)\n%s" % (
            FILE, r.status, len(r.body), srv.error_log_tail()))
    cred = USER + ":" + auth
    for ka in (False, True):
        for col in TIMED:
            check_warm(srv, col, run_ab(a, srv, col, cred, ka,
                                        n=max(200, a.concurrency * 20), warm=True))
    for col in SLOW:
        check_warm(srv, col, run_ab(a, srv, col, cred, False, n=2, warm=True))


def warm_up_redis(a, srv, col, auth, redis):
    """One request (it verifies once, or finds the key in Redis), then
    a short uncounted ab -k run so every child has its Redis connections."""
    before = srv.status()
    r = fetch(srv, "/hmac/" + FILE, auth)
    after = srv.status()
    if r.status != 200 or len(r.body) != FILE_SIZE:
        die("warm-up: %s /hmac/%s answered %d (%d bytes)\n%s\n%s" % (
            LABEL[col], FILE, r.status, len(r.body), srv.error_log_tail(), redis.log_tail()))
    d = counter_delta(before, after)
    log("  %s warm-up request: %s" % (LABEL[col], " ".join(
        "%s=%d" % (k, d[k]) for k in COUNTERS)))
    check_warm(srv, col, run_ab(a, srv, col, USER + ":" + auth, True,
                                n=max(200, a.concurrency * 20), warm=True, redis=redis))


# ---------------------------------------------------------------- report


def med(runs, key):
    vals = [r[key] for r in runs if r[key] is not None]
    return statistics.median(vals) if vals else None


def diffs(runs_a, runs_b, key):
    """Each round's value of a minus b's in the same round (a TIMED
    column's runs are in round order)."""
    return [x[key] - y[key] for x, y in zip(runs_a, runs_b)
            if x[key] is not None and y[key] is not None]


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def ratio(x, y):
    return x / y if x is not None and y else None


def delta_sum(runs, key):
    vals = [r["delta"][key] for r in runs if "delta" in r]
    return sum(vals) if vals else None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def error_log_report(httpds, keep, redis=None, quiet=()):
    # The start/stop notices are expected (and quiet, the caller's);
    # anything else is worth a look.
    quiet = ("resuming normal operations", "caught SIGTERM, shutting down",
             "Command line: ", "AH00558",
             # the flood's wrong passwords, as mod_auth_basic logs them
             "user %s: authentication failure" % USER) + tuple(quiet)
    print()
    for name, srv in httpds.items():
        path = srv.path("logs", "error_log")
        lines = srv.error_log().splitlines()
        odd = [l for l in lines if l.strip() and not any(q in l for q in quiet)]
        if odd:
            print("httpd error log, %s (%d unexpected line(s)%s):" % (
                name, len(odd), ", " + path if keep else ""))
            for l in odd[:40]:
                print("  " + l)
            if len(odd) > 40:
                print("  ...")
        else:
            print("httpd error log, %s: nothing beyond start/stop notices" % name)
    if redis:
        # loglevel warning: a clean run logs only its startup banner, and
        # perhaps the host's vm.overcommit_memory warning (irrelevant here:
        # no persistence).
        quiet = ("Redis is starting", "Redis version=", "Configuration loaded",
                 "Server initialized", "Memory overcommit must be enabled")
        odd = [l for l in redis.log_tail(200).splitlines()
               if l.strip() and not any(q in l for q in quiet)]
        print("redis-server log: " + ("nothing beyond startup notices" if not odd else
                                      "\n  " + "\n  ".join(odd[-20:])))


def pin_cpu(a):
    """"1" when ab should run under taskset -c 1, else None and why not."""
    cpus = os.sched_getaffinity(0)
    if a.no_pin:
        return None, "--no-pin"
    if len(cpus) < 2:
        return None, "nproc=%d" % len(cpus)
    if 1 not in cpus:
        return None, "CPU 1 not in this process's affinity set"
    if not shutil.which("taskset"):
        return None, "taskset (util-linux) not found"
    if subprocess.run(["taskset", "-c", "1", "true"], capture_output=True).returncode:
        return None, "taskset -c 1 failed"
    return "1", ""


def redis_version(a):
    m = re.search(r"v=(\S+)", first_line([a.redis_server, "--version"]))
    return m.group(1) if m else "?"


def redis_available(a):
    """None if the Redis columns can run, else why not."""
    if a.no_redis:
        return "--no-redis"
    if not os.access(a.redis_server, os.X_OK):
        return "%s not found; apt-get install redis-server" % a.redis_server
    return None
