"""Text the store can hold: Unicode without lone surrogates (JSON allows ``"\\ud800"``, UTF-8
cannot store it) and, outside a message's payload, no NUL (PostgreSQL refuses it in text, and
no channel name, key or header means anything with one). Checked at the edge so that such
input is a 422 naming the field, never a store error."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from fastapi import Request

from tocsin.errors import ValidationError

__all__ = ["PAYLOAD_FIELDS", "TEXT_ESCAPE", "check_params", "check_text", "text_problem"]

TEXT_ESCAPE = re.compile(rb"\\u(?:[dD][89a-fA-F]|0000)")
"""A JSON escape of a UTF-16 surrogate or of NUL: where a raw body may hide such text (JSON
text cannot hold either unescaped), so only a body that matches needs :func:`text_problem`."""
PAYLOAD_FIELDS = frozenset({"payload", "payload_text"})
"""Fields whose text is the message itself: stored as bytes, so NUL is allowed there."""
_SURROGATE = "not Unicode text: holds a lone surrogate (\\ud800-\\udfff)"
_NUL = "must not contain NUL (\\u0000)"


def _printable(text: str) -> str:
    """``text`` with NUL, control characters and lone surrogates escaped as in JSON."""
    return json.dumps(text)[1:-1]


def _nul_at(value: Any) -> str | None:
    """Where in ``value`` a NUL is: ``""`` for ``value`` itself, ``"a.0"`` for a nested one,
    None when there is none."""
    if isinstance(value, str):
        return "" if "\x00" in value else None
    items: Any = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, inner in items:
        if isinstance(key, str) and "\x00" in key:
            return _printable(key)
        if (where := _nul_at(inner)) is not None:
            return ".".join(p for p in (str(key), where) if p)
    return None


def text_problem(item: Any, *, free: Collection[str] = PAYLOAD_FIELDS) -> tuple[str, str] | None:
    """The first field of ``item`` (an object's member, or ``""`` for ``item`` itself) holding
    text the store cannot hold, with the reason; None when all is well. NUL is allowed in the
    members named in ``free``."""
    fields = item.items() if isinstance(item, dict) else [("", item)]
    for name, value in fields:
        name = str(name)
        try:
            json.dumps({name: value}, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            return _printable(name), _SURROGATE
        if name not in free and (where := _nul_at({name: value})) is not None:
            return where, _NUL
    return None


def check_text(item: Any, *, prefix: str = "", free: Collection[str] = PAYLOAD_FIELDS) -> None:
    """:class:`ValidationError` naming the first field of ``item`` that :func:`text_problem`
    refuses (under ``prefix``, e.g. ``config``)."""
    if (problem := text_problem(item, free=free)) is not None:
        field, reason = problem
        raise ValidationError(".".join(p for p in (prefix, field) if p) or "body", reason)


def check_params(request: Request) -> None:
    """Refuse NUL or a lone surrogate in any path or query parameter (a dependency of every
    route): ``/v1/schedules/a%00b`` is a 422 on ``schedule_id``, not a store error."""
    for params in (request.path_params, request.query_params):
        for name, value in params.items():
            if isinstance(value, str):
                check_text({name: value}, free=())
