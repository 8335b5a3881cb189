"""Python clients for the Tocsin API, on httpx: :class:`Client` (sync) and :class:`AsyncClient`
(async) have the same methods, the async ones awaited.

Answers are typed dicts (:class:`Created`, :class:`ScheduleInfo`, :class:`DeliveryInfo`,
:class:`ChannelInfo`, :class:`Readiness`): plain JSON values, ready to print or store. HTTP
errors come back as Tocsin's own errors::

    422 → ValidationError (``field``, ``reason``, ``errors``: every bad item of a batch)
    404 → NotFoundError
    409 → ConflictError (``status``: the schedule's current status, e.g. CLAIMED)
    503 → StoreError
    401 → AuthenticationError, 403 → ForbiddenError (``field``, ``reason``)
    429 → QuotaExceededError (``retry_after_s``)
    any other error status → TocsinError

Connection failures are httpx's own (:class:`httpx.TransportError`). Naive datetimes are
refused here, before anything is sent.

Both send ``Authorization: Bearer <api_key>``; without ``api_key`` they send
``TOCSIN_API_KEY``, or the local admin key when the API is on this machine
(:func:`tocsin.keyfile.key_for`); ``api_key=""`` sends none.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict, cast
from urllib.parse import quote

import httpx

from tocsin.errors import (
    AuthenticationError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    QuotaExceededError,
    StoreError,
    TocsinError,
    ValidationError,
)

__all__ = [
    "AsyncClient",
    "ChannelInfo",
    "Client",
    "Created",
    "DeliveryInfo",
    "Readiness",
    "ScheduleInfo",
    "change_body",
    "recurring_body",
    "schedule_body",
]

DEFAULT_URL = "http://127.0.0.1:8765"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Marks ``payload`` as not given (``None`` is a JSON payload: ``null``)."""


class Created(TypedDict):
    """The answer for one schedule created (or found again by its key)."""

    id: str
    status: str
    due_at: str
    """RFC 3339, UTC, with ``Z``."""
    bucket: int
    created: bool
    """False when ``key`` matched an existing schedule with the same request."""


class ScheduleInfo(TypedDict):
    """A schedule as the API reports it. Exactly one of ``payload``, ``payload_text`` and
    ``payload_base64`` is present: the form it was given in."""

    id: str
    tenant: str
    channel: str
    status: str
    due_at: str
    created_at: str
    attempts: int
    last_error: str | None
    next_attempt_at: str | None
    delivered_at: str | None
    lateness_ms: int | None
    headers: dict[str, str]
    key: str | None
    ordering_key: str | None
    bucket: int
    payload: NotRequired[Any]
    payload_text: NotRequired[str]
    payload_base64: NotRequired[str]


class DeliveryInfo(TypedDict):
    """One delivery attempt."""

    delivery_id: str
    attempt: int
    epoch: int
    started_at: str
    ended_at: str
    outcome: str
    """delivered, retry or rejected."""
    error: str | None
    lateness_ms: int


class ChannelInfo(TypedDict):
    """A registered channel."""

    name: str
    kind: str
    config: dict[str, Any]


class Readiness(TypedDict):
    """``/readyz``: ``status`` is ``ready`` or ``unready``, with the ``problems``."""

    status: str
    problems: list[str]


def _instant(value: datetime | str, field: str) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(field, "naive datetime: give it a time zone (e.g. tzinfo=UTC)")
        return value.isoformat()
    return value


