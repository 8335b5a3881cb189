"""Peer "poller": Tocsin's own store and delivery code in one plain Python process, no Spark.

The loop is what the Spark query does, minus Spark: when something is due, take an epoch,
claim the due rows of every bucket (``store.claim``), deliver them to their channels and
acknowledge them (``DispatchCore.deliver``, :mod:`tocsin.dispatcher.core`); otherwise sleep
``--interval-s``. Its GC is tuned as in Tocsin's processes that deliver
(:func:`tocsin.spark.worker.tune_gc`). It runs over the same SQLite schema, so its figures are
the floor the store and the channel set, and the gap to Tocsin's is what Spark costs (or buys,
once there are many machines).

``python -m bench.peers.poller_dispatch --store-url URL`` runs the loop until SIGTERM;
``run()`` is the benchmark part (``bench/run dispatch --peer poller``).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.common import REPO, stop_group
from tocsin.domain.defaults import BUCKETS

__all__ = ["run", "serve"]


def serve(store_url: str, *, buckets: int, interval_s: float, limit: int,
          lease_ms: int = 120_000) -> None:
    """Claim, deliver and acknowledge due schedules until SIGTERM."""
    from tocsin.clock import SystemClock
    from tocsin.dispatcher.core import DispatchCore
    from tocsin.dispatcher.options import DispatchOptions
    from tocsin.spark.worker import tune_gc
    from tocsin.stores import open_store

    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    tune_gc()  # as in every Tocsin process that delivers
    store = open_store(store_url, buckets=buckets)
    clock = SystemClock()
    core = DispatchCore(store, clock=clock, options=DispatchOptions(
        store_url=store_url, buckets=buckets, lease_ms=lease_ms))
    while not stopping:
        now = clock.now_ms()
        due = store.next_due_ms(now_ms=now, lease_ms=lease_ms)
        if due is None or due > now:
            time.sleep(interval_s)
            continue
        rows = store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=store.buckets - 1,
                           until_ms=now, now_ms=now, lease_ms=lease_ms, limit=limit)
        if rows:
            core.deliver(rows)
    core.close()
    store.close()


def run(args: argparse.Namespace, *, procedure: Callable[[Any, argparse.Namespace], dict[str, Any]],
        log: Callable[[str], None]) -> dict[str, Any]:
    """The benchmark part: a fresh store, the poller in a child process, the procedure."""
    from bench.store_target import StoreTarget, open_bench_store, scratch_dir

    tmp = scratch_dir("tocsin-bench-poller-")
    url, store = open_bench_store(args.store, args.store_url, tmp, buckets=args.buckets)
    target = StoreTarget("poller", store, tmp)
    interval_s, limit = 0.2, 20_000
    with (tmp / "poller.log").open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.peers.poller_dispatch", "--store-url", url,
             "--buckets", str(args.buckets), "--interval-s", str(interval_s),
             "--limit", str(limit)],
            cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    log(f"[poller] pid {proc.pid}, store {url}")
    try:
        out = procedure(target, args)
        out["options"] = {"interval_s": interval_s, "claim_limit": limit, "store": url,
                          "processes": 1}
        return out
    finally:
        stop_group(proc)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store-url", required=True)
    p.add_argument("--buckets", type=int, default=BUCKETS)
    p.add_argument("--interval-s", type=float, default=0.2)
    p.add_argument("--limit", type=int, default=20_000)
    a = p.parse_args()
    serve(a.store_url, buckets=a.buckets, interval_s=a.interval_s, limit=a.limit)


if __name__ == "__main__":
    main()
