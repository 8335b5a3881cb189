"""Real PostgreSQL for tests and benchmarks: a throw-away cluster (:class:`PostgresServer`,
:func:`throwaway_server`, run by a source checkout's ``.ci/postgres.sh``) and a fresh schema per
test on any server (:func:`create_schema`, :func:`drop_schema`). psycopg is imported only when
used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "PostgresServer",
    "PostgresUnavailable",
    "check",
    "create_schema",
    "drop_schema",
    "throwaway_server",
]

SCRIPT = Path(__file__).resolve().parents[3] / ".ci" / "postgres.sh"
"""The cluster script of the source checkout this package runs from."""


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server could be started here."""


def check(url: str) -> str | None:
    """None when ``url`` answers, else why not."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


class PostgresServer:
    """A throw-away cluster in ``workdir``, run by ``.ci/postgres.sh``; stopped by its PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.url = ""
        self.pid = 0
        self.port: int | None = None

    def start(self) -> str:
        """Start (initialising the cluster the first time; the same port on a restart);
        :class:`PostgresUnavailable` when it cannot."""
        if not SCRIPT.exists():
            raise PostgresUnavailable(f"{SCRIPT} is missing: run from a source checkout")
        args = ["bash", str(SCRIPT), "start", str(self.workdir)]
        if self.port is not None:
            args.append(str(self.port))
        proc = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
        exports = dict(line.removeprefix("export ").split("=", 1)
                       for line in proc.stdout.splitlines() if line.startswith("export "))
        if proc.returncode != 0 or "TOCSIN_TEST_POSTGRES_URL" not in exports:
            raise PostgresUnavailable(f"{SCRIPT.name} start failed ({proc.returncode}): "
                                      f"{proc.stderr[-2000:]}")
        self.url = exports["TOCSIN_TEST_POSTGRES_URL"]
        self.pid = int(exports["TOCSIN_PG_PID"])
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])
        return self.url

    def stop(self) -> None:
        """Fast shutdown (SIGINT) of the postmaster we started, waiting until it is gone."""
        pid, self.pid = self.pid, 0
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid else b""
        except OSError:
            return
        if str(self.workdir / "data").encode() not in cmdline:  # gone, and the PID reused
            return
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: the server dies without a checkpoint, as in a crash;
        :meth:`start` brings it back on the same port (running crash recovery)."""
        subprocess.run(["bash", str(SCRIPT), "crash", str(self.workdir)], capture_output=True,
                       text=True, timeout=120, check=True)
        self.pid = 0

    def remove(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def throwaway_server() -> Iterator[PostgresServer]:
    """A started :class:`PostgresServer` in a new temporary directory, removed afterwards."""
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="tocsin-pg.")))
    try:
        server.start()
        yield server
    finally:
        server.remove()


def create_schema(server_url: str) -> str:
    """Create an empty schema in the database of ``server_url``; a URL whose sessions work in
    it (``search_path``). Much cheaper than a database per test, and as isolated."""
    import psycopg

    name = f"tocsin_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return f"{server_url}{'&' if '?' in server_url else '?'}options=-csearch_path%3D{name}"


def drop_schema(server_url: str, url: str) -> None:
    """Drop a schema made by :func:`create_schema`, with everything in it."""
    import psycopg

    name = url.rsplit("%3D", 1)[1]
    with contextlib.suppress(psycopg.Error), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
