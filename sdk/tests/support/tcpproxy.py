"""A TCP proxy between a Worker and the server that a test can cut and restore.

(A copy of ``server/tests/_tcpproxy.py``: the SDK tests cannot import the server's tests.)
``TcpProxy(("127.0.0.1", port))`` listens on a free loopback port (:attr:`port`) and
forwards every connection to the target, each direction on its own thread. :meth:`cut`
closes every forwarded connection on both sides (the server sees its WebSocket end, the
Worker sees its socket fail) and refuses new ones (accepted, then closed at once) until
:meth:`restore`. Threads, not the event loop: it keeps forwarding while the test awaits.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forward loopback TCP connections to ``target``; :meth:`cut` and :meth:`restore` them."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self._closed = False
        self.accepted = 0
        self.refused = 0
        self._thread = threading.Thread(target=self._accept, name="tcpproxy", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Close every forwarded connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            _close(a)
            _close(b)

    def restore(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.cut()
        self._listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                refuse = self._cut or self._closed
            if refuse:
                self.refused += 1
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._cut or self._closed:
                    _close(client)
                    _close(upstream)
                    continue
                self._pairs.append((client, upstream))
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
