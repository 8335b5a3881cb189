"""The dashboard's pages and actions. Every read is scoped like the API's (``scope``), every
change goes to the caller's tenant (``tenant_for``) through the same store calls."""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.api.status import held_by_channel, summary
from tocsin.api.ui.figures import (
    deliveries_by_outcome,
    finished_last_hour,
    lateness_by_channel,
    lateness_percentiles,
    pending_next_24h,
)
from tocsin.api.ui.session import (
    COOKIE,
    check_csrf,
    csrf_token,
    end_session,
    principal_from_cookie,
    start_session,
)
from tocsin.api.views import iso
from tocsin.domain import ScheduleOrder, Status, check_tenant
from tocsin.errors import AuthenticationError, TocsinError, ValidationError
from tocsin.validation.parsing import parse_instant

__all__ = ["SORTS", "install_ui"]

_here = resources.files("tocsin.api.ui")
SORTS = [(ScheduleOrder.DUE.value, "due time, latest first"),
         (ScheduleOrder.ACTIVITY.value, "newest activity first"),
         (ScheduleOrder.ID.value, "oldest created first")]
"""The schedule list's sorts, the default first."""
templates = Jinja2Templates(directory=str(_here / "templates"))
templates.env.filters["iso"] = lambda ms: iso(ms) or ""
templates.env.filters["segment"] = lambda value: quote(str(value), safe="")
"""A value as one path segment of a URL (``/`` ``?`` ``#`` and the rest percent-encoded)."""
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' "
                               "'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""What every dashboard answer carries: no framing (clickjacking), scripts only from the
dashboard's own files, no content-type sniffing, no page cached or its URL leaked."""
_RAW_HEADERS = [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]
_REDRIVE_MAX = 100_000
"""The most dead schedules one re-drive from the dashboard sends again."""
pages = APIRouter(prefix="/ui", include_in_schema=False)
actions = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(check_csrf)])


def install_ui(app: FastAPI) -> None:
    """Serve the dashboard at ``/ui`` (and its static files at ``/ui/static``)."""
    app.mount("/ui/static", StaticFiles(directory=str(_here / "static")), name="ui-static")
    app.include_router(pages)
    app.include_router(actions)
    app.add_middleware(DashboardHeaders)


