"""A TCP proxy that holds every chunk for a delay each way: a Redis a
little way off (a farm's is about 1 ms from each server), on loopback."""
import socket
import threading
import time

from .env import free_port


class DelayProxy:
    """Listens on 127.0.0.1:port and forwards each connection to
    127.0.0.1:target, sleeping `delay` seconds before it passes on each
    chunk, in each direction."""

    def __init__(self, target, delay=0.001):
        self.target, self.delay = target, delay
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(64)
        self.closed = False

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self):
        self.closed = True
        self.sock.close()
