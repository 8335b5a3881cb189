"""Python clients for the Tocsin API, on httpx: :class:`Client` (sync) and
:class:`AsyncClient` (async), symmetric. HTTP errors come back as Tocsin's own errors:
422 → ValidationError (with the field), 404 → NotFoundError, 409 → ConflictError (with the
current status), 503 → StoreError.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx

from tocsin.clock import to_ms
from tocsin.errors import ConflictError, NotFoundError, StoreError, TocsinError, ValidationError

__all__ = ["AsyncClient", "Client", "change_body", "schedule_body"]

DEFAULT_URL = "http://127.0.0.1:8765"


def schedule_body(channel: str, *, payload: Any = None, payload_text: str | None = None,
                  payload_base64: str | None = None, due_at: datetime | str | None = None,
                  delay: float | timedelta | str | None = None,
                  headers: dict[str, str] | None = None, key: str | None = None,
                  tenant: str | None = None, ordering_key: str | None = None,
                  has_payload: bool = True) -> dict[str, Any]:
    """The JSON body of one schedule; naive datetimes are refused here too."""
    body: dict[str, Any] = {"channel": channel}
    if payload_text is not None:
        body["payload_text"] = payload_text
    elif payload_base64 is not None:
        body["payload_base64"] = payload_base64
    elif has_payload:
        body["payload"] = payload
    if isinstance(due_at, datetime):
        to_ms(due_at)  # raises on a naive datetime
        body["due_at"] = due_at.isoformat()
    elif due_at is not None:
        body["due_at"] = due_at
    if isinstance(delay, timedelta):
        body["delay"] = delay.total_seconds()
    elif delay is not None:
        body["delay"] = delay
    for name, value in (("headers", headers), ("key", key), ("tenant", tenant),
                        ("ordering_key", ordering_key)):
        if value:
            body[name] = value
    return body


def change_body(*, due_at: datetime | str | None = None,
                delay: float | timedelta | str | None = None, **fields: Any) -> dict[str, Any]:
    """The JSON body of a reschedule (only what changes)."""
    body = {k: v for k, v in fields.items() if v is not None or k == "payload"}
    timing = schedule_body("_", due_at=due_at, delay=delay, has_payload=False)
    body.update({k: v for k, v in timing.items() if k in ("due_at", "delay")})
    return body


def _raise_for(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json() if response.content else None
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        raise TocsinError(f"HTTP {response.status_code}: {response.text[:500]}") from None
    message = error.get("message", response.text)
    if response.status_code == 422:
        raise ValidationError(error.get("field", "body"), error.get("reason", message),
                              errors=error.get("errors"))
    if response.status_code == 404:
        raise NotFoundError(error.get("kind", "object"), error.get("id", "?"))
    if response.status_code == 409:
        raise ConflictError(message, status=error.get("status"), ident=error.get("id"))
    if response.status_code == 503:
        raise StoreError(message)
    raise TocsinError(f"HTTP {response.status_code}: {message}")


class Client:
    """A synchronous client. Use as a context manager, or call :meth:`close`."""

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        return _raise_for(self._http.request(method, path, **kw))

    def schedule(self, channel: str, **fields: Any) -> dict[str, Any]:
        """Schedule one message (see :func:`schedule_body` for the fields)."""
        has_payload = "payload" in fields
        return self._call("POST", "/v1/schedules",  # type: ignore[no-any-return]
                          json=schedule_body(channel, has_payload=has_payload, **fields))

    def schedule_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Schedule a batch (all or nothing); items are :func:`schedule_body` dicts."""
        return self._call("POST", "/v1/schedules",  # type: ignore[no-any-return]
                          json={"schedules": items})["schedules"]

    def get(self, schedule_id: str) -> dict[str, Any]:
        """One schedule."""
        return self._call("GET", f"/v1/schedules/{schedule_id}")  # type: ignore[no-any-return]

    def list(self, *, status: str | None = None, channel: str | None = None,
             page_size: int = 100) -> Iterator[dict[str, Any]]:
        """Every schedule matching the filters, page by page."""
        cursor = None
        while True:
            params = {k: v for k, v in (("status", status), ("channel", channel),
                                        ("cursor", cursor), ("limit", page_size)) if v}
            page = self._call("GET", "/v1/schedules", params=params)
            yield from page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return

    def cancel(self, schedule_id: str) -> dict[str, Any]:
        """Cancel; ConflictError (with ``status``) when it is too late."""
        return self._call("DELETE", f"/v1/schedules/{schedule_id}")  # type: ignore[no-any-return]

    def reschedule(self, schedule_id: str, **changes: Any) -> dict[str, Any]:
        """Change a PENDING schedule (``due_at``, ``delay``, a payload, ``headers``);
        ConflictError (with ``status``) when it is too late."""
        return self._call("PATCH", f"/v1/schedules/{schedule_id}",  # type: ignore[no-any-return]
                          json=change_body(**changes))

    def halted_keys(self, tenant: str | None = None) -> builtins.list[dict[str, Any]]:
        """The ordering keys halted by a dead schedule."""
        params = {"tenant": tenant} if tenant else {}
        return self._call(  # type: ignore[no-any-return]
            "GET", "/v1/ordering-keys", params={"halted": "true", **params})["items"]

    def resume_key(self, ordering_key: str, tenant: str = "default") -> dict[str, Any]:
        """Resume a halted ordering key."""
        return self._call(  # type: ignore[no-any-return]
            "POST", f"/v1/ordering-keys/{ordering_key}/resume", params={"tenant": tenant})

    def deliveries(self, schedule_id: str) -> builtins.list[dict[str, Any]]:
        """The attempt log of one schedule."""
        return self._call(  # type: ignore[no-any-return]
            "GET", f"/v1/schedules/{schedule_id}/deliveries")["items"]

    def add_channel(self, name: str, kind: str, config: dict[str, Any]) -> dict[str, Any]:
        """Register or replace a channel."""
        return self._call("POST", "/v1/channels",  # type: ignore[no-any-return]
                          json={"name": name, "kind": kind, "config": config})

    def channels(self) -> builtins.list[dict[str, Any]]:
        """Every registered channel."""
        return self._call("GET", "/v1/channels")["items"]  # type: ignore[no-any-return]

    def delete_channel(self, name: str) -> None:
        """Forget a channel."""
        self._call("DELETE", f"/v1/channels/{name}")

    def health(self) -> dict[str, Any]:
        """``/readyz``'s answer (raises when unready)."""
        return self._call("GET", "/readyz")  # type: ignore[no-any-return]


