"""A flood of wrong passwords: bcrypt is capped and queued, the rest get 503
with Retry-After, one client cannot take the whole queue, and cached
credentials are served throughout."""
import base64
import http.client
import threading
import re
import time

import pytest

from conftest import make_server
from harness import htpasswd

CAP = 2
BACKLOG = 4


def get(port, user, password, source="127.0.0.1", conn=None):
    """One GET of /a/index.html; returns (status, Retry-After, connection to
    reuse or None)."""
    raw = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=120,
                                           source_address=(source, 0))
    c.request("GET", "/a/index.html", headers={"Authorization": "Basic " + raw})
    r = c.getresponse()
    r.read()
    keep = not r.will_close
    if not keep:
        c.close()
    return r.status, r.getheader("Retry-After"), c if keep else None


class Flood:
    """n connections, each sending a new wrong password for user on every
    request, and honouring a 503's Retry-After as a browser would."""

    def __init__(self, server, user, n=32):
        self.server, self.user, self.n = server, user, n
        self.stop = threading.Event()
        self.codes = {}
        self.retry_after = set()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]

    def run(self, i):
        conn, k = None, 0
        while not self.stop.is_set():
            k += 1
            pw = "flood %d %d" % (i, k)
            try:
                code, retry, conn = get(self.server.port, self.user, pw, conn=conn)
            except (OSError, http.client.HTTPException):
                conn = None
                continue
            with self.lock:
                self.codes[code] = self.codes.get(code, 0) + 1
                self.server.sent[self.user] = self.server.sent.get(self.user, 0) + 1
                if code == 503:
                    self.retry_after.add(retry)
            if code == 503:
                self.stop.wait(int(retry))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


@pytest.mark.slow
@pytest.mark.parametrize("mpm", ["prefork", "event"])
def test_flood_of_wrong_passwords(mpm):
    srv = make_server(mpm, global_conf="AuthHMACMaxVerifications %d\n"
                                       "AuthHMACVerifyBacklog %d" % (CAP, BACKLOG))
    srv.write_config()
    htpasswd(srv.path("a.htpasswd"), "carol", "carol's pass")
    try:
        srv.start()
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        with Flood(srv, "alice") as flood:
            time.sleep(1.5)
            # The cached credential: every request answered, none refused.
            done, failed, non2xx, out = srv.ab("/a/index.html", "alice", "correct horse",
                                               c=8, seconds=3)
            assert done > 0 and failed == 0 and non2xx == 0, out
            mid = srv.status()
            # Another client still gets its share of the queue while the
            # flood holds its own: an uncached right password verifies.
            code, _, conn = get(srv.port, "carol", "carol's pass", source="127.0.0.2")
            if conn:
                conn.close()
            srv.sent["carol"] = 1
        st = srv.status()
        rate = re.search(r"Requests per second:\s+([\d.]+)", out)
        print("%s: flood %s, Retry-After %s; cached user %s req/s; busy %d, "
              "queued %d, verifying_max %d" % (
                  mpm, flood.codes, sorted(flood.retry_after),
                  rate.group(1) if rate else "?", st["busy"], st["queued"],
                  st["verifying_max"]))
        assert code == 200, (code, st)
        assert srv.notes("carol") == ["verified"]
        # Wrong passwords: 401 or 503, never a 200 or a 500.
        assert set(flood.codes) <= {401, 503}, flood.codes
        assert flood.codes.get(503, 0) > 0 and flood.codes.get(401, 0) > 0, flood.codes
        assert all(r is not None and r.isdigit() and int(r) >= 1
                   for r in flood.retry_after), flood.retry_after
        assert mid["busy"] > 0 and mid["queued"] > 0, mid
        assert 1 <= st["verifying_max"] <= CAP, st
        notes = srv.notes("alice")
        assert notes.count("busy") == flood.codes[503], (notes.count("busy"), flood.codes)
        assert "error" not in notes
        # Afterwards: the right password is a hit, a wrong one a 401, and
        # every place in the queue is free again.
        assert srv.status_code("/a/index.html", "alice", "correct horse") == 200
        assert srv.notes("alice")[-1] == "hit"
        assert srv.status_code("/a/index.html", "alice", "still wrong") == 401
        for _ in range(100):
            st = srv.status()
            if st["verifying"] == 0 and st["verify_waiting"] == 0:
                break
            time.sleep(0.1)
        assert st["verifying"] == 0 and st["verify_waiting"] == 0, st
        # The admin is told, once a minute at most in each process.
        busy = re.findall(r"\[authn_hmac:warn\] \[pid (\d+).*AHMAC0007: too many "
                          r"passwords to verify at once \(AuthHMACMaxVerifications %d, "
                          r"AuthHMACVerifyBacklog %d\)" % (CAP, BACKLOG), srv.error_log())
        assert busy and len(busy) == len(set(busy)), busy
        srv.expect_log(r"AHMAC0007")
        problems = srv.log_problems()
        assert not problems, problems
    finally:
        srv.cleanup()
