"""Reading ``POST /v1/schedules``: one schedule or ``{"schedules": [...]}``, every item checked
before anything is stored, and every bad item reported (``index``, ``field``, ``reason``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydantic

from tocsin.api.deps import Deps, registered
from tocsin.api.errors import reason_of
from tocsin.api.models import ScheduleIn
from tocsin.domain import NewSchedule
from tocsin.errors import ValidationError

__all__ = ["read_schedules"]


def read_schedules(deps: Deps, body: bytes,
                   tenant_of: Callable[[str | None], str]) -> tuple[list[NewSchedule], bool]:
    """The request's schedules and whether it was a batch; :class:`ValidationError` listing
    every bad item (in ``errors``) when any is bad. ``tenant_of`` turns the tenant an item
    names (or None) into the one it goes to, or raises (see :func:`tocsin.api.auth.tenant_for`)."""
    raw = _load(body)
    batch = isinstance(raw, dict) and "schedules" in raw
    items = _batch_items(raw, deps.settings.max_batch_items) if batch else [raw]
    intake = _Intake(deps, batch=batch, tenant_of=tenant_of)
    schedules = [s for i, item in enumerate(items) if (s := intake.read(i, item)) is not None]
    intake.raise_errors()
    return schedules, batch


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load(body: bytes) -> Any:
    """The body as JSON; NaN and Infinity (which Python's json would accept) are refused."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, NaN
        raise ValidationError("body", f"malformed JSON: {exc}") from exc


def _batch_items(raw: dict[str, Any], limit: int) -> list[Any]:
    items = raw["schedules"]
    if set(raw) != {"schedules"} or not isinstance(items, list):
        raise ValidationError("schedules", 'a batch is {"schedules": [...]} and nothing else')
    if not items or len(items) > limit:
        raise ValidationError("schedules", f"a batch holds 1 to {limit} schedules, "
                                           f"not {len(items)}")
    return items


class _Intake:
    """Checks the items of one request, collecting every problem."""

    def __init__(self, deps: Deps, *, batch: bool,
                 tenant_of: Callable[[str | None], str]) -> None:
        self.deps = deps
        self.tenant_of = tenant_of
        self.batch = batch
        self.now_ms = deps.clock.now_ms()
        self.errors: list[dict[str, Any]] = []
        self.registered: dict[tuple[str, str, str], bool] = {}
        self.keys: dict[tuple[str, str], tuple[int, str]] = {}
        """(tenant, key) → the first item giving it and its request digest."""

    def read(self, index: int, item: Any) -> NewSchedule | None:
        """The item as a schedule, or None after recording why not."""
        settings = self.deps.settings
        try:
            given = ScheduleIn.model_validate(item)
            value = given.to_domain(
                tenant=self.tenant_of(given.tenant), now_ms=self.now_ms,
                max_payload=settings.max_payload_bytes,
                grace_ms=settings.grace_ms, key_retention_ms=settings.key_retention_ms)
        except pydantic.ValidationError as exc:
            for e in exc.errors():
                self._fail(index, ".".join(map(str, e["loc"])), reason_of(e))
            return None
        except ValidationError as exc:
            self._fail(index, exc.field, exc.reason)
            return None
        if not self._known("channel", value.channel, value.tenant):
            self._fail(index, "channel", f"channel {value.channel!r} is not registered")
            return None
        if value.policy is not None and not self._known("policy", value.policy, value.tenant):
            self._fail(index, "policy", f"policy {value.policy!r} is not registered")
            return None
        if value.key is not None and not value.overwrite_pending:
            digest = value.fingerprint()
            first, first_digest = self.keys.setdefault((value.tenant, value.key), (index, digest))
            if digest != first_digest:
                self._fail(index, "key", f"key {value.key!r} is also given to item "
                                         f"{first} with a different request")
                return None
        return value

    def raise_errors(self) -> None:
        """Raise :class:`ValidationError` naming the first problem and listing them all."""
        if not self.errors:
            return
        first = self.errors[0]
        more = (f" (and {len(self.errors) - 1} more errors; nothing was stored)"
                if len(self.errors) > 1 else "")
        raise ValidationError(first["field"], first["reason"] + more, errors=self.errors)

    def _fail(self, index: int, where: str, reason: str) -> None:
        """Record a problem of item ``index``."""
        field = ".".join(p for p in (f"schedules.{index}" if self.batch else "", where) if p)
        self.errors.append({"index": index, "field": field or "body", "reason": reason})

    def _known(self, kind: str, name: str, tenant: str) -> bool:
        """Whether ``tenant`` has the channel or policy ``name`` (asked once per request)."""
        if (kind, name, tenant) not in self.registered:
            self.registered[(kind, name, tenant)] = registered(self.deps.store, kind, name,
                                                               tenant=tenant)
        return self.registered[(kind, name, tenant)]
