"""Standard Webhooks signing (https://www.standardwebhooks.com), request header checks and
``Retry-After``, for the webhook channel.

A secret is ``whsec_`` followed by the base64 of 24 to 64 random bytes (the prefix is
optional); make one with ``python -c "import base64, secrets; print('whsec_' +
base64.b64encode(secrets.token_bytes(32)).decode())"``.
"""

from __future__ import annotations

import base64
import binascii
from email.utils import parsedate_to_datetime
from functools import lru_cache

from standardwebhooks import Webhook

from tocsin.clock import from_ms, to_ms
from tocsin.domain.headers import header_problem

__all__ = ["MAX_RETRY_AFTER_MS", "bad_header", "retry_after_ms", "secret_error",
           "signature_headers"]

MAX_RETRY_AFTER_MS = 24 * 3600 * 1000
"""The longest ``Retry-After`` honoured; a longer one is cut to this."""
_PREFIX = "whsec_"


def secret_error(secret: str) -> str | None:
    """Why ``secret`` is not a usable Standard Webhooks secret, or None."""
    raw = secret.removeprefix(_PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        return "must be whsec_ followed by base64 (see docs/api.md)"
    if not 24 <= len(key) <= 64:
        return f"must hold 24 to 64 bytes of key, not {len(key)}"
    return None


@lru_cache(maxsize=64)
def _signer(secret: str) -> Webhook:
    return Webhook(secret if secret.startswith(_PREFIX) else _PREFIX + secret)


def signature_headers(secrets: list[str], delivery_id: str, timestamp_s: int,
                      body: bytes) -> list[tuple[str, str]]:
    """The Standard Webhooks headers of one request: ``webhook-id``, ``webhook-timestamp``
    and, when there are secrets, ``webhook-signature`` (one ``v1,`` signature per secret)."""
    headers = [("webhook-id", delivery_id), ("webhook-timestamp", str(timestamp_s))]
    if secrets:
        when = from_ms(timestamp_s * 1000)
        data = body.decode()
        headers.append(("webhook-signature", " ".join(
            _signer(s).sign(delivery_id, when, data) for s in secrets)))
    return headers


def bad_header(name: str, value: str) -> str | None:
    """Why a header cannot be sent, or None (:func:`tocsin.domain.headers.header_problem`)."""
    return header_problem(name, value)


def retry_after_ms(value: str, now_ms: int) -> int | None:
    """A ``Retry-After`` value (seconds or an HTTP date) as milliseconds from ``now_ms``,
    at most :data:`MAX_RETRY_AFTER_MS`; None when it cannot be read."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        wait = int(value) * 1000
    else:
        try:
            wait = to_ms(parsedate_to_datetime(value)) - now_ms
        except (TypeError, ValueError, IndexError):
            return None
    return min(max(wait, 0), MAX_RETRY_AFTER_MS)
