"""The default run (tools/bench with no part named): mod_authn_hmac against
no auth, mod_authn_anon, mod_authn_file, mod_authn_socache, and itself with
Redis.

Starts a private httpd on 127.0.0.1 (a temporary directory holds its config,
logs and htpasswd files), serves one 25 KB file at /noauth/, /anon/, /file/,
/socache/ and /hmac/, and drives it with ab, once with 1 user in the htpasswd
file and once with 100,000 users, with and without keep-alive. /anon/ is
mod_auth_basic with mod_authn_anon, a provider that does no work: the floor
for any Basic-auth provider. If redis-server is installed, it also starts one
(loopback, no persistence) and two more httpds with the same config plus
AuthHMACRedisServer: "hmac+redis" (shared memory in front of Redis) and
"redis only" (AuthHMACCacheSize 0: a Redis GET+PTTL on every request); these
are measured with keep-alive only, in the same rounds as no-auth. The flood
(flood.py) follows the 1-user rounds.

Prints a markdown table of req/s and the server's CPU time per request
(utime + stime of every httpd process, from /proc), the hmac cache counters,
and the targets. About 7.5 minutes; --quick is a smoke test of about 1.
"""

import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time

from harness import Redis

from . import flood
from .common import (COUNTERS, LABEL, SLOW, TARGET_EXTRA_US, TARGET_LARGE, TARGET_RATIO,
                     TARGET_REDIS, TARGET_REDIS_ONLY, TIMED, USER, counter_delta, delta_sum, die,
                     diffs, error_log_report, fmt, header, interrupt_on_term, log, make_httpd,
                     make_userfiles, med, prepare_tmp, ratio, run_ab, site, start, stop_all,
                     warm_up, warm_up_redis)

COLUMNS = ("noauth", "anon", "file", "socache", "hmac", "redis", "redisonly")
REDIS_COLUMNS = ("redis", "redisonly")   # ab -t -k, in the keep-alive rounds


def scenario(a, servers, redis, password, users):
    """servers: column -> Httpd (the main one for every column but the
    Redis ones). Returns the runs and each instance's final counters."""
    cred = USER + ":" + password
    main = servers["hmac"]
    warm_up(a, main, password)
    rcols = [c for c in REDIS_COLUMNS if c in servers]
    for col in rcols:
        warm_up_redis(a, servers[col], col, password, redis)
    out = {}
    for ka in (True, False):
        log("%d user(s), %s" % (users, "keep-alive" if ka else "no keep-alive"))
        runs = {c: [] for c in COLUMNS}
        cols = list(TIMED) + (rcols if ka else [])
        for i in range(a.rounds):
            # Alternate the order so that drift favours no column.
            for col in (cols if i % 2 == 0 else cols[::-1]):
                srv = servers[col]
                before = srv.status() if col not in ("noauth", "anon") else None
                res = run_ab(a, srv, col, cred, ka, seconds=a.seconds,
                             redis=redis if col in REDIS_COLUMNS else None)
                if before is not None:
                    res["delta"] = counter_delta(before, srv.status())
                runs[col].append(res)
        for col in SLOW:
            runs[col].append(run_ab(a, main, col, cred, ka, n=a.slow_requests))
        out[ka] = {"runs": runs}
    stats = {"hmac": main.status()}
    for col in rcols:
        stats[col] = servers[col].status()
    return out, stats


def report(a, results, stats, elapsed, redis_note):
    large = a.users_large
    have_redis = any(results[u][True]["runs"][c] for u in results for c in REDIS_COLUMNS)
    summary = rates_table(a, results, have_redis, redis_note)
    cpu_table(results, summary, large, have_redis)
    print()
    if have_redis:
        redis_table(results, summary, large)
    run_lines(results, stats, summary, large)
    print()
    targets(results, summary, large, have_redis, redis_note)
    print("Total bench time: %.0f s" % elapsed)


