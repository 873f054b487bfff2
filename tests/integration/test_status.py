"""The counters where admins look: mod_status's server-status (its HTML page
and ?auto) and Prometheus's text format, each against the JSON."""
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import MPMS, make_server, serve
from harness import S, Httpd, Redis, basic, client_address, htpasswd
from harness import get as get_from


def prometheus_parser():
    """prometheus_client's parser, from this interpreter or else from
    Debian's python3-prometheus-client (pure Python: tools/deps --test), on
    the path for the import only. Never a silent skip."""
    try:
        from prometheus_client import parser
        return parser
    except ImportError:
        pass
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from prometheus_client import parser
        return parser
    except ImportError as e:
        pytest.fail("cannot import prometheus_client (%s) with %s nor from "
                    "/usr/lib/python3/dist-packages: install python3-prometheus-client "
                    "(tools/deps --test) or pip install prometheus-client"
                    % (e, sys.executable), pytrace=False)
    finally:
        if sys.path[-1] == "/usr/lib/python3/dist-packages":
            sys.path.pop()

STATUS = """
LoadModule status_module {moddir}/mod_status.so
ExtendedStatus On
<Location /server-status>
    SetHandler server-status
    Require local
</Location>
"""


@pytest.fixture(scope="module", params=MPMS)
def srv(request):
    s = make_server(request.param, global_conf=STATUS.format(moddir=S["moddir"]) +
                    "AuthHMACServerStatus On\n")
    yield from serve(s)


@pytest.fixture(scope="module")
def plain_status():
    """mod_status as Debian enables it (every local client), and nothing of
    the module's said about it."""
    s = make_server("event", global_conf=STATUS.format(moddir=S["moddir"]))
    yield from serve(s)


def get(srv, path):
    p = subprocess.run([S["curl"], "-s", "--max-time", "10", "-D", "-", srv.url + path],
                       capture_output=True, text=True, check=True)
    head, _, body = p.stdout.partition("\n\n")  # text mode: \r\n is \n
    return head, body


def traffic(srv):
    """One verification, two hits, a wrong password: nonzero counters."""
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
    assert srv.status_code("/a/index.html", "alice", "not it") == 401


def same(a, b):
    """The values agree (the start time too: it is the segment's)."""
    return a == b


WORDS = {"redis_primary", "redis_breaker_reason"}


def numbers(js):
    """The JSON's numbers: every field but the Redis tier's two words and
    the list of bans in force."""
    assert {k for k, v in js.items() if isinstance(v, str)} == WORDS, js
    assert {k for k, v in js.items() if isinstance(v, list)} == {"bans_in_force"}, js
    return {k: v for k, v in js.items() if k not in WORDS and k != "bans_in_force"}


NUMBER = r"(\d+(?:\.\d+)?)"


def number(s):
    return float(s) if "." in s else int(s)


@pytest.mark.mpm
def test_prometheus_matches_json(srv):
    traffic(srv)
    js = srv.status()
    head, body = get(srv, "/authn-hmac-status?prometheus")
    assert re.search(r"(?i)^content-type: text/plain; version=0\.0\.4", head, re.M), head
    # The words: the labels of one info metric (no Redis here: empty).
    assert js["redis_primary"] == "" and js["redis_breaker_reason"] == ""
    assert 'authn_hmac_redis_info{primary="",breaker_reason=""} 1\n' in body, body
    js = numbers(js)
    values, types = {}, {"redis_info": "gauge"}
    for line in body.splitlines():
        m = re.match(r"# TYPE authn_hmac_(\w+) (counter|gauge|histogram)$", line)
        if m:
            types[m.group(1)] = m.group(2)
        elif line.startswith("authn_hmac_redis_info{"):
            continue
        elif not line.startswith("# HELP authn_hmac_"):
            name, value = line.split(" ")
            assert name.startswith("authn_hmac_"), line
            values[name[len("authn_hmac_"):]] = number(value)
    # The histograms are Prometheus's alone (test_prometheus_conventions).
    hist = [t for t in types if types[t] == "histogram"]
    types = {k: v for k, v in types.items() if k not in hist}
    values = {k: v for k, v in values.items()
              if not any(k.startswith(h + "_") for h in hist)}
    assert types.pop("redis_info") == "gauge"
    assert set(types) == set(values)
    # Counters carry Prometheus's _total; gauges do not.
    prom = {}
    for name, value in values.items():
        if types[name] == "counter":
            assert name.endswith("_total"), name
            name = name[:-len("_total")]
        prom[name] = value
    assert set(prom) == set(js), set(prom) ^ set(js)
    assert same(prom, js), (prom, js)
    assert js["verifications"] >= 2 and js["hits"] >= 2 and js["denied"] >= 1
    assert types["hits_total"] == "counter" and types["verifying_max"] == "gauge"
    assert types["entries"] == "gauge"


