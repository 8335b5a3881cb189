"""Outcome events: when a schedule whose channel names an ``events`` channel (config
``events``, of the same tenant) reaches a final status — DELIVERED, DEAD, EXPIRED, CANCELLED —
and, with ``events_attempts``, after every attempt, a CloudEvent saying so is scheduled on the
events channel, due at once, in the very transaction that wrote the status. So no outcome is
lost (the status and its event commit together) and each goes out at least once, through the
same delivery engine and retry rules as any schedule.

The event is a schedule of its own whose id is the event's id,
``outcome:<schedule id>:<status>:<attempt>``: written ``ON CONFLICT DO NOTHING``, so a replayed
acknowledgement adds nothing, and every repeat of its delivery carries the same CloudEvent
``id``. Its payload is the structured CloudEvent (``application/cloudevents+json``), sent raw.
An outcome event never has events of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from tocsin.clock import iso_ms
from tocsin.domain import NewSchedule, PayloadKind
from tocsin.domain.terms import BodyFormat, Terms
from tocsin.stores.rows import INSERT_ARITY, INSERT_COLUMNS, insert_values
from tocsin.stores.sql.base import Dialect

__all__ = ["EVENT_PREFIX", "Outcome", "outcome_item", "record_outcomes"]

EVENT_PREFIX = "outcome:"
"""The id prefix of an outcome event's schedule (which has no events of its own)."""
_INSERT_IGNORE = (f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES "
                  f"({', '.join('?' * INSERT_ARITY)}) ON CONFLICT DO NOTHING")
_RAW = Terms(body=BodyFormat.RAW)
_HEADERS = {"Content-Type": "application/cloudevents+json"}


class Outcome(NamedTuple):
    """What happened to one schedule, for its events channel."""

    schedule_id: str
    tenant: str
    channel: str
    events: str
    """The events channel (of ``tenant``)."""
    status: str
    """DELIVERED, DEAD, EXPIRED, CANCELLED; PENDING for an attempt to be retried."""
    attempt: int
    error: str | None
    at_ms: int
    due_ms: int


def event_id(o: Outcome) -> str:
    """The event's id (and its schedule's): stable for every repeat."""
    return f"{EVENT_PREFIX}{o.schedule_id}:{o.status}:{o.attempt}"


def outcome_item(o: Outcome) -> NewSchedule:
    """The event of ``o`` as a schedule on its events channel, due at ``o.at_ms``."""
    ident = event_id(o)
    kind = "attempt" if o.status == "PENDING" else o.status.lower()
    event = {
        "specversion": "1.0", "id": ident, "source": f"/tocsin/{o.tenant}/{o.channel}",
        "type": f"tocsin.schedule.{kind}", "subject": o.schedule_id, "time": iso_ms(o.at_ms),
        "datacontenttype": "application/json",
        "data": {"schedule_id": o.schedule_id, "tenant": o.tenant, "channel": o.channel,
                 "status": o.status, "attempt": o.attempt, "error": o.error,
                 "due_at": iso_ms(o.due_ms), "at": iso_ms(o.at_ms)},
    }
    return NewSchedule(id=ident, channel=o.events, tenant=o.tenant,
                       payload=json.dumps(event, separators=(",", ":")).encode(),
                       payload_kind=PayloadKind.JSON, headers=dict(_HEADERS),
                       due_ms=o.at_ms, terms=_RAW)


def record_outcomes(conn: Any, d: Dialect, outcomes: Sequence[Outcome], *, buckets: int,
                    now_ms: int) -> None:
    """Schedule the events of ``outcomes`` in the caller's transaction (a repeat adds
    nothing)."""
    sql = d.q(_INSERT_IGNORE)
    for o in outcomes:
        if not o.schedule_id.startswith(EVENT_PREFIX):
            conn.execute(sql, insert_values(outcome_item(o), buckets=buckets, now_ms=now_ms))


def events_of(conn: Any, d: Dialect, tenant: str, channel: str) -> str | None:
    """The events channel ``tenant``'s ``channel`` names, else its tenant's, if any."""
    row = conn.execute(d.q("SELECT config FROM channels WHERE tenant = ? AND name = ?"),
                       (tenant, channel)).fetchone()
    if row is None:
        return None
    config = row[0] if isinstance(row[0], dict) else json.loads(row[0])
    value = config.get("events")
    if value:
        return str(value)
    found = conn.execute(d.q("SELECT events FROM tenants WHERE name = ?"), (tenant,)).fetchone()
    return str(found[0]) if found and found[0] and found[0] != channel else None


def acknowledged_outcomes(conn: Any, d: Dialect, acks: Sequence[Any], *, final_ids: set[str],
                          epoch: int, now_ms: int) -> list[Outcome]:
    """The outcomes of the acknowledgements ``acks`` (each naming an events channel) that
    this epoch's acknowledgement applied: a DELIVERED one still held by ``epoch`` as
    delivered, a DEAD or EXPIRED one in ``final_ids``; a retried attempt's when its channel
    asks for every attempt (a fenced one may then make an extra attempt event)."""
    delivered = [a.schedule_id for a in acks if a.status.value == "DELIVERED"]
    done: set[str] = set()
    for start in range(0, len(delivered), 500):
        part = delivered[start:start + 500]
        marks = ", ".join("?" * len(part))
        done.update(r[0] for r in conn.execute(d.q(
            f"SELECT id FROM schedules WHERE id IN ({marks}) AND claim_epoch = ? "
            "AND status = 'DELIVERED'"), (*part, epoch)).fetchall())
    out = []
    for a in acks:
        status = a.status.value
        if (status == "DELIVERED" and a.schedule_id in done) or a.schedule_id in final_ids or (
                status == "PENDING" and a.every_attempt):
            out.append(Outcome(a.schedule_id, a.tenant, a.channel, a.events, status,
                               a.attempt, a.error, now_ms, a.due_ms))
    return out
