"""Peer "apscheduler": APScheduler 3 as its users run it — a ``BackgroundScheduler`` in the
application's process, its jobs in the SQLAlchemy job store on a SQLite file (they survive a
restart), a thread pool of ``--apscheduler-threads`` running them. Each message is a one-shot
``date`` job that POSTs Tocsin's webhook body and headers to the receiver (one kept-alive
``httpx.Client`` shared by the pool).

The SQLite file runs in WAL mode with ``synchronous=NORMAL``, as Tocsin's own store does (with
SQLite's defaults jobs are added ten times slower). ``misfire_grace_time=None``: a late job
still runs (APScheduler's default of 1 s would drop it, and a dropped message is not a late
one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import Outcomes
from bench.receiver import Receiver, peer_request

__all__ = ["ApschedulerTarget", "post"]

_http: httpx.Client | None = None


def post(phase: str, n: int, due_ms: int) -> None:
    """The job: one POST (a module-level function, so the SQLAlchemy store can pickle it)."""
    assert _http is not None, "the scheduler's process sets the client up first"
    path, body, headers = peer_request(phase, n, due_ms)
    _http.post(path, content=body, headers=headers).raise_for_status()


def _wal(conn: Any, _record: Any) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")


class ApschedulerTarget:
    """The scheduler, started here (in the bench's process, as an application would)."""

    name = "apscheduler"
    lead_factor = 0.8

    def __init__(self, tmp: Path, receiver: Receiver, *, threads: int,
                 log: Callable[[str], None]) -> None:
        global _http
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        from apscheduler.schedulers.background import BackgroundScheduler
        from sqlalchemy import create_engine, event

        self.receiver = receiver
        _http = httpx.Client(base_url=receiver.url, timeout=10,
                             limits=httpx.Limits(max_connections=threads,
                                                 max_keepalive_connections=threads))
        self.db = tmp / "apscheduler.sqlite"
        engine = create_engine(f"sqlite:///{self.db}")
        event.listen(engine, "connect", _wal)
        self.scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(engine=engine)},
            executors={"default": ThreadPoolExecutor(max_workers=threads)},
            job_defaults={"misfire_grace_time": None, "coalesce": False}, timezone=UTC)
        self.scheduler.start()
        self.options = {"threads": threads, "jobstore": "sqlalchemy on sqlite (WAL, NORMAL)",
                        "misfire_grace_time": None}
        log(f"[apscheduler] scheduler started, jobs in {self.db}")

    def submit(self, phase: str, first: int, dues: Sequence[int]) -> None:
        for k, due in enumerate(dues):
            self.scheduler.add_job(post, "date", args=(phase, first + k, due),
                                   id=f"{phase}-{first + k}",
                                   run_date=datetime.fromtimestamp(due / 1000, UTC))

    def delivered_total(self) -> int:
        return self.receiver.delivered_total()

    def outcomes(self, phase: str) -> Outcomes:
        return self.receiver.outcomes(phase)

    def reset(self) -> None:
        """Drop every job not yet run (after a phase that did not finish), then let the ones
        already handed to the thread pool finish: until nothing arrived for 3 s."""
        import time

        self.scheduler.remove_all_jobs()
        seen, quiet_since = self.receiver.delivered_total(), time.monotonic()
        while time.monotonic() - quiet_since < 3:
            time.sleep(0.5)
            if (now := self.receiver.delivered_total()) != seen:
                seen, quiet_since = now, time.monotonic()

    def stop(self) -> None:
        self.scheduler.shutdown(wait=False)
        if _http is not None:
            _http.close()

    @staticmethod
    def version() -> Any:
        from importlib.metadata import version

        return version("apscheduler")
