"""The channels benchmark: how fast and how punctually Tocsin delivers on each channel (file,
webhook, Kafka, RabbitMQ, SQS on moto's server, Redis Streams, NATS JetStream), and the same
webhook workload on two peers (Celery + Redis ETA tasks, APScheduler 3 with its SQLAlchemy job
store on SQLite), all POSTing to one fast receiver. ``sqs_vs_file``, ``redis_streams_vs_file``
and ``nats_vs_file`` compare each new kind's drain with the file channel's of the same run;
``sqs_vs_emulator`` compares the SQS drain with ``sqs_emulator_raw_per_s``, moto's server
alone (boto3 ``SendMessageBatch`` of 10 from 10 threads, just before the SQS phases), the
queue emptied every 0.1 s in both (``bench/services.py``, ``MotoSQS``).

``bench/run channels [--quick] [--only webhook,celery] [--pending N] [--update]``

Tocsin runs as a user runs it, ``tocsin up`` over a fresh SQLite store (``--store postgres``: a
new schema in the database at ``--store-url``), its
channels registered over HTTP. The webhook receiver is nginx (``bench/receiver.py``); a webhook
delivery's time is its arrival in nginx's access log, any other channel's is the
acknowledgement in the store (after the file write, Kafka ack or RabbitMQ publisher confirm).
Per channel, and per peer:

1. warm-up: ``--warmup`` messages due at once (the first batch after start is slow);
2. drain: ``--drain`` messages all due at one instant, a few seconds after their inserts end:
   the capacity, ``deliveries_per_s`` = delivered / (last delivery - due time);
3. half: capacity / 2 per second, due evenly over ``--half-s``: lateness p50/p99/max;
4. light: ``--light-rate`` per second for ``--light-s``, created ahead of time over HTTP
   (``POST /v1/schedules``; the peers' own API): lateness, the precision a user sees.

Then (Tocsin) ``--pending`` schedules due in 30 days are bulk-created into the same store and
the light phase runs again on the ``--pending-on`` channels. Each target runs in its own child
process, one after the other. Lateness = delivery time - due time. Results:
``bench/results/channels.json`` (``--quick``: ``channels-quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.channel_parts import KINDS, PEERS, run_part
from bench.common import REPO, machine_info, now_ms
from bench.dispatch import _code_version, _exit_on_sigterm, _met, _run_part, log

__all__ = ["main"]

QUICK = {"drain": 3_000, "warmup": 200, "half_s": 10.0, "light_s": 10.0, "pending": 20_000,
         "wait_s": 60.0, "quiet_below": 0.0}


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run channels", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(KINDS + PEERS),
                   help=f"comma-separated targets among {', '.join(KINDS + PEERS)}")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke test with small counts: {QUICK} (explicit options still win)")
    p.add_argument("--drain", type=int, help="messages due at once (default 200 000)")
    p.add_argument("--warmup", type=int, help="warm-up messages (default 2 000)")
    p.add_argument("--half-s", type=float, help="the half-capacity run lasts this (default 30)")
    p.add_argument("--light-rate", type=int, default=100, help="light load, messages/s")
    p.add_argument("--light-s", type=float, help="light load lasts this (default 60)")
    p.add_argument("--pending", type=int,
                   help="far-future schedules pending for the second light run (default 10 M; "
                        "0: skip)")
    p.add_argument("--pending-on", default="webhook",
                   help="channels whose light run is repeated with the pending schedules (not "
                        "the webhook: deliveries are counted with the store's counts(), slow "
                        "over millions)")
    p.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite",
                   help="Tocsin's store: a new SQLite file, or a new schema (dropped after) in "
                        "the PostgreSQL database at --store-url")
    p.add_argument("--store-url", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"),
                   help="PostgreSQL database for --store postgres (default "
                        "$TOCSIN_TEST_POSTGRES_URL)")
    p.add_argument("--webhook-config", default="{}",
                   help="extra webhook channel config, JSON (e.g. '{\"concurrency\": 64}')")
    p.add_argument("--kafka-partitions", type=int, default=4)
    p.add_argument("--celery-pool", default="prefork", help="prefork, threads, ...")
    p.add_argument("--celery-concurrency", type=int, default=2)
    p.add_argument("--apscheduler-threads", type=int, default=16)
    p.add_argument("--wait-s", type=float, help="wait this long after the last due (default 300)")
    p.add_argument("--settle-s", type=float, default=3600.0,
                   help="after a phase that ended undelivered, wait at most this for the rest "
                        "(Tocsin; the peers' queues are emptied instead)")
    p.add_argument("--quiet-below", type=float,
                   help="before each phase, wait until other processes use less than this %% "
                        "of one core (default 30; 0: do not wait)")
    p.add_argument("--quiet-wait-s", type=float, default=600.0)
    p.add_argument("--keep", action="store_true",
                   help="keep each part's scratch directory (stores, logs) after success")
    p.add_argument("--part-timeout-s", type=float, default=7200.0)
    p.add_argument("--out", type=Path)
    p.add_argument("--update", action="store_true",
                   help="keep the results file's figures of the targets this run does not run "
                        "(each kept figure is listed under kept_from, with its run's date)")
    p.add_argument("--part", help=argparse.SUPPRESS)
    p.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    full = {"drain": 200_000, "warmup": 2_000, "half_s": 30.0, "light_s": 60.0,
            "pending": 10_000_000, "wait_s": 300.0, "quiet_below": 30.0}
    for key, value in (QUICK if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.store == "postgres" and not a.store_url:
        p.error("--store postgres needs --store-url postgresql://... "
                "(or $TOCSIN_TEST_POSTGRES_URL)")
    a.targets = [t for t in a.only.split(",") if t]
    unknown = set(a.targets) - set(KINDS + PEERS)
    if unknown:
        p.error(f"--only: unknown {sorted(unknown)}; choose among {KINDS + PEERS}")
    return a


def _fig(result: dict[str, Any] | None, phase: str, key: str) -> Any:
    """``result[phase]``'s deliveries/s (``key='per_s'``) or lateness percentile."""
    got = (result or {}).get(phase) or {}
    if key == "per_s":
        return got.get("deliveries_per_s")
    return (got.get("lateness_ms") or {}).get(key)


