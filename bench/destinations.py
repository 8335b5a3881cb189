"""Many destinations, measured: the same webhook load on one destination and on ten thousand.

``tocsin up`` (API + Spark dispatcher) runs over a fresh store, with nginx as the receiver
(bench/receiver.py: its access log says when each schedule arrived). Two phases, side by side
in the same run and the same process:

* ``one``: ``--rate`` webhooks a second for ``--seconds`` to one destination;
* ``many``: the same load spread round-robin over ``--destinations`` webhook channels of
  ``--tenants`` tenants (each its own destination, registered before the phase).

While each phase runs, the threads and resident memory of every process of ``tocsin up`` are
sampled (/proc, every 0.5 s). Writes ``bench/results/destinations.json`` (merged by key, so
the store-side keys another run writes stay): ``p99_ms_1``, ``p99_ms_<N>``,
``received_ratio_<N>``, ``threads_peak_<N>`` (the Python processes, where the delivery engine
runs), ``threads_peak_<N>_all`` (JVM included), ``rss_mb_peak_<N>`` (the sum of the processes'
resident sets, the issue's measure; the phases start once the processes Spark started to plan
the queries are gone, ``--settle-s``, about 70 s after the start: their memory is in
``delivery_runs.settled``), ``pss_mb_peak_<N>`` (proportional: a page that forked
processes share counted once), and the same for one::

    bench/run destinations [--store sqlite|postgres] [--rate 1000] [--seconds 20]
                           [--destinations 10000] [--tenants 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    lateness_summary,
    now_ms,
    pss_kb,
    run_stamp,
    tree_sample,
    write_results,
)
from bench.receiver import Receiver
from bench.tocsin_up import TocsinUp
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
from tocsin.stores import open_store

RESULTS = REPO / "bench" / "results" / "destinations.json"
LEAD_MS = 4_000
"""Every row is written before the first falls due."""
BATCH = 10_000


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run destinations", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="sqlite", help="sqlite (default) or a postgresql:// URL")
    p.add_argument("--rate", type=int, default=1_000, help="webhooks a second, in all")
    p.add_argument("--seconds", type=int, default=20, help="how long each phase sends")
    p.add_argument("--destinations", type=int, default=10_000)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--settle-s", type=float, default=120.0,
                   help="before the phases, wait at most this long for the processes Spark "
                        "starts to plan the queries to go, as in a dispatcher that has run a "
                        "few minutes (0: measure beside them)")
    return p.parse_args(argv)


class Sampler:
    """Peak threads and resident memory of a process tree, sampled in a thread."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_threads = self.peak_threads_all = self.peak_rss_mb = 0
        self.threads_at_peak: dict[str, int] = {}
        """The Python processes' threads when their sum peaked, by kind of process."""
        self.rss_mb_at_peak: dict[str, int] = {}
        """Resident memory by kind of process when the sum peaked (JVM included)."""
        self.peak_pss_mb = 0
        """The peak of the processes' proportional set sizes: a page shared by forked
        processes (PySpark's daemons and their workers) counted once, where the RSS sum counts
        it in each."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            procs = tree_sample(self.root)
            python = every = rss = pss = 0
            by_kind: dict[str, int] = {}
            rss_by_kind: dict[str, int] = {}
            for pid, proc in procs.items():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                threads = int(status.split("Threads:", 1)[1].split()[0])
                every += threads
                rss += proc.rss_kb
                pss += pss_kb(pid)
                rss_by_kind[proc.kind] = rss_by_kind.get(proc.kind, 0) + proc.rss_kb // 1024
                if proc.kind != "jvm":
                    python += threads
                    by_kind[proc.kind] = by_kind.get(proc.kind, 0) + threads
            if python > self.peak_threads:
                self.peak_threads, self.threads_at_peak = python, by_kind
            self.peak_threads_all = max(self.peak_threads_all, every)
            if rss // 1024 > self.peak_rss_mb:
                self.peak_rss_mb, self.rss_mb_at_peak = rss // 1024, rss_by_kind
            self.peak_pss_mb = max(self.peak_pss_mb, pss // 1024)


def phase(up: TocsinUp, store: Any, receiver: Receiver, name: str,
          specs: list[ChannelSpec], args: argparse.Namespace) -> dict[str, Any]:
    """Send ``rate * seconds`` webhooks round-robin over ``specs``; what came of them."""
    n = args.rate * args.seconds
    start = now_ms() + LEAD_MS
    for off in range(0, n, BATCH):
        store.create([NewSchedule(channel=specs[i % len(specs)].name,
                                  tenant=specs[i % len(specs)].tenant, payload=b"{}",
                                  due_ms=start + i * 1000 // args.rate)
                      for i in range(off, min(n, off + BATCH))], now_ms=now_ms())
    slack = start - now_ms()
    print(f"[destinations] {name}: {n} schedules over {len(specs)} destinations written "
          f"{slack} ms before the first is due", flush=True)
    assert up.proc is not None
    deadline = time.monotonic() + slack / 1000 + args.seconds + 60
    with Sampler(up.proc.pid) as sampler:
        while time.monotonic() < deadline:
            if len(receiver.outcomes(name).done_ms) >= n:
                break
            time.sleep(0.5)
    got = receiver.outcomes(name)
    lateness = [d - due for d, due in zip(got.done_ms, got.due_ms, strict=True)]
    # where it went: due -> claimed, claimed -> acknowledged (from the store's rows)
    rows = [s for s in store.list_schedules(due_from_ms=start,
                                            due_to_ms=start + args.seconds * 1000, limit=n)
            if s.claimed_ms]
    # and of one in ten, from the attempt log: claimed -> the send's start -> its answer
    attempts = [(s, a) for s in rows[::10] for a in store.deliveries(s.id, tenant=s.tenant)[:1]]
    staged = {"claim": lateness_summary([s.claimed_ms - s.due_ms for s in rows]),
              "to_send": lateness_summary([a.started_ms - s.claimed_ms for s, a in attempts]),
              "send": lateness_summary([a.ended_ms - a.started_ms for s, a in attempts]),
              "acknowledged": lateness_summary([s.delivered_ms - s.claimed_ms for s in rows
                                                if s.delivered_ms])}
    out = {"sent": n, "received": len(lateness), "lateness": lateness_summary(lateness),
           "setup_slack_ms": slack, "threads_peak": sampler.peak_threads,
           "threads_peak_all": sampler.peak_threads_all, "rss_mb_peak": sampler.peak_rss_mb,
           "pss_mb_peak": sampler.peak_pss_mb,
           "threads_at_peak": sampler.threads_at_peak, "rss_mb_at_peak": sampler.rss_mb_at_peak,
           "stages": staged, **got.extra}
    print(f"[destinations] {name}: {json.dumps(out)}", flush=True)
    return out


_START_PLANNERS = tuple(f"pyspark.sql.worker.{name}".encode() for name in (
    "lookup_data_sources", "create_data_source", "plan_data_source_read",
    "write_into_data_source"))
"""The Python processes Spark starts to plan a query's data sources when it starts: they stay
until Spark closes their idle workers (a minute, hard-coded) and their daemons follow
(``tocsin.spark.site.sitecustomize``)."""


def settle(root: int, *, timeout_s: float) -> dict[str, Any]:
    """Wait (at most ``timeout_s``) until the start's planners are gone, as they are in a
    dispatcher that has run for a few minutes; their resident memory at first, and the wait."""
    def planners() -> dict[int, int]:
        found = {}
        for pid, proc in tree_sample(root).items():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if any(name in cmd for name in _START_PLANNERS):
                found[pid] = proc.rss_kb
        return found

    started, first = time.monotonic(), planners()
    while planners() and time.monotonic() - started < timeout_s:
        time.sleep(1)
    return {"start_planners": len(first), "start_planners_rss_mb": sum(first.values()) // 1024,
            "settled_s": round(time.monotonic() - started, 1), "settled": not planners()}


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs: dict[str, Any] = {}
    settled: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tocsin-destinations-") as tmp:
        receiver = Receiver(Path(tmp)).start()
        url = None if args.store == "sqlite" else args.store
        up = TocsinUp(Path(tmp), store_url=url, env={"TOCSIN_BUCKETS": "64"}, log=print)
        store: Any = None
        try:
            ready = up.start()
            store = open_store(up.store_url, buckets=64)
            one = [ChannelSpec(name="one", kind=ChannelKind.WEBHOOK, tenant="solo",
                               config={"url": f"{receiver.url}/one"})]
            many = [ChannelSpec(name=f"d{i // args.tenants:05d}", kind=ChannelKind.WEBHOOK,
                                tenant=f"t{i % args.tenants:03d}",
                                config={"url": f"{receiver.url}/many"})
                    for i in range(args.destinations)]
            started = time.monotonic()
            for spec in one + many:
                store.put_channel(spec)
            print(f"[destinations] {len(many) + 1} channels registered in "
                  f"{time.monotonic() - started:.1f}s", flush=True)
            assert up.proc is not None
            settled = settle(up.proc.pid, timeout_s=args.settle_s)
            print(f"[destinations] start's planners: {json.dumps(settled)}", flush=True)
            runs["one"] = phase(up, store, receiver, "one", one, args)
            runs["many"] = phase(up, store, receiver, "many", many, args)
        finally:
            if store is not None:
                store.close()
            up.stop()
            receiver.stop()
    n = args.destinations
    for label, run in (("1", runs.get("one")), (str(n), runs.get("many"))):
        if run is None:
            continue
        results[f"p99_ms_{label}"] = run["lateness"].get("p99")
        results[f"p50_ms_{label}"] = run["lateness"].get("p50")
        results[f"received_ratio_{label}"] = round(run["received"] / run["sent"], 4)
        results[f"threads_peak_{label}"] = run["threads_peak"]
        results[f"threads_peak_{label}_all"] = run["threads_peak_all"]
        results[f"rss_mb_peak_{label}"] = run["rss_mb_peak"]
        results[f"pss_mb_peak_{label}"] = run["pss_mb_peak"]
    if results.get("p99_ms_1") and results.get(f"p99_ms_{n}") is not None:
        results[f"p99_ratio_{n}"] = round(results[f"p99_ms_{n}"] / results["p99_ms_1"], 2)
    kept = {k: results[k] for k in ("date", "commit") if k in results}
    stamp = run_stamp()
    results["delivery_runs"] = {"args": vars(args), "ready_s": round(ready, 1), "runs": runs,
                                "settled": settled, **stamp}
    # The file's date and commit are the claims' run's: the summary stamps these figures
    # with this run's.
    results["kept_from"] = {**results.get("kept_from", {}), **{
        key: {"run_at": stamp["date"], "commit": stamp["commit"]} for key in results
        if key.startswith(("p99_", "p50_", "received_", "threads_", "rss_", "pss_"))}}
    write_results(results, RESULTS)
    if kept:  # the file's date and commit stay those of the claims' run it merges with
        RESULTS.write_text(json.dumps({**results, **kept}, indent=2) + "\n")
    print(json.dumps({k: v for k, v in results.items()
                      if k.startswith(("p99", "received", "threads", "rss"))}))


if __name__ == "__main__":
    main()
