"""The commands topic: ``{"op": "create" | "cancel" | "reschedule" | "recurring", ...}`` with
the API's schema, applied to the store so that applying a message twice changes nothing.

========== ==================================================================================
op         fields
========== ==================================================================================
create     those of ``POST /v1/schedules`` (one schedule); without ``key`` (or
           ``uniqueness_key``) the key ``kafka:<topic>:<partition>:<offset>`` is given, so a
           replayed message is a repeat
cancel     ``id``, or ``key``; an already cancelled schedule answers ``ok`` again
reschedule ``id`` or ``key``, and those of ``PATCH /v1/schedules/{id}``
recurring  those of ``POST /v1/recurring`` (one rule: ``cron``, or ``every`` from ``anchor``,
           with ``jitter``...); its id is ``rec-kafka-`` and a digest of where the message
           was read, so a replayed message finds its rule made and is ``applied`` again
========== ==================================================================================

**Whose commands.** A topic is the operator's and acts in one tenant, the ``ingest_tenant``
setting (default ``default``), like a tenant key: every create goes to that tenant, a command
whose ``tenant`` names another is INVALID on the field ``tenant``, and a cancel or reschedule,
by id or by key, finds only that tenant's schedules (another's id is "not found", like a
missing one). Whoever can produce to the topic acts as that tenant, never as an admin: serve
several tenants with a topic (and an ingest) each, and keep each topic's ACLs to its tenant.

"Now" is the message's timestamp: ``delay`` counts from when the command was produced and the
grace window is judged then, so a replay (or a late ingest) decides exactly as the first time.

The messages of one partition take effect as if applied one by one in their order (a cancel
after its create), in few transactions: a batch's creates are written in one ``create`` call,
then its cancels and reschedules, in order, in one transaction per few thousand. That is the
same as their order whenever no change names, by key, a schedule that a later create of the
batch makes; a batch where one does is applied in order, a run of creates at a time. (Creates
make fresh ids, so a change by id never concerns a later create.)

Spark-free: the ingest query's writer (:mod:`tocsin.pipelines.ingest`) calls it on executors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from enum import StrEnum
from functools import partial
from typing import Any, NamedTuple

import pydantic

from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.domain import NewSchedule, Schedule
from tocsin.errors import (
    ConflictError,
    NotFoundError,
    QuotaExceededError,
    TocsinError,
    ValidationError,
)
from tocsin.pipelines.writes import Change, change_many, create_many
from tocsin.quotas import PENDING_RETRY_S, Quotas
from tocsin.validation.models import RecurringIn, ScheduleChange
from tocsin.validation.nesting import too_deep
from tocsin.validation.recurring import new_rule
from tocsin.validation.schedule import (
    Known,
    Problem,
    ScheduleCheck,
    cached,
    read_change,
    reason_of,
    registered,
)
from tocsin.validation.text import TEXT_ESCAPE

__all__ = ["Answer", "CommandApplier", "Message", "Op", "Outcome"]

_CHANGES = 2_000
"""Cancels and reschedules applied per transaction."""


class Op(StrEnum):
    """What a command asks."""

    CREATE = "create"
    """Store a new schedule."""
    CANCEL = "cancel"
    """Cancel a pending schedule."""
    RESCHEDULE = "reschedule"
    """Change a pending schedule's due time, payload or headers."""
    RECURRING = "recurring"
    """Store a new recurring rule (cron, or an interval with jitter)."""


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

    def __init__(self, store: Store, settings: Settings, *, only: Op | None = None) -> None:
        self.store = store
        self.settings = settings
        self.only = only
        """The one op taken (a message without ``op`` is one), or None: any."""
        self.tenant = settings.ingest_tenant
        """The one tenant this topic's commands act in."""
        self.quotas = Quotas.of(settings)
        """The API's caps on creating schedules, applied to the topic's creates alike."""

    def _tenant_of(self, named: str | None) -> str:
        """The tenant a command acts in: the topic's; naming another is refused."""
        if named is not None and named != self.tenant:
            raise ValidationError("tenant", f"this topic acts for tenant {self.tenant!r} only, "
                                            f"not {named!r}")
        return self.tenant

    def apply(self, messages: Sequence[Message]) -> list[Answer]:
        """Apply ``messages`` as if one by one in order; one answer each."""
        known = cached(partial(registered, self.store))  # one lookup per batch, not per create
        parsed = [self._parse(m, known) for m in messages]
        if not _reorderable(parsed, self.tenant):
            return self._in_order(messages, parsed)
        answers: list[Answer | None] = [p if isinstance(p, Answer) else None for p in parsed]
        creates = [(i, (m, p)) for i, (m, p) in enumerate(zip(messages, parsed, strict=True))
                   if isinstance(p, NewSchedule)]
        for (i, _), answer in zip(creates, self._create([c for _, c in creates]), strict=True):
            answers[i] = answer
        changes = [(i, (m, p)) for i, (m, p) in enumerate(zip(messages, parsed, strict=True))
                   if isinstance(p, _Command)]
        for start in range(0, len(changes), _CHANGES):
            part = changes[start:start + _CHANGES]
            for (i, _), answer in zip(part, self._changes([c for _, c in part]), strict=True):
                answers[i] = answer
        return [a for a in answers if a is not None]

    def _in_order(self, messages: Sequence[Message],
                  parsed: Sequence[Answer | NewSchedule | _Command]) -> list[Answer]:
        answers: list[Answer] = []
        creates: list[tuple[Message, NewSchedule]] = []
        for message, command in zip(messages, parsed, strict=True):
            if isinstance(command, Answer):
                answers.append(command)
            elif isinstance(command, NewSchedule):
                creates.append((message, command))
            else:
                answers.extend(self._create(creates))
                creates = []
                answers.extend(self._changes([(message, command)]))
        answers.extend(self._create(creates))
        return answers

    def _parse(self, m: Message, known: Known) -> Answer | NewSchedule | _Command:
        if (deep := too_deep(m.value or b"", self.settings.max_json_depth)) is not None:
            return Answer(m, None, Outcome.INVALID, field="body", reason=deep)
        try:
            body = json.loads(m.value or b"")
        except (ValueError, RecursionError) as exc:
            return Answer(m, None, Outcome.INVALID, field="body", reason=f"malformed JSON: {exc}")
        if not isinstance(body, dict):
            return Answer(m, None, Outcome.INVALID, field="body", reason="not a JSON object")
        op_name = body.pop("op", self.only)
        try:
            op = Op(op_name)
            if self.only is not None and op is not self.only:
                raise ValueError(op)
        except ValueError:
            ops = [self.only] if self.only is not None else list(Op)
            return Answer(m, str(op_name), Outcome.INVALID, field="op",
                          reason=f"op must be one of {', '.join(ops)}, not {op_name!r}")
        if op is not Op.CREATE:
            return _Command(op, body)
        if "key" not in body and "uniqueness_key" not in body:
            body["key"] = f"kafka:{m.topic}:{m.partition}:{m.offset}"
        # Lone surrogates and NUL reach JSON text only as escapes: only then is the text walked.
        value = ScheduleCheck(self.settings, now_ms=m.timestamp_ms, known=known,
                              tenant_of=self._tenant_of).check(
            body, check_text=TEXT_ESCAPE.search(m.value or b"") is not None)
        if isinstance(value, list):
            return self._invalid(m, op, value)
        return value

    def _create(self, creates: list[tuple[Message, NewSchedule]]) -> list[Answer]:
        """Write ``creates`` in one call; a create whose key another request holds is
        refused, the others applied."""
        if not creates:
            return []
        refused = self._over_caps(creates)
        admitted = [c for i, c in enumerate(creates) if i not in refused]
        results = iter(create_many(self.store, [c[1] for c in admitted],
                                   now_ms=creates[0][0].timestamp_ms) if admitted else [])
        answers = []
        for i, (m, item) in enumerate(creates):
            if i in refused:
                answers.append(refused[i])
                continue
            result = next(results)
            answers.append(Answer(m, Op.CREATE, Outcome.REFUSED, field="key",
                                  reason=f"key {item.key!r} was given to another request")
                           if isinstance(result, ConflictError) else
                           Answer(m, Op.CREATE, Outcome.APPLIED, id=result[0].id,
                                  status=result[0].status.value))
        return answers

    def _over_caps(self, creates: list[tuple[Message, NewSchedule]]) -> dict[int, Answer]:
        """The creates the tenant's caps refuse (by index), as the API would answer them: the
        pending cap (``tenant_max_pending``) and the create rate
        (``tenant_creates_per_second``), in order."""
        if not self.quotas.active:
            return {}
        refused: dict[int, Answer] = {}
        room = (self.quotas.max_pending - self.store.pending_count(tenant=self.tenant)
                if self.quotas.max_pending else len(creates))
        for i, (m, _) in enumerate(creates):
            try:
                if room <= 0:
                    raise QuotaExceededError(
                        f"tenant {self.tenant!r} holds its pending cap of "
                        f"{self.quotas.max_pending} schedules", retry_after_s=PENDING_RETRY_S)
                self.quotas.admit_rate(self.tenant, 1, now_ms=m.timestamp_ms)
                room -= 1
            except QuotaExceededError as exc:
                refused[i] = Answer(m, Op.CREATE, Outcome.REFUSED, field="tenant",
                                    reason=str(exc))
        return refused

    def _changes(self, commands: list[tuple[Message, _Command]]) -> list[Answer]:
        """Cancels and reschedules, by ``id`` or by ``key`` and ``tenant``, in one
        transaction; the ill-formed ones are answered without it."""
        answers: list[Answer | None] = []
        todo: list[tuple[int, Message, Op, bool, Change]] = []
        for m, (op, body) in commands:
            if op is Op.RECURRING:  # no schedule of the batch is a rule's: in place, at once
                answers.append(self._rule(m, dict(body)))
                continue
            change = self._change_of(m, op, dict(body))
            if isinstance(change, Answer):
                answers.append(change)
            else:
                todo.append((len(answers), m, op, body.get("key") is not None, change))
                answers.append(None)
        results = change_many(self.store, [t[-1] for t in todo]) if todo else []
        for (index, m, op, by_key, change), result in zip(todo, results, strict=True):
            answers[index] = _answer(m, op, change, result, by_key=by_key)
        return [a for a in answers if a is not None]

    def _rule(self, m: Message, body: dict[str, Any]) -> Answer:
        """Store the rule a ``recurring`` command asks for, as the API's ``POST
        /v1/recurring`` would (its caps included), under an id of the message's place."""
        place = f"{m.topic}\0{m.partition}\0{m.offset}".encode()
        rule_id = f"rec-kafka-{hashlib.sha256(place).hexdigest()[:24]}"
        try:
            parsed = RecurringIn.model_validate(body)
            tenant = self._tenant_of(parsed.tenant)
            for kind, name in (("channel", parsed.channel), ("policy", parsed.policy)):
                if name is not None and not registered(self.store, kind, name, tenant=tenant):
                    raise ValidationError(kind, f"{kind} {name!r} is not registered")
            rule = new_rule(parsed, rule_id=rule_id, tenant=tenant, settings=self.settings,
                            now_ms=m.timestamp_ms)
        except pydantic.ValidationError as exc:
            e = exc.errors()[0]
            return Answer(m, Op.RECURRING, Outcome.INVALID,
                          field=".".join(map(str, e["loc"])), reason=reason_of(e))
        except ValidationError as exc:
            return self._invalid(m, Op.RECURRING, [Problem(exc.field, exc.reason)])
        try:
            made = self.store.get_recurring(rule_id, tenant=tenant)  # a replay
        except NotFoundError:
            try:
                with self.quotas.holding(tenant):
                    self.quotas.admit_rule(self.store, rule)
                    made = self.store.create_recurring(rule, now_ms=m.timestamp_ms)
            except (QuotaExceededError, ValidationError) as exc:
                field = exc.field if isinstance(exc, ValidationError) else "tenant"
                return Answer(m, Op.RECURRING, Outcome.REFUSED, field=field, reason=str(exc))
        return Answer(m, Op.RECURRING, Outcome.APPLIED, id=made.id,
                      status="PAUSED" if made.paused else "ACTIVE")

    def _change_of(self, m: Message, op: Op, body: dict[str, Any]) -> Answer | Change:
        ident, key = body.pop("id", None), body.pop("key", None)
        named = body.pop("tenant", None)
        if (ident is None) == (key is None) or not isinstance(ident or key, str):
            return Answer(m, op, Outcome.INVALID, field="id", reason="give id or key (a string)")
        try:
            tenant = self._tenant_of(None if named is None else str(named))
            if op is Op.CANCEL and body:
                raise ValidationError(sorted(body)[0], "a cancel takes only id, or key and tenant")
            change = (read_change(ScheduleChange.model_validate(body), settings=self.settings,
                                  now_ms=m.timestamp_ms)._asdict()
                      if op is Op.RESCHEDULE else {})
        except pydantic.ValidationError as exc:
            e = exc.errors()[0]
            return Answer(m, op, Outcome.INVALID, field=".".join(map(str, e["loc"])),
                          reason=reason_of(e))
        except ValidationError as exc:
            return self._invalid(m, op, [Problem(exc.field, exc.reason)])
        return Change(id=ident, key=None if key is None else str(key), tenant=tenant,
                      scope=tenant, now_ms=m.timestamp_ms, cancel=op is Op.CANCEL, **change)

    @staticmethod
    def _invalid(m: Message, op: Op, problems: list[Problem]) -> Answer:
        return Answer(m, op, Outcome.INVALID, field=problems[0].field, reason=problems[0].reason)


