"""Clients for a flood of a large verification queue, each run in a
process of its own (python3 -m harness.queue_clients, from the tree's
top): the flood's 258 threads would otherwise share an
interpreter, and the cores, with the client that is timed.

    flood PORT PATH USER N [KEEPALIVE SOURCE]
                             N connections of wrong passwords (Flood; kept
                             alive unless KEEPALIVE is 0; from SOURCE, by
                             default 127.0.0.1, or from fresh clients of
                             the block B, client_block(), when SOURCE is
                             clients:B), at nice 10 (on a real site
                             the clients are other machines), until stdin
                             closes; then prints {"codes": ..., "errors":
                             ...} as JSON
    hits PORT PATH AUTH SECONDS GAP
                             one kept-alive connection, a GET every GAP s for
                             SECONDS s, from a line on stdin (the caller
                             starts it early: a busy machine starts Python
                             slowly); prints [[seconds, status], ...]
"""
import http.client
import json
import os
import sys
import time


def hits(port, path, auth, seconds, gap):
    conn, out = None, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("GET", path, headers={"Authorization": auth})
            r = conn.getresponse()
            r.read()
            status = r.status
            if r.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            status, conn = 0, None
        out.append((time.monotonic() - t0, status))
        time.sleep(gap)
    return out


def flood(port, path, user, n, keepalive=True, source="127.0.0.1"):
    from harness.client import Flood, block_addresses

    class Srv:
        pass
    srv = Srv()
    srv.port, srv.sent = port, {}
    os.nice(10)
    clients = None
    if source.startswith("clients:"):
        clients = block_addresses(source[len("clients:"):])
    with Flood(srv, path, user, n=n, keepalive=keepalive, source=source,
               clients=clients) as fl:
        sys.stdin.read()  # till the parent closes it
        fl.stop.set()
        with fl.lock:
            print(json.dumps({"codes": fl.codes, "errors": fl.errors}), flush=True)


def command(what, *args):
    """The argv that runs what (flood or hits) with args."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, "-c", "import sys; sys.path.insert(0, %r); "
            "from harness.queue_clients import main; main()" % here, what] + \
        [str(a) for a in args]


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "flood":
        flood(int(args[0]), args[1], args[2], int(args[3]), *(
            [args[4] != "0"] + args[5:6] if len(args) > 4 else []))
    else:
        sys.stdin.readline()
        json.dump(hits(int(args[0]), args[1], args[2], float(args[3]), float(args[4])),
                  sys.stdout)


if __name__ == "__main__":
    main()
