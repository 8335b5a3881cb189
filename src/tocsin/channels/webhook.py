"""Webhook channel: an HTTP POST of the JSON envelope per delivery, many in flight at once.

Config: ``url`` (required, http or https), ``secret`` (optional: one Standard Webhooks secret,
``whsec_<base64>``, or a list of them while rotating), ``timeout`` seconds (default 10: the
whole request, from connecting to the last byte of the answer, at most the operator's
``send_timeout_max_seconds``), ``headers`` (extra request headers), ``concurrency`` (requests in
flight to this destination, default 64, on as many kept-alive HTTP/1.1 connections). Redirects
are not followed.

Every webhook channel of a process sends on the process's one channel loop and one connection
pool (:mod:`tocsin.channels.http`): a channel is a little data (its config, a semaphore of
``concurrency``, a ``Retry-After`` pause), no thread and no socket of its own, so a process
sending to a thousand destinations runs no more threads than one sending to one, and closing a
channel leaves nothing behind. :meth:`WebhookChannel.send_async` awaits a batch on that loop;
``send`` blocks the caller until it is done.

The body is written in the schedule's or the channel's ``body`` format
(:mod:`tocsin.channels.bodies`: the JSON envelope by default), sent with the schedule's or the
channel's ``method`` (POST by default) to the channel's ``url`` with the schedule's ``path``
appended (:func:`joined_url`: the origin stays the channel's).
Each request carries ``Tocsin-Schedule-Id``, ``Tocsin-Delivery-Id``, ``Tocsin-Attempt``,
``Tocsin-Due-At`` and the schedule's own headers (over the channel's ``headers``; values go out
as UTF-8), and the Standard Webhooks headers: ``webhook-id`` (the delivery id: the same on a
repeat), ``webhook-timestamp`` (Unix seconds of this attempt) and, with a secret,
``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, one per
secret, space-separated. A receiver verifies with any Standard Webhooks library, refuses old
timestamps and drops repeats by ``webhook-id``.

Outcomes: 2xx is DELIVERED; 408, 429, 5xx, timeouts and connection failures are RETRY (a
``Retry-After`` on 429 or 503 becomes that delivery's retry time, and pauses this channel's
requests until then); any other status, a request that cannot be formed and a destination the
:class:`~tocsin.channels.policy.DestinationPolicy` refuses are REJECTED. Errors hold the status
line only (``HTTP 500 Internal Server Error``), never the receiver's body or reason phrase.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from tocsin.channels.addresses import (
    RefusedAddress,
    check_address,
    check_host,
    client_host,
    literal_address,
)
from tocsin.channels.bodies import body_format, check_body, render
from tocsin.channels.http import request_timeout, shared_session, status_line, transport_error
from tocsin.channels.limits import SendLimits, current_limits
from tocsin.channels.options import check_seconds, server_url
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.channels.shared import LoopChannel
from tocsin.channels.signing import bad_header, retry_after_ms, secret_error, signature_headers
from tocsin.clock import Clock, SystemClock
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.domain.headers import EXPANDER_HEADERS, stored_headers
from tocsin.domain.terms import WebhookMethod
from tocsin.errors import ValidationError

__all__ = ["WebhookChannel", "WebhookConfig", "joined_url", "outcome_of"]

RETRIED_STATUSES = frozenset({408, 429})
"""Statuses below 500 that are retried."""
PAUSING_STATUSES = frozenset({429, 503})
"""Statuses whose ``Retry-After`` is honoured."""
_DRAIN = 64 * 1024
"""Bytes of a response body read (and dropped) so its connection can be re-used."""


def joined_url(base: str, path: str) -> str | None:
    """``base`` with a schedule's ``path`` (a path and query: ``/orders/42?x=1`` or ``?x=1``)
    appended: its path after the base's, its query after the base's. None when the result
    would not keep the base's scheme and host (so the destination policy that admitted the
    base holds)."""
    from urllib.parse import urlsplit, urlunsplit

    if not path.startswith(("/", "?")) or path.startswith("//"):
        return None
    b, p = urlsplit(base), urlsplit(path)
    if p.scheme or p.netloc or p.fragment:
        return None
    joined = urlunsplit((b.scheme, b.netloc, b.path.rstrip("/") + p.path if p.path else b.path,
                         "&".join(q for q in (b.query, p.query) if q), ""))
    back = urlsplit(joined)
    return joined if (back.scheme, back.netloc) == (b.scheme, b.netloc) else None


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookConfig:
    """A webhook channel's configuration."""

    url: str
    """Where to POST."""
    secret: str | list[str] | None = None
    """Standard Webhooks secret(s); with two, both signatures are sent (rotation)."""
    timeout: float = 10.0
    """Seconds the whole request may take (connect, send, the whole answer); capped by the
    operator's :class:`~tocsin.channels.limits.SendLimits`."""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request; a schedule's own headers win."""
    concurrency: int = 64
    """Requests in flight to this destination at once."""
    method: str = "POST"
    """The HTTP method (POST, PUT, PATCH, DELETE); a schedule's ``method`` wins."""
    body: str = "envelope"
    """The body's format (:class:`~tocsin.domain.terms.BodyFormat`); a schedule's wins."""

    @property
    def secrets(self) -> list[str]:
        """The secrets, as a list."""
        return [self.secret] if isinstance(self.secret, str) else list(self.secret or [])

    def check(self) -> None:
        """Reject what cannot work."""
        server_url(self.url, ("http", "https"), what="an http(s) URL")
        if any(ord(c) <= 32 or ord(c) == 127 for c in self.url):
            raise ValidationError("config.url", "holds a space or a control character")
        if isinstance(self.secret, list) and not 1 <= len(self.secret) <= 2:
            raise ValidationError("config.secret", "takes one secret, or two while rotating")
        for secret in self.secrets:
            if (why := secret_error(secret)) is not None:
                raise ValidationError("config.secret", why)
        for name, value in self.headers.items():
            if (why := bad_header(name, value)) is not None:
                raise ValidationError(f"config.headers.{name}", why)
        if not 1 <= self.concurrency <= 1024:
            raise ValidationError("config.concurrency", "must be between 1 and 1024")
        check_seconds(self.timeout, "config.timeout")
        if self.method not in WebhookMethod.__members__.values():
            raise ValidationError("config.method",
                                  f"must be one of {', '.join(WebhookMethod)}")
        check_body(self.body)

    def admit(self, policy: DestinationPolicy) -> None:
        """Refuse a destination the policy forbids (stored as given otherwise)."""
        check_host(client_host(self.url), policy)


