"""The tools an admin runs: each one's --help and a real run."""
import os
import re
import signal
import socket
import subprocess
import sys
import threading

import pytest

from conftest import make_server, serve

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools")
STAT = os.path.join(TOOLS, "authn-hmac-stat")


def run(*args, timeout=60):
    return subprocess.run([sys.executable, STAT] + list(args), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def srv():
    s = make_server("event")
    yield from serve(s)


def parse(out):
    return dict((m.group(1), float(m.group(2)) if "." in m.group(2) else int(m.group(2)))
                for m in re.finditer(r"^(\w+) +(\d+(?:\.\d+)?) ", out, re.M))


def test_stat_help():
    p = run("--help")
    assert p.returncode == 0 and p.stdout.startswith("authn-hmac-stat [--watch]"), p
    assert "--interval" in p.stdout and "Exit status" in p.stdout
    p = run()
    assert p.returncode == 2 and "URL" in p.stderr


def test_stat_prints_the_counters(srv):
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
    p = run(srv.url + "/authn-hmac-status")
    assert p.returncode == 0, p.stderr
    got, js = parse(p.stdout), srv.status()
    assert js.pop("redis_primary") == js.pop("redis_breaker_reason") == ""
    assert js.pop("bans_in_force") == []  # listed on the page, not a number
    assert not re.search(r"^redis_(primary|breaker_reason) ", p.stdout, re.M)  # no Redis
    assert set(got) == set(js), set(got) ^ set(js)
    assert got == js
    assert got["hits"] >= 1 and got["verifications"] >= 1
    assert re.search(r"^hits +\d+ +credentials found in shared memory$", p.stdout, re.M)


@pytest.mark.slow
def test_stat_watch_gives_rates(srv):
    assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
    p = subprocess.Popen([sys.executable, STAT, "--watch", "--interval", "2", "--count", "2",
                          srv.url + "/authn-hmac-status"], stdout=subprocess.PIPE, text=True)
    first = ""
    while not first.endswith("\n") or not first.splitlines()[-1].startswith("start_time_seconds"):
        line = p.stdout.readline()
        assert line, first
        first += line
    # 200 hits between the two readings, 2 s apart: about 100 per second.
    complete, failed, _, out = srv.ab("/a/index.html", "alice", "correct horse", n=200, c=2)
    assert complete == 200 and failed == 0, out
    stdout, _ = p.communicate(timeout=30)
    assert p.returncode == 0
    second = stdout.split("\n\n")[-1]
    rate = re.search(r"^hits +\d+ +([\d.]+)/s ", second, re.M)
    assert rate, stdout
    assert 40 <= float(rate.group(1)) <= 200, stdout
    assert re.search(r"^entries +\d+ {13}", second, re.M), second  # a gauge: no rate


def test_stat_unreachable_is_a_clear_error():
    p = run("http://127.0.0.1:1/authn-hmac-status")
    assert p.returncode == 1
    assert p.stderr.startswith("authn-hmac-stat: cannot read http://127.0.0.1:1/"), p.stderr


def test_stat_wrong_url_is_a_clear_error(srv):
    p = run(srv.url + "/a/index.html")  # 401 there
    assert p.returncode == 1 and "cannot read" in p.stderr, p.stderr
    p = run(srv.url + "/")
    assert p.returncode == 1 and "no counters" in p.stderr, p.stderr


@pytest.mark.parametrize("args,says", [
    (["--interval", "0"], "--interval must be more than 0 and at most 86400 seconds, not 0"),
    (["--interval", "86401"], "--interval must be more than 0 and at most 86400 seconds"),
    (["--interval", "soon"], "argument --interval: invalid float value: 'soon'"),
    (["--count", "-1"], "--count must be 0 (until interrupted) or more, not -1"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    ([], "no URL given"),
])
def test_stat_usage_error_says_why(args, says):
    """A usage error names what is wrong, then the short usage; exit 2, as
    --help says."""
    url = [] if args == [] else ["http://127.0.0.1:1/authn-hmac-status"]
    p = run(*(args + url))
    assert p.returncode == 2, p
    lines = p.stderr.splitlines()
    assert lines[0].startswith("authn-hmac-stat: " + says), p.stderr
    assert lines[1].startswith("usage: authn-hmac-stat [--watch]"), p.stderr
    assert "2 on a usage error" in run("--help").stdout


def test_stat_url_without_scheme_is_a_usage_error():
    p = run("127.0.0.1/authn-hmac-status")
    assert p.returncode == 2
    assert p.stderr.startswith("authn-hmac-stat: URL must start with http:// or https://"), \
        p.stderr


def test_stat_help_and_man_page_agree_on_exit_status():
    man = os.path.join(os.path.dirname(TOOLS), "docs", "authn-hmac-stat.1")
    with open(man) as f:
        text = f.read()
    assert "0 on success, 1 if the handler could not be read, 2 on a usage error" in text
    assert "Exit status: 0, 1 if the handler could not be read, 2 on a usage error" \
        in run("--help").stdout
    assert "SIGPIPE" in text and "SIGPIPE" in run("--help").stdout


def test_stat_closed_pipe_is_quiet(srv):
    """authn-hmac-stat URL | head: the reader going is not the URL's fault.
    It stops as cat would, killed by SIGPIPE, saying nothing."""
    p = subprocess.Popen([sys.executable, STAT, "--watch", "--interval", "0.2",
                          srv.url + "/authn-hmac-status"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline()
    p.stdout.close()
    _, err = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGPIPE, (p.returncode, err)
    assert err == "", err


def test_stat_http_errors_say_what_to_do(srv):
    p = run(srv.url + "/nothing-here")
    assert p.returncode == 1
    assert "HTTP 404 Not Found (is there a <Location> at this path with " \
        "\"SetHandler authn-hmac-status\"?)" in p.stderr, p.stderr
    p = run(srv.url + "/a/index.html")
    assert p.returncode == 1
    assert "HTTP 401 Unauthorized (this tool sends no password" in p.stderr, p.stderr


def answer_once(reply):
    """A server that answers one request with the bytes reply: its port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)

    def run():
        c, _ = s.accept()
        c.recv(65536)
        c.sendall(reply)
        c.close()
        s.close()
    threading.Thread(target=run, daemon=True).start()
    return s.getsockname()[1]


@pytest.mark.parametrize("reply,says", [
    (b"HTTP/1.0 500 \x1b]0;owned\x07\x1b[2JOops\r\n\r\n", "HTTP 500 \\x1b]0;owned"),
    (b"\x1b[31mEVIL\xc2\x9b2J\r\n\r\n", "\\x1b[31mEVIL"),
])
def test_stat_server_words_reach_the_terminal_escaped(reply, says):
    """A reason phrase or a bad status line is the server's text: it must not
    drive the admin's terminal (retitle it, clear it, reorder the line)."""
    p = subprocess.run([sys.executable, STAT, "http://127.0.0.1:%d/s" % answer_once(reply)],
                       capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 1, p
    assert says in err, err
    assert not [c for c in err.rstrip("\n") if not c.isprintable()], ascii(err)


def page(body):
    return (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
            b"Date: Thu, 26 Nov 2026 10:00:00 GMT\r\n\r\n" + body.encode())


FIELDS = ("redis redis_sentinel redis_up redis_up_since_seconds redis_breaker_open "
          "busy busy_last_time_seconds index_private pepper_random").split()


def fake_status(values, info=None):
    lines = []
    for name in FIELDS:
        lines += ["# TYPE authn_hmac_%s gauge" % name,
                  "authn_hmac_%s %d" % (name, values.get(name, 0))]
    if info is not None:
        lines.append("authn_hmac_redis_info{%s} 1" % info)
    return "\n".join(lines) + "\n"


def check_of(body):
    p = subprocess.run([sys.executable, STAT, "--check",
                        "http://127.0.0.1:%d/s" % answer_once(page(body))],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.strip()


def test_check_reads_escaped_words_and_the_servers_clock():
    """The reason in the info metric's label, with Prometheus's escapes
    (a quote, a backslash, a newline), reaches the line whole; a '|' in it
    (a plugin's performance data) is shown as '/'; a 503 is recent by the
    server's clock (its Date header), not this host's; a page without the
    fields the check reads is UNKNOWN (3), never OK."""
    opened = fake_status({"redis": 1, "redis_breaker_open": 1},
                         r'primary="10.0.0.12:6379",breaker_reason="ERR \"x\\y\" a|b"')
    rc, out = check_of(opened)
    assert rc == 2, out
    assert out == ('AUTHN_HMAC CRITICAL - Redis at 10.0.0.12:6379 unreachable: breaker '
                   'open (ERR "x\\y" a/b)'), out
    # 10:00:00 on the server; the last 503 a minute before it (this host's
    # clock is a day or more on: by it, the 503 is old).
    busy = fake_status({"redis": 0, "busy": 3, "busy_last_time_seconds": 1795687140}, "")
    rc, out = check_of(busy)
    assert rc == 1 and "refused requests (503) within 300 s" in out, out
    rc, out = check_of(fake_status({"redis": 0}, ""))
    assert rc == 0 and out == "AUTHN_HMAC OK - no Redis (shared memory only)", out
    rc, out = check_of("authn_hmac_hits_total 3\n")
    assert rc == 3 and out.startswith("AUTHN_HMAC UNKNOWN - the page has no redis, "), out


def test_check_of_a_page_that_is_not_the_handler_is_unknown():
    """--check on a page that is not the status handler (a site's page, a
    line that is no counter) cannot run: UNKNOWN (3), as a Nagios plugin
    says, not CRITICAL (2), which is for a handler that says something is
    wrong or cannot be read."""
    rc, out = check_of("<html><body>hello</body></html>\n")
    assert rc == 3 and re.fullmatch(r"AUTHN_HMAC UNKNOWN - no counters in the answer: is "
                                    r"http://127\.0\.0\.1:\d+/s the authn-hmac-status "
                                    r"handler\?", out), out
    rc, out = check_of("authn_hmac_hits_total lots\n")
    assert rc == 3 and out.startswith("AUTHN_HMAC UNKNOWN - not a counter line: "), out


def test_check_names_each_state_it_reads():
    """Each state --check reads, alone on a page: Sentinels that have named
    no primary (CRITICAL, before the breaker), a primary that has not
    answered yet (WARNING), a process that kept its own index of an
    htpasswd file (WARNING, with the count), and all well with Redis (OK,
    with the primary and since when)."""
    rc, out = check_of(fake_status({"redis": 1, "redis_sentinel": 1, "redis_breaker_open": 1},
                                   'primary="",breaker_reason="no primary"'))
    assert (rc, out) == (2, "AUTHN_HMAC CRITICAL - no Redis primary known (the Sentinels "
                            "have named none)"), out
    rc, out = check_of(fake_status({"redis": 1}, 'primary="10.0.0.12:6379"'))
    assert (rc, out) == (1, "AUTHN_HMAC WARNING - Redis at 10.0.0.12:6379 has not answered "
                            "yet"), out
    rc, out = check_of(fake_status({"redis": 0, "index_private": 2}, ""))
    assert (rc, out) == (1, "AUTHN_HMAC WARNING - 2 time(s) a process kept its own index of "
                            "an htpasswd file (index_private; see AHMAC0026 in the error "
                            "log); no Redis (shared memory only)"), out
    rc, out = check_of(fake_status({"redis": 1, "redis_up": 1,
                                    "redis_up_since_seconds": 1795687140},
                                   'primary="10.0.0.12:6379"'))
    assert rc == 0 and out.startswith("AUTHN_HMAC OK - Redis up at 10.0.0.12:6379 since "), out


def test_check_warns_of_a_random_pepper_with_redis():
    """Issue 37: Redis configured and the pepper random (no pepper file):
    the farm's servers would each have their own, share nothing and lose
    every login at each restart: WARNING. Without Redis (one server, its
    shared memory) a random pepper is fine: OK."""
    rc, out = check_of(fake_status({"redis": 1, "redis_up": 1, "pepper_random": 1,
                                    "redis_up_since_seconds": 1795687140},
                                   'primary="10.0.0.12:6379"'))
    assert rc == 1, out
    assert out.startswith("AUTHN_HMAC WARNING - the pepper is random (no AuthHMACPepperFile): "
                          "the servers sharing Redis do not share entries; "), out
    rc, out = check_of(fake_status({"redis": 0, "pepper_random": 1}, ""))
    assert (rc, out) == (0, "AUTHN_HMAC OK - no Redis (shared memory only)"), out


def test_check_warns_while_a_source_is_offline():
    """Issue 39: a source of users failing while the credentials it
    confirmed are served (offline_since_seconds set): WARNING, with the
    count; none once it answers again (0)."""
    extra = ("# TYPE authn_hmac_offline_since_seconds gauge\n"
             "authn_hmac_offline_since_seconds %d\n"
             "# TYPE authn_hmac_offline_hits_total counter\n"
             "authn_hmac_offline_hits_total 7\n")
    rc, out = check_of(fake_status({"redis": 0}, "") + extra % 1795687140)
    assert rc == 1, out
    assert out.startswith("AUTHN_HMAC WARNING - a source of users (SQL or a wrapped provider) "
                          "fails since "), out
    assert "(offline_hits: 7; AHMAC0041 in the error log)" in out, out
    rc, out = check_of(fake_status({"redis": 0}, "") + extra % 0)
    assert (rc, out) == (0, "AUTHN_HMAC OK - no Redis (shared memory only)"), out


def test_check_survives_numbers_no_date_can_show():
    """A page whose times are past any date (1e20 s), or whose count is
    past any float (400 digits), still gets one line and a monitor's exit
    status: the number shown as it is, or UNKNOWN (3); never a traceback
    with exit 1, which Nagios takes as a WARNING (found by review)."""
    far = 10 ** 20
    rc, out = check_of(fake_status({"redis": 1, "redis_up": 1, "redis_up_since_seconds": far},
                                   'primary="r:6379"'))
    assert (rc, out) == (0, "AUTHN_HMAC OK - Redis up at r:6379 since %d s" % far), out
    rc, out = check_of(fake_status({"redis": 0, "busy": 1, "busy_last_time_seconds": far}, ""))
    assert (rc, out) == (1, "AUTHN_HMAC WARNING - the verification queue refused requests "
                            "(503) within 300 s, the last at %d s (busy: 1); no Redis (shared "
                            "memory only)" % far), out
    page = fake_status({"redis": 0, "busy": 1, "busy_last_time_seconds": 1795687140}, "")
    rc, out = check_of(page.replace("authn_hmac_busy 1", "authn_hmac_busy 1%s.0" % ("0" * 400)))
    assert rc == 3 and out.startswith("AUTHN_HMAC UNKNOWN - the page's numbers cannot be "
                                      "read"), out
