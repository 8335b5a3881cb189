"""Write the Spark class archive (:mod:`tocsin.spark.cds`) from a short run of the dispatcher's
query, so the archive holds the classes a dispatcher loads: ``python -m tocsin.dispatcher.cds``
(run once by ``scripts/bootstrap.sh``). Here, not in :mod:`tocsin.spark`, which imports
neither the dispatcher nor the pipelines."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

__all__ = ["build_archive"]


def build_archive(path: Path | None = None) -> Path:
    """Run a session and a short dispatcher query over a scratch store with the archive
    written at the JVM's exit; the archive's path."""
    from pyspark import SparkContext

    from tocsin.dispatcher.options import DispatchOptions
    from tocsin.dispatcher.query import start_dispatcher
    from tocsin.spark.cds import QUIET, archive_path
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
                          java_options=f"-XX:ArchiveClassesAtExit={partial} {QUIET}")
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
