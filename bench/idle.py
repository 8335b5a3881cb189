"""What an idle ``tocsin up`` costs, by setting: CPU and resident memory of its whole process
tree (API, Spark driver and JVM, Python workers; the memory without this benchmark's own
process, ~60 MB, which the first figures of 2026-11-26 counted) over ``--seconds`` with nothing
due, after ``--settle`` seconds from ready (70 s by default: Spark stops Python workers idle
for a minute), and how long it took to be ready, for the default settings first and then each
variant of the settings that shape idle work (keep-warm batches, the relay, hand-over
windows).

For the default settings it then delivers a burst (``--burst``, 200 000 schedules due over
10 s to a file channel, created through the store) and samples the tree's memory every 5 s for
``--after`` seconds (60) from the last delivery: ``after_burst_rss_mb`` is the last sample,
the memory ``tocsin up`` holds at rest again (target: 800 MB), and ``after_burst_rss_by_kind``
says which processes hold it.

    bench/run idle [--seconds 60] [--settle 70] [--variants default,keep-warm,no-relay]
                   [--burst 200000] [--after 60] [--store postgresql://...]

With ``--store`` a PostgreSQL URL (an empty database: each variant's ``tocsin up`` runs over
it in turn), the server's CPU is counted as the tree's ``database`` (with SQLite the store's
work is inside the tree) and the results go to bench/results/idle-postgres.json.

Writes bench/results/idle.json (per variant: ``cpu_pct_of_one_core``, ``rss_mb``, ``pss_mb``,
``ready_s``; for the default also ``after_burst_rss_mb``, ``after_burst_pss_mb``,
``after_burst_rss_mb_by_s``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import CpuMeter, machine_info, measure_idle, run_phase, run_stamp, tree_sample
from bench.store_target import attribute_server
from bench.tocsin_up import TocsinUp, UpTarget
from tocsin.stores import open_store

RESULTS = Path(__file__).parent / "results" / "idle.json"
RESULTS_POSTGRES = RESULTS.with_name("idle-postgres.json")
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "keep-warm": {"TOCSIN_KEEP_WARM_SECONDS": "30"},
    "no-relay": {"TOCSIN_RELAY": "false"},
    "no-windows": {"TOCSIN_HAND_OVER_SECONDS": "0"},
}
TARGET_AFTER_BURST_MB = 800.0


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def rss_by_kind(root: int) -> dict[str, float]:
    """Resident memory (MB) of the tree under ``root``, by kind of process."""
    kinds: dict[str, float] = defaultdict(float)
    for proc in tree_sample(root).values():
        kinds["api" if proc.pid == root else proc.kind] += proc.rss_kb / 1024
    return {kind: round(mb, 1) for kind, mb in sorted(kinds.items())}


def burst(up: TocsinUp, n: int, after_s: float) -> dict[str, Any]:
    """Deliver ``n`` schedules due over 10 s, then sample the memory every 5 s for
    ``after_s`` seconds from the moment the last one is delivered (in a thread, while the
    burst's outcomes are read back)."""
    assert up.proc is not None
    root = up.proc.pid
    samples: list[tuple[float, float]] = []
    kinds: list[dict[str, float]] = []

    def sample() -> None:
        meter = CpuMeter(interval_s=5.0)
        started = time.monotonic()
        try:
            while (elapsed := time.monotonic() - started) <= after_s + 0.1:
                samples.append((round(elapsed), meter.rss_mb(root)))
                kinds.append(rss_by_kind(root))
                log(f"after the burst +{elapsed:.0f}s: RSS {samples[-1][1]} MB {kinds[-1]}")
                time.sleep(max(0.0, 5.0 - (time.monotonic() - started) % 5.0))
            samples.append((round(time.monotonic() - started), meter.pss_mb(root)))
        finally:
            meter.close()

    sampler = threading.Thread(target=sample, name="after-burst", daemon=True)
    store = open_store(up.store_url)
    try:
        target = UpTarget(up, store, up.home, None,
                          lambda phase: ("file", {"path": str(up.home / f"{phase}.jsonl")}))
        phase = run_phase(target, "burst", n=n, window_ms=10_000, wait_s=300,
                          ingest_rate_hint=30_000, log=log, after_done=sampler.start)
    finally:
        store.close()
    sampler.join()
    pss = samples.pop()[1]
    return {"burst": n, "burst_delivered": phase["delivered"],
            "burst_deliveries_per_s": phase["deliveries_per_s"],
            "after_burst_s": after_s, "after_burst_rss_mb": samples[-1][1],
            "after_burst_pss_mb": pss, "after_burst_rss_mb_by_s": samples,
            "after_burst_rss_by_kind": kinds[-1],
            "after_burst_target_mb": TARGET_AFTER_BURST_MB}


def run(name: str, env: dict[str, str], seconds: float, settle: float, *,
        burst_n: int = 0, after_s: float = 60.0, store_url: str | None = None) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"tocsin-bench-idle-{name}-"))
    up = TocsinUp(home, store_url=store_url, env={"TOCSIN_ARCHIVE_EVERY_SECONDS": "0", **env},
                  log=log)
    try:
        ready_s = up.start()
        time.sleep(settle)
        assert up.proc is not None
        idle = measure_idle(seconds, root=up.proc.pid)  # tocsin up's tree, not this process
        idle["rss_by_kind"] = rss_by_kind(up.proc.pid)
        if burst_n:
            idle.update(burst(up, burst_n, after_s))
    finally:
        up.stop()
    idle["ready_s"] = round(ready_s, 1)
    log(f"{name}: {idle['cpu_pct_of_one_core']} % of one core ({idle['cpu_s_by_kind']}), "
        f"RSS {idle['rss_mb']} MB (PSS {idle['pss_mb']} MB), ready in {idle['ready_s']} s"
        + (f"; {after_s:.0f} s after a burst of {burst_n}: RSS {idle['after_burst_rss_mb']} MB"
           if burst_n else ""))
    return idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=70.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--burst", type=int, default=200_000,
                        help="Schedules delivered after the default's idle figures (0: none).")
    parser.add_argument("--after", type=float, default=60.0,
                        help="Seconds after the burst's last delivery to measure memory at.")
    parser.add_argument("--store", default="sqlite",
                        help="sqlite (default) or a postgresql:// URL of an empty database")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: bench/results/idle.json (idle-postgres.json on PostgreSQL)")
    args = parser.parse_args()
    store_url = None if args.store == "sqlite" else args.store
    if store_url is not None:
        attribute_server(store_url)
    args.out = args.out or (RESULTS if store_url is None else RESULTS_POSTGRES)
    out: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    out.update({"benchmark": "idle", "seconds": args.seconds, "store": args.store.split(":")[0],
                **run_stamp()})
    for name in args.variants.split(","):
        out[name] = run(name, VARIANTS[name], args.seconds, args.settle,
                        burst_n=args.burst if name == "default" else 0, after_s=args.after,
                        store_url=store_url)
    out["machine"] = machine_info()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    keys = ("cpu_pct_of_one_core", "rss_mb", "pss_mb", "ready_s", "after_burst_rss_mb")
    print(json.dumps({n: {k: out[n][k] for k in keys if k in out[n]}
                      for n in args.variants.split(",")}))


if __name__ == "__main__":
    main()
