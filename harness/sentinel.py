"""Real Redis Sentinels (redis-server --sentinel) for the failover tests."""
import os
import signal
import subprocess
import tempfile
import time

from .env import free_port
from .redis_server import RedisProcess


class Sentinel(RedisProcess):
    """One Sentinel on a loopback port, monitoring `master` at primary
    (a harness Redis), with a quick failure detection. With password, the
    Sentinel requires it (and gives it to the other Sentinels)."""

    LOG = "sentinel.log"

    def __init__(self, primary, master="mymaster", quorum=2, down_after_ms=1000,
                 failover_timeout_ms=3000, password=None):
        self.dir = tempfile.mkdtemp(prefix="authn_hmac_sentinel_")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.primary = primary
        self.master = master
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.password = password
        self.proc = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        conf = ["port %d" % self.port, "bind 127.0.0.1", "daemonize no",
                "dir %s" % self.dir, "logfile %s/sentinel.log" % self.dir,
                "sentinel monitor %s 127.0.0.1 %d %d" % (self.master, self.primary.port,
                                                        self.quorum),
                "sentinel down-after-milliseconds %s %d" % (self.master, self.down_after_ms),
                "sentinel failover-timeout %s %d" % (self.master, self.failover_timeout_ms),
                "sentinel parallel-syncs %s 1" % self.master]
        if self.primary.password:
            conf.append('sentinel auth-pass %s "%s"' % (self.master, self.primary.password))
        if self.password:
            conf += ['requirepass "%s"' % self.password,
                     'sentinel sentinel-pass "%s"' % self.password]
        # NB: a Sentinel rewrites its configuration file: one of its own.
        path = os.path.join(self.dir, "sentinel.conf")
        with open(path, "w") as f:
            f.write("\n".join(conf) + "\n")
        self.proc = subprocess.Popen(["redis-server", path, "--sentinel"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(200):
            if self.cli("PING") == "PONG":
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server --sentinel did not start on %s" % self.address)

    def cli(self, *args):
        cmd = ["redis-cli", "--no-auth-warning", "-p", str(self.port)]
        if self.password:
            cmd += ["-a", self.password]
        try:
            p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            return ""
        return p.stdout.strip()

    def primary_address(self):
        """host:port of the primary, as this Sentinel says now."""
        out = self.cli("SENTINEL", "get-master-addr-by-name", self.master).split()
        return "%s:%s" % tuple(out) if len(out) == 2 else None

    def sees(self, what, n):
        """Whether this Sentinel knows n replicas ("replicas") or n other
        Sentinels ("sentinels")."""
        out = self.cli("SENTINEL", what, self.master)
        return out.splitlines().count("name") >= n

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
