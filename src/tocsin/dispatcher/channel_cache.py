"""Live channels for the dispatcher: specs looked up at most every few seconds (by the clock),
one open channel per spec; a changed spec closes the old channel and opens a new one."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tocsin.abc import Channel
from tocsin.clock import Clock
from tocsin.domain import DEFAULT_TENANT, ChannelSpec

__all__ = ["SPEC_TTL_MS", "ChannelCache"]

SPEC_TTL_MS = 5_000
"""How long a looked-up spec is used before the store is asked again: a changed channel takes
effect within this, and a batch of many schedules asks the store once per channel."""


def _build(spec: ChannelSpec) -> Channel:
    from tocsin.channels import build_channel

    return build_channel(spec)


class ChannelCache:
    """Channel specs from ``lookup(name, tenant)`` (None: not registered), cached ``ttl_ms`` by
    ``clock``, and one live channel per spec, made by ``build``. Channels are namespaced by
    tenant: every cache key is (tenant, name). Safe to share between threads (the dispatcher's
    lanes each send on their own)."""

    def __init__(self, lookup: Callable[[str, str], ChannelSpec | None], *, clock: Clock,
                 ttl_ms: int = SPEC_TTL_MS,
                 build: Callable[[ChannelSpec], Channel] = _build) -> None:
        self._lookup = lookup
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._build = build
        self._specs: dict[tuple[str, str], tuple[int, ChannelSpec | None]] = {}
        self._channels: dict[tuple[str, str], tuple[ChannelSpec, Channel]] = {}
        self._lock = threading.RLock()

    def spec(self, name: str, *, tenant: str = DEFAULT_TENANT) -> ChannelSpec | None:
        """``tenant``'s registered spec, or None when it has no channel ``name``."""
        now = self._clock.now_ms()
        cached = self._specs.get((tenant, name))
        if cached is not None and now - cached[0] < self._ttl_ms:
            return cached[1]
        spec = self._lookup(name, tenant)
        with self._lock:
            self._specs[(tenant, name)] = (now, spec)
        return spec

    def channel(self, spec: ChannelSpec) -> Channel:
        """The live channel for ``spec``."""
        with self._lock:
            live = self._channels.get((spec.tenant, spec.name))
            if live is not None and live[0] == spec:
                return live[1]
            if live is not None:
                live[1].close()
            channel = self._build(spec)
            self._channels[(spec.tenant, spec.name)] = (spec, channel)
            return channel

    def discard(self, tenant: str, name: str) -> Channel | None:
        """Forget the live channel of ``tenant``'s ``name`` without closing it (its send
        hangs; the caller closes it when it can): the next use builds a new one."""
        with self._lock:
            live = self._channels.pop((tenant, name), None)
        return None if live is None else live[1]

    def close(self) -> None:
        """Close every live channel."""
        with self._lock:
            for _, channel in self._channels.values():
                channel.close()
            self._channels.clear()
