"""The parts of the channels benchmark, each run in a child process of its own: ``tocsin``
(every selected channel, one ``tocsin up``), ``celery`` and ``apscheduler`` (the webhook peers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from bench.common import CHUNK, now_ms, run_phase, wait_for_quiet

__all__ = ["KINDS", "PEERS", "phases", "run_part"]

KINDS = ["file", "webhook", "kafka", "rabbitmq", "sqs", "redis_streams", "nats"]
PEERS = ["celery", "apscheduler"]
SQS_RAW_MESSAGES = 5_000
"""Messages the emulator's own figure sends (about 15 s at moto's pace here)."""
SQS_RAW_THREADS = 10
"""Requests in flight for the emulator's own figure: the SQS channel's default
``concurrency``, what one send of the dispatcher's has in flight."""
HTTP_RATE_HINT = 1_000.0
"""Creates/s over HTTP assumed when placing the light phase's first due time (pessimistic:
a schedule created after its due time would count as late)."""

Log = Callable[[str], None]


def phases(target: Any, args: argparse.Namespace, prefix: str, log: Log,
           before_light: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Warm-up, drain (capacity), half capacity, light load on ``target``; phase ``x`` is
    named ``<prefix>-x``."""
    def gate() -> dict[str, Any]:
        if not args.quiet_below:
            return {"skipped": True}
        return wait_for_quiet(args.quiet_below, args.quiet_wait_s, log)

    def phase(name: str, **kw: Any) -> dict[str, Any]:
        base = target.delivered_total()
        result = run_phase(target, f"{prefix}-{name}", log=log, **kw)
        if result["delivered"] < result["schedules"]:
            result["leftover"] = settle(target, base + result["schedules"], args, log)
        return result

    out: dict[str, Any] = {}
    # the first batches after a start can take minutes on a busy machine
    out["warmup"] = phase("warmup", n=args.warmup, window_ms=0,
                          wait_s=max(600.0, args.wait_s), ingest_rate_hint=None)
    out["drain"] = phase("drain", n=args.drain, window_ms=0, wait_s=args.wait_s, gate=gate,
                         ingest_rate_hint=out["warmup"]["ingest"]["per_s"])
    capacity = out["drain"]["deliveries_per_s"]
    if capacity:
        rate = capacity / 2
        out["half"] = phase("half", n=max(1, int(rate * args.half_s)),
                            window_ms=int(args.half_s * 1000), wait_s=args.wait_s, gate=gate,
                            ingest_rate_hint=out["drain"]["ingest"]["per_s"])
        out["half"]["rate_per_s"] = round(rate, 1)
    last = out.get("half") or out["drain"]
    hint = min(HTTP_RATE_HINT, last["ingest"]["per_s"])
    out["light"] = light(target, args, f"{prefix}-light", log, gate, before_light, hint)
    return out


def settle(target: Any, expected: int, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    """After a phase that ended before all was delivered: empty the queue when the target can
    (the peers), else wait for the rest (at most ``--settle-s``, or until nothing moved for a
    minute), so that the next phase does not measure this one's backlog."""
    if hasattr(target, "reset"):
        target.reset()
        return {"reset": True}
    started = time.monotonic()
    last, last_moved = target.delivered_total(), time.monotonic()
    while last < expected and time.monotonic() - started < args.settle_s:
        time.sleep(2)
        now = target.delivered_total()
        if now != last:
            last, last_moved = now, time.monotonic()
        elif time.monotonic() - last_moved > 60:
            break
    waited = round(time.monotonic() - started, 1)
    log(f"[{target.name}] waited {waited}s for the rest of the phase: {expected - last} left")
    return {"waited_s": waited, "still_undelivered": max(0, expected - last)}


def light(target: Any, args: argparse.Namespace, phase: str, log: Log,
          gate: Callable[[], dict[str, Any]], before: Callable[[str], None] | None,
          ingest_rate_hint: float = HTTP_RATE_HINT) -> dict[str, Any]:
    """``--light-rate`` per second for ``--light-s``, created ahead of time (the first due a
    few seconds after the last is expected to be created, at ``ingest_rate_hint``)."""
    if before:
        before(phase)
    base = target.delivered_total()
    result = run_phase(target, phase, n=int(args.light_rate * args.light_s),
                       window_ms=int(args.light_s * 1000), wait_s=args.wait_s, log=log,
                       gate=gate, ingest_rate_hint=ingest_rate_hint)
    result["rate_per_s"] = args.light_rate
    if result["delivered"] < result["schedules"]:
        result["leftover"] = settle(target, base + result["schedules"], args, log)
    return result


def run_part(name: str, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    """One part's result."""
    from bench.receiver import Receiver
    from bench.store_target import scratch_dir

    tmp = scratch_dir(f"tocsin-bench-{name}-")
    log(f"[{name}] scratch directory (logs, stores; removed after success unless --keep): {tmp}")
    with ExitStack() as stack:
        def cleanup(exc_type: type[BaseException] | None, *_: object) -> None:
            if exc_type is None and not args.keep:  # a 10 M-schedule store is gigabytes
                shutil.rmtree(tmp, ignore_errors=True)

        stack.push(cleanup)  # runs last; after a failure, the logs stay
        if name == "tocsin":
            return tocsin_part(args, tmp, stack, log)
        receiver = Receiver(tmp).start()
        stack.callback(receiver.stop)
        if name == "celery":
            from bench.peers.celery_dispatch import CeleryWebhookTarget, _redis_version

            target: Any = CeleryWebhookTarget(tmp, receiver, concurrency=args.celery_concurrency,
                                              pool=args.celery_pool, log=log)
            options = {"pool": args.celery_pool, "concurrency": args.celery_concurrency,
                       "broker": "redis (appendonly, fsync everysec)",
                       "redis_server": _redis_version()}
        elif name == "apscheduler":
            from bench.peers.apscheduler_webhook import ApschedulerTarget

            target = ApschedulerTarget(tmp, receiver, threads=args.apscheduler_threads, log=log)
            options = {**target.options, "apscheduler": target.version()}
        else:
            raise SystemExit(f"unknown part {name!r}")
        stack.callback(target.stop)
        result = phases(target, args, name, log)
        return {"webhook": result, "options": options}
    raise AssertionError("unreachable")


def tocsin_part(args: argparse.Namespace, tmp: Any, stack: ExitStack, log: Log) -> dict[str, Any]:
    """``tocsin up`` and the brokers of the selected channels; every channel in turn, then the
    light runs again over ``--pending`` far-future schedules."""
    from bench.receiver import Receiver
    from bench.services import MotoSQS, Nats, RabbitMQ, Redis, Tansu
    from bench.tocsin_up import TocsinUp, UpTarget
    from tocsin.stores import open_store

    kinds = [k for k in KINDS if k in args.targets]
    receiver = tansu = rabbit = None
    sqs = redis = nats = None
    if "webhook" in kinds:
        receiver = Receiver(tmp).start()
        stack.callback(receiver.stop)
    if "kafka" in kinds:
        tansu = Tansu(tmp).start()
        stack.callback(tansu.stop)
        tansu.create_topic("bench", args.kafka_partitions)
    if "rabbitmq" in kinds:
        rabbit = RabbitMQ(tmp).start()
        stack.callback(rabbit.stop)
    if "sqs" in kinds:
        sqs = MotoSQS(tmp).start()
        stack.callback(sqs.stop)
        sqs_url = sqs.create_queue("bench")
        stack.callback(sqs.keep_short(sqs_url))
    if "redis_streams" in kinds:
        redis = Redis(tmp).start()
        stack.callback(redis.stop)
    if "nats" in kinds:
        nats = Nats(tmp).start()
        stack.callback(nats.stop)
        nats.create_stream("BENCH", "bench")
    extra = json.loads(args.webhook_config)
    files = tmp / "channels"  # where file channels may write by default: $TOCSIN_HOME/channels
    files.mkdir(exist_ok=True)

    def config(phase: str) -> tuple[str, dict[str, Any]]:
        kind = phase.split("-", 1)[0]
        if kind == "webhook" and receiver is not None:
            return kind, {"url": f"{receiver.url}/{phase}", **extra}
        if kind == "kafka" and tansu is not None:
            return kind, {"bootstrap_servers": tansu.bootstrap, "topic": "bench"}
        if kind == "rabbitmq" and rabbit is not None:
            return kind, {"url": rabbit.url, "routing_key": "bench"}
        if kind == "sqs" and sqs is not None:
            return kind, {"queue_url": sqs_url, "access_key_id": "bench",
                          "secret_access_key": "bench"}
        if kind == "redis_streams" and redis is not None:
            return kind, {"url": redis.url, "stream": "bench", "maxlen": 1_000_000}
        if kind == "nats" and nats is not None:
            return kind, {"servers": nats.url, "subject": "bench"}
        return "file", {"path": str(files / f"{phase}.jsonl")}

    store_url = None
    if args.store == "postgres":
        from bench.services import postgres_schema
        from bench.store_target import _attribute_server

        store_url = stack.enter_context(postgres_schema(args.store_url))
        _attribute_server(store_url)  # the server's CPU is the store's work, counted as ours
    # the receiver is on loopback, which a webhook may reach only when allowed
    up = TocsinUp(tmp, store_url=store_url, env={"TOCSIN_WEBHOOK_ALLOW": "127.0.0.1/32"}, log=log)
    stack.callback(up.stop)
    out: dict[str, Any] = {"ready_s": round(up.start(), 1), "store": up.store_url}
    store = open_store(up.store_url)
    stack.callback(store.close)
    target = UpTarget(up, store, files, receiver, config)
    out["channels"] = {}
    for kind in kinds:
        target.by_receiver = kind == "webhook"
        if kind == "sqs" and sqs is not None:  # the peer: the same server, just before
            if args.quiet_below:
                wait_for_quiet(args.quiet_below, args.quiet_wait_s, log)
            out["sqs_emulator"] = sqs_emulator_raw(sqs.endpoint, sqs_url, log)
        out["channels"][kind] = phases(target, args, kind, log, before_light=target.http_phases.add)
    pending_on = [k for k in args.pending_on.split(",") if k in kinds]
    if args.pending and pending_on:
        out["pending"] = insert_pending(target, args.pending, log)
        for kind in pending_on:
            target.by_receiver = kind == "webhook"
            out["channels"][kind]["light_pending"] = light(
                target, args, f"{kind}-lightpending", log,
                lambda: wait_for_quiet(args.quiet_below, args.quiet_wait_s, log)
                if args.quiet_below else {"skipped": True}, target.http_phases.add)
    return out


def sqs_emulator_raw(endpoint: str, queue_url: str, log: Log) -> dict[str, Any]:
    """The SQS emulator alone, Tocsin's peer on the SQS channel: :data:`SQS_RAW_MESSAGES`
    messages shaped as the channel sends the bench's (the same bodies and attributes), as
    ``SendMessageBatch`` requests of 10 from :data:`SQS_RAW_THREADS` threads of one boto3
    client, as fast as the server answers."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from botocore.config import Config

    from tocsin.channels.sqs import attributes
    from tocsin.domain import Envelope, PayloadKind

    client = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint,
                          aws_access_key_id="bench", aws_secret_access_key="bench",
                          config=Config(max_pool_connections=SQS_RAW_THREADS,
                                        retries={"total_max_attempts": 1}))
    envs = [Envelope(schedule_id=f"raw{i}", delivery_id=f"raw{i}-1", attempt=1, epoch=1,
                     tenant="default", channel="sqs-raw", payload=b'{"n":%d}' % i,
                     payload_kind=PayloadKind.JSON, due_ms=now_ms()) for i in range(10)]
    entries = [{"Id": str(i), "MessageBody": e.to_json_bytes().decode(),
                "MessageAttributes": attributes(e)} for i, e in enumerate(envs)]
    failed = [0]

    def one(_: int) -> None:
        answer = client.send_message_batch(QueueUrl=queue_url, Entries=entries)
        failed[0] += len(answer.get("Failed", ()))

    started = time.perf_counter()
    with ThreadPoolExecutor(SQS_RAW_THREADS) as pool:
        list(pool.map(one, range(SQS_RAW_MESSAGES // 10)))
    took = time.perf_counter() - started
    per_s = round((SQS_RAW_MESSAGES - failed[0]) / took, 1)
    log(f"[sqs emulator] {SQS_RAW_MESSAGES} messages, {SQS_RAW_THREADS} threads: {per_s}/s")
    client.close()
    return {"messages": SQS_RAW_MESSAGES, "threads": SQS_RAW_THREADS, "failed": failed[0],
            "seconds": round(took, 2), "per_s": per_s}


def insert_pending(target: Any, n: int, log: Log) -> dict[str, Any]:
    """``n`` schedules due in 30 days, bulk-created through the store in chunks."""
    due = now_ms() + 30 * 86_400_000
    started = time.perf_counter()
    for off in range(0, n, CHUNK):
        target.submit("file-pending", off, [due] * min(CHUNK, n - off))
        if off and off % 1_000_000 == 0:
            log(f"[tocsin] {off:,} pending schedules inserted")
    took = time.perf_counter() - started
    log(f"[tocsin] {n:,} pending schedules in {took:.0f}s ({n / took:,.0f}/s)")
    time.sleep(10)  # let the dispatcher's first look at the new backlog pass
    return {"schedules": n, "insert_s": round(took, 1), "insert_per_s": round(n / took, 1)}
