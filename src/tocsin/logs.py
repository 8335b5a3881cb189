"""Tocsin's own log lines, for people (``text``) or collectors (``json``, one object a line),
and Spark's JVM and Python logging quietened to its own level (``spark_log_level``).

Tocsin logs through the standard library under the ``tocsin`` logger; nothing else is needed.
"""

from __future__ import annotations

import json
import logging
import sys
from enum import StrEnum
from importlib import resources
from typing import Any

__all__ = ["DISPATCHER_JAVA_OPTIONS", "FAST_START_JAVA_OPTIONS", "SPARK_JAVA_OPTIONS", "LogFormat",
           "SparkLogLevel", "setup_logging", "spark_java_options"]

_CONTEXT_SKIP = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime"}


class LogFormat(StrEnum):
    """How Tocsin writes its log lines."""

    TEXT = "text"
    """``2026-01-01T10:00:00.000Z tocsin INFO dispatcher: ready`` — for a terminal."""
    JSON = "json"
    """One JSON object a line (``ts``, ``level``, ``logger``, ``msg`` and any context)."""


class SparkLogLevel(StrEnum):
    """The level of Spark's own logging (its JVM's log4j and the py4j/pyspark loggers)."""

    OFF = "OFF"
    """Nothing."""
    ERROR = "ERROR"
    """Errors only: the default."""
    WARN = "WARN"
    """Spark's warnings too (e.g. "Current batch is falling behind")."""
    INFO = "INFO"
    """Spark's progress chatter, for debugging Spark."""


class _Text(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s tocsin %(levelname)s %(name)s: %(message)s%(context)s",
                         "%Y-%m-%dT%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        extra = _context(record)
        record.context = "".join(f" {k}={v}" for k, v in extra.items())
        return super().format(record)


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
                               "level": record.levelname, "logger": record.name,
                               "msg": record.getMessage(), **_context(record)}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _context(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields of a record."""
    return {k: v for k, v in record.__dict__.items() if k not in _CONTEXT_SKIP
            and k != "context"}


def setup_logging(fmt: LogFormat = LogFormat.TEXT,
                  spark_level: SparkLogLevel = SparkLogLevel.ERROR) -> None:
    """Send the ``tocsin`` logger's lines (INFO and up) to stderr in ``fmt``; hold the py4j
    and pyspark Python loggers to ``spark_level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if fmt is LogFormat.JSON else _Text())
    tocsin = logging.getLogger("tocsin")
    tocsin.handlers[:] = [handler]
    tocsin.setLevel(logging.INFO)
    tocsin.propagate = False
    quiet = logging.CRITICAL + 1 if spark_level is SparkLogLevel.OFF else getattr(
        logging, "WARNING" if spark_level is SparkLogLevel.WARN else spark_level.value)
    for name in ("py4j", "pyspark"):
        logging.getLogger(name).setLevel(quiet)


FAST_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options for Spark sessions that start often and work little (the test suite, a
laptop): the quick (C1) JIT compiler only and the serial collector (no GC threads). Three
sessions starting at once on two cores were ready in 34-41 s instead of 59-67 s. The dispatcher's
own session takes the quick JIT by default (:data:`DISPATCHER_JAVA_OPTIONS`); the batch jobs'
sessions, whose JVMs parse and write files, keep the full one."""
SPARK_JAVA_OPTIONS = "-XX:+UseSerialGC -Xms64m -XX:-UsePerfData"
"""The default extra options of Spark's JVMs (``spark_java_options``): the serial collector
(no collector threads beside the application's: on two cores G1's concurrent work is CPU the
dispatcher does not get, and its regions cost memory), a heap that starts at 64 MB and
grows with the work (the JVM's default starts at 1/64 of the machine's memory, 384 MB here,
resident once touched, though an idle dispatcher uses about 130 MB of it), and no performance
counters for ``jstat`` (their sampler woke every 50 ms: 0.13 % of a core at rest)."""
DISPATCHER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The default extra options of the dispatcher's JVM (``dispatcher_java_options``, after
``spark_java_options``): the quick (C1) JIT compiler only. The dispatcher's JVM moves few rows
(the Python workers claim, send and acknowledge), and the optimizing compiler spent its first
burst compiling on a core the workers needed: over a burst of 200 000 deliveries the JVM used
3.8-4.2 s of CPU with both compilers and 1.9-2.0 s with the quick one only."""


def spark_java_options(level: SparkLogLevel, extra: str) -> str:
    """JVM options that make Spark log through Tocsin's log4j2 file at ``level``, then
    ``extra``."""
    path = resources.files("tocsin.dispatcher") / "log4j2.properties"
    return (f"-Dlog4j2.configurationFile=file:{path} -Dtocsin.spark.level={level.value} "
            f"{extra}").strip()

