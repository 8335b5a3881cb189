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
