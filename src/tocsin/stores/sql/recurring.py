"""Recurring schedules and their expansion (:class:`~tocsin.abc.RecurringStore`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tocsin.abc import FiringRecord, RecurringStore
from tocsin.domain import (
    CronTrigger,
    Expansion,
    IntervalTrigger,
    MisfirePolicy,
    NewSchedule,
    PayloadKind,
    Recurring,
    Status,
)
from tocsin.domain.cron import iana_zone
from tocsin.domain.labels import labels_json, labels_of_json
from tocsin.domain.terms import terms_json, terms_of
from tocsin.errors import NotFoundError, ValidationError
from tocsin.ids import bucket_of
from tocsin.sealing import open_payload, seal_payload
from tocsin.stores.rows import INSERT_ARITY, INSERT_COLUMNS, insert_values
from tocsin.stores.sql.base import SqlBase, executemany, tenant_is

__all__ = ["RECURRING_COLUMNS", "SqlRecurring", "recurring_from_row"]

RECURRING_COLUMNS = (
    "id, tenant, cron, timezone, start_ms, end_ms, channel, payload, payload_kind, headers, "
    "per_firing, stagger_ms, misfire, misfire_grace_ms, policy, paused, revision, "
    "expanded_until_ms, next_expand_ms, created_ms, updated_ms, failed_reason, failed_ms, "
    "every_ms, anchor_ms, jitter_ms, terms, labels"
)
_RECURRING_SET = (
    "cron = ?, timezone = ?, start_ms = ?, end_ms = ?, channel = ?, payload = ?, "
    "payload_kind = ?, headers = ?, per_firing = ?, stagger_ms = ?, misfire = ?, "
    "misfire_grace_ms = ?, policy = ?, paused = ?, every_ms = ?, anchor_ms = ?, jitter_ms = ?, "
    "terms = ?, labels = ?"
)
_INSERT_IGNORE = (f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES "
                  f"({', '.join('?' * INSERT_ARITY)}) ON CONFLICT DO NOTHING")
_CANCEL_FUTURE = ("UPDATE schedules SET status = 'CANCELLED', next_ms = ? WHERE recurring_id = ? "
                  "AND status = 'PENDING' AND firing_ms > ?")


def recurring_from_row(row: Sequence[Any]) -> Recurring:
    """A ``RECURRING_COLUMNS`` row as a :class:`Recurring`."""
    return Recurring(
        id=row[0], tenant=row[1],
        trigger=CronTrigger.parse(row[2], row[3], start_ms=row[4], end_ms=row[5])
        if row[23] is None else IntervalTrigger(every_ms=row[23], anchor_ms=row[24],
                                                start_ms=row[4], end_ms=row[5],
                                                timezone=iana_zone(row[3])),
        channel=row[6], payload=open_payload(bytes(row[7])), payload_kind=PayloadKind(row[8]),
        headers=json.loads(row[9]), count=row[10], stagger_ms=row[11],
        misfire=MisfirePolicy(row[12]), misfire_grace_ms=row[13], policy=row[14],
        paused=bool(row[15]), revision=row[16], expanded_until_ms=row[17],
        next_expand_ms=row[18], created_ms=row[19], updated_ms=row[20],
        failed_reason=row[21], failed_ms=row[22], jitter_ms=row[25],
        terms=terms_of(row[26]), labels=labels_of_json(row[27]),
    )


def _rule_values(r: Recurring) -> tuple[Any, ...]:
    """The values of ``_RECURRING_SET``, in order."""
    t = r.trigger
    every, anchor = (t.every_ms, t.anchor_ms) if isinstance(t, IntervalTrigger) else (None, None)
    return ("" if every is not None else t.expr, t.timezone.key, t.start_ms, t.end_ms,
            r.channel, seal_payload(r.payload), r.payload_kind.value,
            json.dumps(r.headers, separators=(",", ":")), r.count, r.stagger_ms, r.misfire.value,
            r.misfire_grace_ms, r.policy, int(r.paused), every, anchor, r.jitter_ms,
            terms_json(r.terms), labels_json(r.labels))


def check_policy(conn: Any, q: Any, tenant: str, name: str | None) -> None:
    """:class:`~tocsin.errors.ValidationError` unless ``tenant`` has the policy ``name``."""
    if name is not None and conn.execute(q("SELECT 1 FROM policies WHERE tenant = ? AND name = ?"),
                                         (tenant, name)).fetchone() is None:
        raise ValidationError("policy", f"policy {name!r} is not registered")


class SqlRecurring(SqlBase, RecurringStore):
    """The :class:`~tocsin.abc.RecurringStore` role over a backend's ``_work``."""

    def create_recurring(self, recurring: Recurring, *, now_ms: int) -> Recurring:
        d, buckets = self._dialect, self.buckets

        rule = _rule_values(recurring)

        def work(conn: Any) -> tuple[Any, ...]:
            check_policy(conn, d.q, recurring.tenant, recurring.policy)
            return tuple(conn.execute(d.q(
                f"INSERT INTO recurring ({RECURRING_COLUMNS}, bucket) VALUES "
                f"(?, ?, {', '.join('?' * 14)}, 0, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?) "
                f"RETURNING {RECURRING_COLUMNS}"),
                (recurring.id, recurring.tenant, *rule[:14], now_ms, now_ms, now_ms, now_ms,
                 *rule[14:], bucket_of(recurring.id, buckets))).fetchone())

        return recurring_from_row(self._work(work))

    def get_recurring(self, recurring_id: str, *, tenant: str | None = None) -> Recurring:
        rows = self._rows(f"SELECT {RECURRING_COLUMNS} FROM recurring "
                          f"WHERE id = ? AND {tenant_is()}", (recurring_id, tenant, tenant))
        if not rows:
            raise NotFoundError("recurring schedule", recurring_id)
        return recurring_from_row(rows[0])

    def list_recurring(self, *, tenant: str | None = None, after_id: str | None = None,
                       limit: int = 100) -> list[Recurring]:
        rows = self._rows(
            f"SELECT {RECURRING_COLUMNS} FROM recurring "
            f"WHERE {tenant_is()} AND id > ? ORDER BY id LIMIT ?",
            (tenant, tenant, after_id or "", limit))
        return [recurring_from_row(r) for r in rows]

    def update_recurring(self, recurring: Recurring, *, now_ms: int) -> Recurring:
        d = self._dialect

        def work(conn: Any) -> tuple[Any, ...] | None:
            check_policy(conn, d.q, recurring.tenant, recurring.policy)
            row = conn.execute(d.q(
                f"UPDATE recurring SET {_RECURRING_SET}, revision = revision + 1, "
                "expanded_until_ms = ?, next_expand_ms = ?, updated_ms = ?, "
                "failed_reason = NULL, failed_ms = NULL WHERE id = ? AND tenant = ? "
                f"RETURNING {RECURRING_COLUMNS}"),
                (*_rule_values(recurring), now_ms, now_ms, now_ms, recurring.id,
                 recurring.tenant)).fetchone()
            if row is not None:  # firings still ahead are expanded anew under the new rule
                conn.execute(d.q(_CANCEL_FUTURE), (now_ms, recurring.id, now_ms))
            return None if row is None else tuple(row)

        row = self._work(work)
        if row is None:
            raise NotFoundError("recurring schedule", recurring.id)
        return recurring_from_row(row)

    def delete_recurring(self, recurring_id: str, *, now_ms: int,
                         tenant: str | None = None) -> int:
        d = self._dialect

        def work(conn: Any) -> int | None:
            if not conn.execute(d.q(f"DELETE FROM recurring WHERE id = ? AND {tenant_is()}"),
                                (recurring_id, tenant, tenant)).rowcount:
                return None
            conn.execute(d.q("DELETE FROM skipped_firings WHERE recurring_id = ?"),
                         (recurring_id,))
            return int(conn.execute(d.q(_CANCEL_FUTURE),
                                    (now_ms, recurring_id, now_ms)).rowcount)

        cancelled = self._work(work)
        if cancelled is None:
            raise NotFoundError("recurring schedule", recurring_id)
        return cancelled

    def recurring_due(self, *, bucket_lo: int, bucket_hi: int, now_ms: int,
                      limit: int) -> list[Recurring]:
        rows = self._rows(
            f"SELECT {RECURRING_COLUMNS} FROM recurring WHERE bucket BETWEEN ? AND ? "
            "AND next_expand_ms <= ? ORDER BY next_expand_ms LIMIT ?",
            (bucket_lo, bucket_hi, now_ms, limit))
        return [recurring_from_row(r) for r in rows]

    def next_expansion_ms(self) -> int | None:
        found = self._rows("SELECT min(next_expand_ms) FROM recurring")[0][0]
        return None if found is None else int(found)

    def record_expansions(self, expansions: Sequence[tuple[Recurring, Expansion,
                                                           Sequence[NewSchedule], int | None]],
                          *, now_ms: int) -> int:
        d, buckets = self._dialect, self.buckets

        def work(conn: Any) -> int:
            applied = 0
            messages: list[NewSchedule] = []
            skipped: list[tuple[Any, ...]] = []
            for recurring, expansion, items, next_expand_ms in expansions:
                moved = conn.execute(d.q(
                    "UPDATE recurring SET expanded_until_ms = ?, next_expand_ms = ? "
                    "WHERE id = ? AND revision = ? AND expanded_until_ms = ? "
                    "AND failed_ms IS NULL"),
                    (expansion.until_ms, next_expand_ms, recurring.id, recurring.revision,
                     recurring.expanded_until_ms)).rowcount
                if not moved:  # changed, deleted, failed or expanded meanwhile: stale
                    continue
                applied += 1
                messages += items
                skipped += [(recurring.id, recurring.revision, s.firing_ms, s.reason, now_ms)
                            for s in expansion.skipped]
            # In due order, not rule by rule: the messages due together lie together in the
            # table, as one-off schedules created together do, and their claims and
            # acknowledgements write a tenth of the pages (10 000 rules a minute: their firing
            # drained at half the pace of 10 000 one-off schedules due at one instant).
            messages.sort(key=lambda item: (item.due_ms, item.id or ""))
            executemany(conn, d.q(_INSERT_IGNORE),
                        [insert_values(i, buckets=buckets, now_ms=now_ms) for i in messages])
            executemany(conn, d.q(
                "INSERT INTO skipped_firings VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
                skipped)
            return applied

        return self._work(work)

    def fire_recurring(self, recurring: Recurring, items: Sequence[NewSchedule], *,
                       now_ms: int, fresh_only: bool) -> int:
        d, buckets = self._dialect, self.buckets
        by_firing: dict[int, list[NewSchedule]] = {}
        for item in items:
            by_firing.setdefault(item.firing_ms or 0, []).append(item)

        def work(conn: Any) -> int:
            fired = 0
            for firing_ms, messages in by_firing.items():
                if fresh_only and conn.execute(d.q(
                        "SELECT 1 FROM schedules WHERE recurring_id = ? AND firing_ms = ? "
                        "LIMIT 1"), (recurring.id, firing_ms)).fetchone() is not None:
                    continue
                added = 0
                for item in messages:
                    added += conn.execute(d.q(_INSERT_IGNORE), insert_values(
                        item, buckets=buckets, now_ms=now_ms)).rowcount
                fired += 1 if added else 0
            return fired

        return self._work(work)

    def fail_recurring(self, recurring_id: str, *, reason: str, now_ms: int) -> Recurring:
        rows = self._write(
            "UPDATE recurring SET failed_reason = ?, failed_ms = ?, next_expand_ms = NULL "
            f"WHERE id = ? RETURNING {RECURRING_COLUMNS}", (reason, now_ms, recurring_id))
        if not rows:
            raise NotFoundError("recurring schedule", recurring_id)
        return recurring_from_row(rows[0])

    def recurring_firings(self, recurring_id: str, *, after_ms: int = -1, limit: int = 100,
                          tenant: str | None = None) -> list[FiringRecord]:
        self.get_recurring(recurring_id, tenant=tenant)
        expanded = self._rows(
            "SELECT firing_ms, status, count(*), min(due_ms) FROM schedules "
            "WHERE recurring_id = ? AND firing_ms > ? GROUP BY firing_ms, status",
            (recurring_id, after_ms))
        skipped = self._rows(
            "SELECT firing_ms, reason FROM skipped_firings WHERE recurring_id = ? "
            "AND firing_ms > ?", (recurring_id, after_ms))
        return _firing_records(expanded, {int(f): r for f, r in skipped}, limit)


def _firing_records(expanded: Sequence[Sequence[Any]], reasons: dict[int, str],
                    limit: int) -> list[FiringRecord]:
    """Firing records from the (firing, status, count, first due) groups of its messages and
    the reasons of its skipped firings."""
    counts: dict[int, dict[str, int]] = {}
    first_due: dict[int, int] = {}
    for firing_ms, status, n, due_ms in expanded:
        counts.setdefault(int(firing_ms), {})[str(status)] = int(n)
        first_due[int(firing_ms)] = min(int(due_ms), first_due.get(int(firing_ms), due_ms))
    records = []
    for firing_ms in sorted(set(counts) | set(reasons))[:limit]:
        messages = counts.get(firing_ms, {})
        if any(n for status, n in messages.items() if status != Status.CANCELLED.value):
            outcome, reason = "expanded", None
        elif firing_ms in reasons:
            outcome, reason = "skipped", reasons[firing_ms]
        else:  # expanded, then cancelled (its recurring changed or was deleted)
            outcome, reason = "cancelled", None
        records.append(FiringRecord(firing_ms, outcome, reason, first_due.get(firing_ms),
                                    messages))
    return records
