"""The dispatch benchmark: how fast and how punctually Tocsin's Spark dispatcher delivers a burst
of due schedules, what it costs when idle, and the same figures for a peer.

``bench/run dispatch [--schedules N] [--store sqlite|postgres] [--peer celery,poller|none]``

Each target runs in its own child process, one after the other, so that one's processes never
share the two cores with another's, and each idle figure counts one process tree only. Per target:

1. warm up: ``--warmup`` schedules due now, wait until delivered (Spark's first batch is slow);
   then 10 000 more, to time the inserts on a steady system;
2. burst: ``--schedules`` due evenly over ``--window-s`` seconds, the first a few seconds after
   the inserts are expected to end (submitted in chunks of 10 000, timed); wait until all are
   delivered, at most ``--wait-s`` after the last due time;
3. idle: CPU of the whole process tree (/proc utime+stime) over ``--idle-s`` seconds, nothing due;
4. drain: ``--schedules`` all due at the same instant: delivery capacity;
5. (Tocsin only) profiled drain: the same again with py-spy sampling the Python workers;
6. idle with a backlog: ``--future`` schedules due in a day, then idle CPU again.

Headline figures come from the burst: ``deliveries_per_s`` = delivered / (last delivery - first
due time); lateness = delivered time - due time (Tocsin: the acknowledgement's time in the store;
peers: when the message was written). Results: ``bench/results/dispatch-<store>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import (
    CHUNK,
    REPO,
    measure_idle,
    now_ms,
    run_phase,
    stop_group,
    tree_sample,
    wait_for_quiet,
)
from tocsin.domain.defaults import BUCKETS

__all__ = ["main"]


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run dispatch", description=__doc__.split("\n\n")[0])
    p.add_argument("--schedules", type=int, default=200_000, help="messages per burst and drain")
    p.add_argument("--window-s", type=float, default=10.0, help="the burst's due times span this")
    p.add_argument("--warmup", type=int, default=2_000, help="messages due now, before the burst")
    p.add_argument("--wait-s", type=float, default=180.0, help="wait this long after the last due")
    p.add_argument("--idle-s", type=float, default=30.0, help="idle CPU measured over this")
    p.add_argument("--future", type=int, default=200_000,
                   help="schedules due in a day, for a second idle figure (0: skip)")
    p.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--master", default="local[*]",
                   help="Spark master, e.g. local-cluster[2,1,1024] for separate executor JVMs")
    p.add_argument("--store-url", help="an empty PostgreSQL database, for --store postgres")
    p.add_argument("--buckets", type=int, default=BUCKETS)
    p.add_argument("--partitions", type=int, default=4, help="bucket-range tasks per micro-batch")
    p.add_argument("--batch-cap", type=int, default=100_000, help="most rows per micro-batch")
    p.add_argument("--trigger-s", type=float, default=1.0, help="micro-batch trigger interval")
    p.add_argument("--hand-over-s", type=float, default=2.0,
                   help="each task's hand-over window (TOCSIN_HAND_OVER_SECONDS; 0: none)")
    p.add_argument("--no-relay", action="store_true",
                   help="without the relay (the thread of the driver that hands over in the "
                        "gaps between batches, as `tocsin dispatcher` runs it)")
    p.add_argument("--java-options", default=None,
                   help="the Spark JVMs' extra options (default: the dispatcher's, "
                        "spark_java_options then dispatcher_java_options)")
    p.add_argument("--peer", default="celery,poller",
                   help="comma-separated peers to run after Tocsin: celery, poller; or none")
    p.add_argument("--skip-tocsin", action="store_true", help="run the peers only")
    p.add_argument("--no-drain", action="store_true", help="skip the all-due-at-once run")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy profiled drain")
    p.add_argument("--celery-concurrency", type=int, default=2, help="Celery prefork processes")
    p.add_argument("--quiet-below", type=float, default=30.0,
                   help="before each phase, wait until other processes use less than this %% "
                        "of one core (the machine is shared)")
    p.add_argument("--quiet-wait-s", type=float, default=900.0,
                   help="...but wait at most this long, then measure anyway (and say so)")
    p.add_argument("--noisy-above", type=float, default=50.0,
                   help="a burst or drain during which others used more than this %% of one "
                        "core is run again...")
    p.add_argument("--noisy-retries", type=int, default=2, help="...at most this many times")
    p.add_argument("--rounds", type=int, default=1,
                   help="run Tocsin and the peers, one after the other, this many times; the "
                        "summary is each figure's median over the rounds, each ratio the "
                        "median of the rounds' ratios (CPU figures of runs minutes apart "
                        "differ by up to a quarter on this shared machine)")
    p.add_argument("--part-timeout-s", type=float, default=5400.0)
    p.add_argument("--out", type=Path, help="default bench/results/dispatch-<store>.json")
    p.add_argument("--part", help=argparse.SUPPRESS)
    p.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def log(message: str) -> None:
    """Progress on stderr, stamped."""
    print(f"{datetime.now(UTC):%H:%M:%S} {message}", file=sys.stderr, flush=True)


# -- the procedure every target goes through --------------------------------------------------


def procedure(target: Any, args: argparse.Namespace,
              after_drain: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Warm-up, burst, idle, drain, then idle again over a backlog of future schedules, on
    ``target`` (already running)."""
    n, window_ms = args.schedules, int(args.window_s * 1000)
    gate = quiet_gate(args)
    out: dict[str, Any] = {}
    out["warmup"] = run_phase(target, "warmup", n=args.warmup, window_ms=0, wait_s=args.wait_s,
                              ingest_rate_hint=None, log=log)
    # Spark's first batch competes with the warm-up's inserts: time a second one, steady.
    out["calibration"] = run_phase(target, "calibration", n=CHUNK, window_ms=0,
                                   wait_s=args.wait_s, ingest_rate_hint=None, log=log, gate=gate)
    out["burst"] = measured(target, args, "burst", window_ms=window_ms,
                            ingest_rate_hint=out["calibration"]["ingest"]["per_s"])
    time.sleep(5)  # let the last batch's commit and heartbeat finish
    backlog = n - out["burst"]["delivered"]
    if backlog and hasattr(target, "reset"):
        target.reset()  # else the idle figure measures the backlog still being worked off
        time.sleep(5)
    gated = gate()
    out["idle"] = measure_idle(args.idle_s)
    out["idle"]["undelivered_backlog"] = backlog
    out["idle"]["gate"] = gated
    log(f"[{target.name}] idle: {out['idle']['cpu_pct_of_one_core']}% of one core "
        f"({out['idle']['cpu_s_by_kind']})")
    if not args.no_drain:
        out["drain"] = measured(target, args, "drain", window_ms=0,
                                ingest_rate_hint=out["burst"]["ingest"]["per_s"])
    if after_drain:
        after_drain(out)
    if args.future:
        out["idle_with_future"] = idle_with_future(target, args)
    return out


