"""Login beside busy pages, --login: a first login while the server's own
pages keep every core busy, with hmac and with stock mod_authn_file.

The server is prefork, as MediaWiki's usually is, and the busy pages are
CGI scripts that spin, 4 per core: spawned by httpd, they share its
scheduling group as mod_php's work would (busy loops started from a shell
land in a group of their own, where the kernel's autogroups hide any
starvation). Each round starts a burst of busy pages, waits a second, and
times one first login of a new user (bcrypt at --login-cost) through
/file/ and then, beside a burst of its own, through /hmac/; the order of
the two alternates between rounds. Prints each login's time, the medians
and their ratio (hmac / stock); exits 1 if the ratio is above
LOGIN_TARGET.
"""

import os
import statistics
import subprocess
import time

from harness import S, htpasswd

from .common import FILE, USER, die, log, make_httpd, prepare_tmp, run_alone, site, start

LOGIN_TARGET = 2.0  # hmac's median first login / stock's, beside busy pages
BUSY_PER_CORE = 4

BUSY_CGI = r"""#!/bin/sh
# Spins for QUERY_STRING seconds, as a heavy page would.
end=$(( $(date +%s) + ${QUERY_STRING:-5} ))
while [ "$(date +%s)" -lt "$end" ]; do
    i=0
    while [ $i -lt 20000 ]; do i=$((i + 1)); done
done
printf 'Content-Type: text/plain\r\n\r\nspun\n'
"""


def add_args(p):
    p.add_argument("--login", action="store_true",
                   help="only the login part: a first login beside %d busy CGI pages per "
                        "core of the same prefork server, hmac against stock "
                        "mod_authn_file; exits 1 if hmac's median is above %.1f times "
                        "stock's" % (BUSY_PER_CORE, LOGIN_TARGET))
    p.add_argument("--login-rounds", type=int, default=3,
                   help="first logins per provider in the login part (default: 3)")
    p.add_argument("--login-cost", type=int, default=11,
                   help="bcrypt cost of the login part's users (default: 11)")
    p.add_argument("--login-busy-seconds", type=int, default=8,
                   help="how long each busy page spins (default: 8)")


def run(a):
    return run_alone(a, "a login beside busy pages", part)


def burst(srv, n, seconds):
    """n busy pages, started now; wait() for them."""
    return [subprocess.Popen([S["curl"], "-s", "-o", "/dev/null", "--max-time",
                              str(seconds + 120), "%s/busy/busy.cgi?%d" % (srv.url, seconds)])
            for _ in range(n)]


def login(srv, path, user, password):
    """Seconds for one first login; dies if it is not a 200."""
    cmd = [S["curl"], "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "300",
           "-u", "%s:%s" % (user, password), srv.url + path]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.stdout != "200":
        die("login: %s for %s got %r, not 200" % (path, user, p.stdout))
    return dt


def part(a, tmp):
    prepare_tmp(tmp)
    a.mpm = "prefork"
    cores = os.cpu_count() or 1
    busy = BUSY_PER_CORE * cores
    a.concurrency = max(a.concurrency, busy + 4)
    userfile = os.path.join(tmp, "users-login.htpasswd")
    htpasswd(userfile, USER, "login bench pass", cost=a.login_cost, create=True)
    cgi = os.path.join(tmp, "cgi")
    os.mkdir(cgi, 0o755)
    with open(os.path.join(cgi, "busy.cgi"), "w") as f:
        f.write(BUSY_CGI)
    os.chmod(os.path.join(cgi, "busy.cgi"), 0o755)
    srv = make_httpd(a, tmp, "login", throttle=True)  # NB: the module's defaults
    srv.modules.append("cgi")
    srv.body = site(os.path.join(tmp, "htdocs"), userfile) + (
        'ScriptAlias /busy/ "%s/"\n<Directory "%s">\n    Require all granted\n'
        '</Directory>\n' % (cgi, cgi))
    srv.write_config()
    times = {"file": [], "hmac": []}
    start(a, srv, 1)
    try:
        log("login: %d rounds, %d busy CGI pages (%d per core) of %d s each, bcrypt cost %d"
            % (a.login_rounds, busy, BUSY_PER_CORE, a.login_busy_seconds, a.login_cost))
        for r in range(a.login_rounds):
            order = ("file", "hmac") if r % 2 == 0 else ("hmac", "file")
            for col in order:
                user, pw = "login-%d-%s" % (r, col), "first login %d %s" % (r, col)
                htpasswd(userfile, user, pw, cost=a.login_cost)
                pages = burst(srv, busy, a.login_busy_seconds)
                time.sleep(1)
                times[col].append(login(srv, "/%s/%s" % (col, FILE), user, pw))
                for p in pages:
                    p.wait()
                log("login: round %d, %s: %.2f s" % (r + 1, col, times[col][-1]))
    finally:
        srv.stop()
    med = {c: statistics.median(v) for c, v in times.items()}
    ratio = med["hmac"] / med["file"] if med["file"] else float("inf")
    print()
    print("### A first login beside %d busy CGI pages of the same server (prefork, "
          "%d cores, bcrypt cost %d)" % (busy, cores, a.login_cost))
    print()
    print("| provider | logins (s) | median |")
    print("|---|---|---|")
    for col, label in (("file", "stock mod_authn_file"), ("hmac", "hmac")):
        print("| %s | %s | %.2f s |" % (label, ", ".join("%.2f" % t for t in times[col]),
                                       med[col]))
    print()
    verdict = "PASS" if ratio <= LOGIN_TARGET else "FAIL"
    print("- hmac / stock, medians: %.2f (target at most %.1f) %s" % (ratio, LOGIN_TARGET,
                                                                     verdict))
    return 0 if verdict == "PASS" else 1