@pytest.mark.mpm
def test_server_status_auto_and_page_match_json(srv):
    traffic(srv)
    js = numbers(srv.status())
    _, auto = get(srv, "/server-status?auto")
    assert re.search(r"^Total Accesses: \d+", auto, re.M), auto  # mod_status's own
    mine = dict((m.group(1), number(m.group(2)))
                for m in re.finditer(r"^authn_hmac_(\w+): %s$" % NUMBER, auto, re.M))
    assert set(mine) == set(js), set(mine) ^ set(js)
    assert same(mine, js), (mine, js)
    head, page = get(srv, "/server-status")
    assert "<h2>mod_authn_hmac</h2>" in page, page[-2000:]
    rows = dict((m.group(1), number(m.group(2)))
                for m in re.finditer(r"<tr><td>(\w+)</td><td>%s</td>" % NUMBER,
                                     page.split("<h2>mod_authn_hmac</h2>")[1].split("</table>")[0]))
    assert set(rows) == set(js), set(rows) ^ set(js)
    assert same(rows, js), (rows, js)
    assert js["hits"] >= 2
    _, notable = get(srv, "/server-status?notable")
    lines = dict((m.group(1), number(m.group(2)))
                 for m in re.finditer(r"^(\w+): %s$" % NUMBER,
                                      notable.split("<h2>mod_authn_hmac</h2>")[1], re.M))
    assert set(lines) == set(js) and same(lines, js), (lines, js)


def test_server_status_shows_no_counters_unless_asked(plain_status):
    """Debian enables mod_status for every local client, and behind a
    reverse proxy on the same host every client is local: unknown_user
    moving told an unknown name from a wrong password. The counters are in
    server-status only with AuthHMACServerStatus On."""
    traffic(plain_status)
    _, auto = get(plain_status, "/server-status?auto")
    assert re.search(r"^Total Accesses: \d+", auto, re.M), auto
    assert "authn_hmac" not in auto, auto
    _, page = get(plain_status, "/server-status")
    assert "mod_authn_hmac" not in page and "unknown_user" not in page
    assert plain_status.status()["hits"] >= 2  # the module's own handler still


