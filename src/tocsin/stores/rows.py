"""Column lists, row mappers and helpers shared by the SQL stores (SQLite, PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from enum import StrEnum
from importlib import resources
from typing import Any

from tocsin.abc import ClaimedRow
from tocsin.domain import (
    Ack,
    ChannelKind,
    ChannelSpec,
    Delivery,
    NewSchedule,
    Outcome,
    Schedule,
    Status,
)
from tocsin.domain.labels import labels_json, labels_of_json
from tocsin.domain.schedule import PayloadKind
from tocsin.domain.terms import terms_json, terms_of
from tocsin.errors import ConflictError, StoreError
from tocsin.ids import bucket_of, new_schedule_id
from tocsin.sealing import open_payload, seal_payload

__all__ = [
    "CHANNEL_COLUMNS",
    "CLAIM_ARITY",
    "CLAIM_COLUMNS",
    "COUNTS_SQL",
    "DELIVERY_COLUMNS",
    "FINISHED",
    "INSERT_ARITY",
    "INSERT_COLUMNS",
    "SCHEDULE_COLUMNS",
    "KeyDecision",
    "channel_from_row",
    "claimed_from_row",
    "dead_letter_item",
    "delivery_from_row",
    "delivery_values",
    "earliest",
    "head_of_key",
    "headers_json",
    "insert_values",
    "item_of",
    "key_decision",
    "list_filters",
    "migrations",
    "pending_of",
    "pending_values",
    "refuse_newer_schema",
    "schedule_from_row",
    "schedule_from_values",
    "status_counts",
    "with_id",
]

SCHEDULE_COLUMNS = (
    "id, tenant, channel, payload, payload_kind, headers, due_ms, next_ms, bucket, status, "
    "attempts, claim_epoch, claimed_ms, created_ms, delivered_ms, last_error, key, ordering_key, "
    "policy, recurring_id, terms, labels"
)
FINISHED = ("(status = 'DELIVERED' OR status = 'CANCELLED' OR status = 'DEAD' "
            "OR status = 'EXPIRED')")
"""A finished schedule: the predicate of the ``schedules_done`` and ``schedules_finished``
indexes, which a query repeats to read them. Equalities, not an IN list: SQLite tests a list of
three through a temporary table, which it built for every row it wrote (migration 15)."""
COUNTS_SQL = (
    # Each part reads one partial index: pending and claimed rows have no status index of
    # their own (claims and acknowledgements would rewrite it), finished ones do.
    "SELECT 'PENDING', count(*) FROM schedules WHERE status = 'PENDING' AND policy IS NULL "
    "UNION ALL SELECT 'PENDING', count(*) FROM schedules "
    "WHERE status = 'PENDING' AND policy IS NOT NULL "
    "UNION ALL SELECT 'CLAIMED', count(*) FROM schedules WHERE status = 'CLAIMED' "
    f"UNION ALL SELECT status, count(*) FROM schedules WHERE {FINISHED} GROUP BY status"
)
"""Schedules by status: rows of ``(status, count)``, a status possibly more than once."""
CLAIM_COLUMNS = (
    "id, tenant, channel, payload, payload_kind, headers, due_ms, attempts + 1, key, "
    "ordering_key, claim_epoch, chain_base, terms, chain_ms"
)
CLAIM_ARITY = CLAIM_COLUMNS.count(",") + 1
"""How many columns a claim row has (a claim's sort key is appended after them)."""
CHANNEL_COLUMNS = "name, kind, config, tenant"
DELIVERY_COLUMNS = (
    "delivery_id, schedule_id, attempt, epoch, started_ms, ended_ms, outcome, error, lateness_ms"
)
INSERT_COLUMNS = (
    "id, tenant, channel, payload, payload_kind, headers, due_ms, next_ms, bucket, status, "
    "attempts, created_ms, key, fingerprint, ordering_key, policy, recurring_id, firing_ms, "
    "terms, labels"
)
INSERT_ARITY = INSERT_COLUMNS.count(",") + 1


_KIND_TEXT = {k: k.value for k in PayloadKind}
_OUTCOME_TEXT = {o: o.value for o in Outcome}
"""Enum member → its text by dict lookup: ``member.value`` is a slow descriptor on Python 3.11,
and these run once per row on the ingest and acknowledgement paths."""
_PENDING = Status.PENDING.value


_HEADERS_JSON = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(headers, separators=(",", ":"))`` with one encoder made once (``dumps`` makes
one for every call when given separators: ~3 us of an import row's ~30 with headers)."""


def insert_values(item: NewSchedule, *, buckets: int, now_ms: int,
                  new_id: str | None = None) -> tuple[Any, ...]:
    """The INSERT values (in ``INSERT_COLUMNS`` order) of a new PENDING schedule; its id is
    the item's own, else ``new_id`` (made by the caller), else a new one."""
    schedule_id = item.id or new_id or new_schedule_id(now_ms)
    # A key's schedules share a bucket, so one task hands them over in order; a policy's are
    # spread like any others (each range's claim takes its part of the policy's earliest).
    return (
        schedule_id, item.tenant, item.channel, seal_payload(item.payload),
        _KIND_TEXT[item.payload_kind],
        _HEADERS_JSON(item.headers) if item.headers else "{}",
        item.due_ms, item.due_ms,
        bucket_of(item.ordering_key or schedule_id, buckets),
        _PENDING, 0, now_ms, item.key,
        item.fingerprint() if item.key is not None else None, item.ordering_key, item.policy,
        item.recurring_id, item.firing_ms, terms_json(item.terms),
        labels_json(item.labels) if item.labels else None,
    )


def pending_values(*, tenant: str, channel: str, payload: bytes, payload_kind: str,
                   headers: str, due_ms: int, key: str | None, fingerprint: str | None,
                   ordering_key: str | None, policy: str | None,
                   terms: str | None = None, labels: str | None = None) -> tuple[Any, ...]:
    """The INSERT values of a new PENDING schedule, as :func:`insert_values` writes them,
    but its id, bucket and creation time (None), which :func:`with_id` fills in as it is
    written; ``headers`` and ``terms`` as JSON text (:func:`headers_json`,
    :func:`~tocsin.domain.terms.terms_json`). An import builds these
    straight from its columns, without a :class:`NewSchedule` each (2.5 us a row)."""
    return (None, tenant, channel, seal_payload(payload), payload_kind, headers, due_ms, due_ms,
            None, _PENDING, 0, None, key, fingerprint, ordering_key, policy, None, None, terms,
            labels)


def pending_of(item: NewSchedule) -> tuple[Any, ...]:
    """:func:`pending_values` of ``item`` (neither recurring nor given an id)."""
    return pending_values(
        tenant=item.tenant, channel=item.channel, payload=item.payload,
        payload_kind=_KIND_TEXT[item.payload_kind], headers=headers_json(item.headers),
        due_ms=item.due_ms, key=item.key,
        fingerprint=item.fingerprint() if item.key is not None else None,
        ordering_key=item.ordering_key, policy=item.policy, terms=terms_json(item.terms),
        labels=labels_json(item.labels) if item.labels else None)


def with_id(pending: Sequence[Any], schedule_id: str, *, buckets: int,
            now_ms: int) -> tuple[Any, ...]:
    """:func:`pending_values` ``pending`` as the INSERT values of schedule ``schedule_id``
    created at ``now_ms``."""
    return (schedule_id, *pending[1:8], bucket_of(pending[14] or schedule_id, buckets),
            pending[9], pending[10], now_ms, *pending[12:])


def item_of(pending: Sequence[Any], *, key_retention_ms: int) -> NewSchedule:
    """The item :func:`pending_of` made ``pending`` from (as :meth:`NewSchedule.fingerprint`
    and the store see it)."""
    return NewSchedule(
        channel=pending[2], payload=open_payload(pending[3]),
        payload_kind=PayloadKind(pending[4]),
        headers=json.loads(pending[5]), due_ms=pending[6], tenant=pending[1], key=pending[12],
        ordering_key=pending[14], key_retention_ms=key_retention_ms,
        request_digest=pending[13], policy=pending[15], terms=terms_of(pending[18]),
        labels=labels_of_json(pending[19]))


def headers_json(headers: dict[str, str]) -> str:
    """Headers as stored: JSON text, ``{}`` for none."""
    return _HEADERS_JSON(headers) if headers else "{}"


def schedule_from_values(v: Sequence[Any], item: NewSchedule) -> Schedule:
    """The :class:`Schedule` just inserted from ``item`` with ``insert_values`` values ``v``
    (built from the item's own values: this is the ingest path)."""
    return Schedule(
        id=v[0], tenant=item.tenant, channel=item.channel, payload=item.payload,
        payload_kind=item.payload_kind, headers=item.headers, due_ms=item.due_ms,
        next_ms=item.due_ms, bucket=v[8], status=Status.PENDING, attempts=0, created_ms=v[11],
        key=item.key, ordering_key=item.ordering_key, policy=item.policy,
        recurring_id=item.recurring_id, terms=item.terms, labels=item.labels,
    )


def dead_letter_item(ack: Ack, row: Sequence[Any], *, now_ms: int) -> NewSchedule:
    """The copy of a dead schedule for ``ack.dead_letter``, due now; ``row`` is the dead
    schedule's ``(tenant, payload, payload_kind, headers)``."""
    headers = {**json.loads(row[3]), "Tocsin-Dead-Letter-Of": ack.schedule_id,
               "Tocsin-Error": (ack.error or "")[:500]}
    return NewSchedule(channel=str(ack.dead_letter), payload=open_payload(bytes(row[1])),
                       payload_kind=PayloadKind(row[2]), headers=headers, due_ms=now_ms,
                       tenant=row[0])


def delivery_values(acks: Sequence[Ack], epoch: int) -> list[tuple[Any, ...]]:
    """The attempt-log rows (in ``DELIVERY_COLUMNS`` order) of a batch of acks."""
    return [(a.delivery_id, a.schedule_id, a.attempt, epoch, a.started_ms, a.ended_ms,
             _OUTCOME_TEXT[a.outcome], a.error, a.ended_ms - a.due_ms) for a in acks]


def earliest(pending_ms: int | None, claimed_ms: int | None, lease_ms: int) -> int | None:
    """``next_due_ms`` from the earliest PENDING next time and the oldest claim's time."""
    times = [t for t in (pending_ms, None if claimed_ms is None else claimed_ms + lease_ms)
             if t is not None]
    return min(times) if times else None


def list_filters(
    mark: str,
    *,
    status: Status | None,
    channel: str | None,
    due_from_ms: int | None,
    due_to_ms: int | None,
    after_id: str | None,
    tenant: str | None = None,
    key: str | None = None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (``mark`` is the driver's placeholder) and arguments of ``list``
    (a label selector is the ``FROM`` clause's: :func:`tocsin.stores.sql.labels.selected`)."""
    where, args = ["1 = 1"], []
    for clause, value in (("tenant = ?", tenant), ("status = ?", status.value if status else None),
                          ("channel = ?", channel), ("due_ms >= ?", due_from_ms),
                          ("due_ms < ?", due_to_ms), ("id > ?", after_id), ("key = ?", key)):
        if value is not None:
            where.append(clause.replace("?", mark))
            args.append(value)
    return " AND ".join(where), args


def migrations(dialect: str) -> list[tuple[int, str]]:
    """The numbered migration scripts of ``dialect`` (``sqlite``, ``postgres``), in order."""
    folder = resources.files("tocsin.stores") / "migrations" / dialect
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text()))
    return sorted(found)


def refuse_newer_schema(version: int, known: int) -> None:
    """Refuse a store whose schema (``version``) is newer than this code's migrations go
    (``known``): a later Tocsin migrated it, and this code would write rows that schema no
    longer means (docs/deploy.md#upgrades)."""
    if version > known:
        from tocsin import __version__

        raise StoreError(f"the store's schema is version {version}, newer than this Tocsin "
                         f"({__version__}, schema {known}) knows: a later version migrated it; "
                         "install that version on this machine (docs/deploy.md#upgrades)")


def schedule_from_row(row: Sequence[Any]) -> Schedule:
    """A ``SCHEDULE_COLUMNS`` row as a :class:`Schedule`."""
    return Schedule(
        id=row[0], tenant=row[1], channel=row[2], payload=open_payload(bytes(row[3])),
        payload_kind=PayloadKind(row[4]), headers=json.loads(row[5]), due_ms=row[6],
        next_ms=row[7], bucket=row[8], status=Status(row[9]), attempts=row[10],
        claim_epoch=row[11], claimed_ms=row[12], created_ms=row[13], delivered_ms=row[14],
        last_error=row[15], key=row[16], ordering_key=row[17], policy=row[18],
        recurring_id=row[19], terms=terms_of(row[20]), labels=labels_of_json(row[21]),
    )


def status_counts(rows: Iterable[Sequence[Any]]) -> dict[Status, int]:
    """:data:`COUNTS_SQL`'s rows as a count for every status."""
    counts = dict.fromkeys(Status, 0)
    for status, n in rows:
        counts[Status(status)] += int(n)
    return counts


def claimed_from_row(row: Sequence[Any]) -> ClaimedRow:
    """A ``CLAIM_COLUMNS`` row as a :class:`ClaimedRow`."""
    return ClaimedRow(row[0], row[1], row[2], open_payload(bytes(row[3])), row[4], row[5],
                      row[6], row[7], row[8], row[9], row[10], row[11], row[12],
                      None if row[13] is None else int(row[13]))


def delivery_from_row(row: Sequence[Any]) -> Delivery:
    """A ``DELIVERY_COLUMNS`` row as a :class:`Delivery`."""
    return Delivery(
        delivery_id=row[0], schedule_id=row[1], attempt=row[2], epoch=row[3],
        started_ms=row[4], ended_ms=row[5], outcome=Outcome(row[6]), error=row[7],
        lateness_ms=row[8],
    )


def channel_from_row(row: Sequence[Any]) -> ChannelSpec:
    """A ``CHANNEL_COLUMNS`` row as a :class:`ChannelSpec`."""
    config = row[2] if isinstance(row[2], dict) else json.loads(row[2])
    return ChannelSpec(name=row[0], kind=ChannelKind(row[1]), config=config, tenant=row[3])


def head_of_key(seq: str) -> str:
    """The claim's ordering rule, for a candidate row aliased ``s``: a row without an ordering
    key is always claimable; a keyed row only when no other row of its key is CLAIMED or
    PENDING ahead of it in (due time, enqueue sequence ``seq``) order, and its key is not
    halted. So a key's schedules reach the channel one at a time, in order, through retries,
    replays and any number of executors."""
    return (
        "(s.ordering_key IS NULL OR (NOT EXISTS (SELECT 1 FROM schedules p "
        "WHERE p.tenant = s.tenant AND p.ordering_key = s.ordering_key "
        "AND p.status IN ('PENDING', 'CLAIMED') AND p.id <> s.id AND (p.status = 'CLAIMED' "
        f"OR p.due_ms < s.due_ms OR (p.due_ms = s.due_ms AND p.{seq} < s.{seq}))) "
        "AND NOT EXISTS (SELECT 1 FROM halted_keys h WHERE h.tenant = s.tenant "
        "AND h.ordering_key = s.ordering_key)))"
    )


class KeyDecision(StrEnum):
    """What a create does with an item whose key already names a schedule."""

    REPEAT = "repeat"
    """Answer the existing schedule, change nothing."""
    OVERWRITE = "overwrite"
    """Replace the PENDING schedule's payload and headers."""
    REPLACE = "replace"
    """The old holder completed longer ago than the retention: free the key, insert anew."""


def key_decision(item: NewSchedule, existing: Schedule, fingerprint: str | None,
                 *, now_ms: int) -> KeyDecision:
    """The rule for a reused key (see :attr:`NewSchedule.overwrite_pending`); raises
    :class:`~tocsin.errors.ConflictError` when the request cannot be honoured."""
    if not item.overwrite_pending:
        if fingerprint != item.fingerprint():
            raise ConflictError(
                f"key {item.key!r} is already used by schedule {existing.id} with a "
                "different request", ident=existing.id, status=existing.status.value)
        return KeyDecision.REPEAT
    if existing.status is Status.PENDING:
        return KeyDecision.OVERWRITE
    if existing.status is Status.CLAIMED:
        raise ConflictError(f"task key {item.key!r}: schedule {existing.id} is firing; too late "
                            "to overwrite it", ident=existing.id, status=existing.status.value)
    completed = existing.delivered_ms or existing.claimed_ms or existing.next_ms or 0
    if completed > now_ms - item.key_retention_ms:
        return KeyDecision.REPEAT
    return KeyDecision.REPLACE
