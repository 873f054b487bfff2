"""The scale part, --scale: how the htpasswd index scales with users.

Files of 10,000 to 1,000,000 users (made fast: the bench user's hash in the
middle, one other hash repeated), each served by a prefork httpd of 10 children and an event
httpd (2 processes of 25 threads), its DefaultRuntimeDir on a tmpfs (a
directory of --scale-runtime-dir made for the row and removed after it),
as Debian's /run/apache2 is: the server's one index of the file is a
version file there (authn_hmac-index/), written by the child that builds
it and mapped read-only by the others. For each: the server's memory once
every child has served a request (the version files' size; Pss, Pss_Anon
and Pss_Shmem summed over the children, from /proc/<pid>/smaps_rollup;
Pss of parent and children), the time of the server's first request (the
one that builds) and of the first request on each other child (which maps
the version), the same after each change of the file (touched, or one
user's line rewritten by htpasswd) and once more past the second after it
(a version read within a second of a change is read again), cached
requests under ab -k, and mod_authn_file's time per request on the same
file (it reads the file on every request).
"""

import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time

from harness import Httpd, ab, basic, busy_ticks, cpu_ticks, get, hmac_location, htpasswd, \
    htpasswd_line, smaps_rollup

from .common import FILE, USER, die, fetch, first_line, fmt, log, prepare_tmp, run_alone, start

SECONDS = 4  # --seconds: ab -t of the cached requests

SCALE_PREFORK = 10       # prefork children
SCALE_FILE_REQUESTS = 5  # mod_authn_file requests per row, at most
CHURN_USER = "churnuser"  # the user whose line the rewrites change
INDEX_DIR = "authn_hmac-index"  # in DefaultRuntimeDir (mod_authn_hmac.c)
RACY_SECOND = 1.2        # s after a change: past the module's racy second


def add_args(p):
    p.add_argument("--scale", action="store_true",
                   help="only the scale part: htpasswd files of --scale-users users, "
                        "each on prefork (%d children) and event, DefaultRuntimeDir on "
                        "--scale-runtime-dir: memory per server (index files, Pss, "
                        "Pss_Anon, Pss_Shmem), the first request on the server (it "
                        "builds) and on each other child (it maps), also after a change "
                        "of the file, "
                        "cached req/s and hit rate, and mod_authn_file's time per request "
                        "on the same file" % SCALE_PREFORK)
    p.add_argument("--scale-users", default=None,
                   help="comma-separated user counts for --scale (default: "
                        "10000,100000,1000000; --quick: 10000,100000)")
    p.add_argument("--scale-mpms", default="prefork,event",
                   help="comma-separated MPMs for --scale (default: %(default)s)")
    p.add_argument("--scale-cost", type=int, default=5,
                   help="bcrypt cost of the hashes in --scale's files (default: 5: the "
                        "file, not bcrypt, is what is measured)")
    p.add_argument("--scale-changes", type=int, default=None,
                   help="changes of the file of each kind (touch, rewrite) whose first "
                        "request is timed, per row of --scale (default: 3, --quick: 1)")
    p.add_argument("--scale-runtime-dir", default="/dev/shm",
                   help="--scale: where each server's DefaultRuntimeDir is made (and "
                        "removed after it), as Debian's /run/apache2 is a tmpfs "
                        "(default: %(default)s)")
    p.add_argument("--file-cap", type=float, default=30.0,
                   help="--scale: no mod_authn_file request is started past this many "
                        "seconds of them, per row (default: %(default)s)")


def check_args(a, p):
    quick = a.quick
    if a.scale_users is None:
        a.scale_users = "10000,100000" if quick else "10000,100000,1000000"
    try:
        a.scale_users = [int(x) for x in a.scale_users.split(",")]
    except ValueError:
        p.error("--scale-users: comma-separated numbers")
    if any(n < 2 for n in a.scale_users):
        p.error("--scale-users: at least 2 users each")
    a.scale_mpms = a.scale_mpms.split(",")
    if not set(a.scale_mpms) <= {"prefork", "worker", "event"}:
        p.error("--scale-mpms: prefork, worker or event")
    if a.scale_changes is None:
        a.scale_changes = 1 if quick else 3
    if not 4 <= a.scale_cost <= 17:
        p.error("--scale-cost must be from 4 to 17 (htpasswd -C)")