def rates_table(a, results, have_redis, redis_note):
    """The req/s table; returns {(users, keep-alive): (req/s, CPU, extra
    CPU)}, each by column."""
    large = a.users_large
    print()
    print("## Results (median of %d round(s) for no-auth, anon, hmac%s; ab -c %d, "
          "%d s runs; file and socache: -n %d)" % (
              a.rounds, " and the Redis columns (-k only)" if have_redis else "",
              a.concurrency, a.seconds, a.slow_requests))
    print()
    print("| users | keep-alive | no-auth req/s | anon req/s | file req/s "
          "| socache+file req/s | hmac req/s | hmac+redis req/s | redis only req/s "
          "| anon/no-auth | hmac/no-auth | hmac+redis/no-auth | redis only/no-auth "
          "| file/no-auth | socache/no-auth | extra CPU µs/req "
          "| hmac CPU over anon µs/req |")
    print("|---:|:---:|" + "---:|" * 15)
    summary = {}
    for users in (1, large):
        for ka in (True, False):
            runs = results[users][ka]["runs"]
            rps = {c: med(runs[c], "rps") for c in COLUMNS}
            cpu = {c: med(runs[c], "cpu_us") for c in COLUMNS}
            extra = (cpu["hmac"] - cpu["noauth"]
                     if cpu["hmac"] is not None and cpu["noauth"] is not None else None)
            over_anon = (cpu["hmac"] - cpu["anon"]
                         if cpu["hmac"] is not None and cpu["anon"] is not None else None)
            summary[users, ka] = (rps, cpu, extra)
            print("| {:,} | {} | {} |".format(
                users, "yes (-k)" if ka else "no", " | ".join((
                    fmt(rps["noauth"], ".0f"), fmt(rps["anon"], ".0f"),
                    fmt(rps["file"], ".1f"), fmt(rps["socache"], ".1f"),
                    fmt(rps["hmac"], ".0f"), fmt(rps["redis"], ".0f"),
                    fmt(rps["redisonly"], ".0f"),
                    fmt(ratio(rps["anon"], rps["noauth"]), ".3f"),
                    fmt(ratio(rps["hmac"], rps["noauth"]), ".3f"),
                    fmt(ratio(rps["redis"], rps["noauth"]), ".3f"),
                    fmt(ratio(rps["redisonly"], rps["noauth"]), ".3f"),
                    fmt(ratio(rps["file"], rps["noauth"]), ".4f"),
                    fmt(ratio(rps["socache"], rps["noauth"]), ".4f"),
                    fmt(extra, "+.2f"), fmt(over_anon, "+.2f")))))
    print()
    print("(extra CPU: hmac minus no-auth; hmac CPU over anon: hmac minus anon, "
          "what the\nprovider itself costs over mod_auth_basic with a provider "
          "that does no work.\n%s)" % (
              "hmac+redis and redis only are separate httpds on the same machine, "
              "measured with\nkeep-alive only, in the same rounds as no-auth; "
              "their ratios are to that no-auth."
              if have_redis else "Redis columns: " + redis_note + "."))
    return summary


def cpu_table(results, summary, large, have_redis):
    print()
    worst_other = 0.0
    print("Server CPU µs/request (median; utime+stime of all processes of the "
          "column's httpd%s):" % (
              ";\nredis-server not included, see the Redis table" if have_redis else ""))
    print()
    print("| users | keep-alive | no-auth | anon | file | socache+file | hmac "
          "| hmac+redis | redis only | no-auth req/s, each round "
          "| anon req/s, each round | hmac req/s, each round "
          "| hmac - no-auth µs/req, each round | anon - no-auth µs/req, each round "
          "| other load, max (cores) |")
    print("|---:|:---:|" + "---:|" * 7 + ":---|" * 5 + "---:|")
    for users in (1, large):
        for ka in (True, False):
            runs = results[users][ka]["runs"]
            _, cpu, _ = summary[users, ka]
            other = max(r["other"] for c in COLUMNS for r in runs[c])
            worst_other = max(worst_other, other)
            print("| {:,} | {} | {} | {} | {} | {} | {} | {} | {:.2f} |".format(
                users, "yes" if ka else "no",
                " | ".join((fmt(cpu["noauth"], ".1f"), fmt(cpu["anon"], ".1f"),
                            fmt(cpu["file"], ".0f"), fmt(cpu["socache"], ".0f"),
                            fmt(cpu["hmac"], ".1f"), fmt(cpu["redis"], ".1f"),
                            fmt(cpu["redisonly"], ".1f"))),
                ", ".join("%.0f" % r["rps"] for r in runs["noauth"]),
                ", ".join("%.0f" % r["rps"] for r in runs["anon"]),
                ", ".join("%.0f" % r["rps"] for r in runs["hmac"]),
                ", ".join("%+.1f" % d for d in diffs(runs["hmac"], runs["noauth"], "cpu_us")),
                ", ".join("%+.1f" % d for d in diffs(runs["anon"], runs["noauth"], "cpu_us")),
                other))
    print()
    print("(each round: that round's run minus no-auth's in the same round. anon "
          "- no-auth is\nthe control: anon's provider does no work, so its spread "
          "is this machine's noise\nin the CPU per request, which the medians above "
          "do not show.)")
    print("(other load: machine CPU time not spent in httpd, redis-server or ab "
          "during a run,\nin cores; it includes kernel network work not charged "
          "to them, so it is not zero\non an idle machine.)")
    if worst_other > 0.3:
        print("WARNING: up to %.2f cores were busy with other work during some "
              "runs; the\nnumbers above are noisy; rerun on a quiet machine." % worst_other)


