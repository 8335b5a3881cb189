"""The dashboard's session: a browser cannot send a Bearer header when it navigates, so the
login page takes an API key and opens a session kept server-side (:meth:`~tocsin.abc.KeyStore.
open_session`). The browser holds only the session's random token, in an ``HttpOnly``,
``SameSite=Strict`` cookie scoped to ``/ui`` that expires with the session
(``TOCSIN_UI_SESSION_SECONDS``, default 8 hours); the store keeps the token's digest, never the
API key. Every page then authenticates the session's key exactly like the API does (the same
roles, tenant scoping, read-only and revocation: revoking the key ends its sessions). Signing
out deletes the session in the store, so a copied cookie stops working at once.

Changes are POSTs that must carry a CSRF token derived from the session token (the
``X-CSRF-Token`` header htmx sends with every request of a page) and, when the browser says
where it comes from, an ``Origin`` of this very host: a cross-site page can neither read the
token nor, with ``SameSite=Strict``, send the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from fastapi import Request, Response

from tocsin.api.auth import Principal
from tocsin.api.deps import Deps
from tocsin.apikeys.tokens import digest_of, find_key
from tocsin.errors import AuthenticationError, ForbiddenError

__all__ = ["COOKIE", "check_csrf", "csrf_token", "end_session", "principal_from_cookie",
           "start_session"]

COOKIE = "tocsin_session"
_PREFIX = "tss_"


def csrf_token(session: str) -> str:
    """The CSRF token of a session (stable for the session, unguessable without it)."""
    return hmac.new(session.encode(), b"tocsin-ui-csrf", hashlib.sha256).hexdigest()


def start_session(request: Request, response: Response, api_key: str) -> bool:
    """Open a session for ``api_key`` and set its cookie on ``response``; False (and nothing
    opened) when the key is unknown or revoked."""
    deps = Deps.of(request)
    key = find_key(deps.store, api_key)
    if key is None:
        return False
    token = _PREFIX + secrets.token_hex(32)
    now = deps.clock.now_ms()
    seconds = deps.settings.ui_session_seconds
    deps.store.open_session(digest_of(token), key_digest=key.digest, now_ms=now,
                            expires_ms=now + int(seconds * 1000))
    response.set_cookie(COOKIE, token, max_age=int(seconds), httponly=True, samesite="strict",
                        path="/ui", secure=request.url.scheme == "https")
    return True


def end_session(request: Request, response: Response) -> None:
    """Forget the request's session in the store and in the browser."""
    token = request.cookies.get(COOKIE, "")
    if token:
        Deps.of(request).store.end_session(digest_of(token))
    response.delete_cookie(COOKIE, path="/ui")


def principal_from_cookie(request: Request) -> Principal:
    """The caller of a dashboard page, from its session cookie (401 without an unexpired
    session of an active key)."""
    deps = Deps.of(request)
    token = request.cookies.get(COOKIE, "")
    key = (deps.store.session_key(digest_of(token), now_ms=deps.clock.now_ms())
           if token.startswith(_PREFIX) else None)
    if key is None or not key.active:
        raise AuthenticationError("sign in with an API key")
    caller = Principal(key_id=key.id, role=key.role, tenant=key.tenant, read_only=key.read_only)
    request.state.principal = caller
    return caller


def check_csrf(request: Request) -> None:
    """Refuse a change without this session's CSRF token, or from another origin."""
    caller = principal_from_cookie(request)
    origin = request.headers.get("origin")
    if origin and urlsplit(origin).netloc != request.headers.get("host"):
        raise ForbiddenError("origin", f"{origin} is not this dashboard")
    sent = request.headers.get("x-csrf-token", "")
    if not hmac.compare_digest(sent.encode(), csrf_token(request.cookies.get(COOKIE, "")).encode()):
        raise ForbiddenError("csrf", "missing or wrong CSRF token: reload the page")
    if caller.read_only:
        raise ForbiddenError("method", f"key {caller.key_id} is read-only")
