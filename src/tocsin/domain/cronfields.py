"""Checking a cron expression field by field, so an error names the field and says why.

The field ranges and names come from cronsim's private module ``cronsim.cronsim`` (its package
exports only ``CronSim`` and ``CronSimError``); pyproject.toml bounds cronsim to the releases
checked against it, and only this module imports it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cronsim import CronSim, CronSimError
from cronsim.cronsim import FIELD_NAMES, RANGES, SYMBOLIC_DAYS, SYMBOLIC_MONTHS, Field

from tocsin.errors import ValidationError

__all__ = ["check_fields"]

_SHAPE = (
    "expected 5 fields (minute hour day-of-month month day-of-week) "
    "or 6 with a leading second field"
)
_NAMES = {Field.MONTH: SYMBOLIC_MONTHS, Field.DOW: SYMBOLIC_DAYS}


def check_fields(expr: str) -> list[str]:
    """The fields of ``expr`` if it is a valid 5- or 6-field expression; otherwise
    :class:`~tocsin.errors.ValidationError` on ``cron``, e.g. ``minute field '61': 61 is
    outside 0-59``."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValidationError("cron", f"{_SHAPE}, got {len(fields)}")
    kinds = list(Field)[6 - len(fields):]
    for kind, text in zip(kinds, fields, strict=True):
        for term in text.split(","):
            try:
                kind.parse(term.upper())
            except CronSimError:
                raise ValidationError(
                    "cron", f"{FIELD_NAMES[kind]} field {text!r}: {_why(kind, term)}"
                ) from None
    try:
        CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        raise ValidationError(
            "cron",
            f"day-of-month field {fields[-3]!r}: no such day in month field {fields[-2]!r}",
        ) from None
    return fields


def _why(kind: Field, term: str) -> str:
    """Why cronsim refused one comma-separated term of a field."""
    base, slash, step = term.partition("/")
    if slash and not (step.isascii() and step.isdigit() and int(step) >= 1):
        return f"step {step!r} must be a whole number of at least 1"
    if kind is Field.DOW and "#" in base:
        base, _, nth = base.partition("#")
        if not (nth.isascii() and nth.isdigit() and 1 <= int(nth) <= 5):
            return f"'#{nth}' must name the 1st to 5th weekday of the month"
    elif kind is Field.DOW and base.upper().endswith("L"):
        base = base[:-1]
    if base == "*":
        return f"{term!r} is not valid here"
    low, _, high = base.partition("-")
    for value in (low, high) if high or base.endswith("-") else (low,):
        problem = _value_problem(kind, value)
        if problem:
            return problem
    if high and kind.int(high.upper()) < kind.int(low.upper()):
        return f"range {base} runs backwards"
    return f"{term!r} is not valid here"


def _value_problem(kind: Field, value: str) -> str | None:
    """What is wrong with one value of a field, if anything."""
    span = RANGES[kind]
    if value.isascii() and value.isdigit():
        if int(value) in span:
            return None
        return f"{value} is outside {span.start}-{span.stop - 1}"
    names = _NAMES.get(kind)
    if names and value.upper() in names:
        return None
    hint = f" or a name ({names[0]}..{names[-1]})" if names else ""
    return f"{value!r} is not a number{hint}"
