"""The Python worker daemon of Tocsin's Spark sessions (``spark.python.daemon.module``):
PySpark's own daemon, run with PySpark imported from its installed package instead of from the
``pyspark.zip`` Spark puts first on its Python workers' ``PYTHONPATH``.

Python compiles a module imported from a zip anew in every process (a zip holds no compiled
code), and a Spark session starts a Python process for each data source it plans, each query
it writes, each task slot: on a 2-core machine, importing PySpark's worker from the zip took
2.0 s against 0.4 s from the installed package, in each of them. The zips are dropped only
when the same interpreter finds ``pyspark`` and ``py4j`` without them, so a cluster whose
executors hold PySpark only as Spark's zips runs the daemon as before.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

__all__ = ["prefer_installed_pyspark"]

_SPARK_ZIPS = ("pyspark.zip", "py4j-")


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's own zips when ``pyspark`` and ``py4j`` are found without them;
    else ``path`` as it is."""
    rest = [p for p in path if not (p.endswith(".zip")
                                    and os.path.basename(p).startswith(_SPARK_ZIPS))]
    if len(rest) == len(path):
        return path
    if any(PathFinder.find_spec(name, rest) is None for name in ("pyspark", "py4j")):
        return path
    return rest


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    from pyspark.daemon import manager

    manager()
