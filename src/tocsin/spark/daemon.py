"""The Python worker daemon of Tocsin's Spark sessions (``spark.python.daemon.module``):
PySpark's own daemon, run with PySpark imported from its installed package instead of from the
``pyspark.zip`` Spark puts first on its Python workers' ``PYTHONPATH``.

Python compiles a module imported from a zip anew in every process (a zip holds no compiled
code), and a Spark session starts a Python process for each data source it plans, each query
it writes, each task slot: on a 2-core machine, importing PySpark's worker from the zip took
2.0 s against 0.4 s from the installed package, in each of them. The zips are dropped only
when the same interpreter finds ``pyspark`` and ``py4j`` without them, so a cluster whose
executors hold PySpark only as Spark's zips runs the daemon as before.

The daemon also imports, once, what every worker it forks would import on its own
(:data:`PRELOAD`: PySpark's worker, Arrow, Tocsin's dispatcher stages), so a new worker starts
warm in milliseconds: Spark stops a worker idle for a minute (hard-coded), and a dispatcher
that kept its workers alive with a micro-batch every 30 s paid a second of JVM and Python CPU
each time; a cold worker took seconds to import what it needed.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

__all__ = ["PRELOAD", "prefer_installed_pyspark", "preload"]

_SPARK_ZIPS = ("pyspark.zip", "py4j-")
PRELOAD = ("pyspark.worker", "pyarrow", "tocsin.dispatcher.source", "tocsin.dispatcher.sink",
           "tocsin.dispatcher.expander", "tocsin.stores.sqlite", "tocsin.channels.webhook")
"""Modules the daemon imports before it forks workers. None of them starts a thread that
holds a lock across the fork: jemalloc's background thread is fork-aware, and OpenBLAS's
pool (numpy's) is kept to the calling thread (``OPENBLAS_NUM_THREADS=1``). The webhook
channel's (aiohttp, whose TLS contexts are made as it is imported) took 0.16 s of CPU in each
worker that opened a webhook, four at once in a batch after a restart; it adds 8 MB to the
daemon."""


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


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules`` in this process; the ones that would not import (left for the worker
    to report where it needs them)."""
    import importlib

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a worker that needs it raises the error where it is seen
            failed.append(name)
    return failed


if __name__ == "__main__":
    import gc

    sys.path[:] = prefer_installed_pyspark(sys.path)
    preload()
    # What was imported stays out of the collector's sight in the forks: a collection there
    # would touch (and so copy) every page the daemon shares with them.
    gc.freeze()
    from pyspark.daemon import manager

    manager()
