"""A recording webhook receiver: a real HTTP/1.1 server on a free loopback port, in a thread.

    receiver = Receiver().start()           # or: with Receiver() as receiver: ...
    receiver.url                            # http://127.0.0.1:<port>; any path is accepted
    receiver.reset(status=503)              # forget the records, answer 503 from now on
    receiver.set_behaviour(fail_rate=0.2)   # change how it answers, keeping the records
    receiver.received()                     # the requests answered 200 (None: all of them)
    receiver.wait_for(100)                  # block until 100 requests were answered
    receiver.stop()

Behaviours (keywords of :meth:`Receiver.reset` and :meth:`Receiver.set_behaviour`, see
:class:`Behaviour`): a fixed ``status``; a ``fail_rate`` of requests answered ``fail_status``
(seeded: ``seed``); extra response ``headers`` and a ``body``; a ``delay_s`` before answering;
per-path statuses ``by_path``; ``hold``: the next n requests wait (``held()`` counts them)
until :meth:`Receiver.release`.

A thread per connection (keep-alive connections are served until the client closes them) and
a deep listen backlog: hundreds of concurrent requests a second are fine.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tocsin.clock import Clock, SystemClock

__all__ = ["Behaviour", "Received", "Receiver"]


@dataclass(frozen=True)
class Received:
    """One request the receiver answered."""

    path: str
    headers: dict[str, str]
    """Names in lower case."""
    body: bytes
    at_ms: int
    """When it arrived (UTC epoch milliseconds)."""
    status: int
    """What it was answered."""
    method: str = "POST"
    client_port: int = 0
    """The client's source port: requests on one keep-alive connection share it."""

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class Behaviour:
    """How the receiver answers."""

    status: int = 200
    """The status of every request not failed or overridden."""
    fail_rate: float = 0.0
    """The fraction of requests answered ``fail_status`` instead, at random."""
    fail_status: int = 500
    delay_s: float = 0.0
    """Sleep this long before answering."""
    by_path: dict[str, int] = field(default_factory=dict)
    """A fixed status for these paths (``/in``; no query string)."""
    hold: int = 0
    """Hold the next ``hold`` requests until :meth:`Receiver.release`."""
    seed: int = 1
    """Seeds the ``fail_rate`` draws."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers (``Retry-After``...)."""
    body: bytes = b"ok"
    """The response body."""
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


class Receiver:
    """Records every request, stamped by ``clock`` (the system clock by default); answers as
    its :class:`Behaviour` says."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.records: list[Received] = []
        self.behaviour = Behaviour()
        self._lock = threading.Condition()
        self._released = threading.Event()
        self._held = 0
        self._generation = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:  # the sender died mid-request: nothing was delivered
                    self.close_connection = True
                    return
                generation = receiver._generation
                status = receiver._decide(self.path)
                record = Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                  body, receiver.clock.now_ms(), status, self.command,
                                  self.client_address[1])
                with receiver._lock:
                    if generation == receiver._generation:  # not from before a reset
                        receiver.records.append(record)
                        receiver._lock.notify_all()
                behaviour = receiver.behaviour
                body = b"" if status in (204, 304) else behaviour.body  # no body, by RFC 9110
                self.send_response(status)
                for name, value in behaviour.headers.items():
                    self.send_header(name, value)
                if status not in (204, 304):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET = _answer

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that died mid-request (a killed dispatcher) is expected here

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"receiver-{self.port}")

    def _decide(self, path: str) -> int:
        b = self.behaviour
        with self._lock:
            released = self._released if b.hold > 0 else None
            if released is not None:
                b.hold -= 1
                self._held += 1
                self._lock.notify_all()
        if released is not None:
            released.wait(timeout=300)
            with self._lock:
                self._held -= 1
        if b.delay_s:
            time.sleep(b.delay_s)
        path = path.split("?", 1)[0]
        if path in b.by_path:
            return b.by_path[path]
        with self._lock:
            failing = b.fail_rate and b.rng.random() < b.fail_rate
        return b.fail_status if failing else b.status

    def start(self) -> Receiver:
        """Start serving."""
        self._thread.start()
        return self

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def reset(self, **behaviour: Any) -> None:
        """Forget the records, release held requests (they are not recorded), and answer as
        ``behaviour`` says."""
        self.release()
        with self._lock:
            self.records = []
            self._generation += 1
            self.behaviour = Behaviour(**behaviour)
            self._released = threading.Event()

    def set_behaviour(self, **behaviour: Any) -> None:
        """Answer as ``behaviour`` says from now on; the records are kept."""
        with self._lock:
            self.behaviour = Behaviour(**behaviour)
            if self.behaviour.hold:
                self._released = threading.Event()

    def release(self) -> None:
        """Let every held request be answered."""
        self._released.set()

    def held(self) -> int:
        """How many requests are held now."""
        with self._lock:
            return self._held

    def received(self, status: int | None = 200) -> list[Received]:
        """The requests answered with ``status`` (all when None), in arrival order."""
        with self._lock:
            return [r for r in self.records if status is None or r.status == status]

    def wait_for(self, n: int, *, status: int | None = None, timeout_s: float = 30) -> \
            list[Received]:
        """Block until ``n`` requests were answered with ``status`` (any when None); returns
        them. AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                got = [r for r in self.records if status is None or r.status == status]
                left = deadline - time.monotonic()
                if len(got) >= n:
                    return got
                if left <= 0:
                    raise AssertionError(f"receiver got {len(got)} requests, not {n}, "
                                         f"in {timeout_s}s")
                self._lock.wait(left)

    def wait_held(self, n: int, *, timeout_s: float = 30) -> None:
        """Block until ``n`` requests are held."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._held < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self._held} requests held, not {n}")
                self._lock.wait(left)

    def stop(self) -> None:
        """Stop serving and release whatever is held."""
        self.release()
        self._server.shutdown()
        self._server.server_close()
