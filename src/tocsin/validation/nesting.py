"""How deep a JSON text nests, counted on its bytes before any parser sees it.

Python's JSON parser recurses once per level, so a text 100 000 levels deep raises
``RecursionError`` (which is no ``ValueError``: it escapes whatever catches malformed JSON and
takes down the request, the commands query or the import). Every way in counts first: the API's
body limits, the Kafka commands topic, each line of an import.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_DEPTH", "json_depth_over", "too_deep"]

DEFAULT_DEPTH = 64
"""The deepest nesting accepted where no setting says otherwise (``max_json_depth``)."""

_ESCAPE = re.compile(rb"\\.", re.DOTALL)
"""A backslash and the byte it escapes: removed first, so no string ends early or late."""
_STRING = re.compile(rb'"[^"]*"')
"""A string once escapes are gone: one pass, no backtracking beyond one unclosed string."""
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


def json_depth_over(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays and objects more than ``limit`` deep
    (brackets inside strings do not count).

    Linear in ``len(body)`` and at most ``limit`` passes of :meth:`bytes.replace`: escapes
    and strings are cut out, the brackets kept (``{}`` counted as ``[]``), and each pass
    removes the innermost pairs. A pair still there after ``limit`` passes encloses more
    than ``limit`` levels. A body whose brackets never close (malformed, which the parser
    refuses) is over the limit when more than ``limit`` stay open."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    plain = _STRING.sub(b"", _ESCAPE.sub(b"", body))
    brackets = plain.translate(_SQUARE, _NOT_BRACKETS)
    for _ in range(limit):
        reduced = brackets.replace(b"[]", b"")
        if len(reduced) == len(brackets):
            break
        brackets = reduced
    opened = brackets.find(b"[")
    if opened < 0:
        return False
    return brackets.rfind(b"]") > opened or len(brackets) - opened > limit


def too_deep(text: str | bytes, limit: int = DEFAULT_DEPTH) -> str | None:
    """Why ``text`` is refused when it nests more than ``limit`` deep, else None (cheap for a
    text with few brackets: two counts)."""
    if isinstance(text, str):
        if text.count("[") + text.count("{") <= limit:
            return None
        text = text.encode("utf-8", "surrogatepass")
    if json_depth_over(text, limit):
        return f"JSON nested more than {limit} levels deep (setting max_json_depth)"
    return None
