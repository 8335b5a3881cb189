"""Envelopes for channel tests."""

from __future__ import annotations

import base64

from tocsin.domain import Envelope, PayloadKind

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
"""A Standard Webhooks secret for tests."""
SECRET_2 = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
"""A second one, for rotation."""


def envelopes(n: int, *, ordering_key: str | None = None, key: str | None = None,
              headers: dict[str, str] | None = None) -> list[Envelope]:
    """``n`` envelopes with JSON payloads ``{"n": i}``."""
    return [Envelope(schedule_id=f"S{i:05d}", delivery_id=f"S{i:05d}-1", attempt=1, epoch=3,
                     tenant="default", channel="c", payload=b'{"n":%d}' % i,
                     payload_kind=PayloadKind.JSON, due_ms=1_800_000_000_000 + i,
                     headers=headers or {}, key=key, ordering_key=ordering_key)
            for i in range(n)]
