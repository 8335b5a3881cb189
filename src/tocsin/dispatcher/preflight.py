"""The registered channels this dispatcher's machine cannot deliver to, and their holds.

A channel of a kind whose client library is missing here (confluent-kafka, pika, …) or that
comes from a plug-in not installed here would fail each of its schedules at delivery, one retry
after another, into the dead letters. It used to stop every dispatcher start, one tenant's
channel holding back every other tenant's deliveries. Now the dispatcher starts and holds each
such destination (:attr:`~tocsin.domain.HoldReason.UNDELIVERABLE`, the reason naming the kind
and what to install): its rows stay PENDING with no attempt spent, passed over in the buckets
this run owns (a dispatcher on a machine that has the library delivers its own), and
``tocsin status`` and the log say why. The hold is renewed while the run lives and lapses
within :data:`HOLD_MS` once it stops."""

from __future__ import annotations

import logging
import os
import socket

from tocsin.abc import ChannelHold, Store
from tocsin.channels import missing_library
from tocsin.clock import Clock
from tocsin.domain import ChannelKind, HoldReason
from tocsin.errors import StoreError

__all__ = ["CHECK_MS", "HOLD_MS", "UndeliverableHolds", "undeliverable_channels"]

log = logging.getLogger(__name__)

CHECK_MS = 10_000
"""How often the registered channels are looked at again: a channel registered since (by an
API on a machine that has the library) is held within this."""
HOLD_MS = 30_000
"""How long one hold lasts unrenewed: three checks, so one missed check (the store down a
moment) does not let the destination's rows be claimed and fail."""


def undeliverable_channels(store: Store) -> dict[tuple[str, str], str]:
    """Each registered channel (of any tenant) this machine cannot deliver to, by (tenant,
    name): what to install; empty when it can deliver to all. The kinds are asked first, and
    only the channels of kinds missing here are read (every channel read and parsed every
    :data:`CHECK_MS` was 6 % of a dispatcher's CPU beside 10 000 webhook channels)."""
    lacking = {kind: why for kind in store.channel_kinds()
               if (why := missing_library(ChannelKind(kind))) is not None}
    return {(spec.tenant, spec.name): lacking[spec.kind.value]
            for spec in store.list_channels(kinds=sorted(lacking))} if lacking else {}


class UndeliverableHolds:
    """Keeps ``store``'s destinations that this machine cannot deliver to held for dispatcher
    run ``run`` ('' for none: held in every bucket), looking again every :data:`CHECK_MS` of
    ``clock``."""

    def __init__(self, store: Store, *, run: str, clock: Clock) -> None:
        self._store, self._clock = store, clock
        self._holder = f"undeliverable:{socket.gethostname()}:{os.getpid()}" + (
            f"@{run}" if run else "")
        self._held: dict[tuple[str, str], int] = {}
        """The destinations held, with since when."""
        self._last_ms: int | None = None

    def check(self) -> dict[tuple[str, str], str]:
        """Hold (or renew) every undeliverable destination, end the holds of those that no
        longer are (deleted, or changed to a kind this machine takes), at most every
        :data:`CHECK_MS`; the destinations held now, with the reason. A store that does not
        answer is logged and tried again at the next check."""
        now = self._clock.now_ms()
        if self._last_ms is not None and now - self._last_ms < CHECK_MS:
            return {}
        self._last_ms = now
        try:
            lacking = undeliverable_channels(self._store)
            for (tenant, name), reason in lacking.items():
                since = self._held.setdefault((tenant, name), now)
                if since == now:
                    log.warning("destination %s/%s held: this dispatcher cannot deliver to it: "
                                "%s", tenant, name, reason)
                self._store.hold_channel(ChannelHold(
                    tenant, name, HoldReason.UNDELIVERABLE, since, now + HOLD_MS, 0, reason,
                    self._holder))
            for tenant, name in [k for k in self._held if k not in lacking]:
                self._store.unhold_channel(tenant, name, reason=HoldReason.UNDELIVERABLE,
                                           holder=self._holder)
                del self._held[(tenant, name)]
                log.info("destination %s/%s: no longer held", tenant, name)
        except StoreError as exc:
            log.warning("dispatcher: could not hold undeliverable channels: %s", exc)
            return {}
        return lacking
