"""A flood of wrong passwords: bcrypt is capped and queued, the rest get 503
with Retry-After, one client cannot take the whole queue, and cached
credentials are served throughout."""
import re
import time

import pytest

from conftest import make_server
from harness import Flood, basic, get, htpasswd, parse_ab

CAP = 2
BACKLOG = 4


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
        with Flood(srv, "/a/index.html", "alice") as flood:
            time.sleep(1.5)
            # The cached credential: every request answered, none refused.
            done, failed, non2xx, out = srv.ab("/a/index.html", "alice", "correct horse",
                                               c=8, seconds=3)
            assert done > 0 and failed == 0 and non2xx == 0, out
            mid = srv.status()
            # Another client still gets its share of the queue while the
            # flood holds its own: an uncached right password verifies.
            r, conn = get(srv.port, "/a/index.html", basic("carol", "carol's pass"),
                          source="127.0.0.2")
            code = r.status
            if conn:
                conn.close()
            srv.sent["carol"] = 1
        st = srv.status()
        print("%s: flood %s, Retry-After %s; cached user %s req/s; busy %d, "
              "queued %d, verifying_max %d" % (
                  mpm, flood.codes, sorted(flood.retry_after),
                  parse_ab(out)["rps"], st["busy"], st["queued"],
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
