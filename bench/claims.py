"""A claim's cost beside idle destinations, on SQLite and PostgreSQL, in one run.

    bench/run claims [--postgres postgresql://...] [--idle 50000] [--claims 200]

Two stores of each kind (new SQLite files; new schemas of the PostgreSQL database, the URL
from ``--postgres`` or ``TOCSIN_TEST_POSTGRES_URL``) hold the same destination with due
schedules; one of them also ``--idle`` more destinations (100 tenants, a channel each), each
with a schedule due in a day. A claim takes 10 of the destination's due rows over every
bucket, as a hand-over window's claim does, on each store in turn; the figure is the median of
``--claims`` claims (and of the wake-up's ``next_due_ms`` and the window's peek beside it). Target:
``<store>_claim_ms_50000_idle`` within 2x ``<store>_claim_ms_1``. The keys are merged into
``bench/results/destinations.json`` (``bench/run destinations`` writes the file's other keys).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import machine_info, run_stamp
from tocsin.abc import Store
from tocsin.domain import NewSchedule
from tocsin.stores import open_store

RESULTS = Path(__file__).parent / "results" / "destinations.json"
BUCKETS = 64
DAY_MS = 86_400_000
BATCH = 5_000


def _ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _due(store: Store, now: int, n: int) -> None:
    """``n`` schedules of the one busy destination, due a second ago."""
    store.create([NewSchedule(channel="busy", tenant="t-busy", payload=b"{}",
                              due_ms=now - 1_000 + i % 500) for i in range(n)], now_ms=now - 2_000)


def _idle(store: Store, now: int, n: int) -> None:
    """``n`` destinations (100 tenants), each with one schedule due in a day."""
    for lo in range(0, n, BATCH):
        store.create([NewSchedule(channel=f"c{i}", tenant=f"t{i % 100}", payload=b"{}",
                                  due_ms=now + DAY_MS + i) for i in range(lo, min(n, lo + BATCH))],
                     now_ms=now)


def _timings(store: Store, now: int) -> tuple[float, float, float]:
    """Milliseconds of a claim of 10 due rows, of ``next_due_ms`` and of the peek."""
    epoch = store.next_epoch()

    def claim() -> None:
        store.claim(epoch=epoch, bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=now,
                    now_ms=now, lease_ms=60_000, limit=10, replay=False)

    return (_ms(claim), _ms(lambda: store.next_due_ms(now_ms=now, lease_ms=60_000)),
            _ms(lambda: store.next_claimable_ms(bucket_lo=0, bucket_hi=BUCKETS - 1,
                                                until_ms=now + 2_000, now_ms=now,
                                                lease_ms=60_000)))


def _side_by_side(one: Store, idle: Store, now: int, claims: int) -> dict[str, list[float]]:
    """Medians of :func:`_timings` on both stores, their claims taken in turn (so a busy
    moment of the machine falls on both alike)."""
    times: dict[str, list[list[float]]] = {"one": [[], [], []], "idle": [[], [], []]}
    for _ in range(claims):
        for name, store in (("one", one), ("idle", idle)):
            for column, ms in zip(times[name], _timings(store, now), strict=True):
                column.append(ms)
    return {name: [statistics.median(c) for c in columns] for name, columns in times.items()}


def _stores(postgres: str) -> Iterator[tuple[str, str, str]]:
    """Each store's kind and the URLs of two new, empty ones (gone after the next step)."""
    from bench.services import postgres_schema

    with tempfile.TemporaryDirectory(prefix="tocsin-claims-") as tmp:
        yield ("sqlite", f"sqlite:///{Path(tmp) / 'one.db'}", f"sqlite:///{Path(tmp) / 'idle.db'}")
    with postgres_schema(postgres) as one, postgres_schema(postgres) as idle:
        yield ("postgres", one, idle)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--postgres", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"),
                   help="a PostgreSQL database (a schema of its own is made and dropped)")
    p.add_argument("--idle", type=int, default=50_000)
    p.add_argument("--claims", type=int, default=200)
    args = p.parse_args()
    if not args.postgres:
        raise SystemExit("bench/run claims needs --postgres postgresql://... (or "
                         "TOCSIN_TEST_POSTGRES_URL): both stores run in one run")
    out: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    now = int(time.time() * 1000)
    for kind, one_url, idle_url in _stores(args.postgres):
        one, idle = open_store(one_url, buckets=BUCKETS), open_store(idle_url, buckets=BUCKETS)
        try:
            _idle(idle, now, args.idle)
            for store in (one, idle):
                _due(store, now, args.claims * 10 + 500)
                store.refresh_statistics()
            got = _side_by_side(one, idle, now, args.claims)
        finally:
            one.close()
            idle.close()
        key = f"{args.idle}_idle"
        (claim_1, due_1, peek_1), (claim_n, due_n, peek_n) = got["one"], got["idle"]
        out[f"{kind}_claim_ms_1"] = round(claim_1, 3)
        out[f"{kind}_claim_ms_{key}"] = round(claim_n, 3)
        out[f"{kind}_claim_ratio"] = round(claim_n / claim_1, 2)
        out[f"{kind}_next_due_ms_1"] = round(due_1, 3)
        out[f"{kind}_next_due_ms_{key}"] = round(due_n, 3)
        out[f"{kind}_peek_ms_1"] = round(peek_1, 3)
        out[f"{kind}_peek_ms_{key}"] = round(peek_n, 3)
        print(f"{kind}: claim {claim_1:.3f} -> {claim_n:.3f} ms (x{claim_n / claim_1:.2f}); "
              f"next_due {due_1:.3f} -> {due_n:.3f} ms; peek {peek_1:.3f} -> {peek_n:.3f} ms",
              flush=True)
    out["claims_machine"] = machine_info()
    out.update(run_stamp())  # the file's date and commit are this run's (see destinations.py)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
