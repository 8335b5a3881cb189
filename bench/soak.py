"""A soak on PostgreSQL: webhooks at a steady rate for ten minutes through a real ``tocsin up``,
beside a transaction held open for a minute.

    bench/run soak --store postgres [--rate 1000] [--minutes 10] [--hold-at-s 120]
                   [--hold-s 60]

A throw-away PostgreSQL 15 cluster on loopback (``.ci/postgres.sh``, with ``pg_stat_statements``
and ``autovacuum_naptime = 10s``), one ``tocsin up`` over it and one webhook receiver (nginx).
After a warm-up, ``rate x minutes x 60`` schedules of one webhook channel, due evenly over the
soak, are created through the store's bulk create before the first is due: the queue holds ten
minutes of work at the start, and every schedule is claimed and acknowledged (two new row
versions each) during the soak. ``--hold-at-s`` after the first due time another session runs
``BEGIN; SELECT txid_current()`` and sleeps ``--hold-s`` before it ends the transaction: while
it is open, vacuum removes nothing that changed after it began. Lateness = arrival in nginx's
access log - due time.

Writes ``bench/results/soak-postgres.json``: ``p99_ms_start`` (schedules due in the first
minute), ``p99_ms_end`` (the last minute), ``table_mb_start`` (the schedules table with its
indexes and TOAST, just before the first due time) and ``table_mb_end`` (after the last
delivery), every minute's p50/p99 and a sample of sizes and dead rows every 10 s. Targets
(issue 38): ``p99_ms_end`` <= 2 x ``p99_ms_start``, ``table_mb_end`` <= 1.5 x
``table_mb_start``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import REPO, lateness_summary, now_ms, run_phase, write_results
from bench.dispatch import _code_version, _met
from bench.lateness import PG_SCRIPT, ServerViews

RESULTS = REPO / "bench" / "results" / "soak-postgres.json"
PG_SETTINGS = ("-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all "
               "-c autovacuum_naptime=10s")
"""What the soak's cluster adds to PostgreSQL's defaults: the statements view, and autovacuum
looking every 10 s instead of every minute (docs/deploy.md, "Vacuum, and a transaction held
open")."""
CHUNK = 10_000
SAMPLE_S = 10.0
_SIZES = ("SELECT pg_total_relation_size('schedules'), pg_table_size('schedules'), "
          "pg_indexes_size('schedules'), pg_total_relation_size('destinations'), "
          "pg_total_relation_size('deliveries'), "
          "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'schedules'), "
          "(SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'schedules'), "
          "(SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'schedules')")


def log(message: str) -> None:
    print(f"[soak {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", default="postgres", choices=["postgres"])
    p.add_argument("--rate", type=int, default=1_000, help="webhooks due a second")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--hold-at-s", type=float, default=120.0,
                   help="when the held transaction begins, after the first due time")
    p.add_argument("--hold-s", type=float, default=60.0, help="how long it stays open")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


@contextmanager
def cluster() -> Iterator[tuple[str, Path]]:
    """A fresh PostgreSQL cluster: its URL and directory; stopped and removed afterwards."""
    import os

    env = {**os.environ, "TOCSIN_PG_DIR": "", "TOCSIN_PG_PORT": "",
           "TOCSIN_PG_SETTINGS": PG_SETTINGS}
    out = subprocess.run(["bash", str(PG_SCRIPT), "start"], env=env, capture_output=True,
                         text=True, check=True).stdout
    found = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines()
                 if line.startswith("export "))
    url, directory = found["TOCSIN_TEST_POSTGRES_URL"], Path(found["TOCSIN_PG_DIR"])
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        yield url, directory
    finally:
        subprocess.run(["bash", str(PG_SCRIPT), "stop", str(directory)], capture_output=True,
                       check=False)


def sizes(url: str) -> dict[str, Any]:
    """The schedules table's size (MB: with its indexes and TOAST, the heap, the indexes), the
    destinations' and the attempts' (which grow by design), dead and live rows."""
    import psycopg

    mb = 1024 * 1024
    with psycopg.connect(url, autocommit=True) as conn:
        r = conn.execute(_SIZES).fetchone()
        assert r is not None
    return {"table_mb": round(r[0] / mb, 1), "heap_mb": round(r[1] / mb, 1),
            "index_mb": round(r[2] / mb, 1), "destinations_mb": round(r[3] / mb, 2),
            "deliveries_mb": round(r[4] / mb, 1), "dead_rows": r[5], "live_rows": r[6],
            "autovacuums": r[7]}


class HeldTransaction:
    """``BEGIN; SELECT txid_current()`` in a session of its own at ``at_ms``, ended (rolled
    back) ``hold_s`` later: a report or a ``pg_dump`` left open."""

    def __init__(self, url: str, at_ms: int, hold_s: float) -> None:
        self.url, self.at_ms, self.hold_s = url, at_ms, hold_s
        self.began_ms = self.ended_ms = 0
        self.xid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="held-transaction", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        if self._stop.wait(max(0.0, (self.at_ms - now_ms()) / 1000)):
            return
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT txid_current()").fetchone()
            self.xid = int(row[0]) if row else None
            self.began_ms = now_ms()
            log(f"held transaction {self.xid} open for {self.hold_s:g}s")
            self._stop.wait(self.hold_s)
            conn.rollback()
            self.ended_ms = now_ms()
            log("held transaction ended")

    def join(self) -> None:
        self._thread.join()


