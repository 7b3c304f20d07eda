"""A TCP proxy that can stop forwarding without closing: a half-open path on demand.

    with Blackhole(server_host, server_port) as hole:
        client = dynoq.connect(hole.url, ...)    # through the proxy
        hole.cut()        # every byte is held from now on; no connection is closed
        ...               # what the client does now can only end by its own timeouts
        hole.restore()    # new connections are forwarded again; the old ones stay dead

While cut, the proxy neither reads nor writes any connection (the peers' bytes pile up in
the kernel's buffers, as on a partitioned network or towards a frozen host) and new
connections are accepted and then held the same way. A connection that was held stays
held after :meth:`restore` (its stream lost bytes: a client must find that out by its
own timeout, as with a peer that vanished behind a NAT), so only connections made after
the restore carry traffic. Everything is closed by :meth:`close`.

One thread, one selector; the upstream is a local server, so a blocking ``sendall`` to it
is short. Used by tests/test_halfopen.py and benchmarks/bench_blackhole.py.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from typing import Any

TICK = 0.02  # seconds between looks at the cut switch


class Blackhole:
    """A proxy on 127.0.0.1 (a free port) in front of ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self.host = "127.0.0.1"
        self._cut = False
        self._peers: dict[socket.socket, socket.socket] = {}  # forwarded, both directions
        self._held: list[socket.socket] = []  # never read, never written, never closed
        self._reset = False  # close every forwarded connection (on the loop's next turn)
        self._drop = 0  # close this many new connections at once (their handshakes fail)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="blackhole", daemon=True)
        self.accepted = 0  # connections accepted so far (for tests to see reconnects)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def start(self) -> Blackhole:
        self._thread.start()
        return self

    def cut(self) -> None:
        """Stop forwarding: every open connection and every new one is held."""
        with self._lock:
            self._cut = True

    def restore(self) -> None:
        """Forward new connections again (the held ones stay held)."""
        with self._lock:
            self._cut = False

    def reset(self, drop_next: int = 0) -> None:
        """Close every forwarded connection (as a server that drops its clients), and the
        next ``drop_next`` new ones as soon as they are made (before their handshake)."""
        with self._lock:
            self._reset = True
            self._drop = drop_next

    def __enter__(self) -> Blackhole:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with self._lock:
            socks = [*self._peers, *self._held, self._listener]
            self._peers.clear()
            self._held.clear()
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()

    # -- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                with self._lock:
                    cut, reset, self._reset = self._cut, self._reset, False
                if cut and self._peers:
                    self._hold_all(sel)
                if reset:
                    self._close_all(sel)
                for key, _ in sel.select(TICK):
                    sock: Any = key.fileobj
                    if sock is self._listener:
                        self._accept(sel)
                    elif sock in self._peers:
                        self._pump(sel, sock)
        finally:
            sel.close()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, OSError):
            return
        self.accepted += 1
        conn.setblocking(True)
        with self._lock:  # the switch as it is now: a restore a moment ago counts
            cut = self._cut
            drop = self._drop > 0
            self._drop -= drop
        if drop:
            conn.close()
            return
        if cut:
            with self._lock:
                self._held.append(conn)
            return
        try:
            up = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            conn.close()  # the server itself is down: a refusal, not a blackhole
            return
        up.settimeout(None)
        with self._lock:
            self._peers[conn], self._peers[up] = up, conn
        sel.register(conn, selectors.EVENT_READ)
        sel.register(up, selectors.EVENT_READ)

    def _pump(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        peer = self._peers[sock]
        try:
            data = sock.recv(65536)
            if data:
                peer.sendall(data)
                return
        except OSError:
            pass
        for s in (sock, peer):  # one side closed: close the other, as a proxy does
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(s)
            with self._lock:
                self._peers.pop(s, None)
            with contextlib.suppress(OSError):
                s.close()

    def _close_all(self, sel: selectors.BaseSelector) -> None:
        with self._lock:
            socks = list(self._peers)
            self._peers.clear()
        for s in socks:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(s)
            with contextlib.suppress(OSError):
                s.close()

    def _hold_all(self, sel: selectors.BaseSelector) -> None:
        with self._lock:
            socks = list(self._peers)
            self._peers.clear()
            self._held.extend(socks)
        for s in socks:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(s)
