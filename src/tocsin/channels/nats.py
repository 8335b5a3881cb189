"""NATS channel (nats-py; JetStream publish with acknowledgements). ``pip install
'tocsin[nats]'``.

Config: ``servers`` (required: a ``nats://`` or ``tls://`` URL, or a list of them; ``tls://``
verifies the server with the system's CAs), ``subject`` (required: a subject a JetStream stream
captures), ``stream`` (optional: the stream expected to store it, ``Nats-Expected-Stream``),
``user`` and ``password``, or ``token`` (optional; write-only, shown as ``***``, like a
password inside a URL), ``timeout`` seconds (default 10: connecting and every
acknowledgement of the batch, at most the operator's ``send_timeout_max_seconds``). Every
server's host passes the destination policy's broker check (``broker_allow``,
docs/security.md) when registered and when built; the client connects to those servers only
(never to ones a server advertises), and reconnects at the next send after a loss.

The channel is asynchronous (``is_async``): its connection lives on the process's one channel
loop (:mod:`tocsin.channels.shared`), a batch's publishes are all in flight at once, and
``send`` blocks its caller until they are answered. Each message's body is
:meth:`~tocsin.domain.Envelope.to_json_bytes`; its headers are
:meth:`~tocsin.domain.Envelope.transport_headers` and ``Nats-Msg-Id``: the delivery id, so the
stream drops a repeat of one delivery within its duplicate window (2 minutes by default).

Outcomes: a publish the stream acknowledged (a repeat included) is DELIVERED; one larger than
the server takes is REJECTED; anything else (no server, no stream for the subject, a timeout,
a stream that is not the expected one) is RETRY.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tocsin.channels import client_library
from tocsin.channels.bodies import body_format, check_body, render
from tocsin.channels.limits import SendLimits, current_limits
from tocsin.channels.options import check_seconds, server_url
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.channels.shared import LoopChannel, on_close
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, Result
from tocsin.domain.terms import BodyFormat
from tocsin.errors import ValidationError

__all__ = ["NatsChannel", "NatsConfig"]

MSG_ID = "Nats-Msg-Id"
"""The header JetStream de-duplicates by."""
IN_FLIGHT = 512
"""Publishes of one channel awaiting their acknowledgement at once."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NatsConfig:
    """A NATS channel's configuration."""

    servers: str | list[str]
    """``nats://host:4222`` or ``tls://``, or a list of them."""
    subject: str
    """Where every message is published."""
    stream: str | None = None
    """The stream expected to store the messages."""
    user: str | None = None
    """User name, with ``password``."""
    password: str | None = None
    """Password (write-only)."""
    token: str | None = None
    """Authentication token (write-only)."""
    timeout: float = 10.0
    """Seconds one send may take; capped by the operator's send limits."""
    body: str = "envelope"
    """The body's format (:class:`~tocsin.domain.terms.BodyFormat`; CloudEvents binary mode
    as ``ce-*`` headers, as NATS's binding has them); a schedule's wins."""

    @property
    def urls(self) -> list[str]:
        """The servers, as a list."""
        return [self.servers] if isinstance(self.servers, str) else list(self.servers)

    def check(self) -> None:
        """Reject what cannot work."""
        if not 1 <= len(self.urls) <= 16:
            raise ValidationError("config.servers", "takes 1 to 16 server URLs")
        check_body(self.body)
        for url in self.urls:
            parts = server_url(url, ("nats", "tls"), what="a nats:// or tls:// URL",
                               field="config.servers", named=True)
            if parts.path.strip("/") or parts.query or parts.fragment:
                raise ValidationError("config.servers", f"{url!r}: a server URL takes no path "
                                                        "or options")
        if not self.subject or any(c.isspace() for c in self.subject) or \
                "*" in self.subject or ">" in self.subject:
            raise ValidationError("config.subject", "must be a subject without spaces or "
                                                    "wildcards")
        if self.token is not None and (self.user is not None or self.password is not None):
            raise ValidationError("config.token", "is given instead of user and password")
        if (self.user is None) != (self.password is None):
            raise ValidationError("config.password", "is given with user, or neither is")
        check_seconds(self.timeout, "config.timeout")

    def admit(self, policy: DestinationPolicy) -> None:
        """Refuse a server the policy's broker check refuses (stored as given otherwise)."""
        from tocsin.channels.addresses import check_broker

        for url in self.urls:
            # the host urllib reads, as nats-py does
            check_broker(urlsplit(url).hostname or "", policy, field="config.servers")


