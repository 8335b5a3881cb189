"""Recurring schedules at scale: 10 000 rules firing every minute.

Two measurements, written to bench/results/recurring.json:

1. **Expansion cost** over 10 simulated minutes: Tocsin's expander (:func:`expand_due`, what the
   Spark expansion query runs on each executor) turns every firing of 10 000 ``* * * * *`` rules
   between ``t0`` and ``t0 + 10 min`` (plus the 10-minute horizon) into stored schedules, with
   the clock stepped a minute at a time. Side by side, the **peer**: a minimal hand-written
   expander doing the same work with nothing else (cronsim for the times, one executemany into
   a bare SQLite table). ``firings_per_s`` is firings expanded per second of wall time.
2. **Delivery lateness** in real time: the same 10 000 rules, the Spark expansion query and the
   dispatcher (``local[*]``, file channel) running for ``--minutes`` real minute boundaries;
   ``lateness_p99_ms`` is the 99th percentile of (delivered - due) over every firing's message.
   Its peer, in the same run on the same channel: as many one-off schedules due together at
   each half minute between the boundaries (``oneoff_p99_ms``); the target is recurring
   firings as punctual as one-off schedules: ``lateness_p99_ms`` at most 1.2 times
   ``oneoff_p99_ms``.

    bench/run recurring [--rules 10000] [--minutes 2]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cronsim import CronSim

from bench.common import lateness_summary, machine_info, run_stamp
from tocsin.dispatcher.expansion import expand_due
from tocsin.domain import (
    ChannelKind,
    ChannelSpec,
    CronTrigger,
    NewSchedule,
    Recurring,
    Status,
)
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.dispatch import running_dispatcher, running_expander, wait_until

MIN = 60_000
HORIZON = 10 * MIN
RESULTS = Path(__file__).parent / "results" / "recurring.json"


def _now() -> int:
    return time.time_ns() // 1_000_000


def _rules(store: SQLiteStore, n: int, *, now_ms: int) -> None:
    trigger = CronTrigger.parse("* * * * *", "UTC")
    for i in range(n):
        store.create_recurring(Recurring(id=f"rec-{i:06d}", trigger=trigger, channel="out",
                                         payload=b'{"tick": %d}' % i), now_ms=now_ms)


def expansion_cost(n: int, minutes: int) -> dict[str, Any]:
    """Tocsin's expander over ``minutes`` simulated minutes."""
    base = Path(tempfile.mkdtemp(prefix="tocsin-rec-"))
    store = SQLiteStore(base / "t.db", buckets=64)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                  config={"path": str(base / "out.jsonl")}))
    t0 = (_now() // MIN) * MIN
    _rules(store, n, now_ms=t0)
    firings = messages = 0
    started = time.perf_counter()
    for m in range(minutes + 1):
        tally = expand_due(store, bucket_lo=0, bucket_hi=63, now_ms=t0 + m * MIN,
                           horizon_ms=HORIZON)
        firings += tally.firings
        messages += tally.messages
    seconds = time.perf_counter() - started
    stored = store.counts()[Status.PENDING]
    store.close()
    assert stored == messages, (stored, messages)
    return {"firings": firings, "seconds": round(seconds, 3),
            "firings_per_s": round(firings / seconds, 1),
            "us_per_firing": round(seconds / firings * 1e6, 1)}


def peer_expansion_cost(n: int, minutes: int) -> dict[str, Any]:
    """The peer: cronsim + one executemany per step into a bare table, nothing else."""
    base = Path(tempfile.mkdtemp(prefix="tocsin-rec-peer-"))
    db = sqlite3.connect(base / "peer.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE s (id TEXT PRIMARY KEY, due_ms INTEGER, payload BLOB)")
    t0 = (_now() // MIN) * MIN
    until = {i: t0 for i in range(n)}
    firings = 0
    started = time.perf_counter()
    for m in range(minutes + 1):
        now = t0 + m * MIN
        rows = []
        for i in range(n):
            start = datetime.fromtimestamp(until[i] / 1000, UTC)
            for t in CronSim("* * * * *", start):
                ms = int(t.timestamp() * 1000)
                if ms > now + HORIZON:
                    break
                if ms > until[i]:
                    rows.append((f"rec-{i}:{ms}:0", ms, b'{"tick": %d}' % i))
            until[i] = now + HORIZON
        db.execute("BEGIN")
        db.executemany("INSERT OR IGNORE INTO s VALUES (?, ?, ?)", rows)
        db.execute("COMMIT")
        firings += len(rows)
    seconds = time.perf_counter() - started
    db.close()
    return {"firings": firings, "seconds": round(seconds, 3),
            "firings_per_s": round(firings / seconds, 1),
            "us_per_firing": round(seconds / firings * 1e6, 1)}


def delivery_lateness(n: int, minutes: int) -> dict[str, Any]:
    """Real minutes of 10 000 rules through the expansion query and the dispatcher."""
    from tocsin.spark.session import spark_session

    base = Path(tempfile.mkdtemp(prefix="tocsin-rec-live-"))
    store = SQLiteStore(base / "t.db", buckets=64)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                  config={"path": str(base / "out.jsonl")}))
    _rules(store, n, now_ms=_now())
    url = f"sqlite:///{base / 't.db'}"
    spark = spark_session("local[*]")
    with running_expander(spark, url, base / "ck-x", buckets=64, partitions=4), \
            running_dispatcher(spark, url, base / "ck", buckets=64, partitions=4,
                               trigger_seconds=0.5):
        # Steady state: measure from the first minute after the cold start's expansion of
        # every rule's first horizon (10 firings each) has landed.
        wait_until(lambda: (store.next_expansion_ms() or 0) > _now(), timeout_s=300,
                   interval_s=0.5, what="the first expansion")
        first = (_now() // MIN + 1) * MIN
        last = first + (minutes - 1) * MIN
        _one_offs(store, n, [first + m * MIN + MIN // 2 for m in range(minutes)])
        print(f"waiting for {minutes} minute boundaries from "
              f"{datetime.fromtimestamp(first / 1000, UTC):%H:%M:%S}", file=sys.stderr)
        wait_until(lambda: _now() > last + 5_000, timeout_s=(minutes + 2) * 60, interval_s=1)
        wait_until(lambda: _delivered(store, first, last) >= n * minutes, timeout_s=300,
                   interval_s=1, what="every firing delivered")
        wait_until(lambda: _one_offs_delivered(store) >= n * minutes, timeout_s=300,
                   interval_s=1, what="every one-off schedule delivered")
    spark.stop()
    rows = store._conn.execute(
        "SELECT d.lateness_ms FROM deliveries d JOIN schedules s ON s.id = d.schedule_id "
        "WHERE s.firing_ms BETWEEN ? AND ? AND d.outcome = 'delivered'",
        (first, last)).fetchall()
    one_off = store._conn.execute(
        "SELECT d.lateness_ms FROM deliveries d JOIN schedules s ON s.id = d.schedule_id "
        "WHERE s.recurring_id IS NULL AND d.outcome = 'delivered'").fetchall()
    store.close()
    return {"minutes": minutes, "deliveries": len(rows),
            "lateness_ms": lateness_summary([r[0] for r in rows]),
            "oneoff_deliveries": len(one_off),
            "oneoff_lateness_ms": lateness_summary([r[0] for r in one_off])}


def _one_offs(store: SQLiteStore, n: int, instants: list[int]) -> None:
    """``n`` one-off schedules due at each of ``instants``, on the rules' channel."""
    for due_ms in instants:
        for start in range(0, n, 1_000):
            store.create([NewSchedule(channel="out", payload=b'{"once": %d}' % i,
                                      due_ms=due_ms)
                          for i in range(start, min(n, start + 1_000))], now_ms=_now())


def _one_offs_delivered(store: SQLiteStore) -> int:
    row = store._conn.execute(
        "SELECT count(*) FROM schedules WHERE recurring_id IS NULL "
        "AND status = 'DELIVERED'").fetchone()
    return int(row[0])


def _delivered(store: SQLiteStore, first: int, last: int) -> int:
    row = store._conn.execute(
        "SELECT count(*) FROM schedules WHERE firing_ms BETWEEN ? AND ? "
        "AND status = 'DELIVERED'", (first, last)).fetchone()
    return int(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=2,
                        help="real minute boundaries to deliver (simulated: always 10)")
    args = parser.parse_args()
    tocsin = expansion_cost(args.rules, 10)
    peer = peer_expansion_cost(args.rules, 10)
    print(f"expansion: tocsin {tocsin['firings_per_s']}/s, peer {peer['firings_per_s']}/s",
          file=sys.stderr)
    live = delivery_lateness(args.rules, args.minutes)
    result = {
        "benchmark": "recurring", **run_stamp(),
        "rules": args.rules, "cron": "* * * * *", "horizon_s": HORIZON // 1000,
        "firings_per_s": tocsin["firings_per_s"],
        "lateness_p99_ms": live["lateness_ms"].get("p99"),
        "oneoff_p99_ms": live["oneoff_lateness_ms"].get("p99"),
        "lateness_ratio_vs_oneoff": (
            round(live["lateness_ms"]["p99"] / max(live["oneoff_lateness_ms"]["p99"], 1), 2)
            if live["lateness_ms"].get("p99") is not None
            and live["oneoff_lateness_ms"].get("p99") is not None else None),
        "targets": {"lateness_ratio_vs_oneoff": 1.2},
        "expansion": tocsin, "peer_expansion": peer,
        "expansion_ratio_vs_peer": round(tocsin["firings_per_s"] / peer["firings_per_s"], 2),
        "delivery": live,
        "floor": {"druva_firings_per_s": 58, "sla_ms": 60_000},
        "machine": machine_info(),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("firings_per_s", "lateness_p99_ms", "oneoff_p99_ms",
                                             "lateness_ratio_vs_oneoff",
                                             "expansion_ratio_vs_peer")}))


if __name__ == "__main__":
    main()
