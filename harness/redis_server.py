"""A real redis-server for the tests and tools/bench."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .env import free_port


class RedisProcess:
    """What a redis-server of the harness, plain or Sentinel, has besides
    its process (self.proc, ended by stop()): a directory of its own
    (self.dir), its log file there (LOG) and the cleanup."""

    LOG = "redis.log"

    def log_tail(self, n=20):
        try:
            with open(os.path.join(self.dir, self.LOG), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis(RedisProcess):
    """A real redis-server on a loopback port (or a unix socket), with a
    password and optionally an ACL user, and no persistence."""

    def __init__(self, password="redis-test-secret", acl_user=None, unix=False, extra=(),
                 binary="redis-server", acl_rules="~* +@all", tls=None):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="authn_hmac_redis_")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.password = password
        self.acl_user = acl_user  # (name, password)
        self.acl_rules = acl_rules  # the ACL user's keys and commands
        self.socket = os.path.join(self.dir, "redis.sock") if unix else None
        self.extra = list(extra)  # more redis.conf lines
        # TLS only, on the port: {"cert", "key", "ca"} (PEM paths), and
        # "auth_clients" (a client certificate is required) with the
        # "client" (cert, key) redis-cli then presents, and "insecure".
        self.tls = tls
        self.proc = None

    @property
    def address(self):
        return self.socket or "127.0.0.1:%d" % self.port

    def start(self):
        conf = ["port %d" % (0 if self.tls else self.port), "bind 127.0.0.1", "save \"\"",
                "appendonly no",
                "daemonize no", "dir %s" % self.dir, "databases 16", "loglevel warning",
                "logfile %s/redis.log" % self.dir]
        if self.socket:
            conf += ["unixsocket %s" % self.socket, "unixsocketperm 777"]
        if self.tls:
            conf += ["tls-port %d" % self.port, "tls-cert-file %s" % self.tls["cert"],
                     "tls-key-file %s" % self.tls["key"],
                     "tls-ca-cert-file %s" % self.tls["ca"],
                     "tls-auth-clients %s" % ("yes" if self.tls.get("auth_clients") else "no")]
        if self.password:
            conf.append("requirepass \"%s\"" % self.password)
        if self.acl_user:
            conf.append("user %s on >%s %s" % (self.acl_user + (self.acl_rules,)))
        conf += self.extra
        with open(os.path.join(self.dir, "redis.conf"), "w") as f:
            f.write("\n".join(conf) + "\n")
        self.proc = subprocess.Popen([self.binary, os.path.join(self.dir, "redis.conf")],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(200):
            if self.ping():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start on %s\n%s" % (self.address,
                                                                      self.log_tail()))

    def cli(self, *args):
        cmd = ["redis-cli", "--no-auth-warning"]
        cmd += ["-s", self.socket] if self.socket else ["-p", str(self.port)]
        if self.tls:
            # NB: "insecure" for a server whose certificate is meant not
            # to verify (the tests of the module's refusal).
            cmd += ["--tls"] + (["--insecure"] if self.tls.get("insecure")
                                else ["--cacert", self.tls["ca"]])
            if self.tls.get("client"):
                cmd += ["--cert", self.tls["client"][0], "--key", self.tls["client"][1]]
        if self.password:
            cmd += ["-a", self.password]
        elif self.acl_user:  # the default user may be off
            cmd += ["--user", self.acl_user[0], "--pass", self.acl_user[1]]
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=10)
        return p.stdout.strip()

    def ping(self):
        try:
            return self.cli("PING") == "PONG"
        except (subprocess.TimeoutExpired, OSError):
            return False

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def auth_file(self, path, text):
        """A Redis auth file as the module wants it: 0600, one line."""
        with open(path, "w") as f:
            f.write(text + "\n")
        os.chmod(path, 0o600)
        return path
