"""The body-limit middleware's logic, at the ASGI level (the real server tests are in
test_limits.py): it stops reading as soon as a body passes the limit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Message

from tocsin.api.limits import BodyLimits, json_depth_over


def _answer(max_bytes: int, chunks: int, chunk: bytes) -> tuple[int, int, bool]:
    """(status, chunks read, whether the app was reached) for an endless chunked body."""
    read = 0
    reached = False
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": chunk, "more_body": read < chunks}

    async def send(message: Message) -> None:
        sent.append(message)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal reached
        reached = True

    scope = {"type": "http", "method": "POST", "path": "/v1/schedules",
             "headers": [(b"content-type", b"application/json")]}
    asyncio.run(BodyLimits(app, max_bytes=max_bytes, max_depth=64)(scope, receive, send))
    status = sent[0]["status"] if sent else 0
    return status, read, reached


def test_reading_stops_at_the_limit() -> None:
    status, read, reached = _answer(max_bytes=10_000, chunks=1_000_000, chunk=b" " * 1000)
    assert (status, read, reached) == (413, 11, False)


def test_a_body_within_the_limit_reaches_the_app() -> None:
    assert _answer(max_bytes=10_000, chunks=10, chunk=b" " * 1000)[1:] == (10, True)


def test_depth_counts_arrays_and_objects_but_not_strings() -> None:
    assert not json_depth_over(json.dumps([[[["[[[[[[[[[["]]]]).encode(), 4)
    assert json_depth_over(json.dumps([[[[[]]]]]).encode(), 4)
    assert not json_depth_over(b'{"a": "\\"[[[[[[", "b": [{}]}', 3)
    assert json_depth_over(b"[" * 100_000, 64)
