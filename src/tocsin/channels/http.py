"""The webhook channel's HTTP machinery, one of each per process: an aiohttp session on the
process's channel loop (:func:`tocsin.channels.shared.shared_loop`), whose one connection pool
keeps connections alive between batches and across channels (at most ``webhook_connections_max``
in all; each channel holds at most its own ``concurrency`` of them, by a semaphore of its own,
so two tenants' channels to one origin never share one cap), and a resolver that checks every
address a name resolves to against the destination policy before aiohttp connects to it.

There is one session per :class:`~tocsin.channels.policy.DestinationPolicy` (one in a
dispatcher process, whose policy comes from its settings): a connection, and a name's cached
addresses, are only ever re-used under the policy that admitted them. Idle connections close
after :data:`KEEPALIVE_S`, so a destination gone idle leaves nothing open. Each request carries
its own channel's deadline.

aiohttp was kept after bench/webhook_clients.py (docs/benchmarks.md): on the same nginx
receiver it spent 0.14 ms of CPU per request, 12x less than the threaded httpx client the
channel used before and 28x less than httpx's async client.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import threading
from http import HTTPStatus

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from tocsin.channels.addresses import RefusedAddress, check_address
from tocsin.channels.policy import DestinationPolicy

__all__ = ["KEEPALIVE_S", "PolicyResolver", "request_timeout", "shared_session", "status_line",
           "transport_error"]

KEEPALIVE_S = 30.0
"""An idle kept-alive connection is closed after this long."""
DNS_CACHE_S = 10
"""A name's checked addresses are re-used this long (each look-up is checked again)."""


class PolicyResolver(AbstractResolver):
    """The system resolver, refusing a name when any of its addresses is refused (raising
    :class:`~tocsin.channels.addresses.RefusedAddress`, which aiohttp wraps in
    ``ClientConnectorError.os_error``). aiohttp connects to the addresses returned here, so
    a name that answers differently a second time gets no second look-up."""

    def __init__(self, policy: DestinationPolicy) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self._policy = policy

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        infos = await self._inner.resolve(host, port, family)
        for info in infos:
            check_address(ipaddress.ip_address(info["host"].split("%", 1)[0]), host,
                          self._policy)
        return infos

    async def close(self) -> None:
        await self._inner.close()


_sessions: dict[DestinationPolicy, aiohttp.ClientSession] = {}
"""The process's sessions, by policy; used and changed on the channel loop only."""
_registered = threading.Event()
"""Whether closing the loop closes the sessions (registered at the first session)."""


def shared_session(policy: DestinationPolicy) -> aiohttp.ClientSession:
    """The process's session under ``policy`` (called on the channel loop): no cookies, no
    proxy from the environment, no automatic decompression, redirects left to the caller."""
    session = _sessions.get(policy)
    if session is not None and not session.closed:
        return session
    from tocsin.channels.shared import on_close
    from tocsin.config import Settings

    if not _registered.is_set():
        _registered.set()
        on_close(_close_sessions)
    connector = aiohttp.TCPConnector(limit=Settings().webhook_connections_max,
                                     limit_per_host=0, resolver=PolicyResolver(policy),
                                     ttl_dns_cache=DNS_CACHE_S, keepalive_timeout=KEEPALIVE_S)
    session = aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
        auto_decompress=False, headers={"User-Agent": "tocsin"},
        timeout=aiohttp.ClientTimeout(total=None))
    _sessions[policy] = session
    return session


def _forget() -> None:
    """In a forked child: the parent's sessions live on the parent's loop."""
    _sessions.clear()
    _registered.clear()


os.register_at_fork(after_in_child=_forget)


async def _close_sessions() -> None:
    sessions = list(_sessions.values())
    _sessions.clear()
    _registered.clear()
    for session in sessions:
        await session.close()


def request_timeout(timeout_s: float) -> aiohttp.ClientTimeout:
    """A request's deadline: it ends within ``timeout_s`` from its start (waiting for a
    connection included), whatever the destination does (a per-read timeout alone let an
    endpoint that sends a byte now and then hold a request for ever)."""
    return aiohttp.ClientTimeout(total=timeout_s, sock_connect=timeout_s, sock_read=timeout_s)


def status_line(status: int) -> str:
    """``HTTP 500 Internal Server Error``: the standard phrase, never the receiver's."""
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def transport_error(exc: BaseException) -> str:
    """A failed request as its kind, never a text the receiver chose."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, RefusedAddress):
            return str(exc.os_error)
        return f"connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    return f"transport: {type(exc).__name__}"
