"""Logs: ``tocsin up`` on a fresh home is quiet (no Java or Spark WARN line), and Tocsin's own
lines come as text or as JSON."""

from __future__ import annotations

import json
import logging
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tocsin.logs import LogFormat, setup_logging
from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import wait_until
from tocsin.testing.processes import kill_tree, start_tocsin

NOISE = re.compile(r"\bWARN(ING)?\b|log4j|NativeCodeLoader|falling behind")


def _wait_for(log: Path, needle: str, timeout_s: float) -> list[str]:
    """The log's lines up to the first holding ``needle``."""

    def up_to_needle() -> list[str] | None:
        lines = log.read_text(errors="replace").splitlines()
        found = next((i for i, line in enumerate(lines) if needle in line), None)
        return None if found is None else lines[:found + 1]

    lines: list[str] = wait_until(up_to_needle, timeout_s=timeout_s, interval_s=0.5,
                                  what=f"a {needle!r} line in {log}")
    return lines


@pytest.mark.spark
def test_tocsin_up_prints_no_spark_or_java_warning_before_ready(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    proc = start_tocsin("up", env={"TOCSIN_HOME": str(tmp_path / "home"),
                                   "TOCSIN_API_PORT": str(free_port()),
                                   "TOCSIN_SPARK_MASTER": "local[*]"}, log=log)
    try:
        before = _wait_for(log, "tocsin.runner: ready", timeout_s=180)
        time.sleep(3)  # the queries' first triggers
        lines = log.read_text(errors="replace").splitlines()
    finally:
        kill_tree(proc, signal.SIGTERM)
    # a SIGTERM to the group reaches Spark's JVM too: the stop says so in a line, where it
    # ended in a Py4J traceback ("Py4JJavaError: <exception str() failed>")
    stopped = log.read_text(errors="replace")
    assert "Py4JJavaError:" not in stopped, stopped[-3000:]
    assert any("API listening" in line for line in before)
    # nothing claims readiness before /readyz does: one "ready" line, the last
    assert [line for line in before if " ready" in line] == [before[-1]]
    noisy = [line for line in lines if NOISE.search(line)]
    assert noisy == [], "\n".join(noisy)
    assert all(" tocsin " in line for line in before), "\n".join(before)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    tocsin = logging.getLogger("tocsin")
    tocsin.handlers[:] = []
    tocsin.propagate = True


@pytest.mark.usefixtures("restore_logging")
def test_json_log_lines_carry_their_context(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(LogFormat.JSON)
    logging.getLogger("tocsin.test").info("batches", extra={"rows": 5, "query": "q"})
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (line["level"], line["logger"], line["msg"], line["rows"], line["query"]) == (
        "INFO", "tocsin.test", "batches", 5, "q")
    setup_logging(LogFormat.TEXT)
    logging.getLogger("tocsin.test").warning("store unavailable", extra={"retry_s": 1.5})
    text = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r" tocsin WARNING tocsin\.test: store unavailable retry_s=1\.5$", text)
