"""Spark sessions for every Tocsin process that runs Spark: the dispatcher's, the batch jobs'
and the ingest's.

The session runs wherever ``settings.spark_master`` says: ``local[*]`` on one machine,
``local-cluster[2,1,1024]`` for separate executor JVMs, or a cluster's master URL.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tocsin.config import Settings
from tocsin.logs import SPARK_JAVA_OPTIONS, SparkLogLevel, spark_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SITE", "NumpyOnly", "master_for", "numpy_only_converters", "register_python_sources",
           "session_for", "spark_session"]

SITE = Path(__file__).parent / "site"
"""The directory put on the ``PYTHONPATH`` of every Python process a session starts: its
``sitecustomize`` has them read PySpark installed and compiled, not from Spark's zips
(:mod:`tocsin.spark.site.sitecustomize`)."""


def master_for(master: str, partitions: int) -> str:
    """``local[*]`` with a task slot for every task that may wait at once: a hand-over window
    holds its slot while it waits (mostly asleep, not on a core), so the slots are the
    dispatcher's partitions twice over (a batch and its successor's planning), the relay, the
    expander, and the daily archive's two (a round's write and the delete of the round
    before) or an ingest query's. Any other master is taken as given."""
    if master != "local[*]":
        return master
    return f"local[{max(os.cpu_count() or 1, 2 * partitions + 4)}]"


def spark_session(master: str = "local[*]", *, app_name: str = "tocsin",
                  extra: dict[str, str] | None = None,
                  log_level: SparkLogLevel = SparkLogLevel.ERROR,
                  java_options: str = SPARK_JAVA_OPTIONS) -> SparkSession:
    """A Spark session bound to loopback, using this interpreter for Python workers, logging
    at ``log_level`` through Tocsin's log4j2 file from the JVM's first line (a level set
    after the session starts would come too late for its start-up warnings), its JVMs
    started with ``java_options`` (the ``spark_java_options`` setting)."""
    from tocsin.spark.cds import archive_options

    java = spark_java_options(log_level, java_options)
    # the driver only: an executor's JVM (another class path) would not match the archive
    driver_java = f"{java} {archive_options()}".strip()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _add_python_path(str(SITE))
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a core dependency
        raise RuntimeError("the dispatcher needs pyspark: pip install tocsin") from exc
    numpy_only_converters()
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(os.cpu_count() or 2))
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "tocsin.spark.daemon")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        # an idle query's progress event (to every listener, Tocsin's through py4j) once a
        # minute, not every 10 s: idle work of the JVM and the driver
        .config("spark.sql.streaming.noDataProgressEventInterval", "60000")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", driver_java)
        .config("spark.executor.extraJavaOptions", java)
    )
    if app := os.environ.get("PGAPPNAME"):  # the executors' store sessions name the driver's
        builder = builder.config("spark.executorEnv.PGAPPNAME", app)  # run (a fence ends them)
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.value)
    return spark


class NumpyOnly:
    """One of PySpark's numpy converters of py4j arguments, asked only about numpy values.

    py4j asks every registered converter about every argument of every call to the JVM, and
    PySpark's numpy converters import ``pyspark.testing.utils`` to answer, which imports pandas:
    0.3 s of CPU at the driver's start and 43 MB resident for good, in a driver that passes no
    numpy value. A numpy value is still converted by the converter itself."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def can_convert(self, obj: object) -> bool:
        return type(obj).__module__.partition(".")[0] == "numpy" and bool(
            self.inner.can_convert(obj))

    def convert(self, obj: object, gateway_client: Any) -> Any:
        return self.inner.convert(obj, gateway_client)


def numpy_only_converters() -> None:
    """Wrap PySpark's numpy converters of py4j arguments in :class:`NumpyOnly` (once)."""
    from py4j import protocol

    for i, converter in enumerate(protocol.INPUT_CONVERTER):
        if type(converter).__name__ in ("NumpyScalarConverter", "NumpyArrayConverter"):
            protocol.INPUT_CONVERTER[i] = NumpyOnly(converter)


def _add_python_path(path: str) -> None:
    """Append ``path`` to this process's ``PYTHONPATH``, which the JVM the session starts
    inherits and passes on to every Python process it starts (after Spark's own zips)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if path not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, path])


def session_for(settings: Settings, *, app_name: str, master: str | None = None,
                dispatcher: bool = False) -> SparkSession:
    """The Spark session ``settings`` ask for: their master (or ``master``), Spark's log level
    and JVM options (``dispatcher``: the dispatcher's own after them, and on a local master
    memory given back at rest, :class:`~tocsin.spark.rest.AtRest`); every ``tocsin`` command
    that runs Spark makes its session here."""
    java = settings.spark_java_options
    if dispatcher:
        java = f"{java} {settings.dispatcher_java_options}".strip()
    spark = spark_session(master or settings.spark_master, app_name=app_name,
                          log_level=settings.spark_log_level, java_options=java)
    if dispatcher and (spark.sparkContext.master or "").startswith("local"):
        # A long-lived local session gives its memory back between bursts.
        from tocsin.spark.rest import AtRest

        AtRest(spark.sparkContext).start()
    return spark


def register_python_sources(spark: SparkSession, *sources: type) -> None:
    """Register Python data sources with ``spark`` and make it the calling thread's active
    session in the JVM: Spark looks a Python data source up through the thread's active
    session (``DataSource.lookupDataSource``), and a thread whose py4j connection has none
    (another Python thread, or a connection opened anew) found the source when reading and
    not when writing: ``DATA_SOURCE_NOT_FOUND`` at ``writeStream.start()`` (24 tests of one
    pytest-xdist worker in a CI run)."""
    for source in sources:
        spark.dataSource.register(source)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