class DashboardHeaders:
    """ASGI middleware: :data:`_HEADERS` on every answer under ``/ui`` (the API's answers pass
    untouched, without the cost of a ``BaseHTTPMiddleware``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/ui" and not path.startswith("/ui/"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_RAW_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


def _page(request: Request, name: str, title: str, here: str, **ctx: Any) -> Response:
    try:
        principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    return templates.TemplateResponse(request, name, {
        "title": title, "here": here, "csrf": csrf_token(request.cookies.get(COOKIE, "")),
        "tenant": scope(request), **ctx})


def _done(message: str) -> HTMLResponse:
    """An action's answer: a message (escaped: it may quote a path parameter), and the page
    reloads to show the change."""
    return HTMLResponse(f"<p class='ok'>{html.escape(message)}</p>",
                        headers={"HX-Refresh": "true"})


async def _body(request: Request) -> dict[str, Any]:
    """The form an action posts (htmx's json-enc: a JSON object), without its empty fields;
    422 on ``body`` when it is not a JSON object."""
    raw = await request.body()
    try:
        found = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError):
        raise ValidationError("body", "must be a JSON object (htmx's json-enc)") from None
    if not isinstance(found, dict):
        raise ValidationError("body", "must be a JSON object (htmx's json-enc)")
    return {k: v for k, v in found.items() if v not in ("", None)}


def _text(body: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    """A text field of an action's form; 422 naming it when it is something else."""
    value = body.get(name)
    if value is None:
        if required:
            raise ValidationError(name, "is required")
        return None
    if type(value) is not str or "\x00" in value or len(value) > 256:
        raise ValidationError(name, "must be a text of at most 256 characters")
    return value


def _tenant_of(request: Request, body: dict[str, Any]) -> str:
    """The tenant an action acts in: the form's ``tenant`` (checked like the API's; a tenant
    key may name only its own) or the caller's."""
    named = _text(body, "tenant")
    return tenant_for(request, check_tenant(named) if named is not None else None)


@pages.get("/login")
def login_page(request: Request) -> Response:
    return templates.TemplateResponse(request, "login.html", {"title": "Sign in", "here": "",
                                                              "csrf": ""})


@pages.post("/login")
async def login(request: Request) -> Response:
    key = (_text(await _body(request), "key") or "").strip()
    response = HTMLResponse("<p class='ok'>Signed in.</p>", headers={"HX-Redirect": "/ui"})
    if not key or not start_session(request, response, key):
        return HTMLResponse("<p class='bad'>Unknown or revoked API key.</p>", status_code=200)
    return response


@actions.post("/logout")
def logout(request: Request) -> Response:
    response = HTMLResponse("", headers={"HX-Redirect": "/ui/login"})
    end_session(request, response)
    return response


@pages.get("")
def overview(request: Request) -> Response:
    return _page(request, "overview.html", "Overview", "/ui")


@pages.get("/fragments/history")
def history_fragment(request: Request) -> Response:
    deps = Deps.of(request)
    principal_from_cookie(request)
    return templates.TemplateResponse(request, "_history.html", {
        "h": finished_last_hour(deps.store, deps.clock.now_ms(), scope(request))})


@pages.get("/fragments/overview")
def overview_fragment(request: Request) -> Response:
    deps = Deps.of(request)
    principal_from_cookie(request)
    tenant, now = scope(request), deps.clock.now_ms()
    totals = deps.store.counter_totals()
    return templates.TemplateResponse(request, "_overview.html", {
        "s": summary(deps, tenant), "pending": pending_next_24h(deps.store, now, tenant),
        "outcomes": deliveries_by_outcome(totals, tenant),
        "lateness": lateness_percentiles(totals, tenant)})


@pages.get("/schedules")
def schedules(request: Request, id: str = "", status: str = "", channel: str = "",
              tenant: str = "", due_from: str = "", due_to: str = "",
              key: str = "", label: str = "",
              sort: str = ScheduleOrder.DUE.value) -> Response:
    from tocsin.domain.labels import parse_selector

    store, rows, error = Deps.of(request).store, [], None
    try:
        principal_from_cookie(request)
        if id:
            rows = [store.get(id.strip(), tenant=scope(request))]
        else:
            rows = store.list_schedules(
                status=Status(status) if status else None, channel=channel or None,
                key=key.strip() or None, labels=parse_selector(label[:1024]),
                due_from_ms=parse_instant(due_from, "due_from") if due_from else None,
                due_to_ms=parse_instant(due_to, "due_to") if due_to else None,
                limit=200, tenant=(tenant or None) if scope(request) is None else scope(request),
                order=ScheduleOrder(sort))
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    except (TocsinError, ValueError) as exc:
        error = str(exc)
    return _page(request, "schedules.html", "Schedules", "/ui/schedules", rows=rows,
                 error=error, q={"id": id, "key": key, "label": label, "status": status,
                                 "channel": channel,
                                 "tenant": tenant, "due_from": due_from, "due_to": due_to,
                                 "sort": sort},
                 statuses=[s.value for s in Status], sorts=SORTS)


@pages.get("/schedules/{schedule_id}")
def schedule(request: Request, schedule_id: str) -> Response:
    store = Deps.of(request).store
    try:
        principal_from_cookie(request)
        found = store.get(schedule_id, tenant=scope(request))
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    return _page(request, "schedule.html", f"Schedule {schedule_id}", "/ui/schedules",
                 s=found, log=store.deliveries(schedule_id, tenant=scope(request)))


@pages.get("/dead")
def dead(request: Request) -> Response:
    try:
        principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    store = Deps.of(request).store
    rows = store.list_schedules(status=Status.DEAD, limit=500, tenant=scope(request))
    expired = store.list_schedules(status=Status.EXPIRED, limit=500, tenant=scope(request))
    return _page(request, "dead.html", "Dead letters", "/ui/dead", rows=rows, expired=expired)


@pages.get("/channels")
def channels(request: Request) -> Response:
    from tocsin.api.views import channel_out

    try:
        principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    store = Deps.of(request).store
    paused = {(p.tenant, p.name): p for p in store.paused_channels(tenant=scope(request))}
    held = held_by_channel(store.channel_holds(tenant=scope(request)))
    rows = [channel_out(c) for c in store.list_channels(tenant=scope(request))]
    return _page(request, "channels.html", "Channels", "/ui/channels", rows=rows, paused=paused,
                 held=held, in_flight=store.claimed_by_channel(tenant=scope(request)),
                 lateness=lateness_by_channel(store.counter_totals(), scope(request)))


@pages.get("/keys")
def keys(request: Request) -> Response:
    try:
        principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    return _page(request, "keys.html", "Halted ordering keys", "/ui/keys",
                 rows=Deps.of(request).store.halted_keys(tenant=scope(request)))


@pages.get("/audit")
def audit(request: Request) -> Response:
    """The audit log's latest 200 entries, newest first (admin keys only)."""
    try:
        caller = principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    rows = []
    if caller.admin:
        found = Deps.of(request).store.list_audit(
            since_ms=Deps.of(request).clock.now_ms() - 7 * 86_400_000, limit=10_000)
        rows = list(reversed(found))[:200]
    return _page(request, "audit.html", "Audit log", "/ui/audit", rows=rows,
                 forbidden=not caller.admin)


@pages.get("/recurring")
def recurring(request: Request) -> Response:
    from tocsin.api.views import recurring_out

    try:
        principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    deps = Deps.of(request)
    now = deps.clock.now_ms()
    rules = deps.store.list_recurring(tenant=scope(request), limit=200)
    rows = [(recurring_out(r, now_ms=now), deps.store.recurring_firings(
        r.id, tenant=scope(request), after_ms=now - 86_400_000, limit=5)) for r in rules]
    return _page(request, "recurring.html", "Recurring schedules", "/ui/recurring", rows=rows)


@pages.get("/policies")
def policies(request: Request) -> Response:
    from tocsin.api.views import policy_out

    try:
        principal_from_cookie(request)
    except AuthenticationError:
        return RedirectResponse("/ui/login", status_code=303)
    deps = Deps.of(request)
    held = deps.store.tokens_held(now_ms=deps.clock.now_ms(), tenant=scope(request))
    rows = [policy_out(p, in_flight=held.get((p.tenant, p.name), 0))
            for p in deps.store.list_policies(tenant=scope(request))]
    return _page(request, "policies.html", "Throttling policies", "/ui/policies", rows=rows)


@actions.post("/schedules/{schedule_id}/redrive")
def redrive(request: Request, schedule_id: str) -> Response:
    deps = Deps.of(request)
    deps.store.redrive(schedule_id, now_ms=deps.clock.now_ms(), tenant=scope(request))
    return _done(f"Schedule {schedule_id} re-driven.")


@actions.post("/dead/redrive")
async def redrive_where(request: Request) -> Response:
    deps, body = Deps.of(request), await _body(request)
    tenant = _tenant_of(request, body) if "tenant" in body else scope(request)
    channel, due_from, due_to = (_text(body, name) for name in ("channel", "due_from", "due_to"))
    limit = body.get("limit", 10_000)
    if isinstance(limit, str) and limit.isascii() and limit.isdigit():
        limit = int(limit)
    if type(limit) is not int or not 1 <= limit <= _REDRIVE_MAX:
        raise ValidationError("limit", f"must be a whole number from 1 to {_REDRIVE_MAX}")
    count = deps.store.redrive_where(
        now_ms=deps.clock.now_ms(), channel=channel, tenant=tenant,
        due_from_ms=parse_instant(due_from, "due_from") if due_from else None,
        due_to_ms=parse_instant(due_to, "due_to") if due_to else None, limit=limit,
        status=Status.EXPIRED if body.get("status") == "EXPIRED" else Status.DEAD)
    return _done(f"{count} {'expired' if body.get('status') == 'EXPIRED' else 'dead'} "
                 "schedules re-driven.")


_RULES_MAX = 10_000
"""The most recurring schedules one dashboard action by selector acts on."""


@actions.post("/recurring/act")
async def act_on_rules(request: Request) -> Response:
    """Pause, resume, trigger or cancel one recurring schedule (``id``) or every one in the
    caller's scope whose labels match a selector (``label``)."""
    from tocsin.api.recurring import RULE_ACTIONS, act_on_rule
    from tocsin.domain.labels import parse_selector

    deps, body = Deps.of(request), await _body(request)
    action = _text(body, "action", required=True)
    if action not in RULE_ACTIONS:
        raise ValidationError("action", f"must be one of {', '.join(RULE_ACTIONS)}")
    rule_id, selector = _text(body, "id"), _text(body, "label")
    if (rule_id is None) == (selector is None):
        raise ValidationError("id", "give a recurring schedule's id, or a label selector")
    if rule_id is not None:
        rules = [deps.store.get_recurring(rule_id, tenant=scope(request))]
    else:
        pairs = parse_selector(selector)
        rules = [r for r in _rules_in_scope(deps, scope(request))
                 if all(r.labels.get(k) == v for k, v in pairs)]
    for rule in rules:
        act_on_rule(deps, rule, str(action))
    return _done(f"{action}: {len(rules)} recurring schedule{'s' * (len(rules) != 1)}.")


def _rules_in_scope(deps: Deps, tenant: str | None) -> list[Any]:
    """Every recurring schedule of ``tenant`` (None: every tenant's), at most
    :data:`_RULES_MAX`."""
    found: list[Any] = []
    while len(found) < _RULES_MAX:
        page = deps.store.list_recurring(tenant=tenant, limit=1000,
                                         after_id=found[-1].id if found else None)
        found += page
        if len(page) < 1000:
            break
    return found


@actions.post("/channels/pause")
async def pause_channel(request: Request) -> Response:
    deps, body = Deps.of(request), await _body(request)
    tenant, name = _tenant_of(request, body), str(_text(body, "name", required=True))
    deps.store.pause_channel(name, tenant=tenant, now_ms=deps.clock.now_ms())
    return _done(f"Channel {tenant}/{name}: paused.")


@actions.post("/channels/resume")
async def resume_channel(request: Request) -> Response:
    deps, body = Deps.of(request), await _body(request)
    tenant, name = _tenant_of(request, body), str(_text(body, "name", required=True))
    deps.store.get_channel(name, tenant=tenant)
    deps.store.resume_channel(name, tenant=tenant)
    return _done(f"Channel {tenant}/{name}: resumed.")


@actions.post("/keys/resume")
async def resume_key(request: Request) -> Response:
    """Resume a halted ordering key: the key and its tenant travel in the body, never in the
    URL, so no key can make the button address another route or tenant."""
    body = await _body(request)
    tenant = _tenant_of(request, body)
    ordering_key = str(_text(body, "ordering_key", required=True))
    Deps.of(request).store.resume_key(tenant=tenant, ordering_key=ordering_key)
    return _done(f"Ordering key {tenant}/{ordering_key} resumed.")
