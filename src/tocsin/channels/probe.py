"""``tocsin channels test NAME`` (``POST /v1/channels/{name}/test``): one marked message sent
through a channel, now, by the process that is asked, and what came of it.

The message is an envelope like any delivery's, marked so a consumer can tell it apart: its
schedule id is ``test-<id>`` (so its delivery id is ``test-<id>-1``) and its payload is
``{"tocsin_test": true, "channel": NAME, "sent_at": RFC 3339}``. It is stored nowhere and never
retried. The channel is built as a dispatcher builds it (the same destination policy, send
limits and deadline) and closed afterwards.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tocsin.channels.policy import DestinationPolicy
from tocsin.clock import Clock, iso_ms
from tocsin.domain import ChannelSpec, Envelope, Outcome, PayloadKind
from tocsin.errors import ValidationError
from tocsin.ids import delivery_id, new_schedule_id
from tocsin.redact import redact

__all__ = ["Probe", "probe_channel", "test_envelope"]

TEST_PREFIX = "test-"
"""The schedule id of a test message starts so."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    """What came of one test message."""

    tenant: str
    channel: str
    kind: str
    delivery_id: str
    outcome: Outcome
    error: str | None
    took_ms: int

    def to_json(self) -> dict[str, Any]:
        """The API's answer."""
        return {"tenant": self.tenant, "channel": self.channel, "kind": self.kind,
                "delivery_id": self.delivery_id, "outcome": self.outcome.value,
                "delivered": self.outcome is Outcome.DELIVERED, "error": self.error,
                "took_ms": self.took_ms}


def test_envelope(spec: ChannelSpec, now_ms: int) -> Envelope:
    """The marked message for ``spec``."""
    schedule_id = TEST_PREFIX + new_schedule_id(now_ms)
    payload = {"tocsin_test": True, "channel": spec.name, "sent_at": iso_ms(now_ms)}
    return Envelope(schedule_id=schedule_id, delivery_id=delivery_id(schedule_id, 1), attempt=1,
                    epoch=0, tenant=spec.tenant, channel=spec.name,
                    payload=json.dumps(payload).encode(), payload_kind=PayloadKind.JSON,
                    due_ms=now_ms)


def probe_channel(spec: ChannelSpec, *, clock: Clock,
                  policy: DestinationPolicy | None = None) -> Probe:
    """Send one marked message through ``spec``'s channel and wait for its answer (bounded by
    the channel's deadline). ValidationError on ``kind`` when this process cannot build the
    channel (its library or plug-in missing), on the config's field when the policy refuses
    the destination now."""
    from tocsin.channels import build_channel, missing_library

    if (lacking := missing_library(spec.kind)) is not None:
        raise ValidationError("kind", lacking)
    envelope = test_envelope(spec, clock.now_ms())
    start = time.monotonic()
    channel = build_channel(spec, policy=policy)
    try:
        results = channel.send([envelope])
    finally:
        channel.close()
    took_ms = int((time.monotonic() - start) * 1000)
    result = next((r for r in results if r.delivery_id == envelope.delivery_id), None)
    outcome = result.outcome if result is not None else Outcome.RETRY
    error: str | None = "the channel gave no answer" if result is None else (
        str(redact(result.error)) if result.error else None)
    return Probe(tenant=spec.tenant, channel=spec.name, kind=spec.kind.value,
                 delivery_id=envelope.delivery_id, outcome=outcome, error=error, took_ms=took_ms)
