"""What a Spark session's driver pays for nothing: PySpark's numpy converters of py4j arguments
are asked only about numpy values (they import pandas to answer); and which JVM options each
command's session takes."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from tocsin.config import Settings
from tocsin.spark import session


def test_numpy_converters_are_asked_only_about_numpy_values() -> None:
    probe = """
import sys
from pyspark.sql import SparkSession  # registers PySpark's converters
from py4j import protocol
from tocsin.spark.session import NumpyOnly, numpy_only_converters
numpy_only_converters()
numpy_only_converters()  # once: not wrapped twice
wrapped = [c for c in protocol.INPUT_CONVERTER if isinstance(c, NumpyOnly)]
assert len(wrapped) == 2 and not any(isinstance(c.inner, NumpyOnly) for c in wrapped)
assert not any(c.can_convert(a) for c in protocol.INPUT_CONVERTER if isinstance(c, NumpyOnly)
               for a in ("spark.master", 3, None))
assert "pandas" not in sys.modules
import numpy as np
assert any(c.can_convert(np.float64(1.5)) for c in wrapped)
assert any(c.can_convert(np.array([1, 2])) for c in wrapped)
"""
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_only_the_dispatcher_session_takes_the_dispatcher_java_options(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: dict[str, str] = {}

    def fake_session(master: str, *, app_name: str, java_options: str, **_: Any) -> Any:
        made[app_name] = java_options
        return SimpleNamespace(sparkContext=SimpleNamespace(master="spark://elsewhere:7077"))

    monkeypatch.setattr(session, "spark_session", fake_session)
    settings = Settings(spark_java_options="-XX:+UseSerialGC",
                        dispatcher_java_options="-XX:TieredStopAtLevel=1")
    session.session_for(settings, app_name="tocsin", dispatcher=True)
    session.session_for(settings, app_name="tocsin-import")
    assert made == {"tocsin": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
                    "tocsin-import": "-XX:+UseSerialGC"}
    session.session_for(Settings(spark_java_options="-XX:+UseSerialGC",
                                 dispatcher_java_options=""), app_name="tocsin", dispatcher=True)
    assert made["tocsin"] == "-XX:+UseSerialGC"  # empty: both compilers, as every other JVM


@pytest.mark.spark
def test_the_dispatchers_sources_are_found_from_the_thread_that_registers_them(
        spark: Any, tmp_path: Any) -> None:
    """Bug: Spark looks a Python data source up through the calling thread's active session,
    and a thread whose py4j connection had none read from ``tocsin`` and then failed to write
    to it (``DATA_SOURCE_NOT_FOUND`` at ``writeStream.start()``: 24 tests of one CI worker).
    Registering the sources now makes the session the thread's active one."""
    import threading

    from tocsin.dispatcher.query import register_sources

    jvm = spark.sparkContext._jvm
    found: dict[str, object] = {}

    def probe() -> None:  # a fresh Python thread: a JVM thread with no active session
        found["active before"] = jvm.org.apache.spark.sql.SparkSession.getActiveSession() \
            .isDefined()
        register_sources(spark)
        try:
            query = (spark.readStream.format("rate").load().writeStream.format("tocsin")
                     .option("checkpointLocation", str(tmp_path / "ck")).start())
            query.stop()
            found["start"] = "started"
        except Exception as exc:  # reported below
            found["start"] = str(exc)[:2000]

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(120)
    assert found["active before"] is False, "the probe must start without an active session"
    assert found["start"] == "started", found
