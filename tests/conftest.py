"""Shared fixtures: one Spark session per run, and the real servers (see tests/support)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The tests' destination policy, explicitly (a server's default refuses both): webhooks may
# reach the loopback receivers the tests start, and file channels may write under the
# temporary directory, where every test's tmp_path lies. Spark workers and the `tocsin`
# processes the tests start inherit it.
os.environ.setdefault("TOCSIN_WEBHOOK_ALLOW", "127.0.0.0/8,::1")
os.environ.setdefault("TOCSIN_FILE_ROOTS", tempfile.gettempdir())
# The dispatcher processes the tests start never run the daily archive on their own.
os.environ.setdefault("TOCSIN_ARCHIVE_EVERY_SECONDS", "0")

_SUPPORT = Path(__file__).parent / "support"
pytest_plugins = [
    f"tests.support.{name}"
    for name in ("fixtures", "postgres")
    if (_SUPPORT / f"{name}.py").exists()
]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the whole run, with a task slot for each task that may wait
    in a hand-over window at once (tocsin.dispatcher.query.master_for)."""
    from tocsin.dispatcher.query import spark_session

    session = spark_session("local[8]", app_name="tocsin-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture
def say(capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """Print a test's figures (repeats, counts) to the terminal even when it passes, so they
    show up in CI's log."""

    def _say(message: str) -> None:
        with capsys.disabled():
            print(f"\n{message}", flush=True)

    return _say