def measured(target: Any, args: argparse.Namespace, phase: str, *, window_ms: int,
             ingest_rate_hint: float, **kw: Any) -> dict[str, Any]:
    """One phase, run again (as ``<phase>-retry<k>``, fresh messages) while other processes
    used more than ``--noisy-above`` % of a core during its delivery, at most
    ``--noisy-retries`` times; the discarded attempts are kept in the result."""
    discarded: list[dict[str, Any]] = []
    for attempt in range(args.noisy_retries + 1):
        name = phase if attempt == 0 else f"{phase}-retry{attempt}"
        result = run_phase(target, name, n=args.schedules, window_ms=window_ms,
                           wait_s=args.wait_s, ingest_rate_hint=ingest_rate_hint, log=log,
                           gate=quiet_gate(args), **kw)
        noise = result["outside_cpu_pct_of_one_core"]
        if noise <= args.noisy_above or attempt == args.noisy_retries:
            result["attempt"] = name
            result["discarded_noisy_attempts"] = discarded
            return result
        log(f"[{target.name}] {name}: others used {noise}% of a core meanwhile: again")
        discarded.append({k: result[k] for k in (
            "deliveries_per_s", "lateness_ms", "outside_cpu_pct_of_one_core", "delivered",
            "cpu_us_per_delivery")})
        if result["delivered"] < result["schedules"] and hasattr(target, "reset"):
            target.reset()
    raise AssertionError("unreachable")


