"""Helpers to run the Spark dispatcher and expansion queries for a while, and to wait for what
they do (files written by a file channel, any condition polled)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tocsin.dispatcher.options import DispatchOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "api_ready",
    "assert_each_delivered_under_one_id",
    "dispatcher_env",
    "file_store",
    "read_lines",
    "running_dispatcher",
    "running_expander",
    "running_relay",
    "schedule_burst",
    "serving_runs",
    "wait_for_polls",
    "wait_serving",
    "wait_until",
]


def api_ready(api: str) -> bool:
    """Whether the API at ``api`` (``http://host:port``) answers ``/readyz`` with 200 (False
    while it does not answer at all)."""
    import httpx

    try:
        return httpx.get(f"{api}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(predicate: Callable[[], Any], *, timeout_s: float, interval_s: float = 0.2,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def wait_for_polls(store: Any, *, polls: int = 2, timeout_s: float = 60) -> None:
    """Block until the dispatcher's source has asked ``store`` for due work ``polls`` more times
    (its ``dispatcher-source`` beat moved on): evidence that triggers went by, for a check that
    nothing happened in them. Run the dispatcher with a short ``idle_beat_ms`` so every trigger
    beats."""
    from tocsin.dispatcher.beat import SOURCE

    def beat() -> int | None:
        last = store.last_beat(SOURCE)
        return None if last is None else int(last[0])

    seen = [beat()]

    def moved() -> bool:
        now = beat()
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > polls

    wait_until(moved, timeout_s=timeout_s, interval_s=0.02, what=f"{polls} polls of the store")


@contextmanager
def _running(start: Callable[..., StreamingQuery], prefix: str, store_url: str,
             checkpoint: Path, trigger_seconds: float,
             options: dict[str, Any]) -> Iterator[StreamingQuery]:
    query = start(DispatchOptions(store_url=store_url, **options), checkpoint=checkpoint,
                  trigger_seconds=trigger_seconds, name=f"{prefix}-{checkpoint.name}")
    try:
        yield query
    finally:
        query.stop()


def running_dispatcher(spark: SparkSession, store_url: str, checkpoint: Path, *,
                       trigger_seconds: float = 0.5,
                       **options: Any) -> AbstractContextManager[StreamingQuery]:
    """The dispatcher query on ``spark`` for the duration of the block."""
    from tocsin.dispatcher.query import start_dispatcher

    return _running(partial(start_dispatcher, spark), "dispatcher", store_url, checkpoint,
                    trigger_seconds, options)


def running_relay(spark: SparkSession, store_url: str, checkpoint: Path, *,
                  trigger_seconds: float = 0.5,
                  **options: Any) -> AbstractContextManager[StreamingQuery]:
    """The relay query (:mod:`tocsin.dispatcher.handover`) on ``spark`` for the block."""
    from tocsin.dispatcher.query import start_relay

    return _running(partial(start_relay, spark), "relay", store_url, checkpoint,
                    trigger_seconds, options)


def running_expander(spark: SparkSession, store_url: str, checkpoint: Path, *,
                     trigger_seconds: float = 0.5,
                     **options: Any) -> AbstractContextManager[StreamingQuery]:
    """The recurring expansion query on ``spark`` for the duration of the block."""
    from tocsin.dispatcher.query import start_expander

    return _running(partial(start_expander, spark), "expander", store_url, checkpoint,
                    trigger_seconds, options)


def serving_runs(store: Any) -> dict[str, list[tuple[int, int]]]:
    """The dispatcher runs that own buckets now, with their ranges (several dispatchers on one
    store: :mod:`tocsin.stores.sql.owners`)."""
    owned: dict[str, list[tuple[int, int]]] = {}
    for owner in store.owners():
        owned.setdefault(owner.run, []).append((owner.lo, owner.hi))
    return owned


def wait_serving(store: Any, n: int, *, timeout_s: float,
                 other_than: frozenset[str] = frozenset()) -> dict[str, list[tuple[int, int]]]:
    """Wait until exactly ``n`` dispatcher runs (none of ``other_than``), each past its first
    batch, share the buckets; they and their ranges."""
    found: dict[str, list[tuple[int, int]]] = {}

    def serving() -> bool:
        nonlocal found
        found = serving_runs(store)
        ready = {r.run for r in store.runs() if r.ready_ms is not None}
        return len(found) == n and not set(found) & other_than and set(found) <= ready

    wait_until(serving, timeout_s=timeout_s, interval_s=0.5,
               what=f"{n} dispatchers sharing the buckets")
    return found


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every JSON line a file channel wrote (none when the file does not exist yet)."""
    if not path.exists():
        return []
    complete = path.read_text().split("\n")[:-1]  # a line still being written has no newline
    return [json.loads(line) for line in complete if line.strip()]


def file_store(tmp_path: Path, *, buckets: int) -> tuple[Any, Path]:
    """A SQLite store in ``tmp_path`` with a file channel ``out``; returns (store, out path)."""
    from tocsin.domain import ChannelKind, ChannelSpec
    from tocsin.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "tocsin.db", buckets=buckets)
    out = tmp_path / "out.jsonl"
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    return store, out


def dispatcher_env(tmp_path: Path, *, buckets: int, master: str, lease_s: int,
                   **extra: str) -> dict[str, str]:
    """Settings for a ``tocsin dispatcher`` process over :func:`file_store`'s store."""
    return {"TOCSIN_STORE": f"sqlite:///{tmp_path / 'tocsin.db'}",
            "TOCSIN_CHECKPOINT": str(tmp_path / "ck"), "TOCSIN_BUCKETS": str(buckets),
            "TOCSIN_SPARK_MASTER": master, "TOCSIN_TRIGGER_SECONDS": "0.5",
            "TOCSIN_LEASE_SECONDS": str(lease_s), "TOCSIN_BATCH_CAP": "2000", **extra}


def schedule_burst(store: Any, n: int, *, start_in_ms: int, over_ms: int) -> set[str]:
    """``n`` schedules to ``out`` due evenly over ``over_ms`` from ``start_in_ms`` from now."""
    from tocsin.clock import SystemClock
    from tocsin.domain import NewSchedule

    now = SystemClock().now_ms()
    items = [NewSchedule(channel="out", payload=b'{"n": %d}' % i,
                         due_ms=now + start_in_ms + over_ms * i // n) for i in range(n)]
    return {s.id for s, _ in store.create(items, now_ms=now)}


def assert_each_delivered_under_one_id(out: Path, ids: set[str]) -> int:
    """Every id was delivered, and its repeats (if any) kept the delivery id. Returns the
    number of repeats."""
    lines = read_lines(out)
    by_schedule: dict[str, set[str]] = {}
    for line in lines:
        by_schedule.setdefault(line["schedule_id"], set()).add(line["delivery_id"])
    assert set(by_schedule) == ids
    assert all(len(d) == 1 for d in by_schedule.values()), "a repeat changed delivery id"
    return len(lines) - len(ids)