class NatsChannel(LoopChannel):
    """Publishes each envelope to JetStream; a batch's publishes in flight at once."""

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(NatsConfig, spec.config)
        self.config.admit(policy or current_policy())  # again: registered under another policy
        self.timeout_s = (limits or current_limits()).timeout(self.config.timeout)
        self._nats = client_library(ChannelKind.NATS)
        self._nc: Any = None
        self._nc_loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connection(self) -> Any:
        """The open connection on this loop, connecting when there is none."""
        loop = asyncio.get_running_loop()
        if self._nc_loop is not loop:  # a new shared loop: the old one took its connection
            self._nc, self._nc_loop, self._connecting = None, loop, asyncio.Lock()
        assert self._connecting is not None
        async with self._connecting:
            if self._nc is not None and self._nc.is_connected:
                return self._nc
            await self._drop()
            cfg = self.config
            # connect_timeout bounds each server's attempt: the servers share the deadline
            self._nc = await self._nats.connect(
                servers=cfg.urls, user=cfg.user, password=cfg.password, token=cfg.token,
                connect_timeout=max(self.timeout_s / 2 / len(cfg.urls), 0.1),
                allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.05,
                name=f"tocsin/{self.spec.name}",
                error_cb=_quiet, disconnected_cb=_quiet_event, closed_cb=_quiet_event)
            _opened(loop).add(self._nc)
            return self._nc

    async def _drop(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None and self._nc_loop is not None:
            _opened(self._nc_loop).discard(nc)
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                await asyncio.wait_for(nc.close(), 1.0)

    async def _publish(self, js: Any, env: Envelope, deadline: float,
                       slots: asyncio.Semaphore) -> Result:
        errors = self._nats.errors
        async with slots:
            fmt = body_format(env, self.config.body)
            out = render(env, fmt)
            headers = {**out.headers, MSG_ID: env.delivery_id}
            if fmt is not BodyFormat.ENVELOPE:  # the envelope's messages are as they were
                headers["Content-Type"] = out.content_type
            try:
                await js.publish(self.config.subject, out.body,
                                 timeout=max(deadline - time.monotonic(), 0.001),
                                 stream=self.config.stream, headers=headers)
            except errors.MaxPayloadError as exc:
                return Result(env.delivery_id, Outcome.REJECTED, f"nats: {exc}"[:300])
            except errors.NoRespondersError:
                return Result(env.delivery_id, Outcome.RETRY,
                              "nats: no stream captures the subject")
            except (TimeoutError, errors.TimeoutError):
                return Result(env.delivery_id, Outcome.RETRY,
                              f"nats: not acknowledged within {self.timeout_s} s")
            except Exception as exc:  # an answer for every envelope, whatever went wrong
                return Result(env.delivery_id, Outcome.RETRY,
                              f"nats: {type(exc).__name__}: {exc}"[:300])
        return Result(env.delivery_id, Outcome.DELIVERED)

    async def _send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        deadline = time.monotonic() + self.timeout_s
        try:
            nc = await asyncio.wait_for(self._connection(), self.timeout_s / 2)
        except Exception as exc:
            await self._drop()
            error = f"nats: connect: {type(exc).__name__}"
            return [Result(e.delivery_id, Outcome.RETRY, error) for e in envelopes]
        js = nc.jetstream(timeout=self.timeout_s)
        slots = asyncio.Semaphore(IN_FLIGHT)
        results = await asyncio.gather(*(self._publish(js, env, deadline, slots)
                                         for env in envelopes))
        if not nc.is_connected:
            await self._drop()
        return list(results)

    def close(self) -> None:
        """Close the connection (on the loop that holds it, while it runs)."""
        loop = self._nc_loop
        if self._nc is None or loop is None or loop.is_closed() or not loop.is_running():
            self._nc = None
            return
        try:
            asyncio.run_coroutine_threadsafe(self._drop(), loop).result(2.0)
        except Exception:  # closing anyway: the loop is going
            self._nc = None


_OPEN: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[Any]] = \
    weakref.WeakKeyDictionary()
"""The connections open on each channel loop: closed with it, so a channel dropped unclosed
leaves no task behind on a loop that stops."""


def _opened(loop: asyncio.AbstractEventLoop) -> set[Any]:
    """The connections open on ``loop`` (the first call for a loop arranges their closing)."""
    found = _OPEN.get(loop)
    if found is None:
        found = _OPEN[loop] = set()

        async def close_all() -> None:
            for nc in list(found):
                with contextlib.suppress(Exception):  # the loop is going anyway
                    await asyncio.wait_for(nc.close(), 1.0)
            found.clear()
        on_close(close_all)
    return found


async def _quiet(_exc: Exception) -> None:
    """Connection errors are answered per send, not logged by the client."""


async def _quiet_event() -> None:
    """Disconnections are noticed at the next send."""