def summary_row(result: dict[str, Any]) -> dict[str, Any]:
    """One target's comparable figures."""
    return {"drain_per_s": _fig(result, "drain", "per_s"),
            **{f"half_{k}_ms": _fig(result, "half", k) for k in ("p50", "p99", "max")},
            "half_rate_per_s": (result.get("half") or {}).get("rate_per_s"),
            **{f"light_{k}_ms": _fig(result, "light", k) for k in ("p50", "p99", "max")},
            **({f"light_pending_{k}_ms": _fig(result, "light_pending", k)
                for k in ("p50", "p99", "max")} if "light_pending" in result else {})}


def report(args: argparse.Namespace, argv: list[str], results: dict[str, Any],
           started: int, code: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: headline keys, targets, a summary per target, then the details."""
    tocsin = results.get("tocsin") or {}
    chans = tocsin.get("channels") or {}
    web = chans.get("webhook")
    peer = {name: (results.get(name) or {}).get("webhook") for name in PEERS}
    wd, cd = _fig(web, "drain", "per_s"), _fig(peer["celery"], "drain", "per_s")
    out: dict[str, Any] = {
        "webhook_drain_per_s": wd,
        "webhook_p99_ms_at_half": _fig(web, "half", "p99"),
        "light_p50_ms": _fig(web, "light", "p50"),
        "light_p99_ms": _fig(web, "light", "p99"),
        "light_p99_ms_10m_pending": _fig(web, "light_pending", "p99"),
        "pending_schedules": (tocsin.get("pending") or {}).get("schedules"),
        "file_drain_per_s": _fig(chans.get("file"), "drain", "per_s"),
        "kafka_drain_per_s": _fig(chans.get("kafka"), "drain", "per_s"),
        "rabbitmq_drain_per_s": _fig(chans.get("rabbitmq"), "drain", "per_s"),
        "sqs_drain_per_s": _fig(chans.get("sqs"), "drain", "per_s"),
        "sqs_emulator_raw_per_s": (tocsin.get("sqs_emulator") or {}).get("per_s"),
        "redis_streams_drain_per_s": _fig(chans.get("redis_streams"), "drain", "per_s"),
        "nats_drain_per_s": _fig(chans.get("nats"), "drain", "per_s"),
        "celery_webhook_per_s": cd,
        "apscheduler_webhook_per_s": _fig(peer["apscheduler"], "drain", "per_s"),
        "webhook_vs_celery": round(wd / cd, 2) if wd and cd else None,
        "store": args.store,
        "quick": args.quick,
    }
    fd = out["file_drain_per_s"]
    for kind in ("sqs", "redis_streams", "nats"):  # against the file channel, same run
        drain = out[f"{kind}_drain_per_s"]
        out[f"{kind}_vs_file"] = round(drain / fd, 3) if drain and fd else None
    raw = out["sqs_emulator_raw_per_s"]  # against the emulator alone, same run
    out["sqs_vs_emulator"] = round(out["sqs_drain_per_s"] / raw, 3) \
        if out["sqs_drain_per_s"] and raw else None
    out["targets"] = {
        "webhook drain >= 5000/s": _met(wd, 5_000, at_most=False),
        "webhook drain >= 5x Celery's": _met(out["webhook_vs_celery"], 5.0, at_most=False),
        "light p50 <= 20 ms": _met(out["light_p50_ms"], 20, at_most=True),
        "light p99 <= 100 ms": _met(out["light_p99_ms"], 100, at_most=True),
        "light p99 <= 100 ms with pending": _met(out["light_p99_ms_10m_pending"], 100,
                                                  at_most=True),
        "p99 <= 1 s at half capacity": _met(out["webhook_p99_ms_at_half"], 1_000, at_most=True),
        "file drain >= 20000/s": _met(out["file_drain_per_s"], 20_000, at_most=False),
    }
    out["summary"] = {**{f"tocsin-{k}": summary_row(v) for k, v in chans.items()},
                      **{k: summary_row(v) for k, v in peer.items() if v}}
    out["failed"] = {k: v["failed"] for k, v in results.items() if "failed" in v}
    out["machine"] = machine_info()
    out["command"] = "bench/run channels " + " ".join(argv)
    out["code"] = code
    out["run_at"] = datetime.fromtimestamp(started / 1000, UTC).isoformat(timespec="seconds")
    out["wall_s"] = round((now_ms() - started) / 1000, 1)
    out["details"] = results
    return out


def kept(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with ``old``'s headline figures where ``new`` has none (targets it did not
    run), and their summaries; ``kept_from`` names each kept figure's run."""
    doc = dict(new)
    was = dict(old.get("kept_from") or {})
    kept_from: dict[str, Any] = {}
    for key, value in old.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and \
                doc.get(key) is None:
            doc[key] = value
            kept_from[key] = was.get(key) or {
                "run_at": old.get("run_at"), "command": old.get("command"),
                "commit": (old.get("code") or {}).get("commit") or old.get("commit")}
    summary = dict(old.get("summary") or {})
    summary.update(doc.get("summary") or {})
    doc["summary"] = summary
    doc["kept_from"] = kept_from
    return doc


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _args(argv)
    _exit_on_sigterm()
    if args.part:
        args.part_out.write_text(json.dumps(run_part(args.part, args, log), indent=1))
        return
    from bench.store_target import scratch_dir

    scratch = scratch_dir("tocsin-bench-channels-")
    started, code = now_ms(), _code_version()
    parts = (["tocsin"] if set(args.targets) & set(KINDS) else []) + [
        p for p in PEERS if p in args.targets]
    results = {name: _run_part(name, args, argv, scratch, module="bench.channels")
               for name in parts}
    doc = report(args, argv, results, started, code)
    name = "channels" + ("" if args.store == "sqlite" else f"-{args.store}")
    out = args.out or REPO / "bench" / "results" / (
        f"{name}-quick.json" if args.quick else f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.update and out.exists():
        doc = kept(json.loads(out.read_text()), doc)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out}")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)  # the parts' JSON, now in the report
    print(json.dumps({k: v for k, v in doc.items() if k not in ("details", "machine")}, indent=1))


if __name__ == "__main__":
    main()
