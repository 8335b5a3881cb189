"""Webhook channel: an HTTP POST of the JSON envelope per delivery, on httpx.

Config: ``url`` (required, http or https), ``secret`` (optional), ``timeout`` seconds (default
10, for connecting and for each read), ``headers`` (extra request headers), ``concurrency``
(requests in flight per channel, default 16). One ``httpx.Client`` per channel keeps up to
``concurrency`` HTTP/1.1 connections alive between batches; redirects are not followed.

The body is :meth:`~tocsin.domain.Envelope.to_json_bytes`, ``Content-Type: application/json``.
Each request carries ``Tocsin-Schedule-Id``, ``Tocsin-Delivery-Id``, ``Tocsin-Attempt``,
``Tocsin-Due-At`` and the schedule's own headers (over the channel's ``headers``; header values
go out as UTF-8). With a secret it also carries ``Tocsin-Signature: sha256=<hex>``: the
lowercase hex HMAC-SHA256, keyed with the secret's UTF-8 bytes, of the request body exactly as
sent — nothing else is signed. A receiver recomputes it over the raw body and compares in
constant time; it drops repeats by ``Tocsin-Delivery-Id``.

Outcomes: 2xx is DELIVERED; 408, 429, 5xx, timeouts and connection failures are RETRY; any
other status (3xx, other 4xx), and a request that cannot be formed (a header name that is not an
HTTP token), is REJECTED: the schedule dies at once.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["WebhookChannel", "WebhookConfig", "outcome_of", "sign"]

RETRIED_STATUSES = frozenset({408, 429})
"""Statuses below 500 that are retried."""
_JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookConfig:
    """A webhook channel's configuration."""

    url: str
    """Where to POST."""
    secret: str | None = None
    """Signs each body in ``Tocsin-Signature`` when set."""
    timeout: float = 10.0
    """Seconds to connect, and to wait for each read of the response."""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request; a schedule's own headers win."""
    concurrency: int = 16
    """Requests in flight at once."""

    def check(self) -> None:
        """Reject what cannot work."""
        try:
            url = httpx.URL(self.url)
        except httpx.InvalidURL as exc:
            raise ValidationError("config.url", f"{self.url!r} is not a URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValidationError("config.url", f"{self.url!r} is not an http(s) URL")
        if self.secret is not None and not self.secret:
            raise ValidationError("config.secret", "must not be empty (leave it out instead)")
        if not 1 <= self.concurrency <= 256:
            raise ValidationError("config.concurrency", "must be between 1 and 256")
        if not 0 < self.timeout <= 3600:
            raise ValidationError("config.timeout", "must be more than 0 and at most 3600")


def sign(secret: str, body: bytes) -> str:
    """The ``Tocsin-Signature`` value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _merge(layers: Sequence[Mapping[str, str]]) -> list[tuple[bytes, bytes]]:
    """Header layers as UTF-8 pairs, a later layer's name replacing an earlier one's in any
    case."""
    merged: dict[str, tuple[bytes, bytes]] = {}
    for layer in layers:
        for name, value in layer.items():
            merged[name.lower()] = (name.encode(), value.encode())
    return list(merged.values())


def outcome_of(status: int) -> Outcome:
    """How a response status is taken."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in RETRIED_STATUSES or status >= 500:
        return Outcome.RETRY
    return Outcome.REJECTED


class WebhookChannel(Channel):
    """POSTs each envelope; a batch goes out ``concurrency`` requests at a time."""

    def __init__(self, spec: ChannelSpec) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(WebhookConfig, spec.config)
        n = self.config.concurrency
        self._http = httpx.Client(
            timeout=self.config.timeout, follow_redirects=False,
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"webhook-{spec.name}")

    def _post(self, env: Envelope) -> Result:
        body = env.to_json_bytes()
        layers = [self.config.headers, env.transport_headers(), _JSON]
        if self.config.secret:
            layers.append({"Tocsin-Signature": sign(self.config.secret, body)})
        try:
            response = self._http.post(self.config.url, content=body, headers=_merge(layers))
        except httpx.TimeoutException as exc:
            return Result(env.delivery_id, Outcome.RETRY, f"timeout: {exc!r}")
        except (httpx.LocalProtocolError, UnicodeError) as exc:
            return Result(env.delivery_id, Outcome.REJECTED, f"invalid request: {exc!r}")
        except httpx.TransportError as exc:
            return Result(env.delivery_id, Outcome.RETRY, f"transport: {exc!r}")
        except Exception as exc:  # an answer for every envelope, whatever went wrong
            return Result(env.delivery_id, Outcome.RETRY, f"webhook: {exc!r}"[:1000])
        outcome = outcome_of(response.status_code)
        if outcome is Outcome.DELIVERED:
            return Result(env.delivery_id, outcome)
        return Result(env.delivery_id, outcome,
                      f"HTTP {response.status_code}: {response.text[:200]}")

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if len(envelopes) == 1:
            return [self._post(envelopes[0])]
        return list(self._pool.map(self._post, envelopes))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._http.close()