def redis_table(results, summary, large):
    print("Redis columns (keep-alive; counters from /authn-hmac-status?json of "
          "that httpd,\nsummed over the measured runs, warm-up excluded; "
          "redis-server CPU per request\nfrom /proc):")
    print()
    print("| users | column | req/s, each round | /no-auth | httpd CPU µs/req "
          "| redis-server CPU µs/req | requests | verifications | hits "
          "| redis_hits | redis_misses | redis_errors | redis_timeouts |")
    print("|---:|:---|:---|" + "---:|" * 10)
    for users in (1, large):
        runs = results[users][True]["runs"]
        rps, cpu, _ = summary[users, True]
        for col in REDIS_COLUMNS:
            if not runs[col]:
                continue
            print("| {:,} | {} | {} | {} | {} | {} | {} | {} |".format(
                users, LABEL[col],
                ", ".join("%.0f" % r["rps"] for r in runs[col]),
                fmt(ratio(rps[col], rps["noauth"]), ".3f"),
                fmt(cpu[col], ".1f"), fmt(med(runs[col], "redis_us"), ".1f"),
                sum(r["complete"] for r in runs[col]),
                " | ".join(fmt(delta_sum(runs[col], k), "d") for k in COUNTERS)))
    print()
    print("(requests: completed as counted by ab; a few more may have been "
          "answered after ab's\ntime limit, so redis_hits can exceed it "
          "slightly.)")
    print()


def run_lines(results, stats, summary, large):
    """1 user against many, the failures, and the servers' counters."""
    for ka in (True, False):
        r1, c1, _ = summary[1, ka]
        rl, cl, _ = summary[large, ka]
        print("hmac, {:,} users vs 1 user, {}: CPU/request {}x, req/s {}x "
              "(1-user req/s over {:,}-user req/s; above 1 means slower)".format(
                  large, "keep-alive" if ka else "no keep-alive",
                  fmt(ratio(cl["hmac"], c1["hmac"]), ".3f"),
                  fmt(ratio(r1["hmac"], rl["hmac"]), ".3f"), large))
    print()
    fails = []
    for users in (1, large):
        for ka in (True, False):
            for col in COLUMNS:
                for r in results[users][ka]["runs"][col]:
                    if r["failed"] or r["non2xx"] or r["rc"] or r["err"]:
                        fails.append("%s users=%d %s: failed=%d non-2xx=%d rc=%d %s" % (
                            LABEL[col], users, "-k" if ka else "no-k", r["failed"],
                            r["non2xx"], r["rc"], r["err"]))
    print("Failures: " + ("none (ab: 0 failed, 0 non-2xx in every run)" if not fails
                          else "\n  " + "\n  ".join(fails)))
    print()
    for users in (1, large):
        s = stats[users]["hmac"]
        steady = sum(delta_sum(results[users][ka]["runs"]["hmac"], "verifications") or 0
                     for ka in (True, False))
        print("authn-hmac-status, hmac, {:,} user(s): verifications={} hits={} "
              "misses={} stores={} evictions={} errors={} verify_seconds={}; "
              "verifications during the measured hmac runs: {}".format(
                  users, s.get("verifications"), s.get("hits"), s.get("misses"),
                  s.get("stores"), s.get("evictions"), s.get("errors"),
                  s.get("verify_seconds"), steady))
        for col in REDIS_COLUMNS:
            if col not in stats[users]:
                continue
            s = stats[users][col]
            runs = results[users][True]["runs"][col]
            print("authn-hmac-status, {}, {:,} user(s), since start (warm-up "
                  "included): {}; during the measured runs: {}".format(
                      LABEL[col], users,
                      " ".join("%s=%s" % (k, s.get(k)) for k in COUNTERS),
                      " ".join("%s=%s" % (k, fmt(delta_sum(runs, k), "d"))
                               for k in ("verifications", "redis_hits"))))


