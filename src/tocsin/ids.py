"""Identifiers: time-sortable schedule ids, buckets, and stable delivery ids."""

from __future__ import annotations

import mmh3
from ulid import ULID

__all__ = ["bucket_of", "delivery_id", "new_schedule_id"]


def new_schedule_id(now_ms: int | None = None) -> str:
    """A new ULID: 26 characters, sorting by creation time."""
    if now_ms is None:
        return str(ULID())
    return str(ULID.from_timestamp(now_ms / 1000))


def bucket_of(routing: str, buckets: int) -> int:
    """``murmur3(routing) % buckets``: the schedule id, or its ordering key when it has one."""
    return int(mmh3.hash(routing, signed=False)) % buckets


def delivery_id(schedule_id: str, attempt: int) -> str:
    """The id of attempt ``attempt`` of a schedule: the same each time that attempt is replayed."""
    return f"{schedule_id}-{attempt}"
