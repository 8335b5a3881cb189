"""Bulk import (``tocsin import``) from Parquet into SQLite and into PostgreSQL.

``--rows`` schedules (a JSON payload, a delay, a key each) are written as ``--files`` Parquet
files; each store gets a fresh database and the import job runs on a Spark session
(``--master``, default ``local[2]``) warmed up by a small import first, so the figure is the
job's rows a second, not Spark's start. Figures: ``postgres_rows_per_s`` and
``sqlite_rows_per_s`` (targets: 50 000 and 40 000 on 2 cores). PostgreSQL is a throw-away
cluster started for the run (``.ci/postgres.sh``), unless ``--postgres-url`` names one.

    bench/run import [--rows 1000000] [--stores sqlite,postgres] [--files 8]

Writes bench/results/import.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import write_results
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.pipelines.bulk_import import run_import
from tocsin.stores import open_store
from tocsin.testing.postgres import create_schema, throwaway_server

RESULTS = Path(__file__).parent / "results"
TARGETS = {"postgres": 50_000, "sqlite": 40_000}


def write_parquet(folder: Path, rows: int, files: int, *, prefix: str = "k") -> Path:
    """``rows`` schedules in ``files`` Parquet files under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-rows // files)
    for f in range(files):
        ns = range(f * per, min(rows, (f + 1) * per))
        pq.write_table(pa.table({
            "channel": ["out"] * len(ns),
            "payload": [f'{{"order": {n}, "amount": 1250}}' for n in ns],
            "delay": [3600.0] * len(ns),
            "key": [f"{prefix}-{n}" for n in ns],
        }), folder / f"part-{f:03d}.parquet")
    return folder


def _fresh(kind: str, server_url: str | None, home: Path) -> str:
    url = (f"sqlite:///{home / f'{kind}.db'}" if kind == "sqlite"
           else create_schema(server_url or ""))
    store = open_store(url)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    store.close()
    return url


def run_store(spark: Any, kind: str, server_url: str | None, data: Path, warm: Path,
              home: Path, partitions: int | None) -> dict[str, Any]:
    """Import ``data`` into a fresh store of ``kind``; the summary as a dict."""
    url = _fresh(kind, server_url, home)
    settings = Settings(store=url, home=home)
    run_import(spark, str(warm), settings=settings, rejects=str(home / f"{kind}-warm"))
    summary = run_import(spark, str(data), settings=settings, partitions=partitions,
                         rejects=str(home / f"{kind}-rejects"))
    store = open_store(url)
    counts = store.counts()
    store.close()
    result = summary.to_dict()
    result["stored"] = sum(counts.values())
    print(f"{kind}: {result}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=None,
                        help="Most concurrent writers (default: one per file split).")
    parser.add_argument("--postgres-url", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"))
    parser.add_argument("--out", type=Path, default=RESULTS / "import.json")
    args = parser.parse_args()
    from tocsin.spark.session import spark_session

    home = Path(tempfile.mkdtemp(prefix="tocsin-bench-import-"))
    data = write_parquet(home / "data", args.rows, args.files)
    warm = write_parquet(home / "warm", 2_000, 2, prefix="warm")
    spark = spark_session(args.master, app_name="tocsin-bench-import")
    out: dict[str, Any] = {"benchmark": "import", "rows": args.rows, "files": args.files,
                           "master": args.master,
                           "date": datetime.now(UTC).isoformat(timespec="seconds")}
    for kind in args.stores.split(","):
        if kind == "postgres" and not args.postgres_url:
            with throwaway_server() as server:
                result = run_store(spark, kind, server.url, data, warm, home, args.partitions)
        else:
            result = run_store(spark, kind, args.postgres_url, data, warm, home,
                               args.partitions)
        out[f"{kind}_rows_per_s"] = result["rows_per_s"]
        out[f"{kind}_target_rows_per_s"] = TARGETS[kind]
        out[kind] = result
    spark.stop()
    write_results(out, args.out)


if __name__ == "__main__":
    main()
