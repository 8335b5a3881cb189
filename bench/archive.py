"""Archive (``tocsin archive``): finished schedules and their attempts, moved from the store to
Parquet and deleted, on SQLite and on PostgreSQL.

Each store gets a fresh database holding ``--rows`` finished schedules spread over the ten days
before yesterday, each created a day before it fell due, 20 000 at a time (8 in 10 delivered
with one attempt each, 1 cancelled, 1 dead; a tenant ``t2`` for a fifth of them) and a
retention of half a day, so every row goes. The job runs on a Spark
session (``--master``, default ``local[2]``) warmed up by a small archive run first, so the figure
is the job's, not Spark's start. ``<store>_rows_per_s`` counts store rows moved (schedules and
attempts) per second of the job; ``<store>_schedules_per_s`` the schedules alone (target:
100 000 rows a second on 2 cores).

Side by side, the **peer**: what a hand-written script does on the same rows, one process, no
Spark, no checks — one ``SELECT`` of the finished rows into a single Parquet file with pyarrow,
then one ``DELETE`` of them (and of their attempts) per table. The ratio is Tocsin's time to the
peer's for the same rows.

    bench/run archive [--rows 1000000] [--stores sqlite,postgres] [--no-peer]

Writes bench/results/archive.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import now_ms, write_results
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
from tocsin.pipelines.archive import SCHEDULE_SCHEMA, run_archive
from tocsin.stores import open_store
from tocsin.stores.rows import DELIVERY_COLUMNS
from tocsin.stores.sql.archive import ARCHIVE_COLUMNS
from tocsin.stores.sql.base import SqlBase
from tocsin.testing.postgres import create_schema, throwaway_server

RESULTS = Path(__file__).parent / "results"
TARGET = 100_000
DAY = 86_400_000
CHUNK = 20_000
FINISHED = "status IN ('DELIVERED', 'CANCELLED', 'DEAD')"


def _fresh(kind: str, server_url: str | None, home: Path, name: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{home / f'{name}.db'}"
    return create_schema(server_url or "")


def fill(url: str, rows: int, now: int) -> None:
    """``rows`` finished schedules over the ten days before yesterday, with their attempts."""
    store = open_store(url)
    assert isinstance(store, SqlBase)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant="t2"))
    first, step = now - 11 * DAY, max(1, 10 * DAY // rows)
    for start in range(0, rows, CHUNK):
        # Each chunk is created a day before its first row falls due, as a steady intake
        # would: ids follow creation time (one instant for every row would scatter them).
        store.create([NewSchedule(channel="out", payload=b'{"order": 1, "amount": 1250}',
                                  due_ms=first + i * step,
                                  tenant="t2" if i % 5 == 0 else "default")
                      for i in range(start, min(rows, start + CHUNK))],
                     now_ms=first + start * step - DAY)
    q = store._dialect.q

    def finish(conn: Any) -> None:
        nth = "(due_ms - ?) / ?"   # the row's number: its tenth decides its status
        tenth = f"{nth} - 10 * ({nth} / 10)"
        conn.execute(q(f"UPDATE schedules SET status = CASE WHEN {tenth} = 3 THEN 'CANCELLED' "
                       f"WHEN {tenth} = 6 THEN 'DEAD' ELSE 'DELIVERED' END, "
                       "next_ms = due_ms + 500"), (first, step) * 4)
        conn.execute("UPDATE schedules SET attempts = 1, delivered_ms = due_ms + 500 "
                     "WHERE status = 'DELIVERED'")
        conn.execute("INSERT INTO deliveries SELECT id || '-1', id, 1, 1, due_ms + 490, "
                     "due_ms + 500, 'delivered', NULL, 500 FROM schedules "
                     "WHERE status = 'DELIVERED'")

    store._work(finish)
    store.close()


def stored(url: str) -> tuple[int, int]:
    """Schedules and attempts left in the store."""
    store = open_store(url)
    assert isinstance(store, SqlBase)
    counts = (int(store._rows("SELECT count(*) FROM schedules", ())[0][0]),
              int(store._rows("SELECT count(*) FROM deliveries", ())[0][0]))
    store.close()
    return counts


def tocsin(spark: Any, url: str, home: Path, now: int) -> dict[str, Any]:
    """The archive job over the filled store; its summary and rates."""
    home.mkdir(parents=True, exist_ok=True)
    settings = Settings(store=url, home=home, archive_retention_seconds=43_200,
                        archive_dir=str(home / "archive"))
    before = stored(url)
    summary = run_archive(spark, settings=settings)
    moved = summary["schedules"] + summary["deliveries"]
    summary.update(
        rows_before=sum(before), rows_after=sum(stored(url)), rows_moved=moved,
        rows_per_s=round(moved / summary["seconds"], 1),
        schedules_per_s=round(summary["schedules"] / summary["seconds"], 1))
    return summary


def peer(url: str, home: Path, now: int) -> dict[str, Any]:
    """The hand-written script: one SELECT into one Parquet file, one DELETE per table."""
    store = open_store(url)
    assert isinstance(store, SqlBase)
    cutoff = now - DAY // 2
    started = time.monotonic()
    columns = [c.split()[0] for c in SCHEDULE_SCHEMA.split(", ")][:-2]  # no day, archived_ms
    attempt_columns = [c.strip() for c in DELIVERY_COLUMNS.split(",")]

    def move(conn: Any) -> tuple[int, int]:
        q = store._dialect.q
        rows = conn.execute(q(f"SELECT {ARCHIVE_COLUMNS} FROM schedules WHERE {FINISHED} "
                              "AND coalesce(delivered_ms, next_ms) < ?"), (cutoff,)).fetchall()
        pq.write_table(_table(columns, rows), home / "peer-schedules.parquet")
        attempts = conn.execute(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE schedule_id IN (SELECT id FROM "
            f"schedules WHERE {FINISHED} AND coalesce(delivered_ms, next_ms) < {cutoff})"
        ).fetchall()
        pq.write_table(_table(attempt_columns, attempts), home / "peer-deliveries.parquet")
        conn.execute("DELETE FROM deliveries WHERE schedule_id IN (SELECT id FROM schedules "
                     f"WHERE {FINISHED} AND coalesce(delivered_ms, next_ms) < {cutoff})")
        conn.execute(q(f"DELETE FROM schedules WHERE {FINISHED} AND "
                       "coalesce(delivered_ms, next_ms) < ?"), (cutoff,))
        return len(rows), len(attempts)

    schedules, attempts = store._work(move)
    seconds = time.monotonic() - started
    store.close()
    return {"schedules": schedules, "deliveries": attempts, "seconds": round(seconds, 3),
            "rows_per_s": round((schedules + attempts) / seconds, 1)}


def _table(columns: list[str], rows: list[Any]) -> pa.Table:
    values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    return pa.table({c: pa.array(col) for c, col in zip(columns, values, strict=True)})


def run_store(spark: Any, kind: str, server_url: str | None, home: Path, rows: int,
              with_peer: bool) -> dict[str, Any]:
    now = now_ms()
    warm_url = _fresh(kind, server_url, home, f"{kind}-warm")
    fill(warm_url, 2_000, now)
    tocsin(spark, warm_url, home / f"{kind}-warm", now)
    url = _fresh(kind, server_url, home, kind)
    fill(url, rows, now)
    result: dict[str, Any] = {"tocsin": tocsin(spark, url, home / kind, now)}
    print(f"{kind}: tocsin {result['tocsin']}", file=sys.stderr)
    shutil.rmtree(home / kind / "archive", ignore_errors=True)
    if with_peer:
        url = _fresh(kind, server_url, home, f"{kind}-peer")
        fill(url, rows, now)
        result["peer"] = peer(url, home, now)
        result["ratio_vs_peer"] = round(result["peer"]["seconds"] / result["tocsin"]["seconds"],
                                        2)
        print(f"{kind}: peer {result['peer']}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--postgres-url", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"))
    parser.add_argument("--out", type=Path, default=RESULTS / "archive.json")
    args = parser.parse_args()
    from tocsin.spark.session import spark_session

    home = Path(tempfile.mkdtemp(prefix="tocsin-bench-archive-"))
    spark = spark_session(args.master, app_name="tocsin-bench-archive")
    out: dict[str, Any] = {"benchmark": "archive", "rows": args.rows, "master": args.master,
                           "target_rows_per_s": TARGET,
                           "date": datetime.now(UTC).isoformat(timespec="seconds")}
    for kind in args.stores.split(","):
        if kind == "postgres" and not args.postgres_url:
            with throwaway_server() as server:
                result = run_store(spark, kind, server.url, home, args.rows, not args.no_peer)
        else:
            result = run_store(spark, kind, args.postgres_url, home, args.rows,
                               not args.no_peer)
        out[f"{kind}_rows_per_s"] = result["tocsin"]["rows_per_s"]
        out[f"{kind}_schedules_per_s"] = result["tocsin"]["schedules_per_s"]
        out[kind] = result
    spark.stop()
    shutil.rmtree(home, ignore_errors=True)
    write_results(out, args.out)


if __name__ == "__main__":
    main()
