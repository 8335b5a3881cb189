"""Limits at the HTTP edge, applied before any route sees a request.

:class:`BodyLimits` is an ASGI middleware. It refuses a body

* larger than ``max_body_bytes`` (413), or than :data:`~tocsin.api.gate.ANONYMOUS_BODY_BYTES`
  for a request :class:`~tocsin.api.gate.KeyGate` found no key for: a declared
  ``Content-Length`` over the limit is refused without reading a byte, and a body sent in
  chunks is refused as soon as what has arrived passes the limit, so an oversized body is
  never held, let alone parsed, whole;
* that is not ``application/json`` (or ``application/*+json``) (415): a browser can send
  ``text/plain`` or a form cross-site without asking first, JSON it cannot;
* whose JSON nests deeper than ``max_json_depth`` (422): found by :func:`json_depth_over`,
  which takes time linear in the body (a few C-speed passes, no backtracking regular
  expression), so a document 100 000 levels deep never reaches a recursive parser;
* holding text the store cannot hold (422 naming the field; :mod:`tocsin.validation.text`).

A request without a body (GET, DELETE, a bare POST) passes untouched. The checks of a body
over :data:`_INLINE_BYTES` run in a worker thread, so no body costs the event loop more than
reading it.
"""

from __future__ import annotations

import json

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tocsin.api.errors import error_body, status_of
from tocsin.api.gate import ANONYMOUS_BODY_BYTES, gate_key
from tocsin.errors import MediaTypeError, TocsinError, TooLargeError, ValidationError
from tocsin.validation.nesting import json_depth_over
from tocsin.validation.text import TEXT_ESCAPE, text_problem

__all__ = ["BodyLimits", "json_depth_over"]

_INLINE_BYTES = 64 * 1024
"""Bodies up to this size are checked on the event loop (under a millisecond); larger ones in
a worker thread."""


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


class BodyLimits:
    """Refuses oversized, non-JSON and too deeply nested request bodies (see the module)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_depth: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    def _limit(self, scope: Scope) -> int:
        """The full limit for a request the gate found a key for, a small one otherwise."""
        return self.max_bytes if gate_key(scope) else min(self.max_bytes, ANONYMOUS_BODY_BYTES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit = self._limit(scope)
        try:
            self._check_declared(headers, limit)
            body = await self._read(receive, limit)
            if body is None:
                return  # the client went away
            if len(body) > _INLINE_BYTES:
                await anyio.to_thread.run_sync(self._check, body, headers)
            elif body:
                self._check(body, headers)
        except TocsinError as exc:
            response = JSONResponse(error_body(exc), status_code=status_of(exc),
                                    headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _too_large(self, limit: int) -> TooLargeError:
        if limit < self.max_bytes:
            return TooLargeError("body", f"the request body is over {limit} bytes, the limit "
                                         "for a request without an API key")
        return TooLargeError("body", f"the request body is over {limit} bytes, the limit "
                                     "(setting max_body_bytes)")

    def _check_declared(self, headers: Headers, limit: int) -> None:
        declared = headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise self._too_large(limit)

    async def _read(self, receive: Receive, limit: int) -> bytes | None:
        """The whole body, refused as soon as it passes the limit; None on a disconnect."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise self._too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _check(self, body: bytes, headers: Headers) -> None:
        content_type = headers.get("content-type")
        if not _is_json(content_type):
            raise MediaTypeError("content-type", f"a request body must be application/json, "
                                                 f"not {content_type or 'unnamed'!r}")
        if json_depth_over(body, self.max_depth):
            raise ValidationError("body", f"JSON nested more than {self.max_depth} levels "
                                          "deep (setting max_json_depth)")
        if TEXT_ESCAPE.search(body):
            try:
                document = json.loads(body)
            except ValueError:
                return  # malformed: the route says so
            if (problem := text_problem(document)) is not None:
                field, reason = problem
                raise ValidationError(field or "body", reason)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