def _timing(due_at: datetime | str | None,
            delay: float | timedelta | str | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if due_at is not None:
        body["due_at"] = _instant(due_at, "due_at")
    if isinstance(delay, timedelta):
        body["delay"] = delay.total_seconds()
    elif delay is not None:
        body["delay"] = delay
    return body


def schedule_body(channel: str, payload: Any = UNSET, *, payload_text: str | None = None,
                  payload_base64: str | None = None, due_at: datetime | str | None = None,
                  delay: float | timedelta | str | None = None,
                  headers: Mapping[str, str] | None = None, key: str | None = None,
                  tenant: str | None = None, ordering_key: str | None = None,
                  uniqueness_key: str | None = None,
                  key_mode: Literal["idempotent", "task"] | None = None,
                  policy: str | None = None) -> dict[str, Any]:
    """The JSON body of one schedule (only what is given; the server checks the rules)."""
    body: dict[str, Any] = {"channel": channel}
    if payload is not UNSET:
        body["payload"] = payload
    if payload_text is not None:
        body["payload_text"] = payload_text
    if payload_base64 is not None:
        body["payload_base64"] = payload_base64
    body.update(_timing(due_at, delay))
    if headers:
        body["headers"] = dict(headers)
    for name, value in (("key", key), ("tenant", tenant), ("ordering_key", ordering_key),
                        ("uniqueness_key", uniqueness_key), ("key_mode", key_mode),
                        ("policy", policy)):
        if value is not None:
            body[name] = value
    return body


def change_body(*, due_at: datetime | str | None = None,
                delay: float | timedelta | str | None = None, payload: Any = UNSET,
                payload_text: str | None = None, payload_base64: str | None = None,
                headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON body of a reschedule (only what changes)."""
    body = _timing(due_at, delay)
    if payload is not UNSET:
        body["payload"] = payload
    for name, value in (("payload_text", payload_text), ("payload_base64", payload_base64),
                        ("headers", None if headers is None else dict(headers))):
        if value is not None:
            body[name] = value
    return body


class _Call(NamedTuple):
    """One request, built once for both clients; ``pick`` is the answer's key to return."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    pick: str | None = None


def _auth_headers(base_url: str, api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header for ``api_key`` (None: the default key for ``base_url``)."""
    if api_key is None:
        from tocsin.keyfile import key_for

        api_key = key_for(base_url)
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _path(prefix: str, *parts: str) -> str:
    return "/".join([prefix, *(quote(p, safe="") for p in parts)])


def _list_params(status: str | None, channel: str | None, due_from: datetime | str | None,
                 due_to: datetime | str | None, page_size: int) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": page_size}
    for name, value in (("status", status), ("channel", channel)):
        if value is not None:
            params[name] = value
    for name, instant in (("due_from", due_from), ("due_to", due_to)):
        if instant is not None:
            params[name] = _instant(instant, name)
    return params


def _batch(items: Iterable[Mapping[str, Any]]) -> _Call:
    return _Call("POST", "/v1/schedules", json={"schedules": [
        schedule_body(**item) for item in items]}, pick="schedules")


def _answer(response: httpx.Response, pick: str | None) -> Any:
    if response.status_code >= 400:
        raise _error(response)
    if not response.content:
        return None
    data = response.json()
    return data[pick] if pick else data


def _readiness(response: httpx.Response) -> Readiness:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 503 and isinstance(body, dict) and "problems" in body:
        return cast(Readiness, body)
    return cast(Readiness, _answer(response, None))


def _error(response: httpx.Response) -> TocsinError:
    """The Tocsin error an HTTP error answer stands for."""
    code = response.status_code
    try:
        error = response.json()["error"]
        message = str(error["message"])
    except (ValueError, KeyError, TypeError):
        return TocsinError(f"HTTP {code}: {response.text[:500]}")
    if code == 422:
        return ValidationError(error.get("field", "body"), error.get("reason", message),
                               errors=error.get("errors"))
    if code == 404:
        return NotFoundError(error.get("kind", "path"), error.get("id", response.request.url.path))
    if code == 409:
        return ConflictError(message, status=error.get("status"), ident=error.get("id"))
    if code == 503:
        return StoreError(message)
    if code == 401:
        return AuthenticationError(message)
    if code == 403:
        return ForbiddenError(error.get("field", "key"), error.get("reason", message))
    if code == 429:
        retry = response.headers.get("retry-after", "1")
        return QuotaExceededError(message, retry_after_s=int(retry) if retry.isdigit() else 1)
    return TocsinError(f"HTTP {code}: {message}")


def recurring_body(*, cron: str | None = None, channel: str | None = None,
                   payload: Any = UNSET, payload_text: str | None = None,
                   payload_base64: str | None = None, timezone: str | None = None,
                   count: int | None = None, stagger: float | timedelta | str | None = None,
                   start: datetime | str | None = None, end: datetime | str | None = None,
                   misfire: Literal["fire_once", "fire_all", "skip"] | None = None,
                   misfire_grace: float | timedelta | str | None = None,
                   policy: str | None = None, headers: Mapping[str, str] | None = None,
                   tenant: str | None = None, paused: bool | None = None) -> dict[str, Any]:
    """The JSON body of a recurring schedule, or of a change to one (only what is given)."""
    body: dict[str, Any] = {}
    if payload is not UNSET:
        body["payload"] = payload
    for name, value in (("cron", cron), ("channel", channel), ("payload_text", payload_text),
                        ("payload_base64", payload_base64), ("timezone", timezone),
                        ("count", count), ("misfire", misfire), ("policy", policy),
                        ("tenant", tenant), ("paused", paused),
                        ("headers", None if headers is None else dict(headers))):
        if value is not None:
            body[name] = value
    for name, span in (("stagger", stagger), ("misfire_grace", misfire_grace)):
        if span is not None:
            body[name] = span.total_seconds() if isinstance(span, timedelta) else span
    for name, instant in (("start", start), ("end", end)):
        if instant is not None:
            body[name] = _instant(instant, name)
    return body


class _RecurringAndPolicies:
    """Recurring schedules, policies and token release, for both clients: each method builds
    its request once; :class:`Client` answers it, :class:`AsyncClient` returns an awaitable.
    Answers are the API's JSON (see ``/docs``)."""

    def _do(self, call: _Call) -> Any:
        raise NotImplementedError

    def add_recurring(self, cron: str, channel: str, payload: Any = UNSET, **fields: Any) -> Any:
        """Create a recurring schedule: ``cron`` (5 fields, or 6 with seconds) read in
        ``timezone`` (IANA, default UTC); :func:`recurring_body`'s other fields."""
        body = recurring_body(cron=cron, channel=channel, payload=payload, **fields)
        return self._do(_Call("POST", "/v1/recurring", json=body))

    def get_recurring(self, recurring_id: str) -> Any:
        """One recurring schedule, with its state and next firing."""
        return self._do(_Call("GET", _path("/v1/recurring", recurring_id)))

    def list_recurring(self, *, tenant: str | None = None, cursor: str | None = None,
                       limit: int = 100) -> Any:
        """One page: ``{"items": [...], "next_cursor": ...}``."""
        params: dict[str, Any] = {"limit": limit}
        params.update({k: v for k, v in (("tenant", tenant), ("cursor", cursor)) if v})
        return self._do(_Call("GET", "/v1/recurring", params=params))

    def update_recurring(self, recurring_id: str, **changes: Any) -> Any:
        """Change any of :func:`recurring_body`'s fields; firings still ahead follow it."""
        return self._do(_Call("PATCH", _path("/v1/recurring", recurring_id),
                              json=recurring_body(**changes)))

    def pause_recurring(self, recurring_id: str) -> Any:
        """Pause: firings are skipped (and recorded so) until resumed."""
        return self._do(_Call("POST", _path("/v1/recurring", recurring_id, "pause")))

    def resume_recurring(self, recurring_id: str) -> Any:
        """Resume from now on."""
        return self._do(_Call("POST", _path("/v1/recurring", recurring_id, "resume")))

    def delete_recurring(self, recurring_id: str) -> Any:
        """Delete; its firings still ahead are cancelled."""
        return self._do(_Call("DELETE", _path("/v1/recurring", recurring_id)))

    def next_firings(self, recurring_id: str, n: int = 10) -> Any:
        """The next ``n`` firings, each ``{"local": ..., "utc": ...}``."""
        return self._do(_Call("GET", _path("/v1/recurring", recurring_id, "next"),
                              params={"n": n}, pick="items"))

    def firings(self, recurring_id: str, *, after: datetime | str | None = None,
                limit: int = 100) -> Any:
        """The firings so far: expanded (messages by status) or skipped, with the reason."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = _instant(after, "after")
        return self._do(_Call("GET", _path("/v1/recurring", recurring_id, "firings"),
                              params=params, pick="items"))

    def add_policy(self, name: str, max_in_flight: int, *, rate: float | None = None,
                   token_lease: float | timedelta | str | None = None) -> Any:
        """Register or change a throttling policy."""
        body: dict[str, Any] = {"name": name, "max_in_flight": max_in_flight}
        if rate is not None:
            body["rate"] = rate
        if token_lease is not None:
            body["token_lease"] = (token_lease.total_seconds()
                                   if isinstance(token_lease, timedelta) else token_lease)
        return self._do(_Call("POST", "/v1/policies", json=body))

    def policies(self) -> Any:
        """Every policy, with the tokens held now (``in_flight``)."""
        return self._do(_Call("GET", "/v1/policies", pick="items"))

    def get_policy(self, name: str) -> Any:
        """One policy, with the tokens held now."""
        return self._do(_Call("GET", _path("/v1/policies", name)))

    def delete_policy(self, name: str) -> Any:
        """Forget a policy (:class:`ConflictError` while schedules wait on it)."""
        return self._do(_Call("DELETE", _path("/v1/policies", name)))

    def set_tenant(self, name: str, *, durability: Literal["strict", "relaxed"]) -> Any:
        """Configure a tenant: ``durability`` of its creates (strict is the default)."""
        return self._do(_Call("PUT", _path("/v1/tenants", name),
                              json={"durability": durability}))

    def get_tenant(self, name: str) -> Any:
        """A tenant's settings (the defaults, ``configured: false``, if never set)."""
        return self._do(_Call("GET", _path("/v1/tenants", name)))

    def release(self, delivery_id: str) -> Any:
        """Hand back the policy token of a delivery (its ``Tocsin-Delivery-Id``);
        :class:`NotFoundError` when it holds none."""
        return self._do(_Call("POST", _path("/v1/deliveries", delivery_id, "release")))

    def create_key(self, role: Literal["admin", "tenant"], *, tenant: str | None = None,
                   read_only: bool = False, name: str | None = None) -> Any:
        """Create an API key (admin keys only); the answer's ``token`` is shown this once."""
        body = {"role": role, "tenant": tenant, "read_only": read_only, "name": name}
        return self._do(_Call("POST", "/v1/apikeys", json=body))

    def keys(self, *, tenant: str | None = None) -> Any:
        """Every API key (never a token), or one tenant's."""
        return self._do(_Call("GET", "/v1/apikeys", params={"tenant": tenant} if tenant else None,
                              pick="items"))

    def revoke_key(self, key_id: str) -> Any:
        """Revoke an API key: it answers 401 from now on."""
        return self._do(_Call("DELETE", _path("/v1/apikeys", key_id)))


class Client(_RecurringAndPolicies):
    """A synchronous client. Use it as a context manager, or call :meth:`close`."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None,
                 timeout: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport,
                                  headers=_auth_headers(base_url, api_key))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _do(self, call: _Call) -> Any:
        response = self._http.request(call.method, call.path, params=call.params, json=call.json)
        return _answer(response, call.pick)

    def schedule(self, channel: str, payload: Any = UNSET, *, payload_text: str | None = None,
                 payload_base64: str | None = None, due_at: datetime | str | None = None,
                 delay: float | timedelta | str | None = None,
                 headers: Mapping[str, str] | None = None, key: str | None = None,
                 tenant: str | None = None, ordering_key: str | None = None,
                 uniqueness_key: str | None = None,
                 key_mode: Literal["idempotent", "task"] | None = None,
                 policy: str | None = None) -> Created:
        """Schedule one message: one of ``payload`` (any JSON value), ``payload_text`` or
        ``payload_base64``; one of ``due_at`` (aware datetime or RFC 3339) or ``delay``
        (seconds, timedelta or ISO 8601 like ``PT5M``)."""
        body = schedule_body(channel, payload, payload_text=payload_text,
                             payload_base64=payload_base64, due_at=due_at, delay=delay,
                             headers=headers, key=key, tenant=tenant, ordering_key=ordering_key,
                             uniqueness_key=uniqueness_key, key_mode=key_mode, policy=policy)
        return cast(Created, self._do(_Call("POST", "/v1/schedules", json=body)))

    def schedule_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Created]:
        """Schedule a batch, all or nothing; each item has :meth:`schedule`'s arguments as
        keys (``{"channel": ..., "payload": ..., "delay": ...}``)."""
        return cast(builtins.list[Created], self._do(_batch(items)))

    def get(self, schedule_id: str) -> ScheduleInfo:
        """One schedule."""
        return cast(ScheduleInfo, self._do(_Call("GET", _path("/v1/schedules", schedule_id))))

    def list(self, *, status: str | None = None, channel: str | None = None,
             due_from: datetime | str | None = None, due_to: datetime | str | None = None,
             page_size: int = 100) -> Iterator[ScheduleInfo]:
        """Every schedule matching the filters, in id order, fetched a page at a time."""
        params = _list_params(status, channel, due_from, due_to, page_size)
        while True:
            page = self._do(_Call("GET", "/v1/schedules", params=params))
            yield from page["items"]
            if not page["next_cursor"]:
                return
            params = {**params, "cursor": page["next_cursor"]}

    def cancel(self, schedule_id: str) -> ScheduleInfo:
        """Cancel: the answer's status is CANCELLED (it will never be delivered), or
        :class:`ConflictError` with the ``status`` when it is too late."""
        return cast(ScheduleInfo, self._do(_Call("DELETE", _path("/v1/schedules", schedule_id))))

    def reschedule(self, schedule_id: str, **changes: Any) -> ScheduleInfo:
        """Change a PENDING schedule (:func:`change_body`'s arguments);
        :class:`ConflictError` with the ``status`` when it is too late."""
        return cast(ScheduleInfo, self._do(_Call("PATCH", _path("/v1/schedules", schedule_id),
                                                 json=change_body(**changes))))

    def deliveries(self, schedule_id: str) -> builtins.list[DeliveryInfo]:
        """The attempt log of one schedule, oldest first."""
        return cast(builtins.list[DeliveryInfo], self._do(_Call(
            "GET", _path("/v1/schedules", schedule_id, "deliveries"), pick="items")))

    def halted_keys(self, tenant: str | None = None) -> builtins.list[dict[str, Any]]:
        """The ordering keys halted by a dead schedule."""
        params = {"halted": "true", **({"tenant": tenant} if tenant else {})}
        return cast(builtins.list[dict[str, Any]],
                    self._do(_Call("GET", "/v1/ordering-keys", params=params, pick="items")))

    def resume_key(self, ordering_key: str, tenant: str = "default") -> dict[str, Any]:
        """Resume a halted ordering key."""
        return cast(dict[str, Any], self._do(_Call(
            "POST", _path("/v1/ordering-keys", ordering_key, "resume"),
            params={"tenant": tenant})))

    def add_channel(self, name: str, kind: str, config: Mapping[str, Any]) -> ChannelInfo:
        """Register or replace a channel (the server checks ``config`` for its ``kind``)."""
        body = {"name": name, "kind": kind, "config": dict(config)}
        return cast(ChannelInfo, self._do(_Call("POST", "/v1/channels", json=body)))

    def channels(self) -> builtins.list[ChannelInfo]:
        """Every registered channel."""
        return cast(builtins.list[ChannelInfo],
                    self._do(_Call("GET", "/v1/channels", pick="items")))

    def delete_channel(self, name: str) -> None:
        """Forget a channel."""
        self._do(_Call("DELETE", _path("/v1/channels", name)))

    def health(self) -> Readiness:
        """``/readyz``: ready, or unready with the problems (an answer, not an error)."""
        return _readiness(self._http.get("/readyz"))


class AsyncClient(_RecurringAndPolicies):
    """The asynchronous twin of :class:`Client`."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None,
                 timeout: float = 30.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport,
                                       headers=_auth_headers(base_url, api_key))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _do(self, call: _Call) -> Any:
        response = await self._http.request(call.method, call.path, params=call.params,
                                            json=call.json)
        return _answer(response, call.pick)

    async def schedule(self, channel: str, payload: Any = UNSET, *,
                       payload_text: str | None = None, payload_base64: str | None = None,
                       due_at: datetime | str | None = None,
                       delay: float | timedelta | str | None = None,
                       headers: Mapping[str, str] | None = None, key: str | None = None,
                       tenant: str | None = None, ordering_key: str | None = None,
                       uniqueness_key: str | None = None,
                       key_mode: Literal["idempotent", "task"] | None = None,
                       policy: str | None = None) -> Created:
        """Schedule one message (see :meth:`Client.schedule`)."""
        body = schedule_body(channel, payload, payload_text=payload_text,
                             payload_base64=payload_base64, due_at=due_at, delay=delay,
                             headers=headers, key=key, tenant=tenant, ordering_key=ordering_key,
                             uniqueness_key=uniqueness_key, key_mode=key_mode, policy=policy)
        return cast(Created, await self._do(_Call("POST", "/v1/schedules", json=body)))

    async def schedule_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Created]:
        """Schedule a batch, all or nothing (see :meth:`Client.schedule_many`)."""
        return cast(builtins.list[Created], await self._do(_batch(items)))

    async def get(self, schedule_id: str) -> ScheduleInfo:
        """One schedule."""
        return cast(ScheduleInfo,
                    await self._do(_Call("GET", _path("/v1/schedules", schedule_id))))

    async def list(self, *, status: str | None = None, channel: str | None = None,
                   due_from: datetime | str | None = None, due_to: datetime | str | None = None,
                   page_size: int = 100) -> AsyncIterator[ScheduleInfo]:
        """Every schedule matching the filters, in id order, fetched a page at a time."""
        params = _list_params(status, channel, due_from, due_to, page_size)
        while True:
            page = await self._do(_Call("GET", "/v1/schedules", params=params))
            for item in page["items"]:
                yield item
            if not page["next_cursor"]:
                return
            params = {**params, "cursor": page["next_cursor"]}

    async def cancel(self, schedule_id: str) -> ScheduleInfo:
        """Cancel (see :meth:`Client.cancel`)."""
        return cast(ScheduleInfo,
                    await self._do(_Call("DELETE", _path("/v1/schedules", schedule_id))))

    async def reschedule(self, schedule_id: str, **changes: Any) -> ScheduleInfo:
        """Change a PENDING schedule (see :meth:`Client.reschedule`)."""
        return cast(ScheduleInfo, await self._do(_Call(
            "PATCH", _path("/v1/schedules", schedule_id), json=change_body(**changes))))

    async def deliveries(self, schedule_id: str) -> builtins.list[DeliveryInfo]:
        """The attempt log of one schedule, oldest first."""
        return cast(builtins.list[DeliveryInfo], await self._do(_Call(
            "GET", _path("/v1/schedules", schedule_id, "deliveries"), pick="items")))

    async def halted_keys(self, tenant: str | None = None) -> builtins.list[dict[str, Any]]:
        """The ordering keys halted by a dead schedule."""
        params = {"halted": "true", **({"tenant": tenant} if tenant else {})}
        return cast(builtins.list[dict[str, Any]], await self._do(
            _Call("GET", "/v1/ordering-keys", params=params, pick="items")))

    async def resume_key(self, ordering_key: str, tenant: str = "default") -> dict[str, Any]:
        """Resume a halted ordering key."""
        return cast(dict[str, Any], await self._do(_Call(
            "POST", _path("/v1/ordering-keys", ordering_key, "resume"),
            params={"tenant": tenant})))

    async def add_channel(self, name: str, kind: str, config: Mapping[str, Any]) -> ChannelInfo:
        """Register or replace a channel."""
        body = {"name": name, "kind": kind, "config": dict(config)}
        return cast(ChannelInfo, await self._do(_Call("POST", "/v1/channels", json=body)))

    async def channels(self) -> builtins.list[ChannelInfo]:
        """Every registered channel."""
        return cast(builtins.list[ChannelInfo],
                    await self._do(_Call("GET", "/v1/channels", pick="items")))

    async def delete_channel(self, name: str) -> None:
        """Forget a channel."""
        await self._do(_Call("DELETE", _path("/v1/channels", name)))

    async def health(self) -> Readiness:
        """``/readyz``: ready, or unready with the problems (an answer, not an error)."""
        return _readiness(await self._http.get("/readyz"))
