"""How a statement reads the schedules a label selector picks, written once for every read
that takes one (list, re-drive, bulk changes, stats, ``tocsin report``).

:func:`selected` is a ``FROM`` clause that stands where ``schedules`` stood: the ids of the
selector's first pair read in id order from the label index (``schedule_labels``' primary key
within a tenant, ``schedule_labels_pair`` across every tenant), each other pair probed by id,
joined to their schedules ``USING (id)``. A page in id order (``ORDER BY id LIMIT n``) so
reads n entries of the index, however many schedules carry the pair; an ``id IN (SELECT
schedule_id ...)`` filter, which both stores planned by reading every entry of the pair
first, read all of them for each page (SQLite, 10 M schedules: see docs/benchmarks.md,
"Labels"). :func:`rarest_first` puts first the pair that fewest schedules carry, so a
selector of a common pair and a rare one walks the rare one.

:func:`carrying` is the per-row test (``EXISTS`` probes by id), for reads driven by another
index (attempts by when they ended, finished schedules by when they finished): it costs a
probe per row that read would read anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.stores.sql.base import SqlBase

__all__ = ["PROBE_CAP", "carrying", "rarest_first", "selected"]

PROBE_CAP = 1_000
"""Entries of each pair :func:`rarest_first` counts at most (a selector names at most 8)."""


def _pair(alias: str, tenant: str | None) -> str:
    return (f"{alias}.key = ? AND {alias}.value = ?" if tenant is None
            else f"{alias}.tenant = ? AND {alias}.key = ? AND {alias}.value = ?")


def _pair_args(key: str, value: str, tenant: str | None) -> list[Any]:
    return [key, value] if tenant is None else [tenant, key, value]


def selected(labels: Sequence[tuple[str, str]], *,
             tenant: str | None) -> tuple[str, list[Any]]:
    """The ``FROM`` clause (``?`` placeholders) and its arguments of the schedules carrying
    every pair of ``labels`` (of ``tenant``, or of every tenant for None): ``schedules``
    alone for no pair. Its columns are those of ``schedules``; ``id`` is the index's, so
    ``ORDER BY id`` and ``id > ?`` read the index in order."""
    if not labels:
        return "schedules", []
    (key, value), rest = labels[0], labels[1:]
    where, args = [_pair("l0", tenant)], _pair_args(key, value, tenant)
    for n, (k, v) in enumerate(rest, start=1):
        where.append(f"EXISTS (SELECT 1 FROM schedule_labels l{n} WHERE {_pair(f'l{n}', tenant)}"
                     f" AND l{n}.schedule_id = l0.schedule_id)")
        args += _pair_args(k, v, tenant)
    ids = f"SELECT l0.schedule_id AS id FROM schedule_labels l0 WHERE {' AND '.join(where)}"
    return f"({ids}) labelled JOIN schedules USING (id)", args


def carrying(labels: Sequence[tuple[str, str]], *, tenant: str | None,
             column: str = "id") -> tuple[list[str], list[Any]]:
    """The clauses (``?`` placeholders) and arguments true of a row whose schedule id
    (``column``) carries every pair of ``labels``: one probe of the label index each."""
    clauses: list[str] = []
    args: list[Any] = []
    for key, value in labels:
        clauses.append(f"EXISTS (SELECT 1 FROM schedule_labels lp WHERE {_pair('lp', tenant)} "
                       f"AND lp.schedule_id = {column})")
        args += _pair_args(key, value, tenant)
    return clauses, args


def rarest_first(store: SqlBase, labels: Sequence[tuple[str, str]], *,
                 tenant: str | None) -> tuple[tuple[str, str], ...]:
    """``labels`` with the pair fewest schedules carry first (each counted up to
    :data:`PROBE_CAP` by the index, in one statement): the pair :func:`selected` walks."""
    if len(labels) < 2:
        return tuple(labels)
    parts, args = [], []
    for n, (key, value) in enumerate(labels):
        # In the index's order: PostgreSQL otherwise counted a common pair's first entries
        # by a scan of the table (a pair on 10 %: 20 000 rows read, 3.5 ms, for 1 000).
        parts.append(f"SELECT {n} AS n, count(*) AS c FROM (SELECT 1 FROM schedule_labels l "
                     f"WHERE {_pair('l', tenant)} ORDER BY l.schedule_id LIMIT ?) p{n}")
        args += [*_pair_args(key, value, tenant), PROBE_CAP]
    counts = dict(store._rows(" UNION ALL ".join(parts), args))
    order = sorted(range(len(labels)), key=lambda n: (int(counts[n]), n))
    return tuple(labels[n] for n in order)
