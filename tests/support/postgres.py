"""A real PostgreSQL server for the tests, as a pytest plugin.

``postgres_url`` (session): ``$TOCSIN_TEST_POSTGRES_URL`` when set (CI runs
``.ci/postgres.sh start`` and exports it), else a throw-away cluster started here with that same
script and stopped at the end of the session by its PID. When no server can be had the tests
that need one are skipped, except under ``CI=true``, where that is a failure.

``postgres_database`` (function): a fresh, empty database on that server; its URL.
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

import pytest

__all__ = ["create_database", "postgres_database", "postgres_url"]

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "postgres.sh"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


def _check(url: str) -> str | None:
    """None when ``url`` answers, else why not."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


def _stop(pid: int, data_dir: Path) -> None:
    """Fast shutdown of the postmaster we started (SIGINT), waiting for it to go."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if str(data_dir).encode() not in cmdline:  # not ours (the PID was reused)
        return
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a PostgreSQL database for this test session."""
    url = os.environ.get("TOCSIN_TEST_POSTGRES_URL")
    if url:
        problem = _check(url)
        if problem:
            pytest.fail(f"TOCSIN_TEST_POSTGRES_URL={url} does not answer: {problem}",
                        pytrace=False)
        yield url
        return
    workdir = Path(tempfile.mkdtemp(prefix="tocsin-pg."))
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(workdir)], capture_output=True,
                          text=True, timeout=900, check=False)
    exports = dict(line.removeprefix("export ").split("=", 1)
                   for line in proc.stdout.splitlines() if line.startswith("export "))
    if proc.returncode != 0 or "TOCSIN_TEST_POSTGRES_URL" not in exports:
        _unavailable(f"{SCRIPT.name} start failed ({proc.returncode}): {proc.stderr[-2000:]}")
    pid = int(exports["TOCSIN_PG_PID"])
    try:
        yield exports["TOCSIN_TEST_POSTGRES_URL"]
    finally:
        _stop(pid, workdir / "data")
        shutil.rmtree(workdir, ignore_errors=True)


def create_database(server_url: str) -> str:
    """Create an empty database on the server of ``server_url``; its URL."""
    import psycopg

    name = f"tocsin_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server_url.rsplit('/', 1)[0]}/{name}"


def drop_database(server_url: str, url: str) -> None:
    """Drop a database made by :func:`create_database` (closing its sessions)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with contextlib.suppress(psycopg.Error), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    """A fresh, empty database on the session's server, dropped afterwards; its URL."""
    url = create_database(postgres_url)
    yield url
    drop_database(postgres_url, url)