def targets(results, summary, large, have_redis, redis_note):
    checks = []
    for users in (1, large):
        # NB: each round's hmac over the anon round next to it, then the
        # median: a round slowed down by the machine weighs on both.
        runs = results[users][True]["runs"]
        pairs = sorted(h["rps"] / x["rps"] for h, x in zip(runs["hmac"], runs["anon"])
                       if x["rps"])
        rt = statistics.median(pairs) if pairs else None
        checks.append(("hmac/anon >= %.2f, %s users, -k (median of the rounds' "
                       "ratios: %s)" % (TARGET_RATIO, "{:,}".format(users),
                                        ", ".join("%.3f" % r for r in pairs)),
                       rt is not None and rt >= TARGET_RATIO, fmt(rt, ".3f")))
    for ka in (True, False):
        for users in (1, large):
            rps, _, extra = summary[users, ka]
            rt = ratio(rps["hmac"], rps["noauth"])
            checks.append(("hmac/no-auth >= %.2f, %s users, %s" % (
                TARGET_RATIO, "{:,}".format(users), "-k" if ka else "no -k"),
                rt is not None and rt >= TARGET_RATIO, fmt(rt, ".3f")))
            checks.append(("extra CPU <= %g µs/req, %s users, %s" % (
                TARGET_EXTRA_US, "{:,}".format(users), "-k" if ka else "no -k"),
                extra is not None and extra <= TARGET_EXTRA_US, fmt(extra, "+.2f")))
        cr = ratio(summary[large, ka][1]["hmac"], summary[1, ka][1]["hmac"])
        checks.append(("{:,} users <= {}x of 1 user (hmac CPU/req), {}".format(
            large, TARGET_LARGE, "-k" if ka else "no -k"),
            cr is not None and cr <= TARGET_LARGE, fmt(cr, ".3f")))
    for col, target in (("redis", TARGET_REDIS), ("redisonly", TARGET_REDIS_ONLY)):
        for users in (1, large):
            rps = summary[users, True][0]
            rt = ratio(rps[col], rps["noauth"])
            checks.append(("%s/no-auth >= %.2f, %s users, -k" % (
                LABEL[col], target, "{:,}".format(users)),
                None if rt is None and not have_redis else
                (rt is not None and rt >= target),
                fmt(rt, ".3f") if have_redis else "skipped (%s)" % redis_note))
    print("Targets:")
    for name, ok, val in checks:
        print("  [%s] %s: %s" % ({True: "ok", False: "MISS", None: "skip"}[ok], name, val))
    print()


def run(a):
    redis_skip = a.redis_skip
    if redis_skip:
        log("Redis columns skipped: " + redis_skip)
    interrupt_on_term()
    t_start = time.time()
    header(a)
    tmp = tempfile.mkdtemp(prefix="authn-hmac-bench-")
    running = []
    redis = None
    results, stats = {}, {}
    try:
        prepare_tmp(tmp)
        password, userfiles = make_userfiles(a, tmp)
        # NB: the hits as users run them: the throttle on, as shipped.
        shipped = not a.no_throttle
        httpds = {"main": make_httpd(a, tmp, "main", a.port or None, throttle=shipped)}
        if not redis_skip:
            redis = Redis(password=secrets.token_hex(16), binary=a.redis_server)
            log("starting redis-server on 127.0.0.1:%d" % redis.port)
            try:
                redis.start()
            except RuntimeError as e:
                die(str(e))
            pepper = os.path.join(redis.dir, "pepper")
            fd = os.open(pepper, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
            redis_conf = ("AuthHMACPepperFile \"%s\"\nAuthHMACRedisServer %s\n"
                          "AuthHMACRedisAuthFile \"%s\"\n" % (
                              pepper, redis.address,
                              redis.auth_file(os.path.join(redis.dir, "redis-auth"),
                                              redis.password)))
            httpds["redis"] = make_httpd(a, tmp, "redis", server_extra=redis_conf,
                                         throttle=shipped)
            httpds["redisonly"] = make_httpd(a, tmp, "redisonly", throttle=shipped,
                                             server_extra=redis_conf + "AuthHMACCacheSize 0\n")
        main = httpds["main"]
        servers = dict({col: main for col in TIMED + SLOW},
                       **{col: srv for col, srv in httpds.items() if col in REDIS_COLUMNS})
        for users in (1, a.users_large):
            try:
                for srv in httpds.values():
                    srv.body = site(os.path.join(tmp, "htdocs"), userfiles[users])
                    srv.write_config()
                    running.append(srv)
                    start(a, srv, users)
                results[users], stats[users] = scenario(a, servers, redis, password,
                                                         users)
                if users == 1:
                    flooded = flood.scenario(a, main, password)
            finally:
                stop_all(running)
        report(a, results, stats, time.time() - t_start, redis_skip)
        flood.report(flooded)
        error_log_report(httpds, a.keep, redis)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        stop_all(running)
        if redis:
            redis.stop()
        if a.keep:
            print("\n(temporary directory kept: %s%s)" % (
                tmp, ", redis-server's: " + redis.dir if redis else ""))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
            if redis:
                redis.cleanup()
    return 0
