"""Bulk import (``tocsin import``) into SQLite and into PostgreSQL, for each shape of file
users have.

``--rows`` schedules are written in each shape (``--shapes``, default ``delay``, the original
figure; ``all`` for every one); each store gets a fresh database per shape and the import job
runs on a Spark session (``--master``, default ``local[2]``) warmed up by a small import
first, so the figure is the job's rows a second, not Spark's start. PostgreSQL is a
throw-away cluster started for the run (``.ci/postgres.sh``), unless ``--postgres-url`` names
one.

Shapes (Parquet in ``--files`` files unless said otherwise):

==================  ========================================================================
``delay``           a JSON text payload, a delay, a key (the original benchmark)
``due_at_timestamp`` a timestamp ``due_at`` (UTC, microseconds), no key
``due_at_text``     an RFC 3339 text ``due_at``, no key
``due_at_epoch_ms`` an integer ``due_at`` (epoch milliseconds), no key
``nested``          a nested payload column, a headers struct, a delay, no key
``csv``             CSV: a text ``due_at``, a JSON text payload, no key
``jsonl``           JSON lines: API bodies with a delay and a key
``one_file``        one Parquet file of one row group, a timestamp ``due_at``, no key, no
                    ``--partitions``
==================  ========================================================================

Figures: ``<store>_rows_per_s_<shape>`` (``<store>_rows_per_s`` is the ``delay`` shape's);
targets: every shape at least 0.8 x the best shape of its store and 50 000 rows/s. With
``--rounds N`` every shape is imported N times per store, in turn, and its figure is the
median run's (each run's rate is kept in ``rounds_rows_per_s``). ``<store>_cpu_probe_s``:
the seconds of a fixed Python loop before the first round and after each
(:func:`bench.common.cpu_probe`), the machine's speed while the store's shapes ran.
``--growth N`` instead imports N rows of the ``due_at_timestamp`` shape into one store, a
million (``--growth-step``) at a time, and records each step's rate and
``<store>_growth_ratio`` (the last step's rate over the first's; target 0.8 for the last
million of 20 million over the first).

``--shuffled``: each shape is imported twice per round, side by side, the same rows in due
order and in a random order (a seeded shuffle across the files, as an export sorted by
customer or order id has them): ``<store>_rows_per_s_<shape>_shuffled`` and
``<store>_shuffled_ratio_<shape>`` (shuffled over in order, the same round; target 0.8, and
every shuffled shape at least 50 000 rows/s). With ``--growth``, each step imports a million
rows drawn at random from all N (``<store>_growth_ratio_shuffled``). The PostgreSQL server the
run starts has PostgreSQL's defaults but for ``$TOCSIN_PG_SETTINGS`` (server options, e.g.
``-c shared_buffers=6GB``), which the growth records as ``server_settings``.

    bench/run import [--rows 1000000] [--stores sqlite,postgres] [--files 8] [--shapes all]
                     [--rounds 3] [--shuffled]
    bench/run import --growth 5000000 [--stores sqlite,postgres] [--shuffled]

Writes bench/results/import.json (the keys of a run are merged into those already there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import cpu_probe, run_stamp, write_results
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.pipelines.bulk_import import run_import
from tocsin.stores import open_store
from tocsin.testing.postgres import create_schema, drop_schema, throwaway_server

RESULTS = Path(__file__).parent / "results"
TARGETS = {"postgres": 50_000, "sqlite": 40_000}
TARGET_PER_SHAPE = 50_000
"""Every shape, on each store (rows/s)."""
_SHAPE_KEYS = ("sqlite_rows_per_s_", "postgres_rows_per_s_")
"""The beginnings of a shape's figures in the results file."""
SHAPES = ("delay", "due_at_timestamp", "due_at_text", "due_at_epoch_ms", "nested", "csv",
          "jsonl", "one_file")
TARGET_SHUFFLED_RATIO = 0.8
"""Every shape's rows in a random order at least this times the same rows in due order."""
SEED = 43
_HOUR_MS = 3_600_000


