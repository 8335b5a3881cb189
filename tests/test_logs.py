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

from tests.support.api_server import free_port
from tests.support.processes import kill_tree, start_tocsin
from tocsin.logs import LogFormat, setup_logging

NOISE = re.compile(r"\bWARN(ING)?\b|log4j|NativeCodeLoader|falling behind")


def _wait_for(log: Path, needle: str, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if needle in line:
                return lines[:i + 1]
        time.sleep(0.5)
    raise AssertionError(f"no {needle!r} line within {timeout_s}s:\n{log.read_text()}")


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
