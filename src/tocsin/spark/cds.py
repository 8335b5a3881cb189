"""A class-data sharing archive of the classes a Tocsin Spark driver loads, so its JVM starts
in about half the CPU: ``python -m tocsin.spark.cds`` (run once by ``scripts/bootstrap.sh``)
starts a session and a short dispatcher query with ``-XX:ArchiveClassesAtExit``, and every
later session's driver maps the archive (:func:`archive_options`).

A Spark driver loads some twenty thousand classes, parsing and verifying each; from the
archive they are mapped ready-made. Measured on two shared cores (load average 15), a session
and its first job: JVM CPU 17-19 s without, 9 s with; wall 55-59 s against 30 s.

The archive belongs to one JDK and one PySpark: it is named after PySpark's version, and a JVM
that finds it does not match (another JDK, another class path) ignores it silently
(``-Xshare:auto``), starting as it would without.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["archive_options", "archive_path", "build_archive"]

_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
"""The archive is an optimisation: never a warning on the operator's terminal about it."""


def archive_path() -> Path:
    """Where this environment's archive lives: beside its interpreter, per PySpark version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pyspark = version("pyspark")
    except PackageNotFoundError:  # pragma: no cover - pyspark is a core dependency
        pyspark = "unknown"
    return Path(sys.prefix) / "share" / "tocsin" / f"spark-{pyspark}.jsa"


def archive_options() -> str:
    """The driver's JVM options that map the archive, or nothing when there is none (or
    ``TOCSIN_SPARK_CDS=0``)."""
    path = archive_path()
    if os.environ.get("TOCSIN_SPARK_CDS", "1") == "0" or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def build_archive(path: Path | None = None) -> Path:
    """Run a session and a short dispatcher query over a scratch store with the archive
    written at the JVM's exit; the archive's path."""
    from pyspark import SparkContext

    from tocsin.dispatcher.options import DispatchOptions
    from tocsin.dispatcher.query import start_dispatcher
    from tocsin.spark.session import spark_session
    from tocsin.stores import open_store

    path = path or archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="tocsin-cds-"))
    url = f"sqlite:///{scratch / 'tocsin.db'}"
    open_store(url, buckets=8).close()
    os.environ["TOCSIN_SPARK_CDS"] = "0"  # not the old archive: a new one is being written
    spark = spark_session("local[2]", app_name="tocsin-cds",
                          java_options=f"-XX:ArchiveClassesAtExit={partial} {_QUIET}")
    query = start_dispatcher(spark, DispatchOptions(store_url=url, buckets=8, partitions=2,
                                                    hand_over_ms=0),
                             checkpoint=scratch / "checkpoint", trigger_seconds=0.5)
    deadline = time.monotonic() + 300
    while query.lastProgress is None and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    spark.stop()
    gateway = SparkContext._gateway
    jvm = getattr(gateway, "proc", None) if gateway is not None else None
    if jvm is not None:  # the JVM writes the archive as it exits
        jvm.stdin.close()
        jvm.wait(timeout=300)
    if not partial.is_file():
        raise RuntimeError(f"the JVM wrote no class archive at {partial}")
    partial.replace(path)
    return path


if __name__ == "__main__":
    started = time.monotonic()
    written = build_archive()
    print(f"tocsin: Spark class archive written to {written} "
          f"({written.stat().st_size / 2**20:.0f} MB, {time.monotonic() - started:.0f} s)")
