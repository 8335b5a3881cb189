"""The archive's daily run in a thread of the dispatcher process (``archive_every_seconds``).

Apart from :mod:`tocsin.pipelines.archive`, which imports Arrow: the dispatcher's driver starts
the timer at once and runs the job a day later, and Arrow in the driver from the start was
36 MB resident for a day."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from tocsin.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["start_archive_timer"]


def start_archive_timer(spark: SparkSession, settings: Settings,
                        stop: threading.Event) -> threading.Thread | None:
    """Run :func:`~tocsin.pipelines.archive.run_archive` every ``archive_every_seconds`` (the
    first one interval after the start) on a daemon thread until ``stop`` is set; None when it
    is 0 (off). Beside the dispatcher's queries on their session, a round is one task and its
    delete one more (the two slots :func:`~tocsin.spark.session.master_for` keeps for it):
    more would take the slots the dispatcher's next batch waits for."""
    every = settings.archive_every_seconds
    if every <= 0:
        return None

    def loop() -> None:
        import logging

        log = logging.getLogger("tocsin.archive")
        while not stop.wait(every):
            from tocsin.pipelines.archive import run_archive

            try:
                log.info("archive: %s", run_archive(spark, settings=settings, partitions=1))
            except Exception:  # the next day's run tries again; dispatch goes on meanwhile
                log.exception("archive run failed")

    thread = threading.Thread(target=loop, name="tocsin-archive", daemon=True)
    thread.start()
    return thread
