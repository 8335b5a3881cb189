"""A server of the ``example_lines`` protocol for tests: records every line it acknowledges,
on a loopback port it keeps across :meth:`LinesServer.kill` and :meth:`LinesServer.start`."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from typing import Any

__all__ = ["LinesServer"]


class LinesServer:
    """Acknowledges each JSON line (``ok <delivery id>``), refusing lines whose payload text is
    ``refuse``; with ``token``, a connection must start ``AUTH <token>``."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._server: socketserver.ThreadingTCPServer | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> LinesServer:
        """Serve (again) on the same port."""
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                first = True
                for raw in self.rfile:
                    line = raw.strip()
                    if first and outer.token is not None:
                        first = False
                        if line != b"AUTH " + outer.token.encode():
                            return
                        continue
                    envelope = json.loads(line)
                    if envelope.get("payload") == "refuse":
                        self.wfile.write(f"no {envelope['delivery_id']} refused\n".encode())
                        continue
                    with outer._lock:
                        outer.received.append(envelope)
                    self.wfile.write(f"ok {envelope['delivery_id']}\n".encode())

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def delivery_ids(self, channel: str | None = None) -> list[str]:
        """The delivery ids acknowledged so far (of ``channel``'s envelopes), in order."""
        with self._lock:
            return [e["delivery_id"] for e in self.received
                    if channel is None or e.get("channel") == channel]

    def kill(self) -> None:
        """Stop serving (connections in progress end)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    stop = kill
