"""A Redis impostor for the trust-boundary tests: whoever answers on the
Redis address (a process on the network path, a spoofed name, a local
process that took the port while redis-server was down, a compromised
Redis). It speaks enough RESP for the module: AUTH, SELECT, PING, GET, SET, DEL,
EVAL of the farm marker's compare-and-set script (what the script does,
not Lua), and the throttle's MGET of its bans and EVAL of a wrong guess's
count (no ban ever started: counts are not kept).

Modes (set `mode` at any time; it applies to the next command):
  record   an honest store: SET keeps the value, GET returns it
  forge    every GET is answered with the next forgery from `forgeries()`
  trickle  every reply is sent one byte every `gap` seconds
  late     every reply is sent whole, `delay` seconds late
  huge     every GET is answered with a 10 MB bulk string
  error    every command but AUTH and SELECT is answered with `error`

With tls (a server-side ssl.SSLContext) it speaks TLS on its port, as a
redis-server with tls-port does.

With `names` = (host, port) it is also a Sentinel: SENTINEL
get-master-addr-by-name answers that address (whatever master is asked
for), and ROLE says master (listing `replicas` replicas).
"""
import os
import socket
import socketserver
import threading
import time


def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)


class FakeRedis:
    def __init__(self, password=None, tls=None):
        self.password = password
        self.tls = tls
        self.mode = "record"
        self.names = None
        self.replicas = 0    # how many replicas ROLE lists
        self.gap = 0.03
        self.delay = 0.3
        self.error = b"-ERR refused"
        self.store = {}      # key -> value, as SET wrote it
        self.written = []    # (key, value) of every SET, in order
        self.commands = []   # command names, in order
        self.auth_ok = 0
        self._forgery = 0
        self.lock = threading.Lock()
        self.socks = set()
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                if fake.tls:
                    try:
                        sock = fake.tls.wrap_socket(sock, server_side=True)
                    except (OSError, ValueError):
                        return
                fake._serve(sock)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        """Gone: no new connection, and the open ones closed."""
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for s in list(self.socks):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # -------------------------------------------------------------- forging

    def forgeries(self, key):
        """What an attacker can answer for `key` without the pepper."""
        others = [v for k, v in self.written if k != key]
        mine = [v for k, v in self.written if k == key]
        out = [
            # What the previous format held (a bare time): enough, before,
            # for a grant of any password.
            b"%d" % int(time.time() * 1e6),
            # A well-formed value of the current version (4) with entries
            # and a tag of random bytes.
            b"4:" + os.urandom(48).hex().encode() + b":" + os.urandom(32).hex().encode(),
            b"4:" + os.urandom(48).hex().encode() + b":" + os.urandom(48).hex().encode()
            + b":" + os.urandom(32).hex().encode(),
        ]
        # A real value written for another user, replayed under this key.
        out += others[-2:]
        # A real value of this user, truncated, or with a time moved on.
        for v in (mine or others)[-1:]:
            out.append(v[:-1])
            out.append(v[:-10])
            t = v.split(b":")
            if len(t) >= 3 and len(t[1]) >= 80:
                e = t[1]
                later = e[:64] + b"%016x" % (int(e[64:80], 16) + 10**9) + e[80:]
                out.append(b":".join([t[0], later] + t[2:]))
        return out

    def _answer_get(self, key):
        if self.mode == "hold" and b":f:" in key:
            # Every verification "runs" elsewhere, forever.
            return bulk(b"R" + b"0123456789abcdef" * 2)
        if self.mode == "forge":
            with self.lock:
                f = self.forgeries(key)
                self._forgery += 1
                return bulk(f[self._forgery % len(f)])
        if self.mode == "huge":
            return b"$10000000\r\n" + b"x" * 10000000 + b"\r\n"
        v = self.store.get(key)
        return bulk(v) if v is not None else b"$-1\r\n"

    # ------------------------------------------------------------ protocol

    def _serve(self, sock):
        with self.lock:
            self.socks.add(sock)
        f = sock.makefile("rb")
        try:
            while True:
                cmd = self._read_command(f)
                if cmd is None:
                    return
                name = cmd[0].upper()
                self.commands.append(name.decode("latin-1"))
                if name == b"AUTH":
                    ok = self.password is None or cmd[-1].decode("latin-1") == self.password
                    self.auth_ok += ok
                    reply = b"+OK\r\n" if ok else b"-WRONGPASS invalid password\r\n"
                elif name == b"SELECT":
                    reply = b"+OK\r\n"
                elif self.mode == "error":
                    reply = self.error + b"\r\n"
                elif self.mode == "loading" and name != b"PING":
                    # A Redis loading its dataset answers PING only.
                    reply = b"-LOADING Redis is loading the dataset in memory\r\n"
                elif name == b"PING":
                    reply = b"+PONG\r\n"
                elif name == b"SENTINEL" and self.names:
                    reply = b"*2\r\n" + bulk(self.names[0].encode()) \
                        + bulk(b"%d" % self.names[1])
                elif name == b"ROLE":
                    # As Redis answers: each replica's address, port and
                    # replication offset.
                    reply = b"*3\r\n" + bulk(b"master") + b":3129659\r\n*%d\r\n" \
                        % self.replicas + b"".join(
                            b"*3\r\n" + bulk(b"10.0.1.%d" % (100 + i)) + bulk(b"6379")
                            + bulk(b"3129242") for i in range(self.replicas))
                elif name == b"GET":
                    reply = self._answer_get(cmd[1])
                elif name == b"MGET":
                    # The throttle's bans (on at the shipped defaults): as
                    # Redis answers, from the store (a ban only refuses).
                    with self.lock:
                        vals = [self.store.get(k) for k in cmd[1:]]
                    reply = b"*%d\r\n" % len(vals) + b"".join(
                        bulk(v) if v is not None else b"$-1\r\n" for v in vals)
                elif name == b"EVAL" and len(cmd) == 8 and cmd[2] == b"3":
                    # The throttle's read of a wrong guess's counts: as Redis
                    # answers for a new guess and no count yet.
                    reply = b"*2\r\n$0\r\n\r\n$0\r\n\r\n"
                elif name == b"EVAL" and len(cmd) == 16 and cmd[2] == b"4":
                    # Its counts written back (tagged, compare-and-set):
                    # not kept here.
                    reply = b":0\r\n"
                elif name == b"PTTL":
                    reply = b":300000\r\n" if self.mode == "forge" or cmd[1] in self.store \
                        else b":-2\r\n"
                elif name == b"SET" and self.mode == "hold" and b"NX" in cmd:
                    reply = b"$-1\r\n"  # another server holds the marker
                elif name == b"SET":
                    with self.lock:
                        self.store[cmd[1]] = cmd[2]
                        self.written.append((cmd[1], cmd[2]))
                    reply = b"+OK\r\n"
                elif name == b"DEL":
                    with self.lock:
                        reply = b":%d\r\n" % (self.store.pop(cmd[1], None) is not None)
                elif name == b"EVAL" and len(cmd) == 7 and cmd[2] == b"1":
                    # KEYS[1] = cmd[3]; ARGV = owner's claim, result ("":
                    # delete), PX: only while the marker is the claim.
                    key, claim, value = cmd[3], cmd[4], cmd[5]
                    with self.lock:
                        mine = self.store.get(key) == claim
                        if mine and value:
                            self.store[key] = value
                            self.written.append((key, value))
                        elif mine:
                            del self.store[key]
                    reply = b":%d\r\n" % mine
                else:
                    reply = b"-ERR unknown command\r\n"
                self._send(sock, reply)
        except (OSError, ValueError):
            return
        finally:
            with self.lock:
                self.socks.discard(sock)

    def _send(self, sock, reply):
        if self.mode == "trickle":
            for i in range(len(reply)):
                sock.sendall(reply[i:i + 1])
                time.sleep(self.gap)
            return
        if self.mode == "late":
            time.sleep(self.delay)
        sock.sendall(reply)

    @staticmethod
    def _read_command(f):
        line = f.readline()
        if not line:
            return None
        if not line.startswith(b"*"):
            raise ValueError("inline commands are not spoken here")
        n = int(line[1:])
        args = []
        for _ in range(n):
            hdr = f.readline()
            size = int(hdr[1:])
            data = f.read(size + 2)
            args.append(data[:-2])
        return args


if __name__ == "__main__":
    r = FakeRedis().start()
    print("fake redis on", r.address)
    while True:
        time.sleep(3600)
