"""The audit log at the HTTP edge: :class:`AuditTrail` records every change, ``/v1/audit``
reads them (admin keys only).

A change is a POST, PUT, PATCH or DELETE that succeeded (status under 400) through ``/v1`` or
the dashboard's actions, except a schedule's own create, change and cancel (those are the
tenants' data, counted by the metrics): channels, keys, policies, rules, tenant settings,
pauses and resumes, ordering keys, bulk operations and re-drives. Each entry holds who (the
key's id and tenant, from the request's principal), what (method and route, the path, the
status and what the answer named: an id, a name, a count — never a request body, which may
hold a secret), when, and from where (the client's address as the server saw it; behind a
proxy, the proxy's). The entry is written after the answer is sent, in a worker thread; a
store that fails then is logged, and the change stands.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tocsin.abc import Store
from tocsin.api.auth import Principal, require_admin
from tocsin.api.deps import Deps
from tocsin.api.views import iso
from tocsin.clock import Clock
from tocsin.domain.audit import AuditEntry, audit_id
from tocsin.validation.models import TENANT_PATTERN
from tocsin.validation.parsing import parse_instant

__all__ = ["AuditTrail", "audit_out", "router"]

log = logging.getLogger("tocsin.api")
router = APIRouter(prefix="/v1/audit", tags=["audit"])
_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_NOT_AUDITED = frozenset({
    "POST /v1/schedules", "PATCH /v1/schedules/{schedule_id}",
    "DELETE /v1/schedules/{schedule_id}", "POST /ui/login", "POST /ui/logout"})
"""A schedule's own create, change and cancel (tenants' data), and signing in and out."""
_ANSWER_BYTES = 64 * 1024
"""The most of an answer read for what it names."""


def _audited(method: str, path: str) -> bool:
    return method in _CHANGES and (path.startswith(("/v1/", "/ui/")))


class AuditTrail:
    """Records the changes made through the application (see the module)."""

    def __init__(self, app: ASGIApp, *, store: Store, clock: Clock) -> None:
        self.app = app
        self.store = store
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _audited(scope["method"], scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        status = 0
        answer: list[bytes] = []

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif (message["type"] == "http.response.body" and status < 400
                  and sum(map(len, answer)) < _ANSWER_BYTES):
                answer.append(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, watch)
        if not 0 < status < 400:
            return
        entry = self._entry(scope, status, b"".join(answer))
        if entry is None:
            return
        try:
            await anyio.to_thread.run_sync(self.store.record_audit, entry)
        except Exception as exc:  # the change stands; the log says what was not recorded
            log.error("audit: could not record %s %s: %s", entry.action, entry.target, exc)

    def _entry(self, scope: Scope, status: int, answer: bytes) -> AuditEntry | None:
        route = scope.get("route")
        template = getattr(route, "path", None) or scope.get("path", "")
        action = f"{scope['method']} {template}"
        if action in _NOT_AUDITED:
            return None
        state = scope.get("state") or {}
        caller = state.get("principal")
        principal = caller if isinstance(caller, Principal) else None
        named = _named(answer)
        query = dict(_query(scope))
        if template.startswith("/v1/tenants/"):  # the tenant is the path's name
            named.setdefault("tenant", (scope.get("path_params") or {}).get("name"))
        tenant = (principal.tenant if principal is not None and principal.tenant is not None
                  else named.pop("tenant", None) or query.get("tenant"))
        client = scope.get("client")
        now = self.clock.now_ms()
        return AuditEntry(
            id=audit_id(now), at_ms=now,
            key_id=principal.key_id if principal is not None else None,
            key_tenant=principal.tenant if principal is not None else None,
            tenant=tenant, action=action[:200], target=str(scope.get("path", ""))[:500],
            status=status, client=str(client[0]) if client else None,
            detail=json.dumps(named, sort_keys=True) if named else None)


def _query(scope: Scope) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl

    raw = scope.get("query_string", b"")
    return parse_qsl(raw.decode("latin-1"), keep_blank_values=True)


def _named(answer: bytes) -> dict[str, Any]:
    """What an answer names (its id, name, tenant, counts), never anything else of it."""
    try:
        body = json.loads(answer) if answer else None
    except (ValueError, RecursionError):
        return {}
    if not isinstance(body, dict):
        return {}
    return {k: v for k, v in body.items()
            if k in ("id", "name", "tenant", "count", "matched", "changed", "redriven", "kind",
                     "paused")
            and isinstance(v, (str, int, bool)) and len(str(v)) <= 200}


def audit_out(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the API answers it."""
    return {"id": entry.id, "at": iso(entry.at_ms), "key_id": entry.key_id,
            "key_tenant": entry.key_tenant, "tenant": entry.tenant, "action": entry.action,
            "target": entry.target, "status": entry.status, "client": entry.client,
            "detail": json.loads(entry.detail) if entry.detail else None}


@router.get("", summary="The audit log: who changed what, when and from where (admin keys "
            "only; oldest first, cursor pagination)")
def list_audit(
        request: Request,
        cursor: str | None = Query(None, max_length=64,
                                   description="The previous page's next_cursor."),
        limit: int = Query(100, ge=1, le=1000),
        tenant: Annotated[str | None, Query(min_length=1, max_length=64,
                                            pattern=TENANT_PATTERN)] = None,
        key_id: str | None = Query(None, max_length=64, description="Changes made with this "
                                                                    "key."),
        action: str | None = Query(None, max_length=200, description="Actions starting with "
                                   "this, e.g. `POST /v1/channels` or `DELETE`."),
        since: str | None = Query(None, max_length=64, description="RFC 3339: at or after."),
        until: str | None = Query(None, max_length=64, description="RFC 3339: before.")
) -> dict[str, Any]:
    require_admin(request)
    found = Deps.of(request).store.list_audit(
        tenant=tenant, key_id=key_id, action=action,
        since_ms=parse_instant(since, "since") if since else None,
        until_ms=parse_instant(until, "until") if until else None,
        after_id=cursor, limit=limit + 1)
    page = found[:limit]
    return {"items": [audit_out(e) for e in page],
            "next_cursor": page[-1].id if len(found) > limit else None}
