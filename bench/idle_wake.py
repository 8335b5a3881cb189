"""Lateness of the first schedules after a quiet spell, with the keep-warm batch or without.

``bench/run idle_wake KEEP_WARM_MS IDLE_S`` (e.g. ``0 75`` against ``30000 75``): a dispatcher
and its relay on a fresh SQLite store, a webhook receiver on loopback; 100 schedules go out to
warm up, the dispatcher idles for IDLE_S, then 100 fall due 1 s after their creation. Prints
their lateness (p50, max). Spark stops Python workers idle for a minute; without keep-warm
batches the first schedules after a quiet spell wait for new ones.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tocsin.clock import SystemClock
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
from tocsin.spark.session import spark_session
from tocsin.stores import open_store
from tocsin.testing.dispatch import running_dispatcher, running_relay
from tocsin.testing.receiver import Receiver


def _burst(store: object, start_ms: int, clock: SystemClock) -> dict[str, int]:
    made = store.create([NewSchedule(channel="h", payload=b"{}",  # type: ignore[attr-defined]
                                     due_ms=start_ms + i * 10) for i in range(100)],
                        now_ms=clock.now_ms())
    return {s.id: s.due_ms for s, _ in made}


def main(keep_ms: int, idle_s: float) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="tocsin-bench-idle-"))
    url = f"sqlite:///{scratch / 'tocsin.db'}"
    store = open_store(url, buckets=32)
    receiver = Receiver().start()
    store.put_channel(ChannelSpec(name="h", kind=ChannelKind.WEBHOOK,
                                  config={"url": receiver.url + "/in"}))
    spark, clock = spark_session("local[11]"), SystemClock()
    with running_dispatcher(spark, url, scratch / "ck", buckets=32, keep_warm_ms=keep_ms), \
            running_relay(spark, url, scratch / "ck-relay", buckets=32, keep_warm_ms=keep_ms):
        _burst(store, clock.now_ms() + 5_000, clock)
        time.sleep(8)
        seen = len(receiver.records)
        time.sleep(idle_s)
        due = _burst(store, clock.now_ms() + 1_000, clock)
        time.sleep(12)
    late = sorted(r.at_ms - due[sid] for r in receiver.records[seen:]
                  if (sid := r.headers["webhook-id"].rsplit("-", 1)[0]) in due)
    print(f"keep_warm_ms {keep_ms}, idle {idle_s:g} s: {len(late)} delivered, "
          f"lateness p50 {late[len(late) // 2]} ms, max {late[-1]} ms")
    spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
