"""A recording webhook receiver: a real HTTP server on a free loopback port, in a thread."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Received", "Receiver"]


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    at_ms: int
    status: int

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class Behaviour:
    """How the receiver answers: ``status`` always, or ``fail_rate`` of requests with
    ``fail_status``; ``delay_s`` before answering; per-path overrides in ``by_path``."""

    status: int = 200
    fail_rate: float = 0.0
    fail_status: int = 500
    delay_s: float = 0.0
    by_path: dict[str, int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(1))


class Receiver:
    """Records every POST; answers as its :class:`Behaviour` says."""

    def __init__(self) -> None:
        self.records: list[Received] = []
        self.behaviour = Behaviour()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = receiver._decide(self.path)
                with receiver._lock:
                    receiver.records.append(Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                        time.time_ns() // 1_000_000, status))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that died mid-request (a killed dispatcher) is expected here

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _decide(self, path: str) -> int:
        b = self.behaviour
        if b.delay_s:
            time.sleep(b.delay_s)
        if path in b.by_path:
            return b.by_path[path]
        with self._lock:
            failing = b.fail_rate and b.rng.random() < b.fail_rate
        return b.fail_status if failing else b.status

    def start(self) -> Receiver:
        """Start serving."""
        self._thread.start()
        return self

    def reset(self, **behaviour: Any) -> None:
        """Forget the records and set a new behaviour."""
        with self._lock:
            self.records = []
            self.behaviour = Behaviour(**behaviour)

    def received(self, status: int | None = 200) -> list[Received]:
        """The requests answered with ``status`` (all when None)."""
        with self._lock:
            return [r for r in self.records if status is None or r.status == status]

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