class AsyncClient:
    """The asynchronous twin of :class:`Client`."""

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        return _raise_for(await self._http.request(method, path, **kw))

    async def schedule(self, channel: str, **fields: Any) -> dict[str, Any]:
        """Schedule one message."""
        has_payload = "payload" in fields
        return await self._call("POST", "/v1/schedules",  # type: ignore[no-any-return]
                                json=schedule_body(channel, has_payload=has_payload, **fields))

    async def schedule_many(
        self, items: builtins.list[dict[str, Any]]
    ) -> builtins.list[dict[str, Any]]:
        """Schedule a batch (all or nothing)."""
        answer = await self._call("POST", "/v1/schedules", json={"schedules": items})
        return answer["schedules"]  # type: ignore[no-any-return]

    async def get(self, schedule_id: str) -> dict[str, Any]:
        """One schedule."""
        return await self._call(  # type: ignore[no-any-return]
            "GET", f"/v1/schedules/{schedule_id}")

    async def list(self, *, status: str | None = None, channel: str | None = None,
                   page_size: int = 100) -> AsyncIterator[dict[str, Any]]:
        """Every schedule matching the filters, page by page."""
        cursor = None
        while True:
            params = {k: v for k, v in (("status", status), ("channel", channel),
                                        ("cursor", cursor), ("limit", page_size)) if v}
            page = await self._call("GET", "/v1/schedules", params=params)
            for item in page["items"]:
                yield item
            cursor = page["next_cursor"]
            if not cursor:
                return

    async def cancel(self, schedule_id: str) -> dict[str, Any]:
        """Cancel; ConflictError (with ``status``) when it is too late."""
        return await self._call(  # type: ignore[no-any-return]
            "DELETE", f"/v1/schedules/{schedule_id}")

    async def reschedule(self, schedule_id: str, **changes: Any) -> dict[str, Any]:
        """Change a PENDING schedule; ConflictError when it is too late."""
        return await self._call(  # type: ignore[no-any-return]
            "PATCH", f"/v1/schedules/{schedule_id}", json=change_body(**changes))

    async def halted_keys(self, tenant: str | None = None) -> builtins.list[dict[str, Any]]:
        """The ordering keys halted by a dead schedule."""
        params = {"tenant": tenant} if tenant else {}
        answer = await self._call("GET", "/v1/ordering-keys",
                                  params={"halted": "true", **params})
        return answer["items"]  # type: ignore[no-any-return]

    async def resume_key(self, ordering_key: str, tenant: str = "default") -> dict[str, Any]:
        """Resume a halted ordering key."""
        return await self._call(  # type: ignore[no-any-return]
            "POST", f"/v1/ordering-keys/{ordering_key}/resume", params={"tenant": tenant})

    async def deliveries(self, schedule_id: str) -> builtins.list[dict[str, Any]]:
        """The attempt log of one schedule."""
        answer = await self._call("GET", f"/v1/schedules/{schedule_id}/deliveries")
        return answer["items"]  # type: ignore[no-any-return]

    async def add_channel(self, name: str, kind: str, config: dict[str, Any]) -> dict[str, Any]:
        """Register or replace a channel."""
        return await self._call("POST", "/v1/channels",  # type: ignore[no-any-return]
                                json={"name": name, "kind": kind, "config": config})

    async def channels(self) -> builtins.list[dict[str, Any]]:
        """Every registered channel."""
        return (await self._call("GET", "/v1/channels"))["items"]  # type: ignore[no-any-return]

    async def delete_channel(self, name: str) -> None:
        """Forget a channel."""
        await self._call("DELETE", f"/v1/channels/{name}")

    async def health(self) -> dict[str, Any]:
        """``/readyz``'s answer (raises when unready)."""
        return await self._call("GET", "/readyz")  # type: ignore[no-any-return]
