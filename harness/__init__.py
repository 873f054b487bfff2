"""The test harness: a private httpd with the module built from this tree,
a real redis-server, htpasswd, ab, and the clients and /proc readings the
tests (tests/integration) and tools/bench, tools/soak and tools/demo share.
Each puts the tree's top on sys.path and imports it the same way:
`from harness import Httpd, htpasswd`."""
from .client import Flood, Workers, ab, basic, block_addresses, client_address, client_block, \
    get, parse_ab, read_status
from .delay_proxy import DelayProxy
from .farm import FarmFiles
from .env import COST, IS_ROOT, S, VALGRIND, free_port, run_user, settings
from .httpd import EXPECTED_LOG, MPM_CONF, Httpd, changed_default, check_log, cleanup, finish, \
    hmac_auth, hmac_location, htpasswd, htpasswd_line, last_note
from .proc import busy_ticks, children, cpu_ticks, exited, proc_stat, rss_kb, smaps_rollup
from .redis_server import Redis
from .tls import TestCA

__all__ = ["COST", "EXPECTED_LOG", "IS_ROOT", "MPM_CONF", "S", "VALGRIND", "DelayProxy",
           "FarmFiles", "Flood", "Httpd", "Redis", "TestCA", "Workers", "ab", "basic",
           "block_addresses", "busy_ticks", "changed_default", "check_log", "children", "cleanup",
           "client_address", "client_block", "cpu_ticks", "exited", "finish", "free_port", "get",
           "hmac_auth", "hmac_location", "htpasswd", "htpasswd_line", "last_note", "parse_ab",
           "proc_stat", "read_status", "rss_kb", "run_user", "settings", "smaps_rollup"]
