"""One definition of a valid schedule, for every way in: the HTTP API (``POST /v1/schedules``),
the bulk import and the Kafka commands topic (:mod:`tocsin.pipelines`).

Free of FastAPI and Spark so that Spark executors import it cheaply. :class:`ScheduleCheck`
turns one item (a JSON object as a client sends it) into a :class:`~tocsin.domain.NewSchedule`
or into the list of its :class:`Problem`\\ s, each naming the field and the reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import pydantic

from tocsin.config import Settings
from tocsin.domain import DEFAULT_TENANT, TENANT_NAME, NewSchedule, PayloadKind
from tocsin.domain.headers import headers_problem
from tocsin.errors import NotFoundError, ValidationError
from tocsin.validation.models import ScheduleChange, ScheduleIn
from tocsin.validation.parsing import (
    canonical_json,
    check_message_size,
    compact_json,
    due_of,
    json_text,
    payload_of,
)
from tocsin.validation.terms import TERMS_FIELDS
from tocsin.validation.text import text_problem

__all__ = ["NOT_GIVEN", "PLAIN_TENANT", "TEXT_LIMITS", "Change", "Known", "Problem",
           "ScheduleCheck", "cached", "read_change", "reason_of", "registered"]

_DUMP = {name: field.get_default(call_default_factory=True)
         for name, field in ScheduleIn.model_fields.items()}
"""``ScheduleIn().model_dump(mode="json")`` of an item that gives nothing: every field at its
default."""
PLAIN_TENANT = TENANT_NAME
"""A tenant name the model takes (its pattern and lengths), as a regular expression that
Python and RE2 (Arrow) read alike."""
_TENANT = re.compile(PLAIN_TENANT)
TEXT_LIMITS = {name: next(m.max_length for m in ScheduleIn.model_fields[name].metadata
                          if getattr(m, "max_length", None) is not None)
               for name in ("channel", "key", "ordering_key", "policy")}
"""The longest text each of these fields may hold (the model's own limits)."""
_LIMITS = (TEXT_LIMITS["channel"], TEXT_LIMITS["key"], TEXT_LIMITS["ordering_key"],
           TEXT_LIMITS["policy"])
_EXACT = 2 ** 53
"""Whole numbers of seconds up to this are exact as floats (the model reads a delay as one)."""
_SCALARS = frozenset({str, int, float, bool, type(None)})
_TERMS = frozenset(TERMS_FIELDS)
"""The delivery terms' fields, as a set: most items give none, which one
:meth:`frozenset.isdisjoint` tells (a generator over all six took a fifth of
:meth:`ScheduleCheck.plain_fields`)."""
_SURROGATE = b"\\ud"
"""How compact JSON writes a UTF-16 surrogate: the model decides payloads holding one."""
NOT_GIVEN: Any = object()
"""A payload not given (the item gives ``payload_text``)."""
_REQUEST_FIELDS = ("channel", "delay", "due_at", "headers", "key", "key_mode", "ordering_key",
                   "payload", "payload_base64", "payload_text", "policy", "tenant",
                   "uniqueness_key")
"""The fields of a request in the order canonical JSON writes them (:func:`_request_json`)."""
# labels are not among them either: a request without labels digests as it did before they
# existed, and one with labels is the model's to decide (plain_fields)
if tuple(sorted(_DUMP.keys() - set(TERMS_FIELDS) - {"labels"})) != _REQUEST_FIELDS:
    raise RuntimeError("ScheduleIn's fields changed: update _request_json in " + __name__)


def _text_or_null(text: str | None) -> str:
    return "null" if text is None else json_text(text)


def _request_json(*, channel: str, delay: float | str | None, due_at: str | None,
                  headers: dict[str, str], key: str, ordering_key: str | None,
                  payload: Any, payload_text: str | None, policy: str | None,
                  tenant: str) -> str:
    """``canonical_json(ScheduleIn(...).model_dump(mode="json") | {"tenant": tenant})`` of a
    plain item (no payload_base64, uniqueness_key or task key mode), written directly."""
    delay_json = ("null" if delay is None else json_text(delay) if type(delay) is str
                  else float.__repr__(delay))
    payload_json = "null" if payload is NOT_GIVEN else canonical_json(payload)
    return (f'{{"channel":{json_text(channel)},"delay":{delay_json},'
            f'"due_at":{_text_or_null(due_at)},'
            f'"headers":{canonical_json(headers) if headers else "{}"},'
            f'"key":{json_text(key)},"key_mode":"idempotent",'
            f'"ordering_key":{_text_or_null(ordering_key)},"payload":{payload_json},'
            f'"payload_base64":null,"payload_text":{_text_or_null(payload_text)},'
            f'"policy":{_text_or_null(policy)},"tenant":{json_text(tenant)},'
            f'"uniqueness_key":null}}')


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of JSON's own types alone (what ``json.loads`` gives).
    Loops, not ``all()`` over generators: a third of the time, once for every JSON line of
    an import."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) in _SCALARS:
                continue
            if not _plain(item):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110 (a loop, as said)
            if type(item) not in _SCALARS and not _plain(item):
                return False
        return True
    return kind in _SCALARS


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
        self._due: dict[tuple[str | None, float | str | None], int | None] = {}
        """(due_at, delay) → its due time (None: refused), for :meth:`plain`."""
        self.modelled = 0
        """How many items :meth:`check` handed to the model (the others were plainly
        valid)."""

    def check(self, item: Any, *, index: int = 0,
              check_text: bool = True) -> NewSchedule | list[Problem]:
        """``item`` as a schedule, or every problem found with it. ``check_text`` looks for
        lone surrogates (text that JSON allows but UTF-8 cannot store)."""
        value = self._plainly_valid(item)
        if value is None:
            self.modelled += 1
            if check_text and (problem := text_problem(item)) is not None:
                return [Problem(problem[0] or "body", problem[1])]
            try:
                given = ScheduleIn.model_validate(item)
                value = given.to_domain(
                    tenant=self._tenant_of(given.tenant), now_ms=self.now_ms,
                    max_payload=self._max_payload, grace_ms=self._grace_ms,
                    key_retention_ms=self._retention_ms)
            except pydantic.ValidationError as exc:
                return [Problem(".".join(map(str, e["loc"])), reason_of(e))
                        for e in exc.errors()]
            except ValidationError as exc:
                return [Problem(exc.field, exc.reason)]
        return self.accept(value, index=index)

    def accept(self, value: NewSchedule, *, index: int,
               derived: bool = False) -> NewSchedule | list[Problem]:
        """``value`` (item ``index``) once its channel and policy are known to be registered
        and its key is not given to another request of these items; else the problem.
        ``derived``: the key was derived from an item that gave none (an import's row), which
        is accepted as that item is."""
        problems = self.refusal(
            channel=value.channel, policy=value.policy, tenant=value.tenant, index=index,
            key=None if value.overwrite_pending or derived else value.key,
            digest=value.fingerprint)
        return value if problems is None else problems

    def refusal(self, *, channel: str, policy: str | None, tenant: str, key: str | None,
                digest: Callable[[], str] | str | None, index: int) -> list[Problem] | None:
        """Why :meth:`accept` refuses an item of these fields (None: it does not): ``key``
        None when not an idempotency key given by the item, ``digest`` its request's digest
        (or what makes it; None: the key is not checked)."""
        if not self._known("channel", channel, tenant=tenant):
            return [Problem("channel", f"channel {channel!r} is not registered")]
        if policy is not None and not self._known("policy", policy, tenant=tenant):
            return [Problem("policy", f"policy {policy!r} is not registered")]
        if key is not None and digest is not None:
            if callable(digest):
                digest = digest()
            first, first_digest = self._keys.setdefault((tenant, key), (index, digest))
            if digest != first_digest:
                return [Problem("key", f"key {key!r} is also given to item {first} "
                                       "with a different request")]
        return None

    def _plainly_valid(self, item: Any) -> NewSchedule | None:
        """``item`` as a schedule when it is plainly valid: fields of the model alone, each of
        its plain type within the model's limits, one payload (JSON or text), a due time, no
        task key, text the store can hold. Built without the model, to the very value the
        model builds (the same payload bytes and request digest); None for anything else,
        which the model then decides. An import row or a topic's create takes about a third
        of the time this way."""
        fields = self.plain_fields(item)
        return None if fields is None else self.plain(**fields)

    def plain_fields(self, item: Any) -> dict[str, Any] | None:
        """The arguments of :meth:`plain` (and :meth:`plain_parts`) for ``item`` when its
        fields are of the model's plain types (see :meth:`_plainly_valid`); None when the
        model must decide."""
        if type(item) is not dict or not item.keys() <= _DUMP.keys():
            return None
        get = item.get
        if not _TERMS.isdisjoint(item) and any(get(name) is not None for name in TERMS_FIELDS):
            return None  # the model reads delivery terms
        if (get("uniqueness_key") is not None or get("payload_base64") is not None
                or get("key_mode", "idempotent") != "idempotent" or get("labels")):
            return None
        channel, key, ordering_key, policy = (get("channel"), get("key"), get("ordering_key"),
                                              get("policy"))
        if type(channel) is not str or not 0 < len(channel) <= _LIMITS[0]:
            return None
        if key is not None and (type(key) is not str or not 0 < len(key) <= _LIMITS[1]):
            return None
        if ordering_key is not None and (type(ordering_key) is not str
                                         or not 0 < len(ordering_key) <= _LIMITS[2]):
            return None
        if policy is not None and (type(policy) is not str
                                   or not 0 < len(policy) <= _LIMITS[3]):
            return None
        named, due_at, delay = get("tenant"), get("due_at"), get("delay")
        if named is not None and (type(named) is not str or _TENANT.fullmatch(named) is None):
            return None
        if due_at is not None and type(due_at) is not str:
            return None
        if delay is not None and type(delay) not in (int, float, str):
            return None
        headers = get("headers", _DUMP["headers"])
        if type(headers) is not dict or (headers and not all(
                type(k) is str and type(v) is str for k, v in headers.items())):
            return None
        if headers and headers_problem(headers) is not None:
            return None
        text = "".join([channel, key or "", ordering_key or "", policy or "", due_at or "",
                        delay if type(delay) is str else "", *headers, *headers.values()])
        if "\x00" in text or not (text.isascii() or _utf8(text)):
            return None
        payload, payload_text = get("payload", NOT_GIVEN), get("payload_text")
        if payload is not NOT_GIVEN and payload_text is not None:
            return None
        if payload is NOT_GIVEN and type(payload_text) is not str:
            return None
        try:
            if not _plain(payload):
                return None
        except RecursionError:
            return None
        return {"channel": channel, "key": key, "ordering_key": ordering_key, "policy": policy,
                "named": named, "due_at": due_at, "delay": delay, "headers": headers,
                "payload": payload, "payload_text": payload_text}

    def plain(self, *, channel: str, key: str | None, ordering_key: str | None,
              policy: str | None, named: str | None, due_at: str | None,
              delay: int | float | str | None, headers: dict[str, str],
              payload: Any = NOT_GIVEN, payload_text: str | None = None,
              due_ms: int | None = None,
              request_digest: str | None = None) -> NewSchedule | None:
        """The schedule of an item whose fields are known to be of the model's plain types
        (JSON values alone in ``payload``; text of the model's lengths, free of NUL and lone
        surrogates; a delay of seconds or text), with one of ``payload`` or ``payload_text``, no
        ``payload_base64``, ``uniqueness_key`` or task key mode: the very value
        :meth:`check` builds through the model. None when the model must decide (a payload,
        due time, size or tenant it refuses). ``due_ms``: the time ``due_at`` names, known
        already to lie in the grace window (an import's timestamp column), not parsed again.
        ``request_digest``: the request's digest when the caller made it already (an import
        row's derived key)."""
        parts = self.plain_parts(
            channel=channel, key=key, ordering_key=ordering_key, policy=policy, named=named,
            due_at=due_at, delay=delay, headers=headers, payload=payload,
            payload_text=payload_text, due_ms=due_ms, request_digest=request_digest)
        if parts is None:
            return None
        kind, data, due_ms, tenant, digest = parts
        return NewSchedule(
            channel=channel, payload=data, payload_kind=kind, headers=dict(headers),
            due_ms=due_ms, tenant=tenant, key=key, ordering_key=ordering_key,
            key_retention_ms=self._retention_ms, request_digest=digest, policy=policy)

    def plain_parts(self, *, channel: str, key: str | None, ordering_key: str | None,
                    policy: str | None, named: str | None, due_at: str | None,
                    delay: int | float | str | None, headers: dict[str, str],
                    payload: Any = NOT_GIVEN, payload_text: str | None = None,
                    due_ms: int | None = None, request_digest: str | None = None,
                    headers_size: int | None = None,
                    ) -> tuple[PayloadKind, bytes, int, str, str | None] | None:
        """What :meth:`plain` makes of these fields that the schedule does not give as they
        are: the payload's kind and bytes, the due time, the tenant and the request's digest;
        None as :meth:`plain`. An import builds its rows from these (a
        :class:`~tocsin.domain.NewSchedule` costs 2.5 us a row). ``headers_size``: the
        headers' :func:`~tocsin.validation.parsing.header_bytes`, when the caller knows it."""
        try:
            if payload is not NOT_GIVEN:
                kind, data = PayloadKind.JSON, compact_json(payload)
                if _SURROGATE in data:
                    return None
            else:
                kind, data = PayloadKind.TEXT, str(payload_text).encode()
        except (ValueError, RecursionError):
            return None
        if len(data) > self._max_payload:
            return None
        if type(delay) is int:  # the model reads a whole number of seconds as a float
            if not -_EXACT <= delay <= _EXACT:
                return None
            delay = float(delay)
        if due_ms is None:
            due_ms = self.due_ms(due_at, delay)
        if due_ms is None:
            return None
        try:
            if headers:
                check_message_size(data, headers, limit=self._max_payload, size=headers_size)
            tenant = self._tenant_of(named)
        except ValidationError:
            return None
        digest = request_digest
        if key is not None and digest is None:
            digest = hashlib.sha256(_request_json(
                channel=channel, delay=delay, due_at=due_at, headers=headers, key=key,
                ordering_key=ordering_key, payload=payload, payload_text=payload_text,
                policy=policy, tenant=tenant).encode()).hexdigest()
        return kind, data, due_ms, tenant, digest

    def due_ms(self, due_at: str | None, delay: float | str | None) -> int | None:
        """:func:`~tocsin.validation.parsing.due_of`, once for each value (an import's rows often
        share one delay); None when it refuses or neither is given (or a whole number of
        seconds is beyond a float's exact integers, which :meth:`plain` leaves to the
        model)."""
        if type(delay) is int:
            if not -_EXACT <= delay <= _EXACT:
                return None
            delay = float(delay)
        given = (due_at, delay)
        if given not in self._due:
            try:
                self._due[given] = due_of(due_at, delay, now_ms=self.now_ms,
                                          grace_ms=self._grace_ms)
            except ValidationError:
                self._due[given] = None
        return self._due[given]


def _utf8(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8 (holds no lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
