"""Tocsin as a user runs it: ``tocsin up`` (API + dispatcher) in a child process over a fresh
store, channels registered over HTTP, and a :class:`~bench.store_target.StoreTarget` whose
channels are of any kind and whose schedules go in through the store's bulk create (bursts,
backlogs) or over HTTP (``http_phases``: created ahead of time as a user would).

Phase ``p`` uses channel ``bench-p``; a webhook channel POSTs to ``<receiver>/p``, and then the
receiver's access log, not the store, says when each schedule arrived.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO, Outcomes, free_port, now_ms, stop_group
from bench.receiver import Receiver
from bench.services import wait_until
from bench.store_target import StoreTarget
from tocsin.clock import iso_ms
from tocsin.domain import NewSchedule

__all__ = ["TocsinUp", "UpTarget"]

HTTP_BATCH = 1_000
"""Schedules per ``POST /v1/schedules`` when created over HTTP."""


class TocsinUp:
    """``python -m tocsin up`` over ``store_url`` (default: SQLite in ``home``), on a free port."""

    def __init__(self, home: Path, *, store_url: str | None, env: dict[str, str],
                 log: Callable[[str], None]) -> None:
        self.home, self.log = home, log
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        self.store_url = store_url or f"sqlite:///{home / 'tocsin.db'}"
        self.env = {**os.environ, "TOCSIN_HOME": str(home), "TOCSIN_STORE": self.store_url,
                    "TOCSIN_API_PORT": str(self.port), "SPARK_LOCAL_IP": "127.0.0.1",
                    "PYSPARK_PYTHON": sys.executable, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 300) -> float:
        """Start and wait for ``/readyz``; the seconds that took."""
        started = time.perf_counter()
        with (self.home / "tocsin-up.log").open("ab") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "tocsin", "up"], cwd=REPO,
                                         env=self.env, stdout=sink, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        wait_until(lambda: httpx.get(self.api + "/readyz", timeout=2).status_code == 200,
                   self.proc, f"tocsin up (log: {self.home / 'tocsin-up.log'})", timeout_s)
        took = time.perf_counter() - started
        self.log(f"[tocsin] up, pid {self.proc.pid}, ready in {took:.1f}s on {self.api}")
        return took

    def auth_headers(self) -> dict[str, str]:
        """``Authorization`` with the local admin key (``TOCSIN_API_KEY``, else the key file
        ``tocsin up`` writes in its home), when there is one: an API that checks keys gets it,
        one that does not ignores it."""
        key = os.environ.get("TOCSIN_API_KEY")
        if not key and (self.home / "admin.key").exists():
            key = (self.home / "admin.key").read_text().strip()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace_s=60)


class UpTarget(StoreTarget):
    """Schedules on ``tocsin up``'s store; channel configs come from ``channel_config``
    (phase -> (kind, config)), registered over HTTP when a phase first submits."""

    def __init__(self, up: TocsinUp, store: Any, out_dir: Path, receiver: Receiver | None,
                 channel_config: Callable[[str], tuple[str, dict[str, Any]]]) -> None:
        super().__init__("tocsin", store, out_dir)
        self.up, self.receiver, self.channel_config = up, receiver, channel_config
        self.http = httpx.Client(base_url=up.api, timeout=120, headers=up.auth_headers())
        self.http_phases: set[str] = set()
        self.webhook_phases: set[str] = set()
        self.by_receiver = False

    def register(self, phase: str) -> str:
        channel = f"bench-{phase}"
        if channel not in self._channels:
            kind, config = self.channel_config(phase)
            r = self.http.post("/v1/channels", json={"name": channel, "kind": kind,
                                                     "config": config})
            if r.is_error:
                raise RuntimeError(f"registering {channel}: HTTP {r.status_code} {r.text}")
            self._channels.add(channel)
            if kind == "webhook":
                self.webhook_phases.add(phase)
        return channel

    def submit(self, phase: str, first: int, dues: Sequence[int]) -> None:
        channel = self.register(phase)
        if phase not in self.http_phases:
            self.store.create([NewSchedule(channel=channel, payload=b'{"n":%d}' % (first + k),
                                           due_ms=due) for k, due in enumerate(dues)],
                              now_ms=now_ms())
            return
        for off in range(0, len(dues), HTTP_BATCH):
            items = [{"channel": channel, "payload": {"n": first + off + k},
                      "due_at": iso_ms(due)} for k, due in enumerate(dues[off:off + HTTP_BATCH])]
            r = self.http.post("/v1/schedules", content=json.dumps({"schedules": items}),
                               headers={"Content-Type": "application/json"})
            if r.is_error:
                raise RuntimeError(f"creating schedules: HTTP {r.status_code} {r.text[:500]}")

    def delivered_total(self) -> int:
        """Schedules received by the receiver while ``by_receiver`` (a webhook phase: the store
        is not read while the phase runs), else acknowledged in the store."""
        if self.by_receiver and self.receiver is not None:
            return self.receiver.delivered_total()
        return super().delivered_total()

    def outcomes(self, phase: str) -> Outcomes:
        if phase in self.webhook_phases and self.receiver is not None:
            return self.receiver.outcomes(phase)
        return super().outcomes(phase)
