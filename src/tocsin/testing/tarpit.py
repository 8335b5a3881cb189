"""Hostile destinations on loopback, for bulkhead tests and benchmarks: :class:`Tarpit`.

* ``silent``: accepts every connection, reads what comes, never answers (a hung service, a
  broker that never finishes its handshake).
* ``drip``: answers ``HTTP/1.1 200 OK`` and then one header line every ``every_s`` seconds, for
  ever (a slow-loris endpoint: each read gets a byte in time, the answer never ends).

It runs in a daemon thread; :meth:`Tarpit.close` stops it and drops its connections::

    with Tarpit("drip", every_s=2) as pit:
        url = pit.url        # http://127.0.0.1:PORT/
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["Tarpit"]


class Tarpit:
    """A TCP server on ``127.0.0.1`` that holds every client (see the module docstring)."""

    def __init__(self, mode: str = "silent", *, every_s: float = 2.0) -> None:
        if mode not in ("silent", "drip"):
            raise ValueError(f"mode must be silent or drip, not {mode!r}")
        self.mode = mode
        self.every_s = every_s
        self.accepted = 0
        """Connections accepted so far."""
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port: int = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="tarpit", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """An http URL of the tarpit."""
        return f"http://127.0.0.1:{self.port}/"

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.accepted += 1
                self._clients.append(client)
            threading.Thread(target=self._hold, args=(client,), daemon=True).start()

    def _hold(self, client: socket.socket) -> None:
        client.settimeout(0.2)
        sent_status = False
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    if not client.recv(65536):
                        return
                if self.mode == "drip":
                    client.sendall(b"X-Drip: 1\r\n" if sent_status else b"HTTP/1.1 200 OK\r\n")
                    sent_status = True
                    self._stop.wait(self.every_s)

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        self._stop.set()
        self._thread.join(2)
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for client in self._clients:
                with contextlib.suppress(OSError):
                    client.close()

    def __enter__(self) -> Tarpit:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