def run(a):
    httpd = "- httpd: %s (%s)" % (first_line([a.httpd, "-v"]), a.httpd)
    return run_alone(a, "scale", part, machine=True, lines=(httpd,), timed=True)


def fs_type(path):
    """The type of the file system that holds path (/proc/self/mountinfo)."""
    path, best, kind = os.path.realpath(path), "", "?"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                mnt = fields[4].replace("\\040", " ")
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):
                    best, kind = mnt, fields[fields.index("-") + 1]
    except (OSError, IndexError, ValueError):
        pass
    return kind


class ScaleHttpd(Httpd):
    """The harness's httpd, its DefaultRuntimeDir at runtime_dir (the pid
    file and mutexes stay in its directory)."""

    def __init__(self, runtime_dir, **kw):
        self.runtime_dir = runtime_dir
        super().__init__(**kw)

    def config_text(self):
        text = super().config_text()
        line = 'DefaultRuntimeDir "%s/run"' % self.dir
        if line not in text:
            die("scale: the harness's config has no %r to replace" % line)
        return text.replace(line, 'DefaultRuntimeDir "%s"' % self.runtime_dir)


def scale_userfile(a, tmp, n, password):
    """n users: the bench user (--scale-cost) in the middle, as in the
    default run, so that mod_authn_file reads half the file; the churn user
    last; the others share one hash."""
    path = os.path.join(tmp, "users-scale-%d.htpasswd" % n)
    line = htpasswd_line(USER, password, cost=a.scale_cost)
    bulk = htpasswd_line("u", secrets.token_urlsafe(12), cost=a.scale_cost).split(":", 1)[1]
    churn = htpasswd_line(CHURN_USER, secrets.token_urlsafe(12), cost=a.scale_cost)
    middle = n // 2
    with open(path, "w") as f:
        f.writelines(line + "\n" if i == middle else "user%07d:%s\n" % (i, bulk)
                     for i in range(n - 1))
        f.write(churn + "\n")
    os.chmod(path, 0o644)
    past = time.time() - 60
    os.utime(path, (past, past))
    return path


def scale_httpd(a, tmp, runtime, mpm, n, userfile):
    """/noauth/; /hmac/ and /reach/ (the hmac provider) and /file/
    (mod_authn_file) on userfile; /reach/'s requests go to a log with the
    child's pid. DefaultRuntimeDir: runtime/<mpm>-<n>, made here."""
    conf = ("StartServers {n}\nServerLimit {n}\nMinSpareServers 1\nMaxSpareServers {n}\n"
            "MaxRequestWorkers {n}\nMaxConnectionsPerChild 0\n".format(n=SCALE_PREFORK)
            if mpm == "prefork" else
            "StartServers 2\nServerLimit 2\nThreadsPerChild 25\nThreadLimit 25\n"
            "MinSpareThreads 1\nMaxSpareThreads 50\nMaxRequestWorkers 50\n"
            "MaxConnectionsPerChild 0\n")
    rundir = os.path.join(runtime, "%s-%d" % (mpm, n))
    os.mkdir(rundir)
    os.chmod(rundir, 0o755)  # the children's user reaches the index there
    srv = ScaleHttpd(rundir, mpm=mpm, name="scale-%s-%d" % (mpm, n),
                     directory=os.path.join(tmp, "scale-%s-%d" % (mpm, n)), mpm_conf=conf,
                     log_level="warn", log_requests=False,
                     global_conf="AddType application/octet-stream .bin\n")
    docs = os.path.join(tmp, "htdocs")
    srv.body = "".join('Alias /%s/ "%s/"\n' % (c, docs)
                       for c in ("noauth", "hmac", "reach", "file")) + \
        '<Directory "%s">\n    Options None\n</Directory>\n' % docs + \
        "<Location /noauth/>\n    Require all granted\n</Location>\n" + \
        hmac_location("/hmac/", userfile, "bench") + \
        hmac_location("/reach/", userfile, "bench") + \
        hmac_location("/file/", userfile, "bench", provider="file") + \
        'CustomLog "%s" "%%P" "expr=%%{REQUEST_URI} =~ m#^/reach/#"\n' % srv.path("logs", "pids")
    srv.write_config()
    return srv


def logged_pids(srv):
    try:
        with open(srv.path("logs", "pids")) as f:
            return [int(l) for l in f.read().split()]
    except (OSError, ValueError):
        return []


