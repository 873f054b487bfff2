"""The flood: while 32 connections from 127.0.0.2 each send a new wrong
password for the user on every request (honouring a 503's Retry-After; a
process of its own at nice 10, as another machine's CPU would be),
ab -k -c 8 (from 127.0.0.1) measures
the cached user; the ratio to its rate without the flood, in the same run, is
printed with the verification queue's counters, over at least 3 rounds in
turns with an idle-class control (the medians of each round's ratios).
The last part of the default run; --flood-only runs it alone (1 user, no
Redis), after the default run's header."""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import queue_clients

from .common import (FILE, USER, error_log_report, fmt, header, interrupt_on_term, log,
                     make_httpd, make_userfiles, med, prepare_tmp, ratio, run_ab, site, start,
                     stop_all, warm_up)

TARGET_FLOOD = 0.90       # cached user's -k rate under a flood / without
FLOOD_CONNECTIONS = 32
FLOOD_ROUNDS = 3  # at least: one round each is within this machine's noise


def scenario(a, srv, password):
    """The cached user's ab -k -c 8 rate without and with a flood of wrong
    passwords, and with a CPU burner per core in the idle class instead (the
    control), in turns, max(a.rounds, 3) times each: each round's ratios to
    its own rate without, and their medians."""
    cred = USER + ":" + password
    conc, a.concurrency = a.concurrency, 8
    without, with_, idle = [], [], []
    chrt = shutil.which("chrt")
    codes = {}
    before = srv.status()
    try:
        log("flood: %d connections of wrong passwords; cached user ab -k -c 8; "
            "%d rounds" % (FLOOD_CONNECTIONS, max(a.rounds, FLOOD_ROUNDS)))
        for _ in range(max(a.rounds, FLOOD_ROUNDS)):
            without.append(run_ab(a, srv, "hmac", cred, True, seconds=a.seconds))
            # NB: from an address of its own, as an attacker's: with the
            # throttle on (--throttle), the cached user at the attacker's
            # own address would be refused with it (docs/security.md). In a
            # process of its own at nice 10 (harness/queue_clients.py): on a
            # real site the attacker's CPU is another machine's, and 32
            # Python threads in this one took a share of the cores that
            # the server's own work (a verification, the hits) then lacked.
            fl = subprocess.Popen(queue_clients.command(
                "flood", srv.port, "/hmac/" + FILE, USER, FLOOD_CONNECTIONS, 0, "127.0.0.2"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                time.sleep(1)
                with_.append(run_ab(a, srv, "hmac", cred, True, seconds=a.seconds))
            finally:
                out, _ = fl.communicate("")
            got = json.loads(out or "{}")
            if got.get("errors"):  # no answer: shown as 0
                codes[0] = codes.get(0, 0) + got["errors"]
            for k, v in got.get("codes", {}).items():
                codes[int(k)] = codes.get(int(k), 0) + v
            if chrt:
                # The control: no flood, but a CPU burner per core in the
                # idle class (where verifications ran until 0.1). What any
                # such work costs the cached user on this machine, module
                # or not.
                burners = [subprocess.Popen([chrt, "-i", "0", "sh", "-c", "while :; do :; done"])
                           for _ in range(os.cpu_count() or 1)]
                try:
                    time.sleep(1)
                    idle.append(run_ab(a, srv, "hmac", cred, True, seconds=a.seconds))
                finally:
                    for b in burners:
                        b.kill()
                        b.wait()
    finally:
        a.concurrency = conc
    after = srv.status()

    def ratios(runs):
        return [ratio(r["rps"], w["rps"]) for r, w in zip(runs, without)
                if ratio(r["rps"], w["rps"]) is not None]
    return {"without": med(without, "rps"), "with": med(with_, "rps"),
            "idle": med(idle, "rps") if idle else None,
            "ratios": ratios(with_), "idle_ratios": ratios(idle),
            "failed": sum(r["failed"] + r["non2xx"] for r in with_),
            "codes": codes, "cap": after.get("max_verifications"),
            "delta": {k: after.get(k, 0) - before.get(k, 0)
                      for k in ("verifications", "busy", "queued", "hits")},
            "verifying_max": after.get("verifying_max")}


def report(f):
    r = statistics.median(f["ratios"]) if f["ratios"] else None
    print()
    print("## Flood (bcrypt never starves a hit)")
    print()
    print("%d rounds, each: alone, with the flood, with the control, in turns; a "
          "ratio is a round's rate over the same round's rate alone" % len(f["ratios"]))
    print()
    print("- cached user, ab -k -c 8: %s req/s without the flood, %s req/s with "
          "%d connections sending distinct wrong passwords (medians); ratio **%s** "
          "(median of the rounds' %s; target >= %.2f); failed or non-2xx during the "
          "flood: %d" % (
              fmt(f["without"], ".0f"), fmt(f["with"], ".0f"), FLOOD_CONNECTIONS,
              fmt(r, ".3f"), ", ".join("%.3f" % x for x in f["ratios"]),
              TARGET_FLOOD, f["failed"]))
    if f["idle"] is not None:
        print("- control, no flood but %d idle-class CPU burner(s) (`chrt -i 0`, "
              "where verifications ran until 0.1): %s req/s, ratio **%s** (median of %s): what "
              "idle-class work alone costs the cached user on this machine" % (
                  os.cpu_count() or 1, fmt(f["idle"], ".0f"),
                  fmt(statistics.median(f["idle_ratios"]) if f["idle_ratios"] else None,
                      ".3f"),
                  ", ".join("%.3f" % x for x in f["idle_ratios"])))
    print("- flood answers: %s" % ", ".join(
        "%s: %d" % (k, v) for k, v in sorted(f["codes"].items())))
    print("- verifications %d, busy (503) %d, queued %d; verifying_max %s "
          "(AuthHMACMaxVerifications %s)" % (
              f["delta"]["verifications"], f["delta"]["busy"], f["delta"]["queued"],
              f["verifying_max"], f["cap"]))


def add_args(p):
    p.add_argument("--flood-only", action="store_true",
                   help="only the flood: the cached user's rate with and without "
                        "32 connections of wrong passwords (1 user, no Redis)")


def run(a):
    """--flood-only: the default run's first server (1 user), the flood."""
    a.redis_skip = "--flood-only"
    log("Redis columns skipped: " + a.redis_skip)
    interrupt_on_term()
    header(a)
    tmp = tempfile.mkdtemp(prefix="authn-hmac-bench-")
    running = []
    try:
        prepare_tmp(tmp)
        password, userfiles = make_userfiles(a, tmp)
        srv = make_httpd(a, tmp, "main", a.port or None)
        srv.body = site(os.path.join(tmp, "htdocs"), userfiles[1])
        srv.write_config()
        running.append(srv)
        start(a, srv, 1)
        warm_up(a, srv, password)
        f = scenario(a, srv, password)
        running.pop().stop()
        report(f)
        error_log_report({"main": srv}, a.keep)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        stop_all(running)
        if a.keep:
            print("\n(temporary directory kept: %s)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0
