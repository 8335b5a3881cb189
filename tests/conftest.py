"""Shared fixtures: one Spark session per run, and the real servers (see tests/support)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tocsin.logs import FAST_START_JAVA_OPTIONS
from tocsin.testing import use_recording_channels

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The tests' destination policy, explicitly (a server's default refuses both): webhooks and
# brokers may reach the loopback receivers and brokers the tests start, and file channels may
# write under the temporary directory, where every test's tmp_path lies. Spark workers and the
# `tocsin` processes the tests start inherit it.
os.environ.setdefault("TOCSIN_WEBHOOK_ALLOW", "127.0.0.0/8,::1")
os.environ.setdefault("TOCSIN_BROKER_ALLOW", "127.0.0.0/8,::1")  # tansu and RabbitMQ
os.environ.setdefault("TOCSIN_FILE_ROOTS", tempfile.gettempdir())
# The dispatcher processes the tests start never run the daily archive on their own.
os.environ.setdefault("TOCSIN_ARCHIVE_EVERY_SECONDS", "0")
# The suite starts dozens of Spark sessions, several at once on two workers: their JVMs start
# fast (tocsin.logs.FAST_START_JAVA_OPTIONS), the session below and the `tocsin` processes.
os.environ.setdefault("TOCSIN_SPARK_JAVA_OPTIONS", FAST_START_JAVA_OPTIONS)
# The suite's own processes take the test kit's recording channels (production never does).
use_recording_channels()

_SUPPORT = Path(__file__).parent / "support"
pytest_plugins = [
    f"tests.support.{name}"
    for name in ("fixtures", "postgres")
    if (_SUPPORT / f"{name}.py").exists()
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before selection: a test that takes the ``spark`` fixture (directly or through another
    fixture) is marked ``spark``, so ``-m "not spark"`` never starts Spark."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def drop_smaller_twins(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After selection: drop a ``smaller_twin`` whose slow twin runs too with the same
    parameters (the same check at the full size); a twin whose slow twin runs only on some
    parameters (say, PostgreSQL) still runs on the others."""

    def ident(item: pytest.Item, name: str) -> tuple[object, str, str]:
        callspec = getattr(item, "callspec", None)
        return item.path, name, callspec.id if callspec is not None else ""

    selected = {ident(item, getattr(item, "originalname", item.name)) for item in items}
    twins = [item for item in items
             if (mark := item.get_closest_marker("smaller_twin")) is not None
             and ident(item, mark.args[0]) in selected]
    if twins:
        config.hook.pytest_deselected(items=twins)
        dropped = set(twins)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the whole run, with a task slot for each task that may wait
    in a hand-over window at once (tocsin.spark.session.master_for)."""
    from tocsin.spark.session import spark_session

    session = spark_session("local[8]", app_name="tocsin-tests",
                            java_options=os.environ["TOCSIN_SPARK_JAVA_OPTIONS"])
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture
def say(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Report a test's figures (repeats, counts, lateness) even when it passes: they are
    printed at the end of the run, under "figures", so they show up in CI's log (also from
    pytest-xdist's workers, whose output is not shown)."""

    def _say(message: str) -> None:
        request.node.user_properties.append(("figure", message))

    return _say


_FIGURES: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _FIGURES.extend((report.nodeid, str(value)) for name, value in report.user_properties
                        if name == "figure")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("figures")
        for nodeid, message in _FIGURES:
            terminalreporter.write_line(f"{nodeid}: {message}")
