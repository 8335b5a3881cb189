"""A real RabbitMQ node for tests (Debian's rabbitmq-server), on loopback ports, with its
database in a temporary directory; stopped with ``rabbitmqctl stop`` and, failing that, by PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.support.api_server import free_port

__all__ = ["RabbitMQ"]

SBIN = Path("/usr/lib/rabbitmq/bin")


class RabbitMQ:
    """One node named ``tocsin-<port>@localhost``."""

    def __init__(self, base: Path) -> None:
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.node = f"tocsin{self.port}@localhost"
        base.mkdir(parents=True, exist_ok=True)
        (base / "plugins").write_text("[].\n")
        self.env = {
            **os.environ, "HOME": str(base), "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        self._base = base
        self._proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        """Whether Debian's rabbitmq-server is installed."""
        return (SBIN / "rabbitmq-server").exists() and shutil.which("erl") is not None

    def start(self, timeout_s: float = 90) -> RabbitMQ:
        """Start the node and wait until it accepts AMQP connections."""
        import pika

        with (self._base / "server.log").open("ab") as log:
            self._proc = subprocess.Popen([str(SBIN / "rabbitmq-server")], env=self.env,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited; see {self._base / 'server.log'}")
            try:
                pika.BlockingConnection(pika.URLParameters(self.url)).close()
                return self
            except pika.exceptions.AMQPError:
                time.sleep(0.5)
        raise RuntimeError("rabbitmq-server did not start in time")

    def ctl(self, *args: str) -> str:
        """Run ``rabbitmqctl -n <node> <args>``; its output."""
        done = subprocess.run([str(SBIN / "rabbitmqctl"), "-n", self.node, *args], env=self.env,
                              capture_output=True, text=True, timeout=60, check=True)
        return done.stdout

    def close_connections(self) -> None:
        """Make the broker close every client connection (as a restart or a proxy would)."""
        self.ctl("close_all_connections", "tests: closed on purpose")

    def stop(self) -> None:
        """Stop the node we started (its process group, which holds epmd too)."""
        subprocess.run([str(SBIN / "rabbitmqctl"), "-n", self.node, "stop"], env=self.env,
                       capture_output=True, timeout=60, check=False)
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        epmd = shutil.which("epmd")  # the node daemonised it; it stops once no node is left
        for _ in range(20 if epmd else 0):
            done = subprocess.run([epmd, "-kill"], env=self.env, capture_output=True,  # type: ignore[list-item]
                                  timeout=10, check=False)
            if b"Killed" in done.stdout or b"Cannot connect" in done.stderr + done.stdout:
                break
            time.sleep(0.5)
