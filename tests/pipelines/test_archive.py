"""``tocsin archive``: finished schedules and their attempts move to Parquet, partitioned by
day and tenant, then leave the store; on both stores, on the session Spark."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tocsin.clock import ManualClock, SystemClock
from tocsin.config import Settings
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.errors import NotFoundError, ValidationError
from tocsin.pipelines.archive import (
    SCHEDULES,
    ArchiveCheckError,
    Retention,
    _Files,
    _publish,
    _published_run,
    _staging,
    filesystem_of,
    run_archive,
)
from tocsin.stores import open_store
from tocsin.testing.dispatch import wait_until
from tocsin.testing.recording import Recordings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DAY = 86_400_000
LIVE = "live"
"""The slow test's tenant of schedules delivered during the job, in real time: kept."""
NOW = 1_800_000_000_000 // DAY * DAY + DAY // 2   # midday, UTC


def _finished_history(store: Any, n: int, now: int = NOW) -> dict[str, int]:
    """``n`` finished schedules spread over the 10 days before ``now`` (delivered, cancelled,
    dead; a tenant ``t2``; keyed ones), each delivered one with an attempt;
    ``{id: finished_ms}``."""
    items = [NewSchedule(channel="out", payload=b"{}", due_ms=now - 10 * DAY + i * (10 * DAY // n),
                         tenant="t2" if i % 5 == 0 else "default",
                         key=f"k/{i}" if i % 7 == 0 else None) for i in range(n)]
    made = [s for s, _ in store.create(items, now_ms=now - 11 * DAY)]
    finished: dict[str, int] = {}
    delivered, others, attempts = [], [], []
    for i, s in enumerate(made):
        end = s.due_ms + 500
        if i % 10 == 3:
            others.append(("CANCELLED", end, s.id))
        elif i % 10 == 6:
            others.append(("DEAD", end, s.id))
        else:
            delivered.append((end, s.id))
            attempts.append((f"{s.id}-1", s.id, 1, 1, end - 10, end, "delivered", None, 500))
        finished[s.id] = end
    q = store._dialect.q

    def work(conn: Any) -> None:
        from tocsin.stores.sql.base import executemany

        executemany(conn, q("UPDATE schedules SET status = 'DELIVERED', attempts = 1, "
                            "delivered_ms = ? WHERE id = ?"), delivered)
        executemany(conn, q("UPDATE schedules SET status = ?, next_ms = ? WHERE id = ?"), others)
        executemany(conn, q("INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                    attempts)

    store._work(work)
    return finished


def _check_archive(spark: SparkSession, backend_url: str, tmp_path: Path, n: int) -> None:
    settings = Settings(store=backend_url, home=tmp_path, buckets=16,
                        archive_tenant_retention=["t2=86400", f"{LIVE}=1e9"])
    store = open_store(backend_url, buckets=16)
    finished = _finished_history(store, n)
    pending = store.create([NewSchedule(channel="out", payload=b"{}", due_ms=NOW - 20 * DAY)],
                           now_ms=NOW - 21 * DAY)[0][0].id
    retention = Retention.from_settings(settings)
    rows = {s: store.get(s) for s in finished}
    gone = {s for s, end in finished.items()
            if end < retention.cutoff(rows[s].tenant, keyed=rows[s].key is not None,
                                      now_ms=NOW)}
    # Every kind of row both goes and stays: the per-tenant override and the task-key bound.
    assert any(rows[s].tenant == "t2" and NOW - finished[s] < 3 * DAY for s in gone)
    assert any(rows[s].key and rows[s].tenant == "t2" and s not in gone for s in finished)
    summary = run_archive(spark, settings=settings, clock=ManualClock(NOW), partitions=3)
    want_attempts = sum(1 for s in gone if rows[s].status is Status.DELIVERED)
    assert (summary["schedules"], summary["deleted_schedules"]) == (len(gone), len(gone))
    assert (summary["deliveries"], summary["deleted_deliveries"]) == (want_attempts,
                                                                        want_attempts)
    archived = ds.dataset(f"{tmp_path}/archive/schedules", format="parquet",
                          partitioning="hive").to_table().to_pylist()
    assert sorted(r["id"] for r in archived) == sorted(gone)
    for r in archived[:50]:
        assert (r["tenant"], r["status"], r["finished_ms"]) == (
            rows[r["id"]].tenant, rows[r["id"]].status.value, finished[r["id"]])
        assert str(r["day"]) == summary_day(finished[r["id"]])
    attempts = ds.dataset(f"{tmp_path}/archive/deliveries", format="parquet",
                          partitioning="hive").to_table(columns=["schedule_id"]).to_pylist()
    assert len(attempts) == want_attempts and {a["schedule_id"] for a in attempts} <= gone
    assert not list((tmp_path / "archive").glob("_staging*"))   # every task's files moved
    kept = set(finished) - gone
    for s in list(kept)[:100]:
        assert store.get(s).status is rows[s].status
    assert all(store.deliveries(s) for s in kept if rows[s].status is Status.DELIVERED)
    assert store.get(pending).status is Status.PENDING
    again = run_archive(spark, settings=settings, clock=ManualClock(NOW + 1), partitions=3)
    assert again["schedules"] == 0 and again["deleted_schedules"] == 0
    store.close()


def summary_day(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def test_archive(spark: SparkSession, backend_url: str, tmp_path: Path) -> None:
    _check_archive(spark, backend_url, tmp_path, 2_000)


def test_a_page_of_finished_schedules_costs_the_same_wherever_it_starts(tmp_path: Path) -> None:
    """The job reads finished schedules a page at a time; SQLite seeks each page's start in
    the index rather than reading the index up to it (which made a run over a large store
    quadratic). Counted in SQLite's own steps, the last page costs what the first does."""
    from tocsin.stores.sql.archive import finished_between

    store = open_store(f"sqlite:///{tmp_path / 'pages.db'}")
    finished = _finished_history(store, 6_000)
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(count, 100)
    costs, after, seen = [], None, []
    while True:
        steps[0] = 0
        page = finished_between(store, lo_ms=0, hi_ms=NOW + DAY, after=after, limit=200)
        costs.append(steps[0])
        seen += [r[0] for r in page]
        if len(page) < 200:
            break
        after = (int(page[-1][-1]), str(page[-1][0]))
    assert sorted(seen) == sorted(finished) and len(set(seen)) == len(seen)
    assert max(costs) <= 2 * costs[0], costs
    store.close()


@pytest.mark.parametrize("damage", ["lost", "short"])
def test_a_round_whose_files_do_not_check_out_is_not_deleted(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        damage: str) -> None:
    """The job runs in rounds, each written, read back and then deleted. A file of the third
    round lost, or holding a row fewer than written: the job stops; the first two rounds'
    schedules are archived and gone from the store, and every other one is there as it was."""
    from tocsin.pipelines import archive

    url = f"sqlite:///{tmp_path / 'rounds.db'}"
    store = open_store(url, buckets=16)
    finished = _finished_history(store, 2_000)
    before = {s: store.get(s).status for s in finished}
    rounds: list[list[str]] = []
    publish = archive._publish

    def losing(fs: Any, base: str, run: int, written: list[Any]) -> Any:
        moved = publish(fs, base, run, written)
        rounds.append(moved["schedules"].files)
        if len(rounds) == 3:
            path = f"{base}/{moved['schedules'].files[0]}"
            if damage == "lost":
                fs.delete_file(path)
            else:
                rows = pq.read_table(path)
                pq.write_table(rows.slice(1), path)
        return moved

    monkeypatch.setattr(archive, "_publish", losing)
    settings = Settings(store=url, home=tmp_path, buckets=16, archive_retention_seconds=86_400)
    with pytest.raises(ArchiveCheckError, match=r"schedules.*not deleted"):
        run_archive(spark, settings=settings, clock=ManualClock(NOW), partitions=2)
    assert len(rounds) == 3 and rounds[0] and rounds[1]
    done = set(ds.dataset([f"{tmp_path}/archive/{f}" for f in rounds[0] + rounds[1]],
                          format="parquet").to_table(columns=["id"]).column("id").to_pylist())
    for s, status in before.items():
        if s in done:
            with pytest.raises(NotFoundError):
                store.get(s)
        else:
            assert store.get(s).status is status
    assert len(done) > 100
    store.close()


def test_the_dispatchers_timer_archives(spark: SparkSession, tmp_path: Path) -> None:
    """The dispatcher process runs the job every ``archive_every_seconds`` on its session
    (one task a round); what finished before the retention leaves the store for the archive,
    the rest stays."""
    from tocsin.pipelines.archive import start_archive_timer

    url = f"sqlite:///{tmp_path / 'timer.db'}"
    store = open_store(url, buckets=16)
    now = SystemClock().now_ms()
    finished = _finished_history(store, 400, now=now)
    settings = Settings(store=url, home=tmp_path, buckets=16, archive_every_seconds=0.2,
                        archive_retention_seconds=5 * 86_400)
    retention = Retention.from_settings(settings)
    rows = {s: store.get(s) for s in finished}
    # a minute of slack either side: the run's own now falls after this one
    gone = {s for s, end in finished.items()
            if end < retention.cutoff(rows[s].tenant, keyed=rows[s].key is not None,
                                      now_ms=now) - 60_000}
    kept = {s for s, end in finished.items()
            if end >= retention.cutoff(rows[s].tenant, keyed=rows[s].key is not None,
                                       now_ms=now + 60_000)}
    assert gone and kept
    stop = threading.Event()
    thread = start_archive_timer(spark, settings, stop)
    assert thread is not None

    def archived() -> set[str]:
        if not (tmp_path / "archive" / "schedules").exists():
            return set()
        return set(ds.dataset(f"{tmp_path}/archive/schedules", format="parquet",
                              partitioning="hive").to_table(columns=["id"])
                   .column("id").to_pylist())

    try:
        wait_until(lambda: gone <= archived(), timeout_s=120, what="the timer's first run")
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert not archived() & kept
    for s in gone:
        with pytest.raises(NotFoundError):
            store.get(s)
    assert all(store.get(s).status is rows[s].status for s in kept)
    assert start_archive_timer(spark, Settings(store=url, home=tmp_path,
                                               archive_every_seconds=0), stop) is None
    store.close()


def test_bad_tenant_retention_names_the_setting(tmp_path: Path) -> None:
    for entry in ("acme", "acme=soon", "=5", "acme=-1"):
        with pytest.raises(ValidationError) as caught:
            Retention.from_settings(Settings(home=tmp_path, archive_tenant_retention=[entry]))
        assert caught.value.field == "archive_tenant_retention"
    with pytest.raises(ValidationError) as caught:
        run_archive(None, settings=Settings(home=tmp_path), partitions=0)  # type: ignore[arg-type]
    assert caught.value.field == "partitions"
    assert not (tmp_path / "tocsin.db").exists()


@pytest.mark.slow
def test_archive_100k_while_dispatch_delivers(spark: SparkSession, backend_url: str,
                                              tmp_path: Path) -> None:
    """100 000 finished rows over 10 days; schedules falling due meanwhile are delivered
    while the job reads, writes and deletes."""
    store = open_store(backend_url, buckets=16)
    store.put_channel(ChannelSpec(name="live", kind=ChannelKind.RECORDING, tenant=LIVE))
    recordings = Recordings()
    local = LocalDispatcher(store, clock=SystemClock(), recordings=recordings)
    stop = threading.Event()
    worker = threading.Thread(target=local.run, args=(stop,), kwargs={"interval_s": 0.05})
    worker.start()
    now = SystemClock().now_ms()
    live = {s.id for s, _ in store.create(
        [NewSchedule(channel="live", payload=b"{}", due_ms=now + i * 20, tenant=LIVE)
         for i in range(1000)],
        now_ms=now)}
    try:
        _check_archive(spark, backend_url, tmp_path, 100_000)
        wait_until(lambda: all(store.get(s).status is Status.DELIVERED for s in live),
                   timeout_s=120, what="the live schedules delivered")
    finally:
        stop.set()
        worker.join()
        local.close()
        store.close()


def _schedules(ids: list[str], day: str, tenant: str) -> pa.RecordBatch:
    """A batch of archived schedules (only the id and the partition columns filled)."""
    n = len(ids)
    columns = {f.name: pa.nulls(n, f.type) for f in SCHEDULES}
    columns.update(id=pa.array(ids), day=pa.array([day] * n), tenant=pa.array([tenant] * n))
    return pa.RecordBatch.from_pydict(columns, schema=SCHEDULES)


def test_only_the_files_of_attempts_that_succeeded_are_published(tmp_path: Path) -> None:
    """Two attempts of one task write into their own staging folders; the driver publishes
    the files of the attempt whose manifest it got, split by day and tenant into the run's
    folders, and counts their rows; a run folder that exists already is never written over."""
    fs, base = filesystem_of(str(tmp_path))
    stage = _staging(base, 7)
    lost = _Files(fs, f"{stage}/attempt=1")
    lost.add("schedules", _schedules(["a", "b"], "2026-11-16", "acme"))
    lost.close()
    kept = _Files(fs, f"{stage}/attempt=2")
    kept.add("schedules", _schedules(["a", "b"], "2026-11-16", "acme"))
    kept.add("schedules", _schedules(["c"], "2026-11-17", "default"))
    written = [SimpleNamespace(path=p, rows=r) for p, r in kept.close()]
    _published_run(fs, base, 7)
    moved = _publish(fs, base, 7, written)
    assert (moved["schedules"].rows, moved["deliveries"].rows) == (3, 0)
    assert sorted(moved["schedules"].files) == sorted(
        str(f.relative_to(tmp_path)) for f in (tmp_path / "schedules").rglob("*.parquet"))
    found = ds.dataset(f"{tmp_path}/schedules/run=7", format="parquet",
                       partitioning="hive").to_table().to_pylist()
    assert sorted((r["id"], str(r["day"]), r["tenant"]) for r in found) == [
        ("a", "2026-11-16", "acme"), ("b", "2026-11-16", "acme"), ("c", "2026-11-17", "default")]
    assert all(f.name.startswith("2-") for f in (tmp_path / "schedules").rglob("*.parquet"))
    with pytest.raises(ArchiveCheckError, match="exists already"):
        _published_run(fs, base, 7)