def with_redis(s, address):
    """s configured with Redis at address (and so a pepper file)."""
    pepper = s.path("pepper")
    with open(pepper, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(pepper, 0o600)
    s.global_conf += ("AuthHMACPepperFile %s\nAuthHMACRedisServer %s\n"
                      "AuthHMACRedisTimeout 1000\n" % (pepper, address))
    s.write_config()


@pytest.fixture(scope="module", params=MPMS)
def redis_srv(request):
    """A server with Redis (and so a pepper file): misses make round trips."""
    redis = Redis(password=None).start()
    s = make_server(request.param)
    with_redis(s, redis.address)
    try:
        yield from serve(s)
    finally:
        redis.cleanup()


# Units other than base ones (seconds, bytes), as words of a metric name.
NOT_BASE = {"us", "usec", "usecs", "micros", "microseconds", "ms", "msec", "msecs",
            "millis", "milliseconds", "ns", "nsec", "nanoseconds", "sec", "secs",
            "min", "mins", "minutes", "hour", "hours", "days", "kb", "kib", "mb",
            "mib", "gb", "gib", "kilobytes", "megabytes", "gigabytes", "avg", "average"}


def scrape(srv):
    """?prometheus: (raw text, {family name: family}) by prometheus_client."""
    parser = prometheus_parser()
    _, body = get(srv, "/authn-hmac-status?prometheus")
    fams = {f.name: f for f in parser.text_string_to_metric_families(body)}
    assert fams, body
    return body, fams


def buckets(fam):
    """[(le, cumulative count)], _sum and _count of a histogram family."""
    bs = [(float(s.labels["le"]), s.value) for s in fam.samples
          if s.name == fam.name + "_bucket"]
    one = {s.name: s.value for s in fam.samples if not s.name.endswith("_bucket")}
    return bs, one[fam.name + "_sum"], one[fam.name + "_count"]


@pytest.mark.mpm
def test_prometheus_conventions(redis_srv):
    """Prometheus's naming conventions, checked by its own client's parser:
    counters in _total, base units only, HELP and TYPE for every family,
    histograms of verification and Redis time with their buckets."""
    srv = redis_srv
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200  # Redis, bcrypt
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200  # hit
    assert srv.status_code("/a/index.html", "alice", "not it") == 401
    assert srv.status_code("/a/index.html", "nobody", "no such password") == 401  # a dummy
    body, fams = scrape(srv)
    js = srv.status()
    assert js["redis_misses"] >= 1 and js["verifications"] >= 1, js
    for name, fam in fams.items():
        assert name.startswith("authn_hmac_"), name
        assert fam.type in ("counter", "gauge", "histogram"), (name, fam.type)
        assert fam.documentation.strip(), "no HELP for %s" % name
        # The raw text: HELP and TYPE under the name the samples carry.
        shown = name + "_total" if fam.type == "counter" else name
        assert re.search(r"^# HELP %s \S" % shown, body, re.M), shown
        assert re.search(r"^# TYPE %s %s$" % (shown, fam.type), body, re.M), shown
        for smp in fam.samples:
            words = smp.name.split("_")
            assert not NOT_BASE & set(words), "not a base unit: %s" % smp.name
            if fam.type == "counter":
                assert smp.name.endswith("_total"), smp.name
        assert "them" not in fam.documentation.split(), fam.documentation
    # Every counter sample in the raw text, too (the parser adds _total).
    for m in re.finditer(r"^# TYPE (\S+) counter$", body, re.M):
        assert m.group(1).endswith("_total"), m.group(0)
    # Each is listed in docs/operations.md (by its name in every output,
    # or for the histograms, Prometheus's).
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(top, "docs", "operations.md")) as f:
        ops = f.read()
    for name in fams:
        assert "`%s`" % name[len("authn_hmac_"):] in ops or "`%s`" % name in ops, name
    # Gauges of bytes say so; the start time is unix time, in seconds.
    assert "authn_hmac_cache_bytes" in fams
    start = fams["authn_hmac_start_time_seconds"].samples[0].value
    assert abs(start - time.time()) < 3600, start
    assert fams["authn_hmac_verify_seconds"].type == "counter"
    hists = {n: f for n, f in fams.items() if f.type == "histogram"}
    assert set(hists) == {"authn_hmac_verify_duration_seconds",
                          "authn_hmac_redis_duration_seconds"}, set(hists)
    for name, fam in hists.items():
        bs, total, count = buckets(fam)
        les = [le for le, _ in bs]
        assert len(bs) >= 5 and les[-1] == float("inf"), (name, les)
        assert les == sorted(les) and len(set(les)) == len(les), (name, les)
        counts = [c for _, c in bs]
        assert counts == sorted(counts), (name, counts)  # cumulative
        assert counts[-1] == count, (name, counts, count)
        assert count >= 1 and total > 0, (name, count, total)
    # Bounds that fit: bcrypt from ms to seconds, Redis from 100 µs to 1 s.
    vles = [le for le, _ in buckets(hists["authn_hmac_verify_duration_seconds"])[0]]
    rles = [le for le, _ in buckets(hists["authn_hmac_redis_duration_seconds"])[0]]
    assert vles[0] <= 0.001 and 5 <= vles[-2] <= 60, vles
    assert rles[0] <= 0.0001 and 1 <= rles[-2] <= 10, rles
    # Real verifications only, as verifications counts them; the time is
    # verify_seconds'.
    v = buckets(hists["authn_hmac_verify_duration_seconds"])
    assert v[2] == fams["authn_hmac_verifications"].samples[0].value == js["verifications"]
    assert v[1] == pytest.approx(js["verify_seconds"], abs=1e-6)

    # A verification after that scrape shows in the histogram: /nocache/
    # verifies every time.
    assert srv.status_code("/nocache/index.html", "alice", "correct horse") == 200
    _, fams2 = scrape(srv)
    before, after = v, buckets(fams2["authn_hmac_verify_duration_seconds"])
    assert after[2] == before[2] + 1, (before, after)
    assert after[1] > before[1], (before, after)
    moved = [a - b for (_, a), (_, b) in zip(after[0], before[0])]
    assert moved[-1] == 1 and sorted(moved) == moved and set(moved) <= {0, 1}, moved


