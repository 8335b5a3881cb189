"""Reading ``POST /v1/schedules``: one schedule or ``{"schedules": [...]}``, every item checked
before anything is stored, and every bad item reported (``index``, ``field``, ``reason``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tocsin.config import Settings
from tocsin.domain import NewSchedule
from tocsin.errors import ValidationError
from tocsin.validation.schedule import Known, ScheduleCheck

__all__ = ["read_schedules"]


def read_schedules(body: bytes, *, settings: Settings, now_ms: int, known: Known,
                   tenant_of: Callable[[str | None], str]) -> tuple[list[NewSchedule], bool]:
    """The request's schedules and whether it was a batch; :class:`ValidationError` listing
    every bad item (in ``errors``) when any is bad. ``known`` says which channels and policies
    are registered; ``tenant_of`` turns the tenant an item names (or None) into the one it goes
    to, or raises (see :func:`tocsin.api.auth.tenant_for`)."""
    raw = _load(body)
    batch = isinstance(raw, dict) and "schedules" in raw
    items = _batch_items(raw, settings.max_batch_items) if batch else [raw]
    intake = _Intake(ScheduleCheck(settings, now_ms=now_ms, known=known, tenant_of=tenant_of),
                     batch=batch)
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
    """Checks the items of one request (by
    :class:`~tocsin.validation.schedule.ScheduleCheck`, the one definition of a valid
    schedule), collecting every problem."""

    def __init__(self, check: ScheduleCheck, *, batch: bool) -> None:
        self.batch = batch
        self.errors: list[dict[str, Any]] = []
        self.check = check

    def read(self, index: int, item: Any) -> NewSchedule | None:
        """The item as a schedule, or None after recording why not."""
        # Text the store cannot hold was refused at the edge (tocsin.api.limits).
        value = self.check.check(item, index=index, check_text=False)
        if isinstance(value, list):
            for problem in value:
                self._fail(index, problem.field, problem.reason)
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