def child_round(srv, password):
    """Requests to /reach/ from now, each on a new connection kept open
    while the next ones are made (a prefork child serves no other
    connection meanwhile, so 10 held connections are 10 children), until the
    pid log names every child. Returns [(pid, seconds)] in order; the first
    request of each pid is that child's first."""
    kids, mark = set(srv.children()), len(logged_pids(srv))
    out, conns = [], []
    deadline = time.time() + 120
    try:
        while not kids <= {p for p, _ in out}:
            if time.time() > deadline:
                die("scale: not every child of %s served a request: %s of %s" % (
                    srv.name, sorted({p for p, _ in out}), sorted(kids)))
            if len(conns) >= len(kids):
                for c in conns:
                    c.close()
                conns = []
            t0 = time.perf_counter()
            r, c = get(srv.port, "/reach/" + FILE, basic(USER, password), timeout=300)
            dt = time.perf_counter() - t0
            if r.status != 200:
                die("scale: /reach/ answered %d\n%s" % (r.status, srv.error_log_tail()))
            if c:
                conns.append(c)
            for _ in range(500):  # the log line follows the response
                pids = logged_pids(srv)
                if len(pids) > mark + len(out):
                    break
                time.sleep(0.01)
            else:
                die("scale: %s: no pid logged for a request to /reach/" % srv.name)
            out.append((pids[mark + len(out)], dt))
    finally:
        for c in conns:
            c.close()
    return out


def firsts(rnd):
    """The first request of the round (seconds) and the first of each
    other child, in order."""
    seen, others = {rnd[0][0]}, []
    for pid, dt in rnd[1:]:
        if pid not in seen:
            seen.add(pid)
            others.append(dt)
    return rnd[0][1], others


def index_state(srv):
    """{name: size} of the files in the server's authn_hmac-index."""
    d = os.path.join(srv.runtime_dir, INDEX_DIR)
    try:
        return {e.name: e.stat().st_size for e in os.scandir(d) if e.is_file()}
    except OSError:
        return {}


def versions(files):
    """The highest version number published (files <tag>.<slot>.<version>):
    how many versions were built, 0 if none."""
    vs = [int(n.rsplit(".", 1)[1]) for n in files if n.rsplit(".", 1)[-1].isdigit()]
    return max(vs) if vs else 0


def mapped_versions(pids):
    """{pid: [(version file, deleted)]} mapped by each process."""
    out = {}
    for pid in pids:
        seen = set()
        try:
            with open("/proc/%d/maps" % pid) as f:
                for line in f:
                    if "/%s/" % INDEX_DIR in line:
                        path = line.split(None, 5)[5].strip()
                        deleted = path.endswith(" (deleted)")
                        seen.add((os.path.basename(path.replace(" (deleted)", "")), deleted))
        except OSError:
            pass
        out[pid] = sorted(seen)
    return out


def memory(pids):
    mem = {pid: smaps_rollup(pid) for pid in pids}
    return mem if all(mem.values()) else None


def scale_changes(a, srv, userfile, password):
    """For touch (mtime only) and rewrite (htpasswd sets the churn user's
    password: the file copied over itself), --scale-changes of each: a round
    of every child at once (the first request builds, the other children's
    map), then another past the second after the change. Returns
    {kind: [{first, others, settle, built, settle_built, files}]}."""
    out = {"touch": [], "rewrite": []}
    for kind in ("touch", "rewrite"):
        for _ in range(a.scale_changes):
            time.sleep(1.1)  # NB: apart from the change before by more than a second
            v0 = versions(index_state(srv))
            if kind == "touch":
                os.utime(userfile, None)
            else:
                htpasswd(userfile, CHURN_USER, secrets.token_urlsafe(12), cost=a.scale_cost)
            changed = time.monotonic()
            first, others = firsts(child_round(srv, password))
            v1 = versions(index_state(srv))
            time.sleep(max(0.0, changed + RACY_SECOND - time.monotonic()))
            _, settle = firsts([(0, 0.0)] + child_round(srv, password))
            files = index_state(srv)
            out[kind].append({"first": first, "others": others, "settle": settle,
                              "built": v1 - v0, "settle_built": versions(files) - v1,
                              "files": files})
    return out


