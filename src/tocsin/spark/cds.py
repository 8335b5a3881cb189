"""A class-data sharing archive of the classes a Tocsin Spark driver loads, so its JVM starts
in about half the CPU: ``python -m tocsin.dispatcher.cds`` (run once by
``scripts/bootstrap.sh``) starts a session and a short dispatcher query with
``-XX:ArchiveClassesAtExit``, and every later session's driver maps the archive
(:func:`archive_options`).

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
from pathlib import Path

__all__ = ["IN_PLACE", "QUIET", "archive_options", "archive_path"]

QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
"""The archive is an optimisation: never a warning on the operator's terminal about it."""
IN_PLACE = "-XX:+UnlockDiagnosticVMOptions -XX:ArchiveRelocationMode=0"
"""Map the archive at the address it was written for, not at a random one: JDK 17 updates
relocate it by default (``ArchiveRelocationMode=1``), patching every pointer in it, so the
whole archive (155 MB) became resident and private to the process, and the patching cost CPU at
every start. Mapped in place, only the classes used are read, from the page cache. A JVM
without the option ignores it (Spark passes ``-XX:+IgnoreUnrecognizedVMOptions``); one that
cannot map at that address relocates as before."""


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
    return f"-XX:SharedArchiveFile={path} {IN_PLACE} {QUIET}"
