"""Python clients for the Tocsin API, on httpx: :class:`Client` (sync) and :class:`AsyncClient`
(async) have the same methods with the same signatures, the async ones awaited.

Both are thin: every method is built once in :mod:`tocsin.client.calls` (arguments → a request;
answer → a value or an error) and each client only sends it, one blocking, one awaiting.

Answers are typed dicts (:mod:`tocsin.client.answers`): plain JSON values, ready to print or
store. HTTP errors come back as Tocsin's own errors, from the table the API answers with
(:data:`tocsin.errors.HTTP_STATUS`)::

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
(:func:`tocsin.apikeys.keyfile.key_for`); ``api_key=""`` sends none.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from tocsin import tracing
from tocsin.client import bulk, calls
from tocsin.client.answers import (
    ApiKeyInfo,
    ChannelInfo,
    Created,
    DeliveryInfo,
    Firing,
    FiringTime,
    HaltedKey,
    PolicyInfo,
    Readiness,
    RecurringInfo,
    RecurringPage,
    Released,
    ScheduleInfo,
    TenantInfo,
)
from tocsin.client.bodies import UNSET, RecurringFields, change_body, recurring_body, schedule_body
from tocsin.client.calls import Call

__all__ = [
    "UNSET",
    "ApiKeyInfo",
    "AsyncClient",
    "ChannelInfo",
    "Client",
    "Created",
    "DeliveryInfo",
    "Firing",
    "FiringTime",
    "HaltedKey",
    "PolicyInfo",
    "Readiness",
    "RecurringFields",
    "RecurringInfo",
    "RecurringPage",
    "Released",
    "ScheduleInfo",
    "TenantInfo",
    "change_body",
    "recurring_body",
    "schedule_body",
]

DEFAULT_URL = "http://127.0.0.1:8765"

def _auth_headers(base_url: str, api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header for ``api_key`` (None: the default key for ``base_url``)."""
    if api_key is None:
        from tocsin.apikeys.keyfile import key_for

        api_key = key_for(base_url)
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


P = ParamSpec("P")
T = TypeVar("T")


def _as_method(method: Callable[..., Any], build: Callable[..., Any]) -> None:
    """Give a client method its builder's name, docstring and signature (``self`` first, the
    value rather than the :class:`Call` as the return), so help() and IDEs read it as written."""
    sig = inspect.signature(build)
    returns = str(sig.return_annotation).removeprefix("Call[").removesuffix("]")
    self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[self_, *sig.parameters.values()], return_annotation=returns)
    method.__name__ = method.__qualname__ = build.__name__
    method.__doc__ = build.__doc__


