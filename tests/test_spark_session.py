"""What a Spark session's driver pays for nothing: PySpark's numpy converters of py4j arguments
are asked only about numpy values (they import pandas to answer)."""

from __future__ import annotations

import subprocess
import sys


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
