"""The counters where admins look: mod_status's server-status (its HTML page
and ?auto) and Prometheus's text format, each against the JSON."""
import re
import subprocess

import pytest

from conftest import MPMS, make_server, serve
from harness import S

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
    """The values agree, but for the clock."""
    return {k: v for k, v in a.items() if k != "uptime_sec"} == \
        {k: v for k, v in b.items() if k != "uptime_sec"}


def test_prometheus_matches_json(srv):
    traffic(srv)
    js = srv.status()
    head, body = get(srv, "/authn-hmac-status?prometheus")
    assert re.search(r"(?i)^content-type: text/plain; version=0\.0\.4", head, re.M), head
    values, types = {}, {}
    for line in body.splitlines():
        m = re.match(r"# TYPE authn_hmac_(\w+) (counter|gauge)$", line)
        if m:
            types[m.group(1)] = m.group(2)
        elif not line.startswith("# HELP authn_hmac_"):
            name, value = line.split(" ")
            assert name.startswith("authn_hmac_"), line
            values[name[len("authn_hmac_"):]] = int(value)
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


def test_server_status_auto_and_page_match_json(srv):
    traffic(srv)
    js = srv.status()
    _, auto = get(srv, "/server-status?auto")
    assert re.search(r"^Total Accesses: \d+", auto, re.M), auto  # mod_status's own
    mine = dict((m.group(1), int(m.group(2)))
                for m in re.finditer(r"^authn_hmac_(\w+): (\d+)$", auto, re.M))
    assert set(mine) == set(js), set(mine) ^ set(js)
    assert same(mine, js), (mine, js)
    head, page = get(srv, "/server-status")
    assert "<h2>mod_authn_hmac</h2>" in page, page[-2000:]
    rows = dict((m.group(1), int(m.group(2)))
                for m in re.finditer(r"<tr><td>(\w+)</td><td>(\d+)</td>",
                                     page.split("<h2>mod_authn_hmac</h2>")[1].split("</table>")[0]))
    assert set(rows) == set(js), set(rows) ^ set(js)
    assert same(rows, js), (rows, js)
    assert js["hits"] >= 2
    _, notable = get(srv, "/server-status?notable")
    lines = dict((m.group(1), int(m.group(2)))
                 for m in re.finditer(r"^(\w+): (\d+)$",
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
