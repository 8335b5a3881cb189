"""Helpers to run the dispatcher query in tests and to wait for what it does."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tocsin.dispatcher.options import DispatchOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["read_lines", "running_dispatcher", "wait_until"]


def wait_until(predicate: Callable[[], Any], *, timeout_s: float, interval_s: float = 0.2,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


@contextmanager
def running_dispatcher(spark: SparkSession, store_url: str, checkpoint: Path, *,
                       trigger_seconds: float = 0.5, **options: Any) -> Iterator[StreamingQuery]:
    """The dispatcher query on ``spark`` for the duration of the block."""
    from tocsin.dispatcher.query import start_dispatcher

    opts = DispatchOptions(store_url=store_url, **options)
    query = start_dispatcher(spark, opts, checkpoint=checkpoint, trigger_seconds=trigger_seconds,
                             name=f"dispatcher-{checkpoint.name}")
    try:
        yield query
    finally:
        query.stop()


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every JSON line a file channel wrote (none when the file does not exist yet)."""
    if not path.exists():
        return []
    complete = path.read_text().split("\n")[:-1]  # a line still being written has no newline
    return [json.loads(line) for line in complete if line.strip()]
