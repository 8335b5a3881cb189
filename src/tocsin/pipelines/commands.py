"""The commands topic: ``{"op": "create" | "cancel" | "reschedule", ...}`` with the API's
schema, applied to the store so that applying a message twice changes nothing.

========== ==================================================================================
op         fields
========== ==================================================================================
create     those of ``POST /v1/schedules`` (one schedule); without ``key`` (or
           ``uniqueness_key``) the key ``kafka:<topic>:<partition>:<offset>`` is given, so a
           replayed message is a repeat
cancel     ``id``, or ``key`` (and ``tenant``, default ``default``); an already cancelled
           schedule answers ``ok`` again
reschedule ``id`` or ``key`` (and ``tenant``), and those of ``PATCH /v1/schedules/{id}``
========== ==================================================================================

"Now" is the message's timestamp: ``delay`` counts from when the command was produced and the
grace window is judged then, so a replay (or a late ingest) decides exactly as the first time.
Consecutive creates of a partition are written in one ``create`` call; the messages of one
partition are applied in their order (a cancel after its create).

Spark-free: the ingest query's writer (:mod:`tocsin.pipelines.ingest`) calls it on executors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from functools import partial
from typing import Any, NamedTuple

import pydantic

from tocsin.abc import Store
from tocsin.api.models import ScheduleChange
from tocsin.config import Settings
from tocsin.domain import DEFAULT_TENANT, NewSchedule
from tocsin.errors import ConflictError, NotFoundError, TocsinError, ValidationError
from tocsin.intake import Problem, ScheduleCheck, read_change, reason_of, registered
from tocsin.pipelines.writes import create_many, schedule_id_for_key

__all__ = ["Answer", "CommandApplier", "Message", "Op", "Outcome"]


class Op(StrEnum):
    """What a command asks."""

    CREATE = "create"
    """Store a new schedule."""
    CANCEL = "cancel"
    """Cancel a pending schedule."""
    RESCHEDULE = "reschedule"
    """Change a pending schedule's due time, payload or headers."""


class Outcome(StrEnum):
    """What became of a command."""

    APPLIED = "applied"
    """Done now, or found done already (a replay): the store holds what it asked."""
    REFUSED = "refused"
    """Well-formed, but the store said no (not found, too late, a key reused)."""
    INVALID = "invalid"
    """Not a command by the API's rules: sent to the rejects topic with the reason."""


