"""The dashboard's session: a browser cannot send a Bearer header when it navigates, so the
login page takes an API key and keeps it in an ``HttpOnly``, ``SameSite=Strict`` cookie
scoped to ``/ui``. Every page then authenticates that key exactly like the API does (the same
roles, tenant scoping, read-only and revocation).

Changes are POSTs that must carry a CSRF token derived from the key (the ``X-CSRF-Token``
header htmx sends with every request of a page) and, when the browser says where it comes from, an
``Origin`` of this very host: a cross-site page can neither read the token nor, with
``SameSite=Strict``, send the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from fastapi import Request

from tocsin.api.auth import Principal
from tocsin.api.deps import Deps
from tocsin.apikeys import find_key
from tocsin.errors import AuthenticationError, ForbiddenError

__all__ = ["COOKIE", "check_csrf", "csrf_token", "principal_from_cookie"]

COOKIE = "tocsin_key"


def csrf_token(key: str) -> str:
    """The CSRF token of a session (stable for the key, unguessable without it)."""
    return hmac.new(key.encode(), b"tocsin-ui-csrf", hashlib.sha256).hexdigest()


def principal_from_cookie(request: Request) -> Principal:
    """The caller of a dashboard page, from its cookie (401 without a valid key)."""
    token = request.cookies.get(COOKIE, "")
    key = find_key(Deps.of(request).store, token) if token else None
    if key is None:
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
    if not hmac.compare_digest(sent, csrf_token(request.cookies.get(COOKIE, ""))):
        raise ForbiddenError("csrf", "missing or wrong CSRF token: reload the page")
    if caller.read_only:
        raise ForbiddenError("method", f"key {caller.key_id} is read-only")