def idle_with_future(target: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Idle CPU again, now that ``--future`` schedules wait, due in a day: what a scheduler
    holding a real backlog costs while nothing is due."""
    due = now_ms() + 86_400_000
    started = time.perf_counter()
    for off in range(0, args.future, CHUNK):
        target.submit("future", off, [due] * min(CHUNK, args.future - off))
    ingest_s = time.perf_counter() - started
    time.sleep(5)
    gated = quiet_gate(args)()
    idle = measure_idle(args.idle_s)
    idle["gate"] = gated
    idle["future_schedules"] = args.future
    idle["ingest_s"] = round(ingest_s, 1)
    log(f"[{target.name}] idle with {args.future} future schedules: "
        f"{idle['cpu_pct_of_one_core']}% of one core ({idle['cpu_s_by_kind']})")
    return idle


def quiet_gate(args: argparse.Namespace) -> Callable[[], dict[str, Any]]:
    """Before each measured phase: wait for the rest of the machine to quieten."""
    return lambda: wait_for_quiet(args.quiet_below, args.quiet_wait_s, log)


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The comparable figures of one target's run."""
    burst, drain = result["burst"], result.get("drain") or {}
    return {
        "deliveries_per_s": burst["deliveries_per_s"],
        "lateness_p50_ms": burst["lateness_ms"].get("p50"),
        "lateness_p99_ms": burst["lateness_ms"].get("p99"),
        "lateness_max_ms": burst["lateness_ms"].get("max"),
        "delivered": burst["delivered"],
        "idle_cpu_pct": result["idle"]["cpu_pct_of_one_core"],
        "idle_rss_mb": result["idle"]["rss_mb"],
        "idle_pss_mb": result["idle"].get("pss_mb"),
        "ready_s": result.get("ready_s"),
        "idle_with_future_cpu_pct": (result.get("idle_with_future") or {}).get(
            "cpu_pct_of_one_core"),
        "drain_deliveries_per_s": drain.get("deliveries_per_s"),
        "drain_lateness_p99_ms": (drain.get("lateness_ms") or {}).get("p99"),
        "ingest_per_s": burst["ingest"]["per_s"],
        "cpu_us_per_delivery_burst": burst.get("cpu_us_per_delivery"),
        "cpu_us_per_delivery_drain": drain.get("cpu_us_per_delivery"),
        "noise_outside_cpu_pct_burst": burst.get("outside_cpu_pct_of_one_core"),
        "noise_outside_cpu_pct_drain": drain.get("outside_cpu_pct_of_one_core"),
    }


# -- Tocsin ------------------------------------------------------------------------------------


def spark_batches(query: Any) -> list[dict[str, Any]]:
    """Every recent micro-batch: when it started, its rows and its durations (ms)."""
    out = []
    for p in query.recentProgress:
        d = json.loads(p.json) if hasattr(p, "json") else dict(p)
        at = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00"))
        out.append({"batch": d["batchId"], "at_ms": int(at.timestamp() * 1000),
                    "rows": d.get("numInputRows", 0), **d.get("durationMs", {})})
    return out


def batch_summary(batches: list[dict[str, Any]], window: list[int]) -> dict[str, Any]:
    """Micro-batches that started within ``window``: counts, rows, and where their time went."""
    inside = [b for b in batches if window[0] <= b["at_ms"] <= window[1] and b["rows"]]
    keys = sorted({k for b in inside for k in b} - {"batch", "at_ms", "rows"})
    rows = sorted(b["rows"] for b in inside)
    return {
        "batches": len(inside),
        "rows_per_batch": {"min": rows[0], "median": rows[len(rows) // 2], "max": rows[-1]}
        if rows else {},
        "duration_ms_total": {k: sum(b.get(k, 0) for b in inside) for k in keys},
        "duration_ms_max": {k: max(b.get(k, 0) for b in inside) for k in keys},
        "per_batch": [{k: b.get(k) for k in ("batch", "rows", "triggerExecution", "latestOffset",
                                             "addBatch", "walCommit", "commitOffsets")}
                      for b in inside],
    }


def tocsin_part(args: argparse.Namespace) -> dict[str, Any]:
    """Tocsin's Spark dispatcher, in this process, over a fresh store."""
    from bench.pyspy import PySpy, summarise
    from bench.store_target import StoreTarget, open_bench_store, scratch_dir
    from tocsin.clock import SystemClock
    from tocsin.dispatcher.core import DispatchCore
    from tocsin.dispatcher.driver_relay import DriverRelay, relay_options
    from tocsin.dispatcher.options import DispatchOptions
    from tocsin.dispatcher.query import start_dispatcher
    from tocsin.dispatcher.workers import ThreadedWorkers
    from tocsin.logs import DISPATCHER_JAVA_OPTIONS, SPARK_JAVA_OPTIONS
    from tocsin.spark.session import spark_session
    from tocsin.stores import open_store as store_for_relay

    tmp = scratch_dir("tocsin-bench-")
    url, store = open_bench_store(args.store, args.store_url, tmp, buckets=args.buckets)
    target = StoreTarget("tocsin", store, tmp)
    started = time.perf_counter()
    java = {"java_options": args.java_options if args.java_options is not None
            else f"{SPARK_JAVA_OPTIONS} {DISPATCHER_JAVA_OPTIONS}"}  # as tocsin dispatcher
    spark = spark_session(args.master, app_name="tocsin-bench",
                          extra={"spark.sql.streaming.numRecentProgressUpdates": "5000",
                                 "spark.ui.showConsoleProgress": "false"}, **java)
    opts = DispatchOptions(store_url=url, buckets=args.buckets, partitions=args.partitions,
                           batch_cap=args.batch_cap, hand_over_ms=round(args.hand_over_s * 1000))
    query = start_dispatcher(spark, opts, checkpoint=tmp / "checkpoint",
                             trigger_seconds=args.trigger_s)
    log(f"[tocsin] spark session and query started in {time.perf_counter() - started:.1f}s; "
        f"store {url}")
    while query.lastProgress is None and time.perf_counter() - started < 600:
        time.sleep(0.1)  # the warm-up batch: workers started, channels open
    ready_s = round(time.perf_counter() - started, 1)
    log(f"[tocsin] first batch done {ready_s}s after the session started")
    relay = None
    if not args.no_relay and opts.hand_over_ms > 0:  # as run_dispatcher starts it
        relay = DriverRelay(DispatchCore(
            store_for_relay(url, buckets=args.buckets), options=relay_options(opts),
            clock=SystemClock(), workers=ThreadedWorkers(send_threads=opts.send_threads)),
            trigger_s=args.trigger_s).start()

    def profiled_drain(out: dict[str, Any]) -> None:
        if args.no_profile:
            return
        spy = PySpy(tmp)
        if not spy.available:
            out["profile"] = {"skipped": "py-spy is not installed in the venv"}
            return
        files: list[Path] = []
        out["profiled_drain"] = run_phase(
            target, "profiled", n=args.schedules, window_ms=0, wait_s=args.wait_s,
            ingest_rate_hint=out["burst"]["ingest"]["per_s"], log=log, gate=quiet_gate(args),
            before_due=lambda: log(f"[tocsin] py-spy on pids {spy.start()}"),
            after_done=lambda: files.extend(spy.stop()))
        out["profile"] = summarise(files)

    try:
        out = procedure(target, args, after_drain=profiled_drain)
        out["ready_s"] = ready_s
        out["options"] = {"master": args.master, "partitions": args.partitions,
                          "relay": relay is not None, "java_options": java["java_options"],
                          "batch_cap": args.batch_cap, "trigger_s": args.trigger_s,
                          "buckets": args.buckets, "store": url}
        batches = spark_batches(query)
        out["spark"] = {phase: batch_summary(batches, out[phase]["window_ms"])
                        for phase in ("warmup", "burst", "drain", "profiled_drain") if phase in out}
        return out
    finally:
        if relay is not None:
            relay.stop()
            relay.core.store.close()
        query.stop()
        _stop_spark(spark)


def _stop_spark(spark: Any) -> None:
    """Stop the session, then the JVM we launched and anything it left behind, by PID."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    time.sleep(1)
    for pid in tree_sample():
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# -- running the parts and putting the results together ----------------------------------------


def _part(args: argparse.Namespace) -> None:
    if args.part == "tocsin":
        result = tocsin_part(args)
    elif args.part == "celery":
        from bench.peers.celery_dispatch import run as run_celery

        result = run_celery(args, procedure=procedure, log=log)
    elif args.part == "poller":
        from bench.peers.poller_dispatch import run as run_poller

        result = run_poller(args, procedure=procedure, log=log)
    else:
        raise SystemExit(f"unknown part {args.part!r}")
    args.part_out.write_text(json.dumps(result, indent=1))


def _run_part(name: str, args: argparse.Namespace, argv: list[str], scratch: Path,
              module: str = "bench.dispatch") -> Any:
    """Run part ``name`` of benchmark ``module`` in a child process of its own (its own process
    tree, so CPU and idle figures count that part only); its JSON result."""
    out = scratch / f"{name}.json"
    log(f"=== {name} ===")
    proc = subprocess.Popen([sys.executable, "-m", module, *argv, "--part", name,
                             "--part-out", str(out)], cwd=REPO, start_new_session=True)
    try:
        proc.wait(timeout=args.part_timeout_s)
    except subprocess.TimeoutExpired:
        log(f"{name} took longer than {args.part_timeout_s}s: stopped")
    finally:
        stop_group(proc, grace_s=60)
    if proc.returncode != 0 or not out.exists():
        return {"failed": f"exit status {proc.returncode}; see the log above"}
    return json.loads(out.read_text())


def _code_version() -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "--short", "HEAD") or None,
            "src_modified": bool(git("status", "--porcelain", "--", "src"))}


RATIOS = ("deliveries_per_s", "drain_deliveries_per_s", "lateness_p50_ms", "lateness_p99_ms",
          "lateness_max_ms", "idle_cpu_pct", "idle_rss_mb", "idle_with_future_cpu_pct",
          "ingest_per_s", "cpu_us_per_delivery_burst", "cpu_us_per_delivery_drain")


def _ratios(summary: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Tocsin's headline figures over each peer's, of one round."""
    h = summary.get("tocsin") or {}
    if "failed" in h:
        return {}
    return {name: {k: round(h[k] / s[k], 2) if h.get(k) and s.get(k) else None for k in RATIOS}
            for name, s in summary.items() if name != "tocsin" and "failed" not in s}


def _median_of(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over rounds (a round that failed is left out; with none
    left, the first round's failure)."""
    import statistics

    ok = [f for f in figures if "failed" not in f]
    if not ok:
        return figures[0]
    out: dict[str, Any] = {}
    for key in ok[0]:
        values = [f[key] for f in ok if isinstance(f.get(key), int | float)]
        out[key] = (round(statistics.median(values), 2) if values else ok[0][key])
    return out


def _met(value: float | None, goal: float, *, at_most: bool) -> dict[str, Any]:
    ok = value is not None and (value <= goal if at_most else value >= goal)
    return {"value": value, "goal": f"{'<=' if at_most else '>='} {goal}", "met": ok}


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like an exception, so every ``finally`` stops what it started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _args(argv)
    _exit_on_sigterm()
    if args.part:
        _part(args)
        return
    from bench.common import machine_info
    from bench.store_target import scratch_dir

    scratch = scratch_dir("tocsin-bench-parts-")
    started = now_ms()
    code = _code_version()
    peers = [p for p in args.peer.split(",") if p and p != "none"]
    names = ([] if args.skip_tocsin else ["tocsin"]) + peers
    rounds = []
    for k in range(max(1, args.rounds)):
        if args.rounds > 1:
            log(f"=== round {k + 1} of {args.rounds} ===")
        rounds.append({name: _run_part(name, args, argv, scratch) for name in names})
    results = rounds[0]
    report: dict[str, Any] = {}
    tocsin = results.get("tocsin")
    if tocsin and "failed" not in tocsin:
        h = headline(tocsin)
        report.update({k: h[k] for k in ("deliveries_per_s", "lateness_p50_ms", "lateness_p99_ms",
                                          "lateness_max_ms", "idle_cpu_pct")})
    report["schedules"] = args.schedules
    report["machine"] = machine_info()
    report["command"] = "bench/run dispatch " + " ".join(argv)
    report["code"] = code
    report["run_at"] = datetime.fromtimestamp(started / 1000, UTC).isoformat(timespec="seconds")
    report["wall_s"] = round((now_ms() - started) / 1000, 1)
    each = [{name: (headline(r) if "failed" not in r else r) for name, r in one.items()}
            for one in rounds]
    summary = {name: _median_of([e[name] for e in each]) for name in names}
    report["summary"] = summary
    if tocsin and "failed" not in tocsin:
        h = summary["tocsin"]
        drain = h["drain_deliveries_per_s"]
        report["targets"] = {
            "burst deliveries/s >= 20000": _met(h["deliveries_per_s"], 20_000, at_most=False),
            "burst p99 lateness <= 3000 ms": _met(h["lateness_p99_ms"], 3_000, at_most=True),
            "drain capacity >= 20000/s": _met(drain, 20_000, at_most=False),
            "idle CPU < 2% of one core": _met(h["idle_cpu_pct"], 2.0, at_most=True),
            "goal: 50000/s (burst)": _met(h["deliveries_per_s"], 50_000, at_most=False),
            "goal: 50000/s (drain capacity)": _met(drain, 50_000, at_most=False),
            "goal: p99 <= 1000 ms": _met(h["lateness_p99_ms"], 1_000, at_most=True),
        }
        per_round = [_ratios(e) for e in each]
        report["ratios_tocsin_over_peer"] = {
            name: _median_of([r[name] for r in per_round if name in r])
            for name in per_round[0]}
        if len(rounds) > 1:
            report["rounds"] = [{"summary": e, "ratios_tocsin_over_peer": r}
                                for e, r in zip(each, per_round, strict=True)]
    report["details"] = results
    out = args.out or REPO / "bench" / "results" / (
        f"dispatch-{args.store}{'-peers' if args.skip_tocsin else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    log(f"wrote {out}")
    print(json.dumps({k: v for k, v in report.items() if k != "details"}, indent=1))


if __name__ == "__main__":
    main()