class Message(NamedTuple):
    """One record of the commands topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None


class Answer(NamedTuple):
    """The answer to one message (what the reply and rejects topics carry)."""

    message: Message
    op: str | None
    outcome: Outcome
    id: str | None = None
    status: str | None = None
    field: str | None = None
    reason: str | None = None

    def to_json(self) -> bytes:
        """The answer as a JSON reply (with where the command was read)."""
        m = self.message
        body = {"topic": m.topic, "partition": m.partition, "offset": m.offset, "op": self.op,
                "outcome": self.outcome.value, "id": self.id, "status": self.status,
                "field": self.field, "reason": self.reason}
        if self.outcome is Outcome.INVALID:
            body["value"] = (m.value or b"").decode("utf-8", "replace")
        return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


class CommandApplier:
    """Applies the messages of one partition, in order, to ``store``."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    def apply(self, messages: Sequence[Message]) -> list[Answer]:
        """Apply ``messages`` in order; one answer each."""
        answers: list[Answer] = []
        creates: list[tuple[Message, NewSchedule]] = []
        for message in messages:
            command = self._parse(message)
            if isinstance(command, Answer):
                answers.append(command)
            elif isinstance(command, NewSchedule):
                creates.append((message, command))
            else:
                answers.extend(self._create(creates))
                creates = []
                answers.append(self._change(message, *command))
        answers.extend(self._create(creates))
        return answers

    def _parse(self, m: Message) -> Answer | NewSchedule | tuple[Op, dict[str, Any]]:
        try:
            body = json.loads(m.value or b"")
        except ValueError as exc:
            return Answer(m, None, Outcome.INVALID, field="body", reason=f"malformed JSON: {exc}")
        if not isinstance(body, dict):
            return Answer(m, None, Outcome.INVALID, field="body", reason="not a JSON object")
        op_name = body.pop("op", None)
        try:
            op = Op(op_name)
        except ValueError:
            return Answer(m, str(op_name), Outcome.INVALID, field="op",
                          reason=f"op must be one of {', '.join(Op)}, not {op_name!r}")
        if op is not Op.CREATE:
            return op, body
        if "key" not in body and "uniqueness_key" not in body:
            body["key"] = f"kafka:{m.topic}:{m.partition}:{m.offset}"
        check = ScheduleCheck(self.settings, now_ms=m.timestamp_ms,
                              known=partial(registered, self.store))
        value = check.check(body)
        if isinstance(value, list):
            return self._invalid(m, op, value)
        return value

    def _create(self, creates: list[tuple[Message, NewSchedule]]) -> list[Answer]:
        if not creates:
            return []
        try:
            results = create_many(self.store, [c[1] for c in creates],
                                  now_ms=creates[0][0].timestamp_ms)
        except ConflictError:
            if len(creates) == 1:
                m = creates[0][0]
                return [Answer(m, Op.CREATE, Outcome.REFUSED, field="key",
                               reason=f"key {creates[0][1].key!r} was given to another request")]
            return [a for c in creates for a in self._create([c])]
        return [Answer(m, Op.CREATE, Outcome.APPLIED, id=s.id, status=s.status.value)
                for (m, _), (s, _) in zip(creates, results, strict=True)]

    def _change(self, m: Message, op: Op, body: dict[str, Any]) -> Answer:
        """A cancel or a reschedule, by ``id`` or by ``key`` and ``tenant``."""
        ident, key = body.pop("id", None), body.pop("key", None)
        named = body.pop("tenant", None)
        scope = None if named is None else str(named)
        if (ident is None) == (key is None) or not isinstance(ident or key, str):
            return Answer(m, op, Outcome.INVALID, field="id", reason="give id or key (a string)")
        try:
            if op is Op.CANCEL and body:
                raise ValidationError(sorted(body)[0], "a cancel takes only id, or key and tenant")
            if op is Op.RESCHEDULE:
                change = read_change(ScheduleChange.model_validate(body), settings=self.settings,
                                     now_ms=m.timestamp_ms)
        except pydantic.ValidationError as exc:
            e = exc.errors()[0]
            return Answer(m, op, Outcome.INVALID, field=".".join(map(str, e["loc"])),
                          reason=reason_of(e))
        except ValidationError as exc:
            return self._invalid(m, op, [Problem(exc.field, exc.reason)])
        try:
            if ident is None:
                ident = schedule_id_for_key(self.store, tenant=str(named or DEFAULT_TENANT),
                                            key=str(key))
            if op is Op.CANCEL:
                done = self.store.cancel(ident, now_ms=m.timestamp_ms, tenant=scope)
            else:
                done = self.store.reschedule(ident, now_ms=m.timestamp_ms, tenant=scope,
                                             **change._asdict())
        except ConflictError as exc:
            if op is Op.CANCEL and exc.status == "CANCELLED":
                return Answer(m, op, Outcome.APPLIED, id=ident, status="CANCELLED")
            return Answer(m, op, Outcome.REFUSED, id=ident, status=exc.status, reason=str(exc))
        except NotFoundError as exc:
            return Answer(m, op, Outcome.REFUSED, id=ident, field="key" if key else "id",
                          reason=str(exc))
        except TocsinError as exc:
            if isinstance(exc, ValidationError):
                return Answer(m, op, Outcome.REFUSED, id=ident, field=exc.field,
                              reason=exc.reason)
            raise
        return Answer(m, op, Outcome.APPLIED, id=done.id, status=done.status.value)

    @staticmethod
    def _invalid(m: Message, op: Op, problems: list[Problem]) -> Answer:
        return Answer(m, op, Outcome.INVALID, field=problems[0].field, reason=problems[0].reason)