class _Command(NamedTuple):
    """A cancel or a reschedule as read from its message."""

    op: Op
    body: dict[str, Any]


def _reorderable(parsed: Sequence[Answer | NewSchedule | _Command], tenant: str) -> bool:
    """Whether writing every create before every change ends as applying them in order: no
    change names, by key, a schedule that a later create makes (all in ``tenant``)."""
    last: dict[tuple[str, str], int] = {}
    for i, p in enumerate(parsed):
        if isinstance(p, NewSchedule) and p.key is not None:
            last[(p.tenant, p.key)] = i
    return not any(
        isinstance(p, _Command) and isinstance(key := p.body.get("key"), str)
        and last.get((tenant, key), -1) > j
        for j, p in enumerate(parsed))


def _answer(m: Message, op: Op, change: Change, result: Schedule | TocsinError, *,
            by_key: bool) -> Answer:
    """A change's answer, from the schedule as changed or the store's refusal."""
    ident = change.id
    if isinstance(result, Schedule):
        return Answer(m, op, Outcome.APPLIED, id=result.id, status=result.status.value)
    if isinstance(result, ConflictError):
        if op is Op.CANCEL and result.status == "CANCELLED":
            return Answer(m, op, Outcome.APPLIED, id=result.ident, status="CANCELLED")
        return Answer(m, op, Outcome.REFUSED, id=result.ident, status=result.status,
                      reason=str(result))
    if isinstance(result, NotFoundError):
        return Answer(m, op, Outcome.REFUSED, id=ident, field="key" if by_key else "id",
                      reason=str(result))
    if isinstance(result, ValidationError):
        return Answer(m, op, Outcome.REFUSED, id=ident, field=result.field,
                      reason=result.reason)
    raise result