def by_minute(due: list[int], done: list[int], first_due: int) -> list[dict[str, Any]]:
    """Lateness of the schedules due in each minute of the soak."""
    minutes: dict[int, list[int]] = defaultdict(list)
    for u, d in zip(due, done, strict=True):
        minutes[(u - first_due) // 60_000].append(d - u)
    return [{"minute": m, **lateness_summary(v)} for m, v in sorted(minutes.items())]


def soak(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from bench.receiver import Receiver
    from bench.tocsin_up import TocsinUp, UpTarget
    from tocsin.stores import open_store

    with ExitStack() as stack:
        url, directory = stack.enter_context(cluster())
        views = ServerViews(url, directory)
        receiver = Receiver(tmp).start()
        stack.callback(receiver.stop)
        up = TocsinUp(tmp, store_url=url, env={"TOCSIN_WEBHOOK_ALLOW": "127.0.0.1/32"}, log=log)
        stack.callback(up.stop)
        out: dict[str, Any] = {"ready_s": round(up.start(), 1)}
        store = open_store(up.store_url)
        stack.callback(store.close)
        target = UpTarget(up, store, tmp, receiver,
                          lambda phase: ("webhook", {"url": f"{receiver.url}/{phase}"}))
        target.by_receiver = True
        out["warmup"] = run_phase(target, "warmup", n=2_000, window_ms=2_000, wait_s=300,
                                  ingest_rate_hint=None, margin_ms=2_000, log=log)
        window_ms = int(args.minutes * 60_000)
        n = int(args.rate * args.minutes * 60)
        first_due = now_ms() + int(n / 8_000 * 1000) + 30_000
        dues = [first_due + window_ms * i // n for i in range(n)]
        started = time.perf_counter()
        for off in range(0, n, CHUNK):
            target.submit("soak", off, dues[off:off + CHUNK])
        log(f"{n} schedules created in {time.perf_counter() - started:.1f}s; first due in "
            f"{(first_due - now_ms()) / 1000:.1f}s")
        store.refresh_statistics()
        time.sleep(max(0.0, (first_due - now_ms() - 5_000) / 1000))
        out["start"] = sizes(url)
        log(f"start: {out['start']}")
        views.reset()
        held = HeldTransaction(url, first_due + int(args.hold_at_s * 1000), args.hold_s)
        timeline: list[dict[str, Any]] = []
        deadline = first_due + window_ms + 180_000
        base = receiver.delivered_total()
        while receiver.delivered_total() - base < n and now_ms() < deadline:
            time.sleep(SAMPLE_S)
            timeline.append({"t_s": round((now_ms() - first_due) / 1000),
                             "delivered": receiver.delivered_total() - base, **sizes(url)})
            if len(timeline) % 6 == 0:
                log(f"{timeline[-1]}")
        held.join()
        out["server"] = views.read((now_ms() - first_due) / 1000)
        out["end"] = sizes(url)
        log(f"end: {out['end']}")
        got = receiver.outcomes("soak")
        out["delivered"] = len(got.done_ms)
        out["schedules"] = n
        out["repeated_deliveries"] = got.extra.get("repeated_deliveries")
        out["minutes"] = by_minute(got.due_ms, got.done_ms, first_due)
        out["held"] = {"xid": held.xid, "began_s": round((held.began_ms - first_due) / 1000, 1),
                       "ended_s": round((held.ended_ms - first_due) / 1000, 1)}
        out["timeline"] = timeline
        return out


def main(argv: list[str] | None = None) -> None:
    import tempfile

    argv = sys.argv[1:] if argv is None else argv
    args = _args(argv)
    started = now_ms()
    with tempfile.TemporaryDirectory(prefix="tocsin-bench-soak-") as tmp:
        got = soak(args, Path(tmp))
    minutes = got["minutes"]
    doc: dict[str, Any] = {
        "p99_ms_start": minutes[0].get("p99") if minutes else None,
        "p99_ms_end": minutes[-1].get("p99") if minutes else None,
        "p50_ms_start": minutes[0].get("p50") if minutes else None,
        "p50_ms_end": minutes[-1].get("p50") if minutes else None,
        "table_mb_start": got["start"]["table_mb"],
        "table_mb_end": got["end"]["table_mb"],
        "delivered_ratio": round(got["delivered"] / got["schedules"], 4),
    }
    p99_ratio = (round(doc["p99_ms_end"] / max(doc["p99_ms_start"], 1), 2)
                 if doc["p99_ms_start"] is not None and doc["p99_ms_end"] is not None else None)
    size_ratio = round(doc["table_mb_end"] / max(doc["table_mb_start"], 0.1), 2)
    doc["targets"] = {"p99 at the end <= 2x the start": _met(p99_ratio, 2.0, at_most=True),
                      "table and indexes at the end <= 1.5x the start": _met(size_ratio, 1.5,
                                                                             at_most=True),
                      "all delivered": _met(doc["delivered_ratio"], 1.0, at_most=False)}
    doc["command"] = "bench/run soak " + " ".join(argv)
    doc["code"] = _code_version()
    doc["run_at"] = datetime.fromtimestamp(started / 1000, UTC).isoformat(timespec="seconds")
    doc["wall_s"] = round((now_ms() - started) / 1000, 1)
    doc["details"] = got
    write_results(doc, args.out)
    print(json.dumps({k: v for k, v in doc.items() if k not in ("details", "machine")},
                     indent=1))


if __name__ == "__main__":
    main()
