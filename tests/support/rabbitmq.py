"""A real RabbitMQ node for tests (Debian's rabbitmq-server), on loopback ports, with its
database in a temporary directory and an epmd of its own (so one test worker stopping its node
never takes the port mapper from under another's); stopped with ``rabbitmqctl stop`` and,
failing that, by PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tocsin.testing.api_server import free_port

__all__ = ["RabbitMQ"]

SBIN = Path("/usr/lib/rabbitmq/bin")


class RabbitMQ:
    """One node named ``tocsin-<port>@localhost``."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        (base / "plugins").write_text("[].\n")
        self._base = base
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports()

    def _ports(self) -> None:
        """Pick the node's loopback ports (AMQP, distribution, its own epmd) and name."""
        base = self._base
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.node = f"tocsin{self.port}@localhost"
        self.env = {
            **os.environ, "HOME": str(base), "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    @staticmethod
    def available() -> bool:
        """Whether Debian's rabbitmq-server is installed."""
        return (SBIN / "rabbitmq-server").exists() and shutil.which("erl") is not None

    def start(self, timeout_s: float = 90, attempts: int = 3) -> RabbitMQ:
        """Start the node and wait until it accepts AMQP connections. A node that exits while
        starting (a port picked as free was taken before it bound it) is started again on fresh
        ports, up to ``attempts`` times; the error quotes the end of its log."""
        for attempt in range(1, attempts + 1):
            if self._start_once(timeout_s):
                return self
            self.stop()
            if attempt < attempts:
                self._ports()
        raise RuntimeError(f"rabbitmq-server exited {attempts} times while starting; the end of "
                           f"{self._base / 'server.log'}:\n{self._log_tail()}")

    def _start_once(self, timeout_s: float) -> bool:
        """One start: True once it accepts AMQP connections, False if it exited first."""
        import pika
        from pika.adapters.utils.connection_workflow import AMQPConnectorException

        with (self._base / "server.log").open("ab") as log:
            self._proc = subprocess.Popen([str(SBIN / "rabbitmq-server")], env=self.env,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                pika.BlockingConnection(pika.URLParameters(self.url)).close()
                return True
            except (pika.exceptions.AMQPError, AMQPConnectorException):  # not up yet, or not it
                time.sleep(0.5)
        raise RuntimeError(f"rabbitmq-server did not start in {timeout_s:.0f} s; the end of "
                           f"{self._base / 'server.log'}:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 40) -> str:
        """The last lines of the node's console output."""
        try:
            text = (self._base / "server.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

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
        epmd = shutil.which("epmd")  # the node daemonised its own epmd (ERL_EPMD_PORT): end it
        for _ in range(20 if epmd else 0):
            done = subprocess.run([epmd, "-kill"], env=self.env, capture_output=True,  # type: ignore[list-item]
                                  timeout=10, check=False)
            if b"Killed" in done.stdout or b"Cannot connect" in done.stderr + done.stdout:
                break
            time.sleep(0.5)
