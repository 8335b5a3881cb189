"""The key is checked before the body is read: bounded work for an anonymous caller.

:class:`KeyGate` is the outermost ASGI middleware. A request to ``/v1`` must carry
``Authorization: Bearer <token>`` naming an active key; without one it is answered 401 at once,
before a byte of its body is read or scanned, so a stranger's body costs the server nothing
whatever its size or shape. The key found is kept in the request's state
(:data:`KEY_STATE`): :func:`tocsin.api.auth.authenticate` uses it instead of a second lookup,
and :class:`tocsin.api.limits.BodyLimits` grants a keyed request the full ``max_body_bytes``.

Every other path (the dashboard's login and its forms, ``/healthz``, an unknown path) may carry
at most :data:`ANONYMOUS_BODY_BYTES`: no route there reads more than a small form. The lookup
itself runs in a worker thread (it is a store query), never on the event loop.
"""

from __future__ import annotations

import logging

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tocsin.abc import Store
from tocsin.api.errors import STORE_FAILED
from tocsin.apikeys.tokens import find_key
from tocsin.domain import ApiKey
from tocsin.errors import AuthenticationError, StoreError, TocsinError, error_body, status_of

__all__ = ["ANONYMOUS_BODY_BYTES", "KEY_STATE", "KeyGate", "gate_key"]

log = logging.getLogger("tocsin.api")
ANONYMOUS_BODY_BYTES = 16 * 1024
"""The largest body a request without a key may send (the login form is under 200 bytes)."""
KEY_STATE = "tocsin_api_key"
"""Where, in the ASGI scope's ``state``, the gate leaves the key it found."""
_KEYED = "/v1"


def gate_key(scope: Scope) -> ApiKey | None:
    """The key :class:`KeyGate` found for this request, if any."""
    state = scope.get("state")
    key = state.get(KEY_STATE) if isinstance(state, dict) else None
    return key if isinstance(key, ApiKey) else None


def _keyed(path: str) -> bool:
    return path == _KEYED or path.startswith(_KEYED + "/")


def _bearer(headers: Headers) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class KeyGate:
    """Answers 401 to a ``/v1`` request without an active key before reading its body."""

    def __init__(self, app: ASGIApp, *, store: Store) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _keyed(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        token = _bearer(Headers(scope=scope))
        try:
            if not token:
                raise AuthenticationError("no API key: send Authorization: Bearer <key>")
            key = await anyio.to_thread.run_sync(find_key, self.store, token)
            if key is None:
                raise AuthenticationError("unknown or revoked API key")
        except TocsinError as exc:
            await _refuse(exc, scope, receive, send)
            return
        scope.setdefault("state", {})[KEY_STATE] = key
        await self.app(scope, receive, send)


async def _refuse(exc: TocsinError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer ``exc`` and close the connection: the body is never read."""
    headers = {"Connection": "close"}
    if isinstance(exc, AuthenticationError):
        headers["WWW-Authenticate"] = 'Bearer realm="tocsin"'
    if isinstance(exc, StoreError):  # its text names files and hosts: the log has it
        log.error("store error while checking a key: %s", exc)
        exc = StoreError(STORE_FAILED)
    response = JSONResponse(error_body(exc), status_code=status_of(exc), headers=headers)
    await response(scope, receive, send)
