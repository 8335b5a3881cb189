"""Real servers for the SQS, Redis Streams and NATS channels' tests, each a child process on a
loopback port with its data in a temporary directory: moto's SQS-protocol server, Debian's
``redis-server`` and ``nats-server -js`` (``scripts/bootstrap.sh --dev`` installs them). Each
can be killed (SIGKILL, by its PID) and started again on the same port and data, for the tests
of a broker that dies."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tocsin.testing.api_server import free_port

__all__ = ["MotoSQS", "NatsServer", "RedisServer", "Server"]


class Server:
    """A server process on ``127.0.0.1:port``; subclasses give its command line."""

    program = ""
    """The executable, looked up on the PATH (or a path)."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def available(cls) -> bool:
        """Whether the program is installed."""
        return shutil.which(cls.program) is not None or Path(cls.program).exists()

    def command(self) -> list[str]:
        """The command line that starts it."""
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The running process's id."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self, timeout_s: float = 30) -> Server:
        """Start it and wait until its port accepts connections."""
        with (self.base / "server.log").open("ab") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                          cwd=self.base, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.program} exited while starting:\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.program} did not listen in {timeout_s:.0f} s:\n"
                           f"{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL it (its process group: ours alone) and wait for it to end."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def restart(self) -> None:
        """Kill it and start it again on the same port and data."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """End it."""
        self.kill()

    def log_tail(self, lines: int = 30) -> str:
        """The end of its console output."""
        try:
            text = (self.base / "server.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class MotoSQS(Server):
    """moto's server mode (SQS and the rest of its AWS emulation), state in memory."""

    program = sys.executable

    @classmethod
    def available(cls) -> bool:
        """Whether moto's server mode is installed (``moto[server]``: flask)."""
        try:
            import flask  # noqa: F401
            import moto  # noqa: F401
        except ImportError:
            return False
        return True

    @property
    def endpoint(self) -> str:
        """The service's URL."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def client(self) -> object:
        """A boto3 SQS client of it (test credentials)."""
        import boto3

        return boto3.client("sqs", region_name="us-east-1", endpoint_url=self.endpoint,
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def create_queue(self, name: str) -> str:
        """A new queue named ``name`` (FIFO if it ends ``.fifo``, content dedup off); its URL."""
        attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
        url: str = self.client().create_queue(  # type: ignore[attr-defined]
            QueueName=name, Attributes=attributes)["QueueUrl"]
        return url


class RedisServer(Server):
    """Debian's redis-server, every write appended and synced (a kill loses nothing added)."""

    program = "redis-server"

    @property
    def url(self) -> str:
        """The server's URL, database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                "--dir", str(self.base), "--save", "", "--appendonly", "yes",
                "--appendfsync", "always", "--protected-mode", "no", "--daemonize", "no"]


class NatsServer(Server):
    """Debian's nats-server with JetStream, its store in the base directory."""

    program = "nats-server"

    @classmethod
    def available(cls) -> bool:
        return shutil.which("nats-server") is not None or Path("/usr/sbin/nats-server").exists()

    @property
    def url(self) -> str:
        """The server's URL."""
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        program = shutil.which("nats-server") or "/usr/sbin/nats-server"
        return [program, "-js", "-a", "127.0.0.1", "-p", str(self.port),
                "-sd", str(self.base / "js")]
