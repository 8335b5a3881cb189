"""A throttled consumer: a webhook receiver that hands each delivery's policy token back to
the API a little after it arrived (or never), and measures how many it held at once.

    consumer = ReleasingConsumer(api_url, release_after_s=0.02, headers=auth).start()
    consumer.url            # the webhook URL
    consumer.max_held       # the most deliveries held (arrived, token not yet returned) at once
    consumer.stop()

A delivery counts as held from its arrival until its release is sent: inside the time the
store holds its token (taken before the delivery left, given back when the release commits), so
the figure never exceeds the tokens held at that moment, and a policy that let more through than
it allows shows as more held here. (Counting until the API's answer would count a token twice
when the dispatcher hands it to the next delivery between the commit and the answer.)
"""

from __future__ import annotations

import heapq
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["ReleasingConsumer"]


class ReleasingConsumer:
    """Records every delivery; releases its token ``release_after_s`` later (None: never),
    sending ``headers`` (the API key) with each release."""

    def __init__(self, api_url: str, *, release_after_s: float | None,
                 headers: dict[str, str] | None = None) -> None:
        self.api_url = api_url
        self.release_after_s = release_after_s
        self.arrivals: list[tuple[int, str, str]] = []
        """(arrival ms, schedule id, delivery id) of every request."""
        self.held = 0
        self.max_held = 0
        self.released = 0
        self.release_errors: list[str] = []
        self._lock = threading.Condition()
        self._due: list[tuple[float, str]] = []
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="release")
        self._http = httpx.Client(base_url=api_url, timeout=30, headers=headers)
        consumer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                consumer._arrived(self.headers["Tocsin-Schedule-Id"],
                                  self.headers["Tocsin-Delivery-Id"])
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/in"
        self._threads = [threading.Thread(target=self._server.serve_forever, daemon=True),
                         threading.Thread(target=self._release_loop, daemon=True)]

    def start(self) -> ReleasingConsumer:
        for t in self._threads:
            t.start()
        return self

    def _arrived(self, schedule_id: str, delivery_id: str) -> None:
        with self._lock:
            self.arrivals.append((time.time_ns() // 1_000_000, schedule_id, delivery_id))
            self.held += 1
            self.max_held = max(self.max_held, self.held)
            if self.release_after_s is not None:
                heapq.heappush(self._due, (time.monotonic() + self.release_after_s, delivery_id))
                self._lock.notify_all()

    def _release_loop(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                wait = 0.5 if not self._due else self._due[0][0] - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                _, delivery_id = heapq.heappop(self._due)
            self._pool.submit(self._release, delivery_id)

    def _release(self, delivery_id: str) -> None:
        with self._lock:
            self.held -= 1
        r = self._http.post(f"/v1/deliveries/{delivery_id}/release")
        with self._lock:
            if r.status_code != 200:
                self.release_errors.append(f"{delivery_id}: {r.status_code} {r.text}")
            self.released += 1

    def schedule_ids(self) -> set[str]:
        """Every schedule that arrived."""
        with self._lock:
            return {a[1] for a in self.arrivals}

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._pool.shutdown(wait=True)
        self._http.close()
