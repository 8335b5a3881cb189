"""On the executors: check a batch of import rows by the API's rules and write the good ones
through the store's bulk ``create`` (COPY on PostgreSQL, ``executemany`` on SQLite), one
transaction per chunk. Every row carries a key, so a chunk written twice (a retried Spark task,
a second run of the import) creates nothing twice.

Spark-free: the Spark job (:mod:`tocsin.pipelines.bulk_import`) hands it rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tocsin.abc import Store
from tocsin.api.text import TEXT_ESCAPE
from tocsin.config import Settings
from tocsin.domain import NewSchedule
from tocsin.errors import ConflictError
from tocsin.intake import Problem, ScheduleCheck, registered
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.pipelines.writes import create_many

__all__ = ["REJECT_FIELDS", "ImportJob", "Loader", "Tally"]

REJECT_FIELDS = ("source", "row", "field", "reason", "errors")
"""A rejects record: the row's file, the row, its first problem, and every problem (JSON)."""
_ALONE = 32
"""A chunk refused for a conflicting key is split until it is this small, then written row
by row to find the rows at fault."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportJob:
    """Everything an executor needs, picklable: where to write, the rules, the row shape."""

    store_url: str
    buckets: int
    settings: Settings
    now_ms: int
    """The import's "now" (from the driver's clock): ``delay`` and the grace window count
    from it, for every row alike."""
    shape: RowShape
    root: str
    """The imported path as a URI: a row's source is its file's path below it."""
    chunk: int = 5_000

    def source_of(self, uri: str) -> str:
        """A file's name within the import (its base name when a single file was given)."""
        root = self.root.rstrip("/")
        if uri == root or not uri.startswith(root + "/"):
            return uri.rsplit("/", 1)[-1]
        return uri[len(root) + 1:]


@dataclass(slots=True)
class Tally:
    """What became of the rows: created, already there (same key and request), rejected."""

    created: int = 0
    existing: int = 0
    rejected: int = 0
    rejects: list[dict[str, str]] = field(default_factory=list)


class Loader:
    """Checks and writes batches of one import in one executor process."""

    def __init__(self, job: ImportJob, store: Store) -> None:
        self.job = job
        self.store = store

    def load(self, rows: Sequence[tuple[Any, str]]) -> Tally:
        """Check and write ``rows`` (each the raw row and its file's URI)."""
        job, tally = self.job, Tally()
        check = ScheduleCheck(job.settings, now_ms=job.now_ms,
                              known=partial(registered, self.store))
        good: list[tuple[NewSchedule, Any, str]] = []
        for index, (raw, uri) in enumerate(rows):
            if raw == "" and job.shape.format is SourceFormat.JSON:
                continue  # a blank line is no row
            source = job.source_of(uri)
            item = job.shape.item(raw, source=source)
            value = item if isinstance(item, Problem) else check.check(
                item, index=index, check_text=isinstance(raw, str)
                and TEXT_ESCAPE.search(raw.encode("utf-8", "surrogatepass")) is not None)
            if isinstance(value, NewSchedule):
                good.append((value, raw, source))
            else:
                self._reject(tally, raw, source, [value] if isinstance(value, Problem) else value)
        for start in range(0, len(good), job.chunk):
            self._write(good[start:start + job.chunk], tally)
        return tally

    def _write(self, chunk: Sequence[tuple[NewSchedule, Any, str]], tally: Tally) -> None:
        """Write a chunk in one transaction; a conflicting key fails it whole, so split it
        to find the rows at fault (each rejected on ``key``)."""
        try:
            results = self._create([c[0] for c in chunk])
        except ConflictError:
            if len(chunk) <= _ALONE:
                for one in chunk:
                    self._write_alone(one, tally)
                return
            half = len(chunk) // 2
            self._write(chunk[:half], tally)
            self._write(chunk[half:], tally)
            return
        self._count(results, tally)

    def _write_alone(self, one: tuple[NewSchedule, Any, str], tally: Tally) -> None:
        try:
            results = self._create([one[0]])
        except ConflictError as conflict:
            self._reject(tally, one[1], one[2], [Problem("key", str(conflict))])
            return
        self._count(results, tally)

    def _create(self, items: list[NewSchedule]) -> list[tuple[Any, bool]]:
        """``create`` by the bulk path (see :func:`~tocsin.pipelines.writes.create_many`)."""
        return create_many(self.store, items, now_ms=self.job.now_ms)

    @staticmethod
    def _count(results: Sequence[tuple[Any, bool]], tally: Tally) -> None:
        created = sum(1 for _, new in results if new)
        tally.created += created
        tally.existing += len(results) - created

    def _reject(self, tally: Tally, raw: Any, source: str, problems: list[Problem]) -> None:
        tally.rejected += 1
        tally.rejects.append({
            "source": source, "row": self.job.shape.text(raw), "field": problems[0].field,
            "reason": problems[0].reason,
            "errors": json.dumps([p._asdict() for p in problems])})