def example_sections():
    """The shipped MediaWiki example's login section and its status section
    (uncommented), as the example has them."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(top, "conf", "mediawiki-vhost.conf.example")) as f:
        text = f.read()
    login = re.search(r"^    <Location />\n.*?^    </Location>\n", text, re.M | re.S).group(0)
    status = re.search(r"^    #<Location /authn-hmac-status>\n.*?^    #</Location>\n", text,
                       re.M | re.S).group(0)
    return login, re.sub(r"^(\s*)#", r"\1", status, flags=re.M)


@pytest.mark.parametrize("placement", ["the example's", "the server's"])
def test_the_examples_counters_refuse_a_logged_in_user_from_another_address(placement):
    """The example virtual host's status section, after its <Location />,
    lets in the scraper's address and refuses a logged-in user from any
    other (403). The same section at the server's level (where the shipped
    authn_hmac.conf applies) is replaced by the virtual host's later
    `Require valid-user`: that user reads the counters, which is why the
    docs put it in the virtual host."""
    login, status = example_sections()
    srv = Httpd(name="statusplace")
    users = srv.path("wiki.htpasswd")
    htpasswd(users, "alice", "alice's wiki pass", create=True)
    login = login.replace("/etc/apache2/wiki.htpasswd", users)
    status = status.replace("Require ip 192.0.2.10", "Require ip 127.0.0.1")
    vhost = "<VirtualHost 127.0.0.1:%d>\n    DocumentRoot \"%s\"\n%s%s</VirtualHost>\n" % (
        srv.port, srv.path("htdocs"), login,
        status if placement == "the example's" else "")
    srv.body = (status if placement == "the server's" else "") + vhost
    srv.write_config()
    try:
        srv.start()
        scraper, _ = get_from(srv.port, "/authn-hmac-status")
        user, _ = get_from(srv.port, "/authn-hmac-status", basic("alice", "alice's wiki pass"),
                           source="127.0.0.2")
        stranger, _ = get_from(srv.port, "/authn-hmac-status", source="127.0.0.2")
    finally:
        srv.stop()
        srv.cleanup()
    if placement == "the example's":
        assert (scraper.status, user.status, stranger.status) == (200, 403, 403)
    else:
        # NB: what the docs warn of: the login's Require replaced the
        # scraper's; the scraper itself must now log in.
        assert (scraper.status, user.status, stranger.status) == (401, 200, 401)


STAT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools", "authn-hmac-stat")


def check(srv, *args):
    p = subprocess.run([sys.executable, STAT, "--check"] + list(args) +
                       [srv.url + "/authn-hmac-status"],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.strip()


def test_redis_health_and_the_check():
    """The Redis tier's state where a monitor reads it: up since when, the
    breaker and its reason while it is open (cleared when it closes), in
    JSON, Prometheus and authn-hmac-stat; and authn-hmac-stat --check's one
    line and exit status: OK, CRITICAL with Redis down (WARNING after a 503:
    test_the_check_warns_after_a_503; its probe on a quiet server:
    test_the_check_probes_redis_on_a_quiet_server)."""
    redis = Redis(password=None).start()
    # NB: the misses that reach Redis here are wrong passwords, each from
    # a client of its own: none is refused by the throttle before Redis.
    s = make_server("event", global_conf="AuthHMACMaxVerifications 1\n"
                                         "AuthHMACVerifyBacklog 0\n")
    with_redis(s, redis.address)
    try:
        s.start()
        js = s.status()
        # Nothing has used Redis yet: not up, no reason; the check's probe
        # is its first answer.
        assert js["redis"] == 1 and js["redis_sentinel"] == 0, js
        assert js["redis_up"] == 0 and js["redis_up_since_seconds"] == 0, js
        assert js["redis_primary"] == redis.address and js["redis_breaker_reason"] == ""
        assert "redis_check" not in js, js
        t0 = time.time()
        rc, out = check(s)
        assert rc == 0 and out.startswith("AUTHN_HMAC OK - Redis up at %s since "
                                          % redis.address), out
        assert s.status_code("/a/index.html", "alice", "correct horse") == 200
        js = s.status()
        assert js["redis_up"] == 1 and js["redis_breaker_open"] == 0, js
        assert t0 - 2 <= js["redis_up_since_seconds"] <= time.time(), js
        rc, out = check(s)
        assert rc == 0 and out.startswith("AUTHN_HMAC OK - Redis up at %s since "
                                          % redis.address), out
        p = subprocess.run([sys.executable, STAT, s.url + "/authn-hmac-status"],
                           capture_output=True, text=True, timeout=60)
        assert re.search(r"^redis_primary +%s +the Redis primary$" % re.escape(redis.address),
                         p.stdout, re.M), p.stdout
        assert "redis_breaker_reason" not in p.stdout, p.stdout
        # Redis goes: the breaker opens, with the reason the log gives.
        redis.kill9()
        for i in range(6):
            assert s.status_code("/a/index.html", "bob", "hunter2 %d" % i,
                                 source=client_address()) == 401
            if s.status()["redis_breaker_open"]:
                break
        js = s.status()
        assert js["redis_breaker_open"] == 1 and js["redis_up"] == 0, js
        assert js["redis_up_since_seconds"] == 0, js
        reason = js["redis_breaker_reason"]
        assert "refused" in reason.lower(), js
        assert reason in s.error_log(), (reason, s.error_log()[-2000:])
        _, body = get(s, "/authn-hmac-status?prometheus")
        info = [l for l in body.splitlines() if l.startswith("authn_hmac_redis_info{")]
        assert info == ['authn_hmac_redis_info{primary="%s",breaker_reason="%s"} 1'
                        % (redis.address, reason)], info
        rc, out = check(s)
        assert rc == 2, out
        assert out == ("AUTHN_HMAC CRITICAL - Redis at %s does not answer (%s)"
                       % (redis.address, reason)), out
        _, body = get(s, "/authn-hmac-status?json&check")
        assert '"redis_check": 0' in body and '"redis_check_reason": "%s"' % reason in body, \
            body
        p = subprocess.run([sys.executable, STAT, s.url + "/authn-hmac-status"],
                           capture_output=True, text=True, timeout=60)
        assert re.search(r"^redis_breaker_reason +%s +why the breaker is open$"
                         % re.escape(reason), p.stdout, re.M), p.stdout
        # Back: the probe closes the breaker, and the reason goes.
        redis.start()
        deadline = time.time() + 40
        n = 0
        while time.time() < deadline and not s.status()["redis_up"]:
            n += 1
            assert s.status_code("/a/index.html", "bob", "again %d" % n,
                                 source=client_address()) == 401
            time.sleep(0.5)
        js = s.status()
        assert js["redis_up"] == 1 and js["redis_breaker_open"] == 0, js
        assert js["redis_breaker_reason"] == "", js
        assert check(s)[0] == 0
        # A usage error is UNKNOWN (3) under --check.
        p = subprocess.run([sys.executable, STAT, "--check", "--busy-window", "0",
                            s.url + "/authn-hmac-status"], capture_output=True, text=True)
        assert p.returncode == 3 and "--busy-window must be" in p.stderr, p
        # The handler unreadable: CRITICAL.
        p = subprocess.run([sys.executable, STAT, "--check", "http://127.0.0.1:1/x"],
                           capture_output=True, text=True)
        assert p.returncode == 2 and p.stdout.startswith(
            "AUTHN_HMAC CRITICAL - cannot read http://127.0.0.1:1/x"), p
    finally:
        s.stop()
        redis.cleanup()


def check_follows_redis(srv, redis, pause=False):
    """authn-hmac-stat --check every second on a quiet srv while its Redis
    (redis, in use, answering) is killed, then started again: CRITICAL
    at the first check after the kill, OK at the first after the start,
    and no request but the status handler's meanwhile. Three failed
    probes within 10 s open the breaker, as three requests' failures would
    (logged: AHMAC0004); the first answer closes it (AHMAC0005). With
    pause, Redis stops answering first (SIGSTOP): the probe ends at its
    timeout, CRITICAL."""
    rc, out = check(srv)
    assert rc == 0 and out.startswith("AUTHN_HMAC OK - Redis up at %s since "
                                      % redis.address), out
    srv.expect_log(r"\[authn_hmac:warn\].*AHMAC0004: Redis at .* is unavailable")
    seen = len(srv.access_log())
    if pause:
        redis.pause()
        try:
            rc, out = check(srv)
        finally:
            redis.resume()
        assert rc == 2 and "does not answer" in out and "timed out" in out, out
        time.sleep(1)
    redis.kill9()
    for _ in range(3):
        rc, out = check(srv)
        assert rc == 2, out
        assert out.startswith("AUTHN_HMAC CRITICAL - Redis at %s does not answer ("
                              % redis.address), out
        time.sleep(1)
    # NB: open unless the checks were more than 10 s apart (valgrind).
    opened = srv.status()["redis_breaker_open"]
    redis.start()
    rc, out = check(srv)
    assert rc == 0 and out.startswith("AUTHN_HMAC OK - Redis "), out
    assert redis.address in out, out
    # The breaker keeps its backoff (2 s after its first opening): the
    # checks close it when it is due, as a request's probe would, still
    # with no request.
    for _ in range(10):
        js = srv.status()
        if not js["redis_breaker_open"]:
            break
        time.sleep(1)
        rc, out = check(srv)
        assert rc == 0, out
    requests = srv.access_log()[seen:]
    assert requests and all(" /authn-hmac-status" in l
                            for l in requests), requests
    js = srv.status()
    assert js["redis_breaker_open"] == 0 and js["redis_up"] == 1, js
    assert not opened or re.search(r"AHMAC0005: Redis at .* is back after",
                                   srv.error_log()), srv.error_log_tail()


def test_the_check_probes_redis_on_a_quiet_server():
    """Redis dies under a server that no request reaches: --check says
    CRITICAL at once, not after three requests have failed; it says OK
    as soon as Redis is back, not after a request has missed the cache.
    A Redis that stops answering costs a check the timeout, no more."""
    redis = Redis(password=None).start()
    s = make_server("event")
    with_redis(s, redis.address)
    try:
        s.start()
        assert s.status_code("/a/index.html", "alice", "correct horse") == 200
        check_follows_redis(s, redis, pause=True)
        # The probe's answer in Prometheus's terms, as its parser reads them.
        _, body = get(s, "/authn-hmac-status?prometheus&check")
        fams = {f.name: f for f in prometheus_parser().text_string_to_metric_families(body)}
        assert fams["authn_hmac_redis_check"].samples[0].value == 1, body
        info = fams["authn_hmac_redis_info"].samples[0].labels
        assert info == {"primary": redis.address, "breaker_reason": "",
                        "check_reason": ""}, info
    finally:
        s.stop()
        problems = s.log_problems()
        s.cleanup()
        redis.cleanup()
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_the_check_warns_after_a_503():
    """(Was part of test_redis_health_and_the_check: a 503 needs two
    verifications at once, which valgrind's httpd -X, whose threads take
    turns, did not give in a loaded run.) Logins at once with room for one
    verification and no backlog: a 503, and --check warns of it for
    --busy-window seconds, then says OK. The user's hash costs 12 (about
    250 ms): the first verification is under way while the others come."""
    s = make_server("event", global_conf="AuthHMACMaxVerifications 1\n"
                                         "AuthHMACVerifyBacklog 0\n")
    htpasswd(s.path("a.htpasswd"), "slow", "slow pass", cost=12)
    try:
        s.start()
        busy = s.status()["busy"]
        for _ in range(5):
            procs = [subprocess.Popen(
                [S["curl"], "-s", "-o", "/dev/null", "-w", "%{http_code}", "-u",
                 "slow:slow pass", s.url + "/nocache/index.html"],
                stdout=subprocess.PIPE, text=True) for i in range(4)]
            codes = [p.communicate()[0] for p in procs]
            if "503" in codes:
                break
        assert "503" in codes, codes
        js = s.status()
        assert js["busy"] > busy and abs(js["busy_last_time_seconds"] - time.time()) < 30, js
        rc, out = check(s)
        assert rc == 1 and "the verification queue refused requests (503) within 300 s" \
            in out, out
        assert out.startswith("AUTHN_HMAC WARNING - "), out
        time.sleep(2)
        rc, out = check(s, "--busy-window", "1")
        assert rc == 0, out
    finally:
        s.stop()
        s.cleanup()


def test_a_reason_from_redis_is_escaped_on_every_page():
    """The breaker's reason is whatever answers as Redis said: HTML in it
    is text on mod_status's pages (?notable's <pre> too), in JSON and in
    Prometheus's label, never markup."""
    from fake_redis import FakeRedis
    fake = FakeRedis().start()
    fake.mode = "error"
    fake.error = b"-ERR <img src=x onerror=alert(1)> & more"
    s = make_server("event", global_conf=STATUS.format(moddir=S["moddir"]) +
                    "AuthHMACServerStatus On\n")
    with_redis(s, fake.address)
    try:
        s.start()
        for i in range(6):
            assert s.status_code("/a/index.html", "nobody%d" % i, "guess %d" % i) == 401
            if s.status()["redis_breaker_open"]:
                break
        js = s.status()
        assert js["redis_breaker_open"] == 1 and "<img" in js["redis_breaker_reason"], js
        for path in ("/server-status", "/server-status?notable"):
            _, body = get(s, path)
            assert "<img" not in body, (path, body[-1500:])
            assert re.search(r"&(lt|#60);img src=x onerror=alert\(1\)&(gt|#62);", body), \
                (path, body[-1500:])
    finally:
        s.stop()
        fake.stop()


def test_the_check_is_of_what_the_requests_need():
    """A Redis that answers PING but refuses what the requests send (still
    loading its data after a restart): the check says so (CRITICAL), and
    leaves the breaker the requests opened open (an answer to a PING
    closed it, and every check undid its backoff)."""
    from fake_redis import FakeRedis
    redis = FakeRedis().start()
    s = make_server("event")
    with_redis(s, redis.address)
    try:
        s.start()
        redis.mode = "loading"
        for i in range(8):
            assert s.status_code("/a/index.html", "bob", "wrong %d" % i,
                                 source=client_address()) == 401
            if s.status()["redis_breaker_open"]:
                break
        assert s.status()["redis_breaker_open"] == 1
        s.expect_log(r"AHMAC0004: Redis at .* is unavailable")
        for _ in range(4):
            rc, out = check(s)
            assert rc == 2 and "LOADING" in out, out
            assert s.status()["redis_breaker_open"] == 1
            time.sleep(1)
    finally:
        s.stop()
        s.cleanup()
        redis.stop()
