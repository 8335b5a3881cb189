"""One definition of a valid schedule, for every way in: the HTTP API (``POST /v1/schedules``),
the bulk import and the Kafka commands topic (:mod:`tocsin.pipelines`).

Free of FastAPI and Spark so that Spark executors import it cheaply. :class:`ScheduleCheck`
turns one item (a JSON object as a client sends it) into a :class:`~tocsin.domain.NewSchedule`
or into the list of its :class:`Problem`\\ s, each naming the field and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import pydantic

from tocsin.api.models import ScheduleChange, ScheduleIn
from tocsin.api.parsing import due_of, payload_of
from tocsin.api.text import text_problem
from tocsin.config import Settings
from tocsin.domain import DEFAULT_TENANT, NewSchedule, PayloadKind
from tocsin.errors import NotFoundError, ValidationError

__all__ = ["Change", "Known", "Problem", "ScheduleCheck", "cached", "read_change",
           "reason_of", "registered"]


class Known(Protocol):
    """Whether ``tenant``'s ``channel`` or ``policy`` (``kind``) named ``name`` is
    registered."""

    def __call__(self, kind: str, name: str, *, tenant: str) -> bool: ...


class Problem(NamedTuple):
    """Why one item was refused: the field (a dotted path) and the reason."""

    field: str
    reason: str


class Change(NamedTuple):
    """A reschedule as the store takes it (``None``: unchanged)."""

    due_ms: int | None
    payload: bytes | None
    payload_kind: PayloadKind | None
    headers: dict[str, str] | None


def read_change(body: ScheduleChange, *, settings: Settings, now_ms: int) -> Change:
    """The change a reschedule asks for (``PATCH /v1/schedules/{id}``), or
    :class:`ValidationError` naming the field."""
    if (problem := text_problem(body.model_dump())) is not None:
        raise ValidationError(problem[0] or "body", problem[1])
    payload = payload_of(body, max_payload=settings.max_payload_bytes)
    due_ms = due_of(body.due_at, body.delay, now_ms=now_ms,
                    grace_ms=settings.grace_ms)
    if payload is None and due_ms is None and body.headers is None:
        raise ValidationError("body", "give a new due_at or delay, payload, or headers")
    kind, data = payload if payload else (None, None)
    return Change(due_ms=due_ms, payload=data, payload_kind=kind, headers=body.headers)


def reason_of(error: Any) -> str:
    """A pydantic error's message, without pydantic's "Value error, " prefix."""
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def cached(known: Known) -> Known:
    """``known``, asking once per (kind, name, tenant)."""
    seen: dict[tuple[str, str, str], bool] = {}

    def ask(kind: str, name: str, *, tenant: str) -> bool:
        if (kind, name, tenant) not in seen:
            seen[(kind, name, tenant)] = known(kind, name, tenant=tenant)
        return seen[(kind, name, tenant)]

    return ask


def registered(store: Any, kind: str, name: str, *, tenant: str) -> bool:
    """Whether ``tenant``'s ``kind`` (``channel``, ``policy``) named ``name`` is registered
    in ``store``."""
    try:
        getattr(store, f"get_{kind}")(name, tenant=tenant)
    except NotFoundError:
        return False
    return True


class ScheduleCheck:
    """Checks items against the rules of ``POST /v1/schedules`` as of ``now_ms``: the schema,
    the cross-field rules, registered channel and policy (each asked once), and that one key
    is not given to two different requests."""

    def __init__(self, settings: Settings, *, now_ms: int, known: Known,
                 tenant_of: Callable[[str | None], str] = lambda named: named or DEFAULT_TENANT,
                 ) -> None:
        self.now_ms = now_ms
        self._max_payload = settings.max_payload_bytes
        self._grace_ms = settings.grace_ms
        self._retention_ms = settings.key_retention_ms
        self._known = cached(known)
        self._tenant_of = tenant_of
        self._keys: dict[tuple[str, str], tuple[int, str]] = {}
        """(tenant, key) → the first item giving it and its request digest."""

    def check(self, item: Any, *, index: int = 0,
              check_text: bool = True) -> NewSchedule | list[Problem]:
        """``item`` as a schedule, or every problem found with it. ``check_text`` looks for
        lone surrogates (text that JSON allows but UTF-8 cannot store)."""
        if check_text and (problem := text_problem(item)) is not None:
            return [Problem(problem[0] or "body", problem[1])]
        try:
            given = ScheduleIn.model_validate(item)
            value = given.to_domain(
                tenant=self._tenant_of(given.tenant), now_ms=self.now_ms,
                max_payload=self._max_payload, grace_ms=self._grace_ms,
                key_retention_ms=self._retention_ms)
        except pydantic.ValidationError as exc:
            return [Problem(".".join(map(str, e["loc"])), reason_of(e)) for e in exc.errors()]
        except ValidationError as exc:
            return [Problem(exc.field, exc.reason)]
        if not self._known("channel", value.channel, tenant=value.tenant):
            return [Problem("channel", f"channel {value.channel!r} is not registered")]
        if value.policy is not None and not self._known("policy", value.policy,
                                                         tenant=value.tenant):
            return [Problem("policy", f"policy {value.policy!r} is not registered")]
        if value.key is not None and not value.overwrite_pending:
            digest = value.fingerprint()
            first, first_digest = self._keys.setdefault((value.tenant, value.key),
                                                        (index, digest))
            if digest != first_digest:
                return [Problem("key", f"key {value.key!r} is also given to item {first} "
                                       "with a different request")]
        return value
