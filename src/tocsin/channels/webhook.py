"""Webhook channel: an HTTP POST of the JSON envelope per delivery, on httpx.

Config: ``url`` (required), ``secret`` (optional), ``timeout`` seconds (default 10),
``headers`` (extra request headers), ``concurrency`` (requests in flight, default 16).

Each request carries ``Tocsin-Schedule-Id``, ``Tocsin-Delivery-Id``, ``Tocsin-Attempt``,
``Tocsin-Due-At`` and the schedule's own headers. With a secret it also carries
``Tocsin-Signature: sha256=<hex>``, the HMAC-SHA256 under the secret of the request body
exactly as sent. 2xx is delivered; 408, 429, 5xx, timeouts and connection failures are
retried; any other status is a permanent refusal (the schedule dies at once).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["WebhookChannel", "WebhookConfig", "sign"]

RETRIED_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookConfig:
    """A webhook channel's configuration."""

    url: str
    secret: str | None = None
    timeout: float = 10.0
    headers: dict[str, str] = field(default_factory=dict)
    concurrency: int = 16

    def check(self) -> None:
        """Reject what cannot work."""
        if not self.url.startswith(("http://", "https://")):
            raise ValidationError("config.url", f"{self.url!r} is not an http(s) URL")
        if not 1 <= self.concurrency <= 256:
            raise ValidationError("config.concurrency", "must be between 1 and 256")
        if self.timeout <= 0:
            raise ValidationError("config.timeout", "must be positive")


def sign(secret: str, body: bytes) -> str:
    """The ``Tocsin-Signature`` value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


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
        self._http = httpx.Client(timeout=self.config.timeout,
                                  limits=httpx.Limits(max_connections=self.config.concurrency))
        self._pool = ThreadPoolExecutor(max_workers=self.config.concurrency,
                                        thread_name_prefix=f"webhook-{spec.name}")

    def _post(self, env: Envelope) -> Result:
        body = env.to_json_bytes()
        headers = {**self.config.headers, **env.transport_headers(),
                   "Content-Type": "application/json"}
        if self.config.secret:
            headers["Tocsin-Signature"] = sign(self.config.secret, body)
        try:
            response = self._http.post(self.config.url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            return Result(delivery_id=env.delivery_id, outcome=Outcome.RETRY,
                          error=f"timeout: {exc!r}")
        except httpx.TransportError as exc:
            return Result(delivery_id=env.delivery_id, outcome=Outcome.RETRY,
                          error=f"transport: {exc!r}")
        outcome = outcome_of(response.status_code)
        error = None if outcome is Outcome.DELIVERED else (
            f"HTTP {response.status_code}: {response.text[:200]}")
        return Result(delivery_id=env.delivery_id, outcome=outcome, error=error)

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if len(envelopes) == 1:
            return [self._post(envelopes[0])]
        return list(self._pool.map(self._post, envelopes))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._http.close()
