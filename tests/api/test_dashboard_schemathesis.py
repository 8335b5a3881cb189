"""schemathesis over the dashboard's POST routes, on every store: they are not in the API's
OpenAPI document (``include_in_schema=False``), so :data:`DASHBOARD` describes them — the JSON
forms htmx sends — and the same checks as ``test_schemathesis.py`` run with a signed-in admin
session: no 5xx, and every status one the description names."""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis

from tests.api.test_schemathesis import MODES, _failures
from tocsin.api.ui.session import COOKIE, csrf_token
from tocsin.testing.api_server import ApiServer

_TEXT: dict[str, Any] = {"type": "string", "maxLength": 300}
_STATUSES = {str(s): {"description": d} for s, d in (
    (200, "Done (a message), or a sign-in refused"), (401, "No session"),
    (403, "No CSRF token, another origin, a read-only key or another tenant"),
    (404, "No such schedule, channel or halted key"), (409, "Not in a state for it"),
    (422, "A form field of the wrong shape (named)"))}


def _form(*names: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    props: dict[str, Any] = {name: _TEXT for name in names}
    if "limit" in names:
        props["limit"] = {"type": "integer", "minimum": 1, "maximum": 100_000}
    return {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": props, "required": list(required)}}}}


def _post(operation: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"post": {"operationId": operation, "requestBody": body, "responses": _STATUSES,
                     **extra}}


DASHBOARD: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Tocsin dashboard actions", "version": "1"},
    "paths": {
        "/ui/login": _post("login", _form("key")),
        "/ui/logout": _post("logout", _form()),
        "/ui/dead/redrive": _post("redrive_where", _form("tenant", "channel", "due_from",
                                                         "due_to", "limit")),
        "/ui/schedules/{schedule_id}/redrive": _post(
            "redrive", _form(), parameters=[{"name": "schedule_id", "in": "path",
                                             "required": True, "schema": _TEXT}]),
        "/ui/channels/pause": _post("pause", _form("name", "tenant", required=("name",))),
        "/ui/channels/resume": _post("resume", _form("name", "tenant", required=("name",))),
        "/ui/keys/resume": _post("resume_key", _form("ordering_key", "tenant",
                                                     required=("ordering_key",))),
    },
}
"""The dashboard's POST routes as htmx calls them (json-enc forms)."""


def test_dashboard_posts_never_5xx(api_server: ApiServer) -> None:
    with httpx.Client(base_url=api_server.url, timeout=30) as browser:
        assert browser.post("/ui/login", json={"key": api_server.admin_key}).status_code == 200
        session = browser.cookies[COOKIE]
    headers = {"cookie": f"{COOKIE}={session}", "x-csrf-token": csrf_token(session)}
    schema = schemathesis.openapi.from_dict(DASHBOARD)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(DASHBOARD["paths"])
    for operation in sorted(operations, key=lambda o: o.path == "/ui/logout"):  # it ends
        for mode in MODES:  # the session: last
            failures += _failures(operation, mode, api_server.url, headers)
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:20])
