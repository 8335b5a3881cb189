"""Run by Python at the start of every Python process a Tocsin Spark session starts (this
directory is on their ``PYTHONPATH``: :func:`tocsin.spark.session.spark_session`): it drops
Spark's own ``pyspark.zip``, ``py4j-*.zip`` and Spark's jar from the front of ``sys.path``
when the same interpreter finds ``pyspark`` and ``py4j`` installed without them.

Spark puts its zips first on the path of every Python process it starts, and a module imported
from a zip is compiled anew in every process (a zip holds no compiled code): the planners of a
query's data sources, its source and commit processes, each a daemon and a fork, spent 0.5-0.7 s
of CPU each compiling PySpark, one after another before the first batch. Installed, PySpark is
read compiled. (:mod:`tocsin.spark.daemon` does the same for the task workers on executors that
lack this directory.)

Only the standard library is used here: importing ``tocsin`` would load its settings in every
process. Another ``sitecustomize`` further down the path still runs, after this one.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

_SPARK_PATHS = ("pyspark.zip", "py4j-")


def _spark_entry(path: str) -> bool:
    name = os.path.basename(path)
    return ((path.endswith(".zip") and name.startswith(_SPARK_PATHS))
            or (path.endswith(".jar") and name.startswith("spark-core")))


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's zips and jar when ``pyspark`` and ``py4j`` are found without
    them; else ``path`` as it is."""
    rest = [p for p in path if not _spark_entry(p)]
    if len(rest) == len(path):
        return path
    if any(PathFinder.find_spec(name, rest) is None for name in ("pyspark", "py4j")):
        return path
    return rest


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, if any, as Python would have without us."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    this = sys.modules.pop(__name__)
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.modules[__name__] = this  # the import machinery looks it up once we return


sys.path[:] = prefer_installed_pyspark(sys.path)
_chain()