def outcome_of(status: int) -> Outcome:
    """How a response status is taken."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in RETRIED_STATUSES or status >= 500:
        return Outcome.RETRY
    return Outcome.REJECTED


class WebhookChannel(LoopChannel):
    """POSTs each envelope; at most ``concurrency`` requests in flight, whatever the sends."""

    quick_build = True  # a config parsed, an address literal checked: no I/O

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 clock: Clock | None = None, limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(WebhookConfig, spec.config)
        self.timeout_s = (limits or current_limits()).timeout(self.config.timeout)
        self._policy = policy or current_policy()
        self._clock = clock or SystemClock()
        self._secrets = self.config.secrets
        self._refused: str | None = None
        host = client_host(self.config.url)  # what aiohttp connects to, not the raw text
        if (literal := literal_address(host)) is not None:  # aiohttp resolves no literal
            try:
                check_address(literal, host, self._policy)
            except RefusedAddress as exc:
                self._refused = str(exc)
        self._timeout = request_timeout(self.timeout_s)
        self._slots = asyncio.Semaphore(self.config.concurrency)
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        self._paused_until_ms = 0

    async def _post(self, session: aiohttp.ClientSession, env: Envelope) -> Result:
        now_ms = self._clock.now_ms()
        if now_ms < self._paused_until_ms:
            return Result(env.delivery_id, Outcome.RETRY, "paused by the receiver's Retry-After",
                          self._paused_until_ms - now_ms)
        headers: dict[str, tuple[str, str]] = {}
        for layer in (self.config.headers, stored_headers(env.headers)):
            for name, value in layer.items():
                if name.lower() in EXPANDER_HEADERS:  # Tocsin's own, from the expander
                    headers[name.lower()] = (name, value)
                    continue
                if (why := bad_header(name, value)) is not None:
                    return Result(env.delivery_id, Outcome.REJECTED,
                                  f"invalid request: header {name!r} {why}")
                headers[name.lower()] = (name, value)
        terms = env.terms
        url = self.config.url if terms is None or terms.path is None else joined_url(
            self.config.url, terms.path)
        if url is None:
            return Result(env.delivery_id, Outcome.REJECTED,
                          "invalid request: the schedule's path would leave the channel's "
                          "origin")
        method = str(terms.method if terms and terms.method else self.config.method)
        out = render(env, body_format(env, self.config.body))
        body = out.body
        for name, value in (*out.headers.items(), ("Content-Type", out.content_type),
                            *signature_headers(self._secrets, env.delivery_id, now_ms // 1000,
                                               body)):
            headers[name.lower()] = (name, value)
        try:
            async with session.request(method, url, data=body, allow_redirects=False,
                                       headers=dict(headers.values()),
                                       timeout=self._timeout) as response:
                await response.content.read(_DRAIN)
                status, after = response.status, response.headers.get("Retry-After")
        except ValueError as exc:
            return Result(env.delivery_id, Outcome.REJECTED, f"invalid request: {exc}"[:300])
        except aiohttp.ClientConnectorError as exc:
            error = transport_error(exc)
            refused = isinstance(exc.os_error, RefusedAddress)
            return Result(env.delivery_id, Outcome.REJECTED if refused else Outcome.RETRY,
                          error)
        except Exception as exc:  # an answer for every envelope, whatever went wrong
            return Result(env.delivery_id, Outcome.RETRY, transport_error(exc))
        outcome = outcome_of(status)
        if outcome is Outcome.DELIVERED:
            return Result(env.delivery_id, outcome)
        wait = retry_after_ms(after, self._clock.now_ms()) if (
            status in PAUSING_STATUSES and after) else None
        if wait is not None:
            self._paused_until_ms = max(self._paused_until_ms, self._clock.now_ms() + wait)
        return Result(env.delivery_id, outcome, status_line(status), wait)

    async def _send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if self._refused is not None:
            return [Result(e.delivery_id, Outcome.REJECTED, self._refused) for e in envelopes]
        session = shared_session(self._policy)
        if (loop := asyncio.get_running_loop()) is not self._slots_loop:  # a new shared loop
            self._slots, self._slots_loop = asyncio.Semaphore(self.config.concurrency), loop
        results: list[Result] = []
        todo = iter(envelopes)

        async def worker() -> None:
            for env in todo:
                async with self._slots:
                    results.append(await self._post(session, env))

        await asyncio.gather(*(worker() for _ in range(min(self.config.concurrency,
                                                           len(envelopes)))))
        return results

    def close(self) -> None:
        """Nothing to release: the channel owns no thread and no connection (those it used
        stay in the process's pool, which closes them once idle)."""