def _columns(shape: str, ns: Sequence[int], now_ms: int, prefix: str) -> dict[str, Any]:
    """The columns of rows ``ns`` in ``shape`` (Parquet shapes)."""
    due = [now_ms + _HOUR_MS + n for n in ns]
    text = [f'{{"order": {n}, "amount": 1250}}' for n in ns]
    channel = ["out"] * len(ns)
    if shape == "delay":
        return {"channel": channel, "payload": text, "delay": [3600.0] * len(ns),
                "key": [f"{prefix}-{n}" for n in ns]}
    if shape in ("due_at_timestamp", "one_file"):
        return {"channel": channel, "payload": text,
                "due_at": pa.array([d * 1000 for d in due], pa.timestamp("us", tz="UTC"))}
    if shape == "due_at_text":
        return {"channel": channel, "payload": text,
                "due_at": [datetime.fromtimestamp(d / 1000, UTC).isoformat() for d in due]}
    if shape == "due_at_epoch_ms":
        return {"channel": channel, "payload": text, "due_at": pa.array(due, pa.int64())}
    if shape == "nested":
        return {"channel": channel,
                "payload": pa.array([{"order": n, "amount": 1250} for n in ns]),
                "headers": pa.array([{"x-campaign": prefix}] * len(ns)),
                "delay": [3600.0] * len(ns)}
    raise ValueError(shape)


