"""Counters and gauges (:class:`~tocsin.abc.MetricsStore`), written once.

A counter is a few rows ``(name, labels, shard, value)`` that writers add to with one atomic
upsert inside their own transaction, each on a random shard, and that readers sum. So
increments from any number of dispatchers are never lost or reversed (no read-then-write),
and concurrent PostgreSQL writers rarely wait on one row's lock.
"""

from __future__ import annotations

import json
import random
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from tocsin.abc import MetricsStore
from tocsin.domain import Ack, Status
from tocsin.stores.sql.base import Dialect, SqlBase, tenant_is
from tocsin.stores.sql.stats import FINISHED_AT, finished_rows

__all__ = ["DELIVERIES", "FENCED", "LATENESS", "LATENESS_SUM", "SHARDS", "SqlMetrics",
           "add_counts", "delivery_counts", "labels", "lateness_index"]

SHARDS = 8
DELIVERIES = "deliveries"
"""Delivery attempts by tenant, channel and outcome (``delivered``, ``retried``, ``dead``,
``expired``)."""
LATENESS = "lateness_le"
"""Delivered schedules by tenant, channel and lateness bucket: ``le`` is the bucket's upper
bound in milliseconds (``inf`` for the last), so a change of the bounds never misfiles the
counts kept under the old ones (:func:`lateness_index`). Before schema 13 the counter was
``lateness_bucket``, keyed by the bucket's index; it is no longer read."""
LATENESS_SUM = "lateness_ms"
"""Delivered schedules' summed lateness by tenant and channel."""
FENCED = "fenced"
"""Acknowledgements refused by the epoch fence (a newer claim owns the row)."""
_OUTCOME = {Status.DELIVERED: "delivered", Status.PENDING: "retried", Status.DEAD: "dead",
            Status.EXPIRED: "expired"}


def labels(**values: str | int) -> str:
    """Labels as the canonical JSON a counter row keys them by."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=4096)
def _destination_labels(tenant: str, channel: str, *extra: tuple[str, str | int]) -> str:
    """:func:`labels` of a destination and ``extra`` pairs, made once: a burst's
    acknowledgements encoded the same few labels three times a row, 8 % of a worker's CPU."""
    return labels(tenant=tenant, channel=channel, **dict(extra))


def delivery_counts(acks: Sequence[Ack], bounds_ms: Sequence[int]) -> Counter[tuple[str, str]]:
    """What a batch of acknowledgements adds to the delivery counters."""
    counts: Counter[tuple[str, str]] = Counter()
    for a in acks:
        tenant, channel = a.tenant, a.channel
        counts[(DELIVERIES, _destination_labels(tenant, channel,
                                                ("outcome", _OUTCOME[a.status])))] += 1
        if a.status is Status.DELIVERED:
            late = max(0, a.ended_ms - a.due_ms)
            i = bisect_left(bounds_ms, late)
            le = bounds_ms[i] if i < len(bounds_ms) else "inf"
            counts[(LATENESS, _destination_labels(tenant, channel, ("le", le)))] += 1
            counts[(LATENESS_SUM, _destination_labels(tenant, channel))] += late
    return counts


def lateness_index(le: object, bounds_ms: Sequence[int]) -> int:
    """The bucket of ``bounds_ms`` a lateness counter's ``le`` label falls in (a bound no longer
    used goes to the first bucket that holds it)."""
    return len(bounds_ms) if le == "inf" else bisect_left(bounds_ms, int(le))  # type: ignore[call-overload]


def add_counts(conn: Any, d: Dialect, counts: Mapping[tuple[str, str], int]) -> None:
    """Add ``counts`` to their counters inside the caller's transaction."""
    shard = random.randrange(SHARDS)
    items = [(name, lab, n) for (name, lab), n in sorted(counts.items()) if n]
    if not items:
        return
    if d.arrays:  # one statement of three arrays: one execution, not one per counter
        names, labs, values = (list(c) for c in zip(*items, strict=True))
        conn.execute(
            "INSERT INTO counters SELECT c.name, c.labels, %s, c.value FROM "
            "unnest(%b::text[], %b::text[], %b::bigint[]) AS c(name, labels, value) "
            "ON CONFLICT (name, labels, shard) DO UPDATE "
            "SET value = counters.value + excluded.value", (shard, names, labs, values))
        return
    # SQLite: one statement over a JSON array too (see SQLiteStore._log_deliveries)
    conn.execute(
        "INSERT INTO counters SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
        "?, json_extract(value, '$[2]') FROM json_each(?) WHERE true "
        "ON CONFLICT (name, labels, shard) DO UPDATE SET value = counters.value + excluded.value",
        (shard, json.dumps(items)))


class SqlMetrics(SqlBase, MetricsStore):
    """The :class:`~tocsin.abc.MetricsStore` role over a backend's ``_work``."""

    def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        d = self._dialect
        self._work(lambda conn: add_counts(conn, d, counts))

    def counter_totals(self) -> dict[tuple[str, str], int]:
        rows = self._rows("SELECT name, labels, sum(value) FROM counters GROUP BY name, labels")
        return {(r[0], r[1]): int(r[2]) for r in rows}

    def due_between(self, *, from_ms: int, to_ms: int, tenant: str | None = None) -> int:
        rows = self._rows("SELECT count(*) FROM schedules WHERE status = 'PENDING' "
                          f"AND next_ms >= ? AND next_ms < ? AND {tenant_is()}",
                          (from_ms, to_ms, tenant, tenant))
        return int(rows[0][0])

    def pending_by_slot(self, *, from_ms: int, to_ms: int, slot_ms: int,
                        tenant: str | None = None) -> list[tuple[int, int]]:
        rows = self._rows(
            "SELECT (next_ms - ?) / ?, count(*) FROM schedules WHERE status = 'PENDING' "
            f"AND next_ms >= ? AND next_ms < ? AND {tenant_is()} GROUP BY 1 ORDER BY 1",
            (from_ms, slot_ms, from_ms, to_ms, tenant, tenant))
        return [(from_ms + int(r[0]) * slot_ms, int(r[1])) for r in rows]

    def finished_by_slot(self, *, from_ms: int, to_ms: int, slot_ms: int,
                         tenant: str | None = None) -> list[tuple[int, Status, int]]:
        rows = self._rows(  # one bounded range of the schedules_finished index
            f"SELECT ({FINISHED_AT} - ?) / ?, status, count(*) FROM "
            f"{finished_rows(self._dialect)} AND {FINISHED_AT} >= ? "
            f"AND {FINISHED_AT} < ? AND {tenant_is()} GROUP BY 1, 2 ORDER BY 1, 2",
            (from_ms, slot_ms, from_ms, to_ms, tenant, tenant))
        return [(from_ms + int(r[0]) * slot_ms, Status(r[1]), int(r[2])) for r in rows]

    def dead_count(self, *, tenant: str | None = None) -> int:
        rows = self._rows(f"SELECT count(*) FROM schedules WHERE status = 'DEAD' "
                          f"AND {tenant_is()}", (tenant, tenant))
        return int(rows[0][0])

    def tokens_held(self, *, now_ms: int,
                    tenant: str | None = None) -> dict[tuple[str, str], int]:
        rows = self._rows("SELECT tenant, policy, count(*) FROM tokens WHERE expires_ms > ? "
                          f"AND {tenant_is()} GROUP BY tenant, policy", (now_ms, tenant, tenant))
        return {(r[0], r[1]): int(r[2]) for r in rows}
