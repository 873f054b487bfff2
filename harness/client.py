"""Clients: one GET, ab, and a flood of wrong passwords."""
import base64
import http.client
import itertools
import re
import secrets
import subprocess
import threading

from .env import S


# NB: single addresses from 127.0.0.0/16; blocks of 65,534 (for a process
# of its own, as harness.queue_clients's flood) are 127.1.0.0/16 and up.
_clients = itertools.count(1)  # NB: 0 is 127.0.0.1, the default client
_blocks = itertools.count(1)
_clients_lock = threading.Lock()


def _in_block(block, n):
    """The nth usable address of block (127.K), or None past its last; no
    .0 or .255, which nothing else uses."""
    hi, lo = divmod(n, 254)
    return "%s.%d.%d" % (block, hi, lo + 1) if hi < 256 else None


def client_address():
    """A loopback address that no one in this run has had (127.0.0.2 and
    up; Linux routes all of 127.0.0.0/8 to lo): a client of its own, with
    the throttle's counts of its own, as each of a real site's clients
    has. For a test whose clients send many wrong passwords on purpose:
    get(source=...), Httpd.status_code(source=...), Flood(source=...)."""
    with _clients_lock:
        a = _in_block("127.0", next(_clients))
    if a is None:
        raise RuntimeError("client_address(): 127.0.0.0/16 used up")
    return a


def client_block():
    """A /16 of loopback addresses (127.K) that no one in this run has
    had: for clients made in another process (Flood(clients=...) there)."""
    with _clients_lock:
        k = next(_blocks)
    if k > 255:
        raise RuntimeError("client_block(): 127.0.0.0/8 used up")
    return "127.%d" % k


def block_addresses(block):
    """Each address of block (client_block()) in turn, for Flood(clients=...)."""
    n = 0
    while True:
        a = _in_block(block, n)
        if a is None:
            raise RuntimeError("block_addresses(): %s.0.0/16 used up" % block)
        yield a
        n += 1


def basic(user, password):
    """The Authorization value for Basic credentials."""
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def get(port, path, auth=None, conn=None, source="127.0.0.1", timeout=120):
    """One GET, with an Authorization value if given, on conn or a new
    connection from source. Returns the response (its body read into
    .body) and the connection to reuse, or None if it closed."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                           source_address=(source, 0))
    c.request("GET", path, headers={"Authorization": auth} if auth else {})
    r = c.getresponse()
    r.body = r.read()
    if r.will_close:
        c.close()
        return r, None
    return r, c


AB_FIELDS = (("rps", r"Requests per second:\s+([\d.]+)", float),
             ("complete", r"Complete requests:\s+(\d+)", int),
             ("failed", r"Failed requests:\s+(\d+)", int),
             ("non2xx", r"Non-2xx responses:\s+(\d+)", int))


def read_status(sock):
    """The status code of the answer on a raw socket, read up to the end
    of its first line; 0 if it closed before one."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]) if data else 0


def parse_ab(out):
    """rps, complete, failed and non2xx from ab's output (0 if absent)."""
    res = {}
    for key, pat, conv in AB_FIELDS:
        m = re.search(pat, out)
        res[key] = conv(m.group(1)) if m else conv(0)
    return res


def ab(url, auth=None, n=2000, c=8, keepalive=True, seconds=None, prefix=()):
    """Runs ab (after prefix, e.g. taskset) with "user:password" auth if
    given; returns parse_ab() of its output, with rc, out (its output) and
    err (its stderr if it failed)."""
    # NB: -t implies -n 50000 unless -n comes after it.
    cmd = list(prefix) + [S["ab"], "-q"] + (["-t", str(seconds)] if seconds else [])
    cmd += ["-n", str(n), "-c", str(c), "-s", "60"]
    if auth:
        cmd += ["-A", auth]
    if keepalive:
        cmd.append("-k")
    p = subprocess.run(cmd + [url], capture_output=True, text=True)
    res = parse_ab(p.stdout)
    res.update(rc=p.returncode, out=p.stdout, err=p.stderr.strip() if p.returncode else "")
    return res


class Workers:
    """Threads (self.threads, made by the subclass) that run until
    self.stop is set: started on entering the with, stopped and joined
    (join_timeout seconds each, None for no limit) on leaving it."""
    join_timeout = 120

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.join_timeout)


class Flood(Workers):
    """n connections, each sending a new wrong password for user to path on
    every request, and honouring a 503's Retry-After as a browser would.
    codes counts the answers, retry_after holds the Retry-After values of
    the 503s, errors counts requests that got no answer. keepalive=False:
    a new connection for every request; source: the address it comes from;
    clients: where each connection takes its address instead (an iterator,
    e.g. block_addresses(client_block()), or True: client_address()), a new
    one after every GUESSES requests, so that none is refused by the
    throttle on guessing: a distributed flood, as it reaches a real site
    (sources then holds the addresses used)."""

    # NB: AuthHMACMaxFailures's default: a client's 10th distinct wrong
    # password is still verified, its 11th refused; counted per request,
    # whatever its answer.
    GUESSES = 10

    def __init__(self, srv, path, user, n=32, keepalive=True, source="127.0.0.1",
                 clients=None):
        self.srv, self.path, self.user, self.keepalive = srv, path, user, keepalive
        self.source = source
        self.clients = clients
        self.sources = set()
        self.tag = secrets.token_hex(4)  # no password repeats from an earlier flood
        self.stop = threading.Event()
        self.codes, self.retry_after, self.errors = {}, set(), 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]

    def next_source(self):
        if self.clients is None:
            return self.source
        with self.lock:
            a = client_address() if self.clients is True else next(self.clients)
            self.sources.add(a)
        return a

    def run(self, i):
        conn, k = None, 0
        source = self.next_source()
        while not self.stop.is_set():
            k += 1
            if self.clients is not None and k > 1 and (k - 1) % self.GUESSES == 0:
                # NB: this client has sent its GUESSES: the next one's turn.
                if conn:
                    conn.close()
                conn, source = None, self.next_source()
            auth = basic(self.user, "flood %s %d %d" % (self.tag, i, k))
            try:
                r, conn = get(self.srv.port, self.path, auth, conn=conn, source=source)
            except (OSError, http.client.HTTPException):
                conn = None
                with self.lock:
                    self.errors += 1
                continue
            if conn and not self.keepalive:
                conn.close()
                conn = None
            retry = r.getheader("Retry-After")
            with self.lock:
                self.codes[r.status] = self.codes.get(r.status, 0) + 1
                self.srv.sent[self.user] = self.srv.sent.get(self.user, 0) + 1
                if r.status == 503:
                    self.retry_after.add(retry)
            if r.status == 503:
                self.stop.wait(int(retry) if retry and retry.isdigit() else 1)
        if conn:
            conn.close()
