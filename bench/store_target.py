"""A benchmark target that schedules through Tocsin's store (``store.create``) and reads the
outcome back from it; whatever dispatches (the Spark query, the plain poller) runs beside it."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.common import Outcomes, attribute, lateness_summary, now_ms
from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores import open_store

__all__ = ["StoreTarget", "attribute_server", "open_bench_store"]


def open_bench_store(kind: str, url: str | None, tmp: Path, *, buckets: int) -> tuple[str, Store]:
    """A fresh, empty store: a new SQLite file (WAL) under ``tmp``, or the PostgreSQL at ``url``."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'tocsin.db'}"
    elif not url:
        raise SystemExit("--store postgres needs --store-url postgresql://... (an empty database)")
    else:  # a schema of its own in that database: each part (Tocsin, a peer) starts empty
        from tocsin.testing.postgres import create_schema

        url = create_schema(url)
        attribute_server(url)
    store = open_store(url, buckets=buckets)
    if sum(store.counts().values()):
        raise SystemExit(f"the store at {url} is not empty: the benchmark needs a fresh one")
    return url, store


def attribute_server(url: str) -> None:
    """Count the PostgreSQL server at ``url`` (on this machine) as this part's ``database``:
    with SQLite the store's work runs inside the dispatcher's processes, and the two stores'
    CPU figures should compare."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    backend = int(row[0]) if row else 0
    try:
        postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return  # the server is on another machine: its CPU is not ours to count
    attribute(postmaster, "database")


class StoreTarget:
    """Messages are schedules on channel ``bench-<phase>``, a file channel per phase (registered
    when the phase first submits)."""

    lead_factor = 0.8

    def __init__(self, name: str, store: Store, out_dir: Path) -> None:
        self.name = name
        self.store = store
        self.out_dir = out_dir
        self._channels: set[str] = set()

    def submit(self, phase: str, first: int, dues: Sequence[int]) -> None:
        channel = f"bench-{phase}"
        if channel not in self._channels:
            path = self.out_dir / f"{phase}.jsonl"
            self.store.put_channel(ChannelSpec(name=channel, kind=ChannelKind.FILE,
                                               config={"path": str(path)}))
            self._channels.add(channel)
        items = [NewSchedule(channel=channel, payload=b'{"n":%d}' % (first + k), due_ms=due)
                 for k, due in enumerate(dues)]
        self.store.create(items, now_ms=now_ms())

    def delivered_total(self) -> int:
        return self.store.counts()[Status.DELIVERED]

    def outcomes(self, phase: str) -> Outcomes:
        channel = f"bench-{phase}"
        due, done, cursor = [], [], None
        while batch := self.store.list_schedules(status=Status.DELIVERED, channel=channel,
                                       after_id=cursor, limit=20_000):
            for s in batch:
                due.append(s.due_ms)
                done.append(s.delivered_ms or 0)
            cursor = batch[-1].id
        missing = {}
        for status in (Status.PENDING, Status.CLAIMED, Status.DEAD):
            cursor, count = None, 0
            while batch := self.store.list_schedules(status=status, channel=channel,
                                                     after_id=cursor, limit=20_000):
                count += len(batch)
                cursor = batch[-1].id
            if count:
                missing[status.value] = count
        out = Outcomes(due_ms=due, done_ms=done, not_delivered=missing)
        path = self.out_dir / f"{phase}.jsonl"
        out.extra["file_lines"] = path.read_bytes().count(b"\n") if path.exists() else 0
        out.extra.update(self._channel_lateness(channel))
        db = getattr(self.store, "path", None)
        if isinstance(db, str) and Path(db).exists():
            out.extra["sqlite_mb"] = {"db": round(Path(db).stat().st_size / 2**20, 1),
                                      "wal": round(Path(db + "-wal").stat().st_size / 2**20, 1)
                                      if Path(db + "-wal").exists() else 0.0}
        return out

    def _channel_lateness(self, channel: str) -> dict[str, object]:
        """From the attempt log (SQLite only): lateness when the channel write ended, before the
        acknowledgement, and how many schedules were attempted more than once."""
        path = getattr(self.store, "path", None)
        if not isinstance(path, str) or path == ":memory:":
            return {}
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                "SELECT d.lateness_ms FROM deliveries d JOIN schedules s ON s.id = d.schedule_id "
                "WHERE s.channel = ? AND d.outcome = 'delivered'", (channel,)).fetchall()
            repeats = conn.execute(
                "SELECT count(*) - count(DISTINCT d.schedule_id) FROM deliveries d "
                "JOIN schedules s ON s.id = d.schedule_id WHERE s.channel = ?",
                (channel,)).fetchone()[0]
        return {"lateness_at_channel_write_ms": lateness_summary([r[0] for r in rows]),
                "repeated_attempts": repeats}


def scratch_dir(prefix: str) -> Path:
    """A new temporary directory for one run's store, files and checkpoint."""
    return Path(tempfile.mkdtemp(prefix=prefix))
