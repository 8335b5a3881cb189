"""Peer "celery": the same messages as Celery ETA tasks on Redis.

Each message is ``deliver.apply_async((phase, n, due_ms), eta=due)``; one Celery worker with a
prefork pool of ``--celery-concurrency`` processes (2 on this 2-core machine) runs the task,
which appends the message as a JSON line, with the time it ran, to one file. Redis is Debian's
``redis-server`` on a free 127.0.0.1 port, with an append-only file synced every second (about
what SQLite's WAL with ``synchronous=NORMAL`` promises), started and stopped by the benchmark.

The module is also the Celery app the worker loads (``celery -A bench.peers.celery_dispatch``):
the broker URL and the output file come from ``BENCH_BROKER_URL`` and ``BENCH_OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from celery import Celery

from bench.common import REPO, Outcomes, free_port, stop_group
from bench.receiver import Receiver

__all__ = ["CeleryWebhookTarget", "app", "deliver", "post", "run"]

app = Celery("tocsin_bench_peer",
             broker=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json", accept_content=["json"], task_ignore_result=True,
    timezone="UTC", enable_utc=True, broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False, worker_send_task_events=False,
)

_out: IO[bytes] | None = None
_http: Any = None


@app.task(name="bench.deliver", ignore_result=True)  # type: ignore[untyped-decorator]
def deliver(phase: str, n: int, due_ms: int) -> None:
    """Append the message, with the time it ran, as one JSON line (one write: O_APPEND keeps
    the pool processes' lines whole)."""
    global _out
    ran_ms = time.time_ns() // 1_000_000
    if _out is None:
        _out = open(os.environ["BENCH_OUT"], "ab", buffering=0)  # noqa: SIM115 - lives with the process
    _out.write(json.dumps({"phase": phase, "n": n, "due_ms": due_ms, "ran_ms": ran_ms},
                          separators=(",", ":")).encode() + b"\n")


@app.task(name="bench.post", ignore_result=True)  # type: ignore[untyped-decorator]
def post(phase: str, n: int, due_ms: int) -> None:
    """POST the message to the receiver at ``BENCH_POST_URL``, as Tocsin's webhook channel
    would (same body, same headers), on a kept-alive connection of this pool process."""
    global _http
    import httpx

    from bench.receiver import peer_request

    if _http is None:
        _http = httpx.Client(base_url=os.environ["BENCH_POST_URL"], timeout=10)
    path, body, headers = peer_request(phase, n, due_ms)
    _http.post(path, content=body, headers=headers).raise_for_status()


class CeleryTarget:
    """Redis and a Celery worker, started here and stopped by PID."""

    name = "celery"
    lead_factor = 0.75  # the worker takes in the ETA messages while they are being published

    def __init__(self, tmp: Path, *, concurrency: int, log: Callable[[str], None],
                 pool: str = "prefork", env: dict[str, str] | None = None) -> None:
        self.tmp, self.concurrency, self.log, self.pool = tmp, concurrency, log, pool
        self.env = env or {}
        self.out = tmp / "celery.jsonl"
        self._seen_bytes = self._seen_lines = 0
        self.redis: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise SystemExit("the celery peer needs redis-server: apt-get install -y redis-server")
        port = free_port()
        self.url = f"redis://127.0.0.1:{port}/0"
        with (self.tmp / "redis.log").open("ab") as sink:
            self.redis = subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.tmp),
                 "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        app.conf.broker_url = self.url
        self.log(f"[celery] redis pid {self.redis.pid} on {self.url}")
        self._start_worker()

    def _start_worker(self) -> None:
        env = {**os.environ, "BENCH_BROKER_URL": self.url, "BENCH_OUT": str(self.out), **self.env}
        with (self.tmp / "worker.log").open("ab") as sink:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.peers.celery_dispatch", "worker",
                 "--pool", self.pool, "--concurrency", str(self.concurrency),
                 "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "--hostname", "bench@127.0.0.1"],
                cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        self.log(f"[celery] worker pid {self.worker.pid} on {self.url}")

    def stop(self) -> None:
        for proc in (self.worker, self.redis):
            if proc is not None:
                stop_group(proc, grace_s=5)

    def reset(self) -> None:
        """After a phase that did not finish: a new worker over an emptied Redis, so the next
        phase starts with nothing queued (the old messages stay counted as not delivered).
        Redis keeps its port: the producer's connection pool stays valid."""
        import redis

        self.log("[celery] previous phase unfinished: new worker, queue emptied")
        if self.worker is not None:
            stop_group(self.worker, grace_s=5)
        redis.Redis.from_url(self.url).flushall()
        self._start_worker()

    def submit(self, phase: str, first: int, dues: Sequence[int]) -> None:
        with app.producer_or_acquire() as producer:
            for k, due in enumerate(dues):
                deliver.apply_async((phase, first + k, due), producer=producer,
                                    eta=datetime.fromtimestamp(due / 1000, UTC))

    def delivered_total(self) -> int:
        if not self.out.exists():
            return 0
        with self.out.open("rb") as f:
            f.seek(self._seen_bytes)
            data = f.read()
        complete = data.rfind(b"\n") + 1
        self._seen_bytes += complete
        self._seen_lines += data.count(b"\n", 0, complete)
        return self._seen_lines

    def outcomes(self, phase: str) -> Outcomes:
        due, done, seen = [], [], set()
        repeats = 0
        with self.out.open("rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                m = json.loads(line)
                if m["phase"] != phase:
                    continue
                if m["n"] in seen:
                    repeats += 1
                    continue
                seen.add(m["n"])
                due.append(m["due_ms"])
                done.append(m["ran_ms"])
        return Outcomes(due_ms=due, done_ms=done, extra={"repeated_deliveries": repeats})


class CeleryWebhookTarget(CeleryTarget):
    """The same worker running :func:`post`: each message is POSTed to ``receiver``, whose
    access log says when it arrived."""

    def __init__(self, tmp: Path, receiver: Receiver, *, concurrency: int, pool: str,
                 log: Callable[[str], None]) -> None:
        self.receiver = receiver
        super().__init__(tmp, concurrency=concurrency, log=log, pool=pool,
                         env={"BENCH_POST_URL": receiver.url})

    def submit(self, phase: str, first: int, dues: Sequence[int]) -> None:
        with app.producer_or_acquire() as producer:
            for k, due in enumerate(dues):
                post.apply_async((phase, first + k, due), producer=producer,
                                 eta=datetime.fromtimestamp(due / 1000, UTC))

    def delivered_total(self) -> int:
        return self.receiver.delivered_total()

    def outcomes(self, phase: str) -> Outcomes:
        return self.receiver.outcomes(phase)


def run(args: argparse.Namespace, *, procedure: Callable[[Any, argparse.Namespace], dict[str, Any]],
        log: Callable[[str], None]) -> dict[str, Any]:
    """The benchmark part: Redis, a worker, the procedure, then both stopped."""
    from bench.store_target import scratch_dir

    target = CeleryTarget(scratch_dir("tocsin-bench-celery-"), concurrency=args.celery_concurrency,
                          log=log)
    try:
        out = procedure(target, args)
        missing = {ph: out[ph]["schedules"] - out[ph]["delivered"]
                   for ph in ("burst", "drain") if ph in out}
        for ph, count in missing.items():
            if count:
                out[ph]["not_delivered"] = {"not run": count}
        out["options"] = {"pool": "prefork", "concurrency": args.celery_concurrency,
                          "broker": "redis (appendonly, fsync everysec)",
                          "redis_server": _redis_version()}
        return out
    finally:
        target.stop()


def _redis_version() -> str | None:
    try:
        return subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
