"""Text the store can hold: Unicode without lone surrogates (JSON allows ``"\\ud800"``, UTF-8
cannot store it) and, outside a message's payload, no NUL (PostgreSQL refuses it in text, and
no channel name, key or header means anything with one).

Checked at the edge for every request, so that such input is a 422 naming the field, never a
store error: :func:`text_problem` over any JSON body (the request limits middleware calls it
when the raw body holds such an escape), :func:`value_problem` over every path and query
parameter (:func:`tocsin.api.params.check_params`, a dependency of every route); and by the
import and the commands topic over each item.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["PAYLOAD_FIELDS", "TEXT_ESCAPE", "text_problem", "value_problem"]

TEXT_ESCAPE = re.compile(rb"\\u(?:[dD][89a-fA-F]|0000)")
"""A JSON escape of a UTF-16 surrogate or of NUL: JSON text cannot hold either unescaped, so
only a body that matches needs :func:`text_problem`."""
PAYLOAD_FIELDS = frozenset({"payload", "payload_text"})
"""A message's own text (of a body, or of an item of its ``schedules``): stored as bytes, so
NUL is data there."""
_SURROGATE = "not Unicode text: holds a lone surrogate (\\ud800-\\udfff)"
_NUL = "must not contain NUL (\\u0000)"


def _printable(text: str) -> str:
    """``text`` with NUL, control characters and lone surrogates escaped as in JSON."""
    return json.dumps(text)[1:-1]


def _not_unicode(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    except (TypeError, ValueError):
        return False  # not JSON at all (bytes from a Parquet column): the model refuses it
    return False


def text_problem(document: Any) -> tuple[str, str] | None:
    """The first field of a JSON request body (``a.0.b``, ``""`` for the body itself) holding
    text the store cannot hold, with the reason; None when all is well."""
    items = document.get("schedules") if isinstance(document, dict) else None
    messages = [document, *(items if isinstance(items, list) else [])]
    return _walk(document, "", {id(m) for m in messages if isinstance(m, dict)})


def _walk(value: Any, path: str, messages: set[int]) -> tuple[str, str] | None:
    if isinstance(value, str):
        if "\x00" in value:
            return path, _NUL
        return (path, _SURROGATE) if _not_unicode(value) else None
    members: Any = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, inner in members:
        where = ".".join(p for p in (path, _printable(str(key))) if p)
        if isinstance(key, str) and (found := _walk(key, where, messages)) is not None:
            return found
        if id(value) in messages and key in PAYLOAD_FIELDS:
            if _not_unicode(inner):
                return where, _SURROGATE
            continue
        if (found := _walk(inner, where, messages)) is not None:
            return found
    return None


def value_problem(value: Any, name: str) -> tuple[str, str] | None:
    """``name`` with the reason when ``value`` (a parameter's text, or any JSON value) holds
    NUL or a lone surrogate anywhere; None when all is well."""
    return _walk(value, name, set())