def scale_file_times(a, srv, password):
    """mod_authn_file's seconds per request: up to SCALE_FILE_REQUESTS, and
    none started past --file-cap seconds. Returns (times, capped)."""
    times, t0 = [], time.monotonic()
    for _ in range(SCALE_FILE_REQUESTS):
        if times and time.monotonic() - t0 > a.file_cap:
            return times, True
        dt, status = timed_fetch(srv, "/file/" + FILE, password)
        if status != 200:
            die("scale: /file/ answered %d\n%s" % (status, srv.error_log_tail()))
        times.append(dt)
    return times, False


def timed_fetch(srv, path, password):
    """Seconds for one GET on a new connection, and its status."""
    t0 = time.perf_counter()
    r = fetch(srv, path, password)
    return time.perf_counter() - t0, r.status


def other_load(start, pids):
    """Cores busy with other work than httpd (pids), the bench and its
    children (ab, htpasswd) since start, on average."""
    b0, h0, c0, w0 = start
    b1, h1, c1, w1 = busy_ticks(), cpu_ticks(pids), os.times(), time.monotonic()
    own = sum(getattr(c1, f) - getattr(c0, f)
              for f in ("user", "system", "children_user", "children_system"))
    tick = os.sysconf("SC_CLK_TCK")
    return max(0.0, ((b1 - b0) - (h1 - h0)) / tick - own) / (w1 - w0)


# prefork, its 10 children each holding a connection: not an error here.
SCALE_EXPECTED = (r"AH00161: server reached MaxRequestWorkers",)


def scale_row(a, tmp, runtime, mpm, n, userfile, password):
    srv = scale_httpd(a, tmp, runtime, mpm, n, userfile)
    try:
        start(a, srv, n)
        want = SCALE_PREFORK if mpm == "prefork" else 2
        deadline = time.time() + 20
        while len(srv.children()) < want and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        kids, parent = srv.children(), srv.pid()
        before = memory([parent] + kids)
        load0 = (busy_ticks(), cpu_ticks(srv.pids()), os.times(), time.monotonic())
        t0 = time.perf_counter()
        rnd = child_round(srv, password)
        reach_s = time.perf_counter() - t0
        first, others = firsts(rnd)
        log("scale: %s, %s users: first request %.3f s, other children's first %s" % (
            mpm, "{:,}".format(n), first, " ".join("%.3f" % x for x in others)))
        time.sleep(0.5)
        pids = srv.pids()
        mem = memory(pids)
        files = index_state(srv)
        maps = mapped_versions(kids)
        if srv.children() != kids or not mem or not before:
            die("scale: the children of %s changed while measured" % srv.name)
        size = os.path.getsize(userfile)
        row = {"mpm": mpm, "users": n, "size": size, "children": len(kids),
               "first": first, "others": others, "reached": len(rnd), "reach_s": reach_s,
               "files": files, "maps": maps,
               "pss": sum(mem[p]["Pss"] for p in kids) * 1024,
               "anon": sum(mem[p]["Pss_Anon"] for p in kids) * 1024,
               "shmem": sum(mem[p]["Pss_Shmem"] for p in kids) * 1024,
               "anon_growth": sum(mem[p]["Pss_Anon"] - before[p]["Pss_Anon"]
                                  for p in kids) * 1024,
               "parent_anon_growth": (mem[parent]["Pss_Anon"]
                                      - before[parent]["Pss_Anon"]) * 1024,
               "total": sum(mem[p]["Pss"] for p in pids) * 1024}
        log("scale: ab -k -c 8 -t %d on /hmac/" % a.seconds)
        st0 = srv.status()
        res = ab(srv.url + "/hmac/" + FILE, USER + ":" + password, n=10000000, c=8,
                 keepalive=True, seconds=a.seconds,
                 prefix=["taskset", "-c", a.pin_cpu] if a.pin_cpu else ())
        st1 = srv.status()
        hits = st1["hits"] - st0["hits"]
        misses = st1["misses"] - st0["misses"]
        row.update(rps=res["rps"], ab_bad=res["failed"] + res["non2xx"] + (res["rc"] != 0),
                   hit_rate=hits / (hits + misses) if hits + misses else None)
        log("scale: changes of the file")
        row["changes"] = scale_changes(a, srv, userfile, password)
        time.sleep(0.5)
        after = memory(kids)
        if srv.children() != kids or not after:
            die("scale: the children of %s changed while measured" % srv.name)
        row["anon_growth_changed"] = sum(after[p]["Pss_Anon"] - before[p]["Pss_Anon"]
                                         for p in kids) * 1024
        row["maps_changed"] = mapped_versions(kids)
        log("scale: mod_authn_file")
        row["file"], row["file_capped"] = scale_file_times(a, srv, password)
        row["other"] = other_load(load0, srv.pids())
        row["errors"] = [l for l in srv.error_log().splitlines()
                         if re.search(r"\[\w+:(warn|error|crit|alert|emerg)\]", l) and
                         not any(re.search(e, l) for e in SCALE_EXPECTED)]
        return row
    finally:
        srv.stop()
        shutil.rmtree(srv.runtime_dir, ignore_errors=True)


