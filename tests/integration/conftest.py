"""Fixtures: a real httpd per MPM with the module built from this tree.

AUTHN_HMAC_MPMS names the MPMs to run under (default "event prefork
worker"). The whole suite runs under the first; under the others, only
the tests marked `mpm` (what depends on the MPM: processes against
threads, restarts, the busy 503 path, state shared among children). A
test or fixture parametrized by MPM names runs only those in the list."""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

# The harness is harness/ at the tree's top, shared with tools/. Its
# helpers that assert (check_log, finish) report as a test's own assert.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytest.register_assert_rewrite("harness")
from harness import VALGRIND, Httpd, client_address, hmac_location, htpasswd  # noqa: E402

ALL_MPMS = ("event", "prefork", "worker")
MPMS = (os.environ.get("AUTHN_HMAC_MPMS") or " ".join(ALL_MPMS)).split()
if VALGRIND:
    # httpd -X: no restarts, no other accounts, and timings 20-50x slower.
    # Prefork: one process, one thread, and a plain exit path.
    MPMS = ["prefork"]
    collect_ignore = ["test_lifecycle.py"]


def item_mpm(item):
    """The MPM an item runs under, when a parameter names one."""
    spec = getattr(item, "callspec", None)
    for value in (spec.params.values() if spec else ()):
        if isinstance(value, str) and value in ALL_MPMS:
            return value
    return None


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        mpm = item_mpm(item)
        if mpm is not None and (mpm not in MPMS or (
                mpm != MPMS[0] and not item.get_closest_marker("mpm"))):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if not VALGRIND:
        return
    skip = pytest.mark.skip(reason="timing- or load-bound: not run under valgrind")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: timing- or load-bound; skipped under valgrind")
    config.addinivalue_line("markers", "mpm: depends on the MPM; runs under every MPM of "
                                       "AUTHN_HMAC_MPMS, other tests under the first only")
    config.addinivalue_line("markers", "plain: runs on the plain build only (skipped under "
                                       "the sanitizers and valgrind); CI runs it with -m plain")

# /a/ and /b/ use two different htpasswd files (two scopes); /short/ uses
# the file of /a/ with a 2-second TTL; /idle/ with a 3-second TTL, and
# /maxage/ with a 6-second max age as well; /gone/ points at a file the
# tests remove and restore; /nocache/ verifies every time.
def body(d):
    a = d + "/a.htpasswd"
    locations = [("/a/", a, "a"),
                 ("/b/", d + "/b.htpasswd", "b", "AuthHMACCacheTTL 5m"),
                 ("/short/", a, "a", "AuthHMACCacheTTL 2"),
                 ("/idle/", a, "a", "AuthHMACCacheTTL 3"),
                 ("/maxage/", a, "a", "AuthHMACCacheTTL 3", "AuthHMACCacheMaxAge 6"),
                 ("/gone/", d + "/gone.htpasswd", "gone"),
                 ("/noneg/", a, "a", "AuthHMACNegativeTTL 0"),
                 ("/showunknown/", a, "a", "AuthHMACHideUnknownUsers Off"),
                 ("/nocache/", a, "a", "AuthHMACCacheTTL 0")]
    return "".join('Alias %s "%s/htdocs/"\n' % (loc[0], d) for loc in locations) + \
        "".join(hmac_location(*loc) for loc in locations)


def make_server(mpm, **kw):
    srv = Httpd(mpm=mpm, name=mpm, **kw)
    srv.body = body(srv.dir)
    srv.write_config()
    with open(srv.path("htdocs", "index.html"), "w") as f:
        f.write("<html><body>hello</body></html>\n")
    with open(srv.path("htdocs", "page.css"), "w") as f:
        f.write("body { color: #333 }\n" * 1200)  # ~25 KB
    # NB: three files, three htpasswd runs (0.26 s of bcrypt each) at once.
    files = (("a.htpasswd", "alice", "correct horse"), ("b.htpasswd", "alice", "battery staple"),
             ("gone.htpasswd", "gina", "gina's pass"))
    with ThreadPoolExecutor(len(files)) as pool:
        list(pool.map(lambda f: htpasswd(srv.path(f[0]), f[1], f[2], create=True), files))
    return srv


def serve(srv):
    """A fixture's body: srv started for the tests, then stopped, and no
    error log line that no test expected."""
    srv.start()
    yield srv
    srv.stop()
    problems = srv.log_problems()
    srv.cleanup()
    assert not problems, "unexpected error log lines:\n" + "\n".join(problems)


@pytest.fixture(scope="module", params=MPMS)
def server(request):
    yield from serve(make_server(request.param))


# The servers a module's tests share (module-scoped fixtures).
SHARED = ("server", "srv", "redis_srv", "plain", "plain_status", "site", "ldap_site",
          "remote", "farm", "burst_farm")


@pytest.fixture(autouse=True)
def own_client(request):
    """Each test sends to the servers its module shares from a client of its
    own (Httpd.source: status_code() and the helpers that read it), as a
    real site's clients do: the throttle on guessing counts each client's
    wrong passwords, and one test's must not refuse the next one's."""
    def servers(v):
        if isinstance(v, Httpd):
            yield v
        elif isinstance(v, (tuple, list)):
            for x in v:
                yield from servers(x)
        elif isinstance(v, dict):
            for x in v.values():
                yield from servers(x)
    touched = []
    for name in SHARED:
        if name in request.fixturenames:
            for srv in servers(request.getfixturevalue(name)):
                srv.source = client_address()
                touched.append(srv)
    yield
    for srv in touched:
        srv.source = None
