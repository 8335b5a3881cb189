"""Issue 40, finding 1: bounded work before the key is checked.

The application's own middleware stack (``create_app``) is driven at the ASGI level, and the
CPU time of the event loop's thread (``time.thread_time``: what the loop itself spent, not
what other processes on a busy machine took from it, nor the worker threads) is measured from
the request to its answer: no body up to 1 MiB, whatever its shape, may cost the loop 50 ms
before its key is checked. A request to ``/v1`` without an active key is answered 401 before
a byte of its body is read. On both stores (the key lookup is a store query).
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.types import Message

from tocsin.abc import Store
from tocsin.api.app import create_app
from tocsin.api.gate import ANONYMOUS_BODY_BYTES
from tocsin.api.limits import json_depth_over
from tocsin.config import Settings

MiB = 1 << 20
SLOW = 0.05
"""The most event-loop time a request may take before its key is checked (issue 40)."""
_TOKENS = [b'\\"', b"[", b"{", b'"', b"\\", b"[],", b'{"a":', b"\\u0000", b"\\ud800", b"]",
           b"}", b" ", b"\\\\", b'"\\', b"0,", b'"a":[']
_PATHS = ["/v1/schedules", "/v1/recurring", "/v1/channels/x", "/v1", "/ui/login",
          "/ui/dead/redrive", "/healthz", "/nowhere"]
_KEYS = [None, "Bearer", "Bearer nonsense", "Basic abc",
         "Bearer tsk_key_0000000000000000_" + "0" * 64]


def _drive(app: Any, *, path: str, body: bytes, auth: str | None,
           chunk: int = 64 * 1024) -> tuple[int, int, float]:
    """(status, body chunks the app read, event-loop CPU seconds) of one POST through
    ``app``."""
    chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)] or [b""]
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if read >= len(chunks):
            await asyncio.sleep(3600)
        read += 1
        return {"type": "http.request", "body": chunks[read - 1],
                "more_body": read < len(chunks)}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json")]
    if auth is not None:
        headers.append((b"authorization", auth.encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}

    async def run() -> float:
        gc.collect()  # a collection of the whole test process is not this request's work
        begun = time.thread_time()
        await app(scope, receive, send)
        return time.thread_time() - begun

    spent = asyncio.run(run())
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], read, spent


@pytest.fixture
def api_headers(api_server: Any) -> dict[str, str]:
    headers: dict[str, str] = api_server.headers
    return headers


@pytest.fixture
def app(api_store: Store) -> Any:
    """The application, warmed by a request to each path (the first builds the middleware
    stack, and a path's first request may import or compile what it uses: CI once measured
    436 ms for the first ``/ui/login``, which a second run of the same request did not)."""
    application = create_app(Settings(), store=api_store)
    for path in _PATHS:
        _drive(application, path=path, body=b"{}", auth=None)
    return application


_bodies = st.builds(
    lambda prefix, pattern, size: (prefix + pattern * (size // len(pattern) + 1))[:size],
    st.sampled_from([b"", b"[" * 65 + b'"', b'{"payload": "', b"[" * 100]),
    st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=6).map(b"".join),
    st.integers(min_value=1, max_value=MiB))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_bodies, path=st.sampled_from(_PATHS), auth=st.sampled_from(_KEYS))
def test_no_body_holds_the_loop_before_its_key_is_checked(
        app: Any, body: bytes, path: str, auth: str | None) -> None:
    status, _, spent = _drive(app, path=path, body=body, auth=auth)
    assert status < 500, status
    if path.startswith("/v1"):
        assert status == 401
    assert spent < SLOW, f"{spent * 1000:.0f} ms of event-loop time"


def test_the_reported_bodies_are_refused_at_once(app: Any) -> None:
    backslashes = b"[" * 65 + b'"' + b'\\"' * 16_000  # 32 KB: 3.3 s of backtracking before
    many = b"[" + b"[]," * (15 * MiB // 3) + b"[]]"  # 15 MiB: 2-4 s a request before
    for body in (backslashes, b"[" * 65 + b'"' + b'\\"' * 100_000, many):
        status, read, spent = _drive(app, path="/v1/schedules", body=body, auth=None)
        assert (status, read) == (401, 0) and spent < SLOW
    status, read, spent = _drive(app, path="/ui/login", body=many, auth=None)
    assert status == 413 and read <= 1 + ANONYMOUS_BODY_BYTES // (64 * 1024) and spent < SLOW


def test_a_keyed_body_is_checked_off_the_loop(app: Any, api_headers: dict[str, str]) -> None:
    auth = api_headers["authorization"]
    deep = b"[" * 65 + b'"' + b'\\"' * 400_000  # 800 KB
    status, _, spent = _drive(app, path="/v1/schedules", body=deep, auth=auth)
    assert status == 422 and spent < SLOW


def test_the_keyed_answers_are_unchanged_on_a_real_server(api: httpx.Client) -> None:
    r = api.post("/v1/schedules", content=b"[" * 65 + b'"' + b'\\"' * 16_000,
                 headers={"content-type": "application/json"})
    assert r.status_code == 422 and "nested more than 64" in r.json()["error"]["message"]
    anonymous = httpx.post(f"{api.base_url}/v1/schedules", content=b"[" * 100_000,
                           headers={"content-type": "application/json"})
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_json = st.recursive(st.none() | st.integers() | st.text(alphabet='[]{}"\\ab'),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(alphabet='[]{}"\\x', max_size=3), inner,
                                       max_size=3),
                     max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(document=_json, limit=st.integers(min_value=1, max_value=12))
def test_the_scan_agrees_with_the_parser(document: Any, limit: int) -> None:
    body = json.dumps(document).encode()
    assert json_depth_over(body, limit) == (_depth(document) > limit)


def test_the_scan_of_malformed_bodies() -> None:
    assert json_depth_over(b"[" * 100_000, 64)
    assert json_depth_over(b"[" * 65 + b'"' + b'\\"' * 16_000, 64)
    assert not json_depth_over(b"]" * 100 + b"[[", 64)
    assert not json_depth_over(b'["' + b"[" * 100 + b'"]', 4)
    assert json_depth_over(b"[" * 10 + b"]" * 10, 4)