def _sync(build: Callable[P, Call[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._send(build(*args, **kwargs))

    _as_method(method, build)
    return method


def _async(build: Callable[P, Call[T]]
           ) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._send(build(*args, **kwargs))

    _as_method(method, build)
    return method


class Client:
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

    def _send(self, call: Call[T]) -> T:
        headers: dict[str, str] = {}
        tracing.inject(headers)  # the caller's trace context, when tracing is on
        r = self._http.request(call.method, call.path, params=call.params, json=call.json,
                               headers=headers)
        return call.value(r.status_code, r.content, r.json, r.text)

    def list_schedules(self, *, status: str | None = None, channel: str | None = None,
             due_from: datetime | str | None = None, due_to: datetime | str | None = None,
             key: str | None = None, page_size: int = 100,
             label: str | None = None) -> Iterator[ScheduleInfo]:
        """Every schedule matching the filters (``key``: the one created with that idempotency
        key; ``label``: a label selector), in id order, fetched a page at a time."""
        call: Call[calls.Page] | None = calls.list_page(
            status=status, channel=channel, due_from=due_from, due_to=due_to, key=key,
            page_size=page_size, label=label)
        while call is not None:
            page = self._send(call)
            yield from page["items"]
            call = calls.next_page(call, page)

    schedule = _sync(calls.schedule)
    schedule_many = _sync(calls.schedule_many)
    get = _sync(calls.get)
    cancel = _sync(calls.cancel)
    reschedule = _sync(calls.reschedule)
    cancel_where = _sync(bulk.cancel_where)
    reschedule_where = _sync(bulk.reschedule_where)
    stats = _sync(bulk.stats)
    deliveries = _sync(calls.deliveries)
    halted_keys = _sync(calls.halted_keys)
    resume_key = _sync(calls.resume_key)
    redrive = _sync(calls.redrive)
    redrive_dead = _sync(calls.redrive_dead)
    pause_channel = _sync(calls.pause_channel)
    resume_channel = _sync(calls.resume_channel)
    paused_channels = _sync(calls.paused_channels)
    status = _sync(calls.status)
    add_channel = _sync(calls.add_channel)
    test_channel = _sync(calls.test_channel)
    channels = _sync(calls.channels)
    delete_channel = _sync(calls.delete_channel)
    health = _sync(calls.health)
    add_recurring = _sync(calls.add_recurring)
    get_recurring = _sync(calls.get_recurring)
    list_recurring = _sync(calls.list_recurring)
    update_recurring = _sync(calls.update_recurring)
    pause_recurring = _sync(calls.pause_recurring)
    resume_recurring = _sync(calls.resume_recurring)
    trigger_recurring = _sync(calls.trigger_recurring)
    backfill_recurring = _sync(calls.backfill_recurring)
    delete_recurring = _sync(calls.delete_recurring)
    next_firings = _sync(calls.next_firings)
    firings = _sync(calls.firings)
    add_policy = _sync(calls.add_policy)
    policies = _sync(calls.policies)
    get_policy = _sync(calls.get_policy)
    delete_policy = _sync(calls.delete_policy)
    set_tenant = _sync(calls.set_tenant)
    get_tenant = _sync(calls.get_tenant)
    release = _sync(calls.release)
    create_key = _sync(calls.create_key)
    keys = _sync(calls.keys)
    audit = _sync(calls.audit)
    revoke_key = _sync(calls.revoke_key)


class AsyncClient:
    """The asynchronous twin of :class:`Client`: the same methods, awaited."""

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

    async def _send(self, call: Call[T]) -> T:
        headers: dict[str, str] = {}
        tracing.inject(headers)  # the caller's trace context, when tracing is on
        r = await self._http.request(call.method, call.path, params=call.params,
                                     json=call.json, headers=headers)
        return call.value(r.status_code, r.content, r.json, r.text)

    async def list_schedules(self, *, status: str | None = None, channel: str | None = None,
                   due_from: datetime | str | None = None, due_to: datetime | str | None = None,
                   key: str | None = None,
                   page_size: int = 100,
                   label: str | None = None) -> AsyncIterator[ScheduleInfo]:
        """Every schedule matching the filters (``key``: the one created with that idempotency
        key; ``label``: a label selector), in id order, fetched a page at a time."""
        call: Call[calls.Page] | None = calls.list_page(
            status=status, channel=channel, due_from=due_from, due_to=due_to, key=key,
            page_size=page_size, label=label)
        while call is not None:
            page = await self._send(call)
            for item in page["items"]:
                yield item
            call = calls.next_page(call, page)

    schedule = _async(calls.schedule)
    schedule_many = _async(calls.schedule_many)
    get = _async(calls.get)
    cancel = _async(calls.cancel)
    reschedule = _async(calls.reschedule)
    cancel_where = _async(bulk.cancel_where)
    reschedule_where = _async(bulk.reschedule_where)
    stats = _async(bulk.stats)
    deliveries = _async(calls.deliveries)
    halted_keys = _async(calls.halted_keys)
    resume_key = _async(calls.resume_key)
    redrive = _async(calls.redrive)
    redrive_dead = _async(calls.redrive_dead)
    pause_channel = _async(calls.pause_channel)
    resume_channel = _async(calls.resume_channel)
    paused_channels = _async(calls.paused_channels)
    status = _async(calls.status)
    add_channel = _async(calls.add_channel)
    test_channel = _async(calls.test_channel)
    channels = _async(calls.channels)
    delete_channel = _async(calls.delete_channel)
    health = _async(calls.health)
    add_recurring = _async(calls.add_recurring)
    get_recurring = _async(calls.get_recurring)
    list_recurring = _async(calls.list_recurring)
    update_recurring = _async(calls.update_recurring)
    pause_recurring = _async(calls.pause_recurring)
    resume_recurring = _async(calls.resume_recurring)
    trigger_recurring = _async(calls.trigger_recurring)
    backfill_recurring = _async(calls.backfill_recurring)
    delete_recurring = _async(calls.delete_recurring)
    next_firings = _async(calls.next_firings)
    firings = _async(calls.firings)
    add_policy = _async(calls.add_policy)
    policies = _async(calls.policies)
    get_policy = _async(calls.get_policy)
    delete_policy = _async(calls.delete_policy)
    set_tenant = _async(calls.set_tenant)
    get_tenant = _async(calls.get_tenant)
    release = _async(calls.release)
    create_key = _async(calls.create_key)
    keys = _async(calls.keys)
    audit = _async(calls.audit)
    revoke_key = _async(calls.revoke_key)
