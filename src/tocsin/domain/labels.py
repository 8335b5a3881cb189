"""Labels: bounded ``key=value`` text pairs on schedules and recurring rules, to find and act
on them by what they are for (a campaign, a team, a customer), and a label selector to match
them: ``team=billing,campaign=spring`` (every pair must match).

A key is 1 to :data:`MAX_KEY` characters of letters, digits, ``.``, ``_``, ``-`` and ``/``,
starting with a letter or digit; a value is up to :data:`MAX_VALUE` characters of the same (or
empty); at most :data:`MAX_LABELS` pairs. A rule's firings carry the rule's labels. Labels are
set at creation and do not change; the store indexes them (``schedule_labels``), so a selector
reads the matching schedules through the index, not the table."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from tocsin.errors import ValidationError

__all__ = ["MAX_KEY", "MAX_LABELS", "MAX_SELECTOR", "MAX_VALUE", "check_labels",
           "labels_json", "labels_of_json", "labels_of_text", "parse_selector"]

MAX_LABELS = 16
MAX_KEY = 63
MAX_VALUE = 63
MAX_SELECTOR = 8
"""The most pairs one selector names."""
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,62}")
_VALUE = re.compile(r"[A-Za-z0-9._/-]{0,63}")


def check_labels(labels: Mapping[str, str], *, field: str = "labels") -> None:
    """:class:`ValidationError` naming ``field`` (or ``field.<key>``) unless ``labels`` are
    within the bounds above."""
    if len(labels) > MAX_LABELS:
        raise ValidationError(field, f"at most {MAX_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        if not isinstance(key, str) or _KEY.fullmatch(key) is None:
            raise ValidationError(field, f"label key {key!r} must be 1 to {MAX_KEY} letters, "
                                         "digits, '.', '_', '-' or '/', starting with a "
                                         "letter or digit")
        if not isinstance(value, str) or _VALUE.fullmatch(value) is None:
            raise ValidationError(f"{field}.{key}", f"must be up to {MAX_VALUE} letters, "
                                                    "digits, '.', '_', '-' or '/'")


def labels_json(labels: Mapping[str, str]) -> str | None:
    """Labels as the store keeps them: compact JSON with sorted keys, None for none."""
    if not labels:
        return None
    return json.dumps(dict(sorted(labels.items())), separators=(",", ":"))


def labels_of_json(text: str | None) -> dict[str, str]:
    """Stored labels back (empty for None)."""
    return {} if not text else dict(json.loads(text))


def labels_of_text(text: str, *, field: str = "labels") -> dict[str, str]:
    """Labels written as text (an import's CSV cell or text column): a JSON object
    (``{"team": "billing"}``), or pairs ``k=v[,k2=v2...]``. :class:`ValidationError` naming
    ``field`` when it is neither; the pairs themselves are checked by :func:`check_labels`
    (the caller's model does it)."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError as exc:
            raise ValidationError(field, f"not JSON text: {exc}") from None
        if not isinstance(value, dict):
            raise ValidationError(field, "JSON text must hold one object")
        return value
    pairs: dict[str, str] = {}
    for part in stripped.split(",") if stripped else ():
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise ValidationError(field, f"{part.strip()!r} is not key=value (labels as text "
                                         "are k=v[,k2=v2...] or a JSON object)")
        if key.strip() in pairs:
            raise ValidationError(field, f"label key {key.strip()!r} is given twice")
        pairs[key.strip()] = value.strip()
    return pairs


def parse_selector(text: str | None, *, field: str = "label") -> tuple[tuple[str, str], ...]:
    """A selector ``k=v[,k2=v2...]`` as its pairs (empty for None or ''); every pair must
    match. :class:`ValidationError` naming ``field`` for anything else."""
    if not text:
        return ()
    pairs: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise ValidationError(field, f"{part.strip()!r} is not key=value (a selector is "
                                         "k=v[,k2=v2...])")
        pairs[key.strip()] = value.strip()
    if len(pairs) > MAX_SELECTOR:
        raise ValidationError(field, f"at most {MAX_SELECTOR} pairs, got {len(pairs)}")
    check_labels(pairs, field=field)
    return tuple(sorted(pairs.items()))