def write_shape(folder: Path, shape: str, rows: int, files: int, *, prefix: str = "k",
                start: int = 0, now_ms: int | None = None,
                numbers: Sequence[int] | None = None) -> Path:
    """``rows`` schedules (numbered from ``start``, or ``numbers`` in their order) in
    ``shape`` under ``folder``: ``files`` files (one for ``one_file``)."""
    folder.mkdir(parents=True, exist_ok=True)
    now_ms = now_ms or int(time.time() * 1000)
    files = 1 if shape == "one_file" else files
    every = range(start, start + rows) if numbers is None else numbers
    per = -(-len(every) // files)
    for f in range(files):
        ns = every[f * per:(f + 1) * per]
        if shape == "csv":
            with open(folder / f"part-{f:03d}.csv", "w") as out:
                out.write("channel,payload,due_at\n")
                for n in ns:
                    due = datetime.fromtimestamp((now_ms + _HOUR_MS + n) / 1000, UTC)
                    out.write(f'out,"{{""order"": {n}, ""amount"": 1250}}",'
                              f"{due.isoformat()}\n")
        elif shape == "jsonl":
            with open(folder / f"part-{f:03d}.jsonl", "w") as out:
                for n in ns:
                    out.write(json.dumps({"channel": "out", "payload": {"order": n,
                                          "amount": 1250}, "delay": 3600,
                                          "key": f"{prefix}-{n}"}) + "\n")
        else:
            table = pa.table(_columns(shape, ns, now_ms, prefix))
            pq.write_table(table, folder / f"part-{f:03d}.parquet",
                           row_group_size=max(len(ns), 1))
    return folder


def _fresh(kind: str, server_url: str | None, home: Path, name: str) -> str:
    # a new SQLite file each time: a reused Spark worker keeps its store open by its URL
    url = (f"sqlite:///{home / f'{kind}-{name}-{time.monotonic_ns()}.db'}" if kind == "sqlite"
           else create_schema(server_url or ""))
    store = open_store(url)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    store.close()
    return url


def _stored(url: str) -> int:
    store = open_store(url)
    try:
        return sum(store.counts().values())
    finally:
        store.close()


def _drop(kind: str, server_url: str | None, url: str) -> None:
    """Drop a PostgreSQL store's schema once measured (a shared server keeps no bench rows);
    delete a SQLite store's files (with ``--rounds``, every run of every shape leaves one)."""
    if kind == "postgres" and server_url:
        drop_schema(server_url, url)
    elif kind == "sqlite":
        db = Path(url.removeprefix("sqlite:///"))
        for path in db.parent.glob(f"{db.name}*"):
            path.unlink(missing_ok=True)


def run_shape(spark: Any, kind: str, server_url: str | None, shape: str, data: Path,
              warm: Path, home: Path, partitions: int | None) -> dict[str, Any]:
    """Import ``data`` (of ``shape``) into a fresh store of ``kind``; the summary as a dict."""
    url = _fresh(kind, server_url, home, shape)
    settings = Settings(store=url, home=home)
    run_import(spark, str(warm), settings=settings, rejects=str(home / f"{kind}-{shape}-warm"))
    summary = run_import(spark, str(data), settings=settings,
                         partitions=None if shape == "one_file" else partitions,
                         rejects=str(home / f"{kind}-{shape}-rejects"))
    result = summary.to_dict()
    result["stored"] = _stored(url)
    _drop(kind, server_url, url)
    print(f"{kind} {shape}: {result}", file=sys.stderr, flush=True)
    return result


def shuffled(rows: int) -> list[int]:
    """``range(rows)`` in a random order (seeded: every run shuffles alike)."""
    numbers = list(range(rows))
    random.Random(SEED).shuffle(numbers)
    return numbers


def run_growth(spark: Any, kind: str, server_url: str | None, rows: int, step: int,
               home: Path, partitions: int | None, files: int, *,
               in_any_order: bool = False) -> dict[str, Any]:
    """Import ``rows`` rows of the ``due_at_timestamp`` shape into one fresh store of ``kind``,
    ``step`` rows at a time (``in_any_order``: each step a random draw of them, shuffled);
    each step's rate."""
    # Spark warmed up first, on a store of its own: the first step is the ratio's base, and a
    # cold one (its JIT, its Python workers started) made the ratio of one store run alone
    # look better than the same store's run after another's
    warm = _fresh(kind, server_url, home, "growth-warm")
    run_import(spark, str(write_shape(home / f"growth-warm-{kind}", "due_at_timestamp", 20_000,
                                      files, prefix="warm")),
               settings=Settings(store=warm, home=home), partitions=partitions,
               rejects=str(home / f"{kind}-growth-warm"))
    _drop(kind, server_url, warm)
    url = _fresh(kind, server_url, home, "growth")
    settings = Settings(store=url, home=home)
    step = min(step, rows)
    rates: list[float] = []
    now_ms = int(time.time() * 1000)
    order = shuffled(rows) if in_any_order else None
    for start in range(0, rows, step):
        data = write_shape(home / f"growth-{kind}-{start}", "due_at_timestamp", step, files,
                           start=start, now_ms=now_ms,
                           numbers=None if order is None else order[start:start + step])
        summary = run_import(spark, str(data), settings=settings, partitions=partitions,
                             rejects=str(home / f"{kind}-growth-{start}"))
        rates.append(summary.rows_per_s)
        print(f"{kind} growth {start + step:,} rows: {summary.rows_per_s:,.0f} rows/s",
              file=sys.stderr, flush=True)
        shutil.rmtree(data, ignore_errors=True)
    stored = _stored(url)
    _drop(kind, server_url, url)
    return {"rows": rows, "step": step, "rates": rates, "stored": stored,
            "growth_ratio": round(rates[-1] / rates[0], 3)}


def _on_stores(args: argparse.Namespace, run: Callable[[str, str | None], None]) -> None:
    for kind in args.stores.split(","):
        if kind == "postgres" and not args.postgres_url:
            with throwaway_server() as server:
                run(kind, server.url)
        else:
            run(kind, args.postgres_url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--shapes", default="delay",
                        help=f"Comma-separated, or all: {', '.join(SHAPES)}.")
    parser.add_argument("--growth", type=int, default=0,
                        help="Rows to import a million at a time into one store, for the "
                             "growth ratio (instead of the shapes).")
    parser.add_argument("--growth-step", type=int, default=1_000_000,
                        help="Rows per import of --growth (the ratio is the last's rate over "
                             "the first's).")
    parser.add_argument("--rounds", type=int, default=1,
                        help="Import every shape this many times per store, in turn (the "
                             "order reversed each round); each shape's figure is its median "
                             "(one shape's rate moves by up to a third between runs of the "
                             "same code on this shared machine).")
    parser.add_argument("--shuffled", action="store_true",
                        help="Import each shape's rows in due order and shuffled, side by side "
                             "(with --growth: every step's rows drawn at random).")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=None,
                        help="Writers (default: one per file split, at least the cores).")
    parser.add_argument("--postgres-url", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"))
    parser.add_argument("--out", type=Path, default=RESULTS / "import.json")
    args = parser.parse_args()
    from tocsin.spark.session import spark_session

    shapes = SHAPES if args.shapes == "all" else tuple(args.shapes.split(","))
    home = Path(tempfile.mkdtemp(prefix="tocsin-bench-import-"))
    warm = write_shape(home / "warm", "delay", 2_000, 2, prefix="warm")
    spark = spark_session(args.master, app_name="tocsin-bench-import")
    out: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    out.update({"benchmark": "import", "master": args.master})
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    load = os.getloadavg()

    if args.growth:
        def growth(kind: str, server_url: str | None) -> None:
            result = run_growth(spark, kind, server_url, args.growth, args.growth_step, home,
                                args.partitions, args.files, in_any_order=args.shuffled)
            tail = "_shuffled" if args.shuffled else ""
            if kind == "postgres" and not args.postgres_url:
                # the throw-away server's options beyond PostgreSQL's defaults
                result["server_settings"] = (os.environ.get("TOCSIN_PG_SETTINGS", "").strip()
                                             or "defaults")
            out[f"{kind}_growth_ratio{tail}"] = result["growth_ratio"]
            out[f"{kind}_growth{tail}"] = {**result, "date": stamp}
            # the file's date and commit are its last run's, often a shapes run: the summary
            # stamps this figure with its own run
            out.setdefault("kept_from", {})[f"{kind}_growth_ratio{tail}"] = {
                "run_at": stamp, "commit": run_stamp()["commit"]}

        _on_stores(args, growth)
        out["growth_load_before"] = load
        # the file's date and commit become this run's: the shapes' figures keep their run
        if shapes_run := out.get("shapes_run"):
            kept = out.setdefault("kept_from", {})
            for key in [k for k in out if k.startswith(_SHAPE_KEYS)]:
                kept.setdefault(key, shapes_run)
    else:
        data = {shape: write_shape(home / shape, shape, args.rows, args.files)
                for shape in shapes}
        mixed = shuffled(args.rows) if args.shuffled else []
        for shape in shapes if args.shuffled else ():
            data[f"{shape}_shuffled"] = write_shape(home / f"{shape}_shuffled", shape,
                                                    args.rows, args.files, numbers=mixed)
        runs_of = [*shapes, *(f"{shape}_shuffled" for shape in shapes if args.shuffled)]
        # The figures of shapes this run leaves alone keep the run that made them
        # (``kept_from``: the summary stamps them with it); this run's are its own. That run
        # is the last shapes run (``shapes_run``), not the file's date and commit, which a
        # growth run since may have stamped.
        before = out.get("shapes_run") or {"run_at": out.get("date"),
                                           "commit": out.get("commit")}
        out["shapes_run"] = {"run_at": stamp, "commit": run_stamp()["commit"]}
        kept = out.setdefault("kept_from", {})
        for key in [k for k in out if k.startswith(_SHAPE_KEYS)]:
            shape = key.split("_rows_per_s_", 1)[1].removesuffix("_shuffled")
            if shape in shapes:
                kept.pop(key, None)
            elif before["run_at"]:
                kept.setdefault(key, before)
        out.update({"rows": args.rows, "files": args.files, "date": stamp,
                    "load_before": load, "rounds": max(1, args.rounds)})

        def shaped(kind: str, server_url: str | None) -> None:
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in runs_of}
            probes = out[f"{kind}_cpu_probe_s"] = [cpu_probe()]
            for k in range(max(1, args.rounds)):
                for shape in shapes if k % 2 == 0 else shapes[::-1]:
                    # in order and shuffled side by side, which first alternating by round
                    pair = [shape, f"{shape}_shuffled"] if args.shuffled else [shape]
                    for name in pair if k % 2 == 0 else pair[::-1]:
                        runs[name].append(run_shape(spark, kind, server_url, shape,
                                                    data[name], warm, home, args.partitions))
                probes.append(cpu_probe())
            for name in runs_of:
                ranked = sorted(runs[name], key=lambda r: r["rows_per_s"])
                result = ranked[(len(ranked) - 1) // 2]  # the median run (the lower of two)
                if len(ranked) > 1:
                    result = {**result, "rounds_rows_per_s": [r["rows_per_s"]
                                                              for r in runs[name]]}
                out[f"{kind}_rows_per_s_{name}"] = result["rows_per_s"]
                out.setdefault(f"{kind}_shapes", {})[name] = result
                if name == "delay":
                    out[f"{kind}_rows_per_s"] = result["rows_per_s"]
                    out[f"{kind}_target_rows_per_s"] = TARGETS[kind]
                    out[kind] = result
            for shape in shapes if args.shuffled else ():
                ratios = sorted(a["rows_per_s"] / b["rows_per_s"] for a, b in zip(
                    runs[f"{shape}_shuffled"], runs[shape], strict=True))
                out[f"{kind}_shuffled_ratio_{shape}"] = round(ratios[(len(ratios) - 1) // 2], 3)
            # over every shape the file holds: a run of some shapes keeps the others' figures
            known = [s for s in SHAPES if f"{kind}_rows_per_s_{s}" in out]
            rates = {s: out[f"{kind}_rows_per_s_{s}"] for s in known}
            out[f"{kind}_worst_over_best"] = round(min(rates.values()) / max(rates.values()),
                                                   3)
            mixed_known = [s for s in known if f"{kind}_shuffled_ratio_{s}" in out]
            if mixed_known:
                out[f"{kind}_shuffled_worst"] = {
                    "ratio": min(out[f"{kind}_shuffled_ratio_{s}"] for s in mixed_known),
                    "rows_per_s": min(out[f"{kind}_rows_per_s_{s}_shuffled"]
                                      for s in mixed_known),
                    "targets": {"ratio": TARGET_SHUFFLED_RATIO,
                                "rows_per_s": TARGET_PER_SHAPE}}

        _on_stores(args, shaped)
        out["load_after"] = os.getloadavg()
        out["target_rows_per_s_per_shape"] = TARGET_PER_SHAPE
    spark.stop()
    shutil.rmtree(home, ignore_errors=True)
    write_results(out, args.out)


if __name__ == "__main__":
    main()