def mb(x):
    return "%.1f MB" % (x / 1e6)


def ms(xs):
    return "%.1f ms" % (statistics.median(xs) * 1e3) if xs else "-"


def ms_max(xs):
    """Median (max) in ms."""
    return "%.1f (%.1f) ms" % (statistics.median(xs) * 1e3, max(xs) * 1e3) if xs else "-"


def short(name):
    """A version file's name without the server's tag: <slot>.<version>."""
    return name.split(".", 1)[-1]


def change_figures(r, kind):
    """The first requests after the changes of kind, the other children's
    first, and past the second the first (it builds, but where a child
    built one past the second already) and the other children's first."""
    ch = r["changes"][kind]
    return ([c["first"] for c in ch], [x for c in ch for x in c["others"]],
            [c["settle"][0] for c in ch], [x for c in ch for x in c["settle"][1:]])


def scale_report(a, rows, runtime):
    print()
    print("## Scale: the htpasswd index from 10,000 to 1,000,000 users")
    print()
    print("bcrypt cost %d (--scale-cost; every user's hash but the bench user's is one "
          "hash repeated); prefork: %d children; event: 2 processes of 25 threads; "
          "DefaultRuntimeDir: a directory of %s (%s) made per server. Memory once every "
          "child has served a request: the index's version files in "
          "<DefaultRuntimeDir>/%s (their number and size; on a tmpfs they are in memory "
          "whole, mapped or not); Pss_Anon, Pss_Shmem and Pss summed over the children, "
          "from /proc/<pid>/smaps_rollup (growth: since before the first request; all: "
          "parent and children); the server's total for the index: the version files "
          "plus the growth of Pss_Anon of parent and children. Times: the first "
          "request on the server (it builds the index, and verifies once) and the "
          "first on each other child (it maps the version), on new connections held "
          "open (kept alive) until every child has answered; after a change the same "
          "(%d changes of each kind, each more than a second after the one before: "
          "touch, mtime only, or htpasswd -b rewriting one user's line), and once more "
          "past the second after the change (%.1f s: a version read within the second "
          "of a change is read again), with the versions built. Cached: ab -k -c 8 -t "
          "%d, the hit rate from /authn-hmac-status. mod_authn_file: the same file "
          "through AuthBasicProvider file (it reads the file up to the user's line, in "
          "the middle, on every request), median of up to %d requests, none started "
          "after %g s." % (
              a.scale_cost, SCALE_PREFORK, runtime, fs_type(runtime), INDEX_DIR,
              a.scale_changes, RACY_SECOND, a.seconds, SCALE_FILE_REQUESTS, a.file_cap))
    print()
    print("| users | file | MPM | children | index files | index size (x file) "
          "| Pss_Anon, children | Pss_Anon growth (x file) | Pss_Shmem, children "
          "| Pss, children | Pss, all | server total for the index (x file) |")
    print("|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        isize = sum(r["files"].values())
        tot = isize + r["anon_growth"] + r["parent_anon_growth"]
        print("| {:,} | {} | {} | {} | {} | {} ({:.2f}x) | {} | {} ({:.2f}x) | {} | {} | {} "
              "| {} ({:.2f}x) |".format(
                  r["users"], mb(r["size"]), r["mpm"], r["children"], len(r["files"]),
                  mb(isize), isize / r["size"], mb(r["anon"]), mb(r["anon_growth"]),
                  r["anon_growth"] / r["size"], mb(r["shmem"]), mb(r["pss"]),
                  mb(r["total"]), mb(tot), tot / r["size"]))
    print()
    print("Times: median (max) where there are many.")
    print()
    print("| users | MPM | 1st request (builds) | other children's 1st "
          "| after touch: 1st (builds) | other children's 1st "
          "| after rewrite: 1st (builds) | other children's 1st "
          "| past the second: 1st (builds) | other children's 1st "
          "| versions built per change "
          "| cached req/s | hit rate | mod_authn_file per request | other load (cores) |")
    print("|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|:---|---:|---:|---:|---:|")
    for r in rows:
        tf, to, tsf, tso = change_figures(r, "touch")
        rf, ro, rsf, rso = change_figures(r, "rewrite")
        built = ["%d+%d" % (c["built"], c["settle_built"])
                 for k in ("touch", "rewrite") for c in r["changes"][k]]
        print("| {:,} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} "
              "| {:.2f} |".format(
            r["users"], r["mpm"], ms([r["first"]]), ms_max(r["others"]), ms(tf),
            ms_max(to), ms(rf), ms_max(ro), ms_max(tsf + rsf), ms_max(tso + rso),
            " ".join(built),
            fmt(r["rps"], ".0f"), fmt(r["hit_rate"], ".4f"), ms(r["file"]),
            " (n=%d, capped)" % len(r["file"]) if r["file_capped"]
            else " (n=%d)" % len(r["file"]), r["other"]))
    print()
    print("- other load: machine CPU time not spent in httpd, the bench or its ab and "
          "htpasswd, over the row (from the first request to the last), in cores")
    print("- versions built per change: at once + past the second (1+0: one build "
          "per change, mapped by every other child)")
    for r in rows:
        name = "%s/{:,}".format(r["users"]) % r["mpm"]
        if r["ab_bad"]:
            print("- %s: ab had failed or non-2xx requests" % name)
        if r["errors"]:
            print("- %s: %d warn-or-worse line(s) in the error log, the first: %s"
                  % (name, len(r["errors"]), r["errors"][0]))
        last = [c["files"] for k in ("touch", "rewrite") for c in r["changes"][k]]
        most = max([len(f) for f in last] + [len(r["files"])])
        stale = sorted({short(m) for lst in r["maps_changed"].values() for m, d in lst if d})
        mapped = sorted({short(m) for lst in r["maps_changed"].values() for m, _ in lst})
        print("- %s: index files at start %s; most files after a change: %d; at the "
              "end the children map %s%s; Pss_Anon growth over the children after the "
              "changes: %s (%.2fx the file)" % (
                  name, ", ".join("%s %s" % (short(k), mb(v))
                                  for k, v in sorted(r["files"].items()))
                  or "none", most, ", ".join(mapped) or "none",
                  " (unlinked, still mapped: %s)" % ", ".join(stale) if stale else "",
                  mb(r["anon_growth_changed"]), r["anon_growth_changed"] / r["size"]))
    print("- every child reached at start with: %s" % ", ".join(
        "%s/{:,}: {} requests in {:.1f} s".format(r["users"], r["reached"], r["reach_s"])
        % r["mpm"] for r in rows))
    for r in rows:
        for kind in ("touch", "rewrite"):
            print("- %s/{:,}, each {} (ms): {}".format(r["users"], kind, "; ".join(
                "1st {:.0f}, others {}, past the second {}".format(
                    c["first"] * 1e3, " ".join("%.0f" % (x * 1e3) for x in c["others"]),
                    " ".join("%.0f" % (x * 1e3) for x in c["settle"]))
                for c in r["changes"][kind])) % r["mpm"])


def part(a, tmp):
    """The scale part; returns the exit status."""
    prepare_tmp(tmp)
    password = secrets.token_urlsafe(12)
    rows = []
    try:
        runtime = tempfile.mkdtemp(prefix="authn-hmac-bench-run-", dir=a.scale_runtime_dir)
    except OSError as e:
        die("--scale-runtime-dir %s: %s" % (a.scale_runtime_dir, e))
    os.chmod(runtime, 0o755)
    try:
        print("- DefaultRuntimeDir: a directory of %s per server (%s; the harness's "
              "default is the server's directory under %s, %s)" % (
                  runtime, fs_type(runtime), tmp, fs_type(tmp)))
        print()
        print("- users: %s; MPMs: %s" % (", ".join("{:,}".format(n) for n in a.scale_users),
                                         ", ".join(a.scale_mpms)))
        sys.stdout.flush()
        for n in a.scale_users:
            log("scale: writing a file of {:,} users".format(n))
            userfile = scale_userfile(a, tmp, n, password)
            for mpm in a.scale_mpms:
                rows.append(scale_row(a, tmp, runtime, mpm, n, userfile, password))
            os.unlink(userfile)
        scale_report(a, rows, runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    return 0
