"""A stuck ordering key stays alone: 1 000 keys x 20 schedules to a webhook receiver, one
key's deliveries failing every time. The other 999 keys' lateness is measured with and
without the stuck key, side by side on this machine, and written to
bench/results/stuck-key.json.

    bench/run stuck_key
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.spark.session import spark_session
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.dispatch import running_dispatcher, wait_until
from tocsin.testing.receiver import Receiver

KEYS, PER_KEY = 1_000, 20


def run(spark: object, receiver: Receiver, *, stuck: bool) -> dict[str, float]:
    """One run; the lateness figures of the healthy keys."""
    base = Path(tempfile.mkdtemp(prefix="tocsin-stuck-"))
    store = SQLiteStore(base / "t.db", buckets=64)
    store.put_channel(ChannelSpec(name="ok", kind=ChannelKind.WEBHOOK, config={
        "url": receiver.url + "/ok", "concurrency": 32}))
    store.put_channel(ChannelSpec(name="bad", kind=ChannelKind.WEBHOOK, config={
        "url": receiver.url + "/bad", "max_attempts": 1000}))
    receiver.reset(by_path={"/bad": 503})
    now = time.time_ns() // 1_000_000
    start = now + 5_000
    items = [NewSchedule(channel="bad" if stuck and k == 0 else "ok", payload=b"{}",
                         due_ms=start + i * 500 + k, ordering_key=f"key-{k}")
             for i in range(PER_KEY) for k in range(KEYS)]
    store.create(items, now_ms=now)
    healthy = (KEYS - 1) * PER_KEY if stuck else KEYS * PER_KEY
    with running_dispatcher(spark, f"sqlite:///{base / 't.db'}", base / "ck",  # type: ignore[arg-type]
                            buckets=64, retry_base_ms=200, retry_cap_ms=1_000):
        wait_until(lambda: store.counts()[Status.DELIVERED] >= healthy, timeout_s=300,
                   interval_s=0.5, what="the healthy keys")
    late = sorted(s.lateness_ms or 0 for s in store.list_schedules(status=Status.DELIVERED,
                                                         limit=KEYS * PER_KEY))
    stuck_attempts = len([r for r in receiver.received(503)])
    store.close()
    return {"healthy_delivered": len(late), "lateness_p50_ms": late[len(late) // 2],
            "lateness_p99_ms": late[int(len(late) * 0.99)], "lateness_max_ms": late[-1],
            "lateness_mean_ms": round(statistics.fmean(late), 1),
            "stuck_key_failed_attempts": stuck_attempts}


def main() -> None:
    receiver = Receiver().start()
    spark = spark_session("local[2]", app_name="tocsin-bench-stuck-key")
    try:
        run(spark, receiver, stuck=False)  # warm-up: Spark's first batches are slow
        baseline = run(spark, receiver, stuck=False)
        with_stuck = run(spark, receiver, stuck=True)
    finally:
        spark.stop()  # type: ignore[attr-defined]
        receiver.stop()
    result = {"keys": KEYS, "per_key": PER_KEY, "baseline": baseline, "one_key_stuck": with_stuck,
              "p99_ratio_stuck_vs_baseline": round(
                  with_stuck["lateness_p99_ms"] / max(1, baseline["lateness_p99_ms"]), 2),
              "command": "bench/run stuck_key"}
    out = Path("bench/results/stuck-key.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    json.dump(result, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
