"""On the executors: check a batch of import rows by the API's rules and write the good ones
through the store's bulk ``create`` (COPY on PostgreSQL, ``executemany`` on SQLite), one
transaction per chunk. Every row carries a key, so a chunk written twice (a retried Spark task,
a second run of the import) creates nothing twice.

Spark-free: the Spark job (:mod:`tocsin.pipelines.bulk_import`) hands it rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from tocsin.abc import Store
from tocsin.api.text import TEXT_ESCAPE
from tocsin.config import Settings
from tocsin.domain import NewSchedule
from tocsin.errors import ConflictError
from tocsin.intake import Problem, ScheduleCheck, registered
from tocsin.pipelines.rows import DERIVED_KEY_PREFIX, RowShape, SourceFormat
from tocsin.pipelines.writes import create_many

__all__ = ["REJECT_FIELDS", "ImportJob", "Loader", "Tally"]

REJECT_FIELDS = ("source", "row", "field", "reason", "errors")
"""A rejects record: the row's file, the row, its first problem, and every problem (JSON)."""


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
            if isinstance(item, Problem):
                self._reject(tally, raw, source, [item])
                continue
            row, digest = item
            value = check.check(row, index=index, check_text=isinstance(raw, str) and
                                TEXT_ESCAPE.search(raw.encode("utf-8", "surrogatepass"))
                                is not None)
            if isinstance(value, list):
                self._reject(tally, raw, source, value)
                continue
            if digest is not None:
                # The derived key digests the whole row: it is the request's digest too (a
                # different request cannot have it), so the check need not make another.
                value = replace(value, key=DERIVED_KEY_PREFIX + digest[:40],
                                request_digest=digest, overwrite_pending=False)
            good.append((value, raw, source))
        for start in range(0, len(good), job.chunk):
            self._write(good[start:start + job.chunk], tally)
        return tally

    def _write(self, chunk: Sequence[tuple[NewSchedule, Any, str]], tally: Tally) -> None:
        """Write a chunk in one transaction; a row whose key another request holds is
        rejected on ``key``, the others are written."""
        results = create_many(self.store, [c[0] for c in chunk], now_ms=self.job.now_ms)
        for (_, raw, source), result in zip(chunk, results, strict=True):
            if isinstance(result, ConflictError):
                self._reject(tally, raw, source, [Problem("key", str(result))])
            elif result[1]:
                tally.created += 1
            else:
                tally.existing += 1

    def _reject(self, tally: Tally, raw: Any, source: str, problems: list[Problem]) -> None:
        tally.rejected += 1
        tally.rejects.append({
            "source": source, "row": self.job.shape.text(raw), "field": problems[0].field,
            "reason": problems[0].reason,
            "errors": json.dumps([p._asdict() for p in problems])})
