"""Per-process caches for code that runs in Spark's Python workers: one store connection and
one channel instance per process, re-used across micro-batches (workers are re-used)."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tocsin.abc import Channel, Store
from tocsin.domain import DEFAULT_TENANT, ChannelSpec
from tocsin.errors import NotFoundError, StoreError
from tocsin.stores import open_store

__all__ = ["ChannelCache", "channels_for", "retrying", "store_for"]

T = TypeVar("T")
log = logging.getLogger("tocsin.dispatcher")
GC_THRESHOLDS = (50_000, 50, 1_000)
"""The cyclic collector's thresholds in dispatcher processes. A claim or a delivery makes tens
of thousands of short-lived tuples, none of them cyclic; at Python's default (a young
collection every 700 allocations) the collector took 10-20 % of a batch's Python time."""
STORE_RETRY_S = 90.0
"""How long a claim or an acknowledgement keeps retrying a store that does not answer (a
database restart, a fail-over) before the task fails and Spark takes over."""


def retrying(work: Callable[[], T], *, what: str, budget_s: float = STORE_RETRY_S) -> T:
    """``work()``, retried with back-off (0.1 s doubling to 5 s) while the store raises
    :class:`~tocsin.errors.StoreError`, for up to ``budget_s``. Every store write the
    dispatcher makes is safe to repeat: claims replay by epoch, acknowledgements are fenced."""
    deadline = time.monotonic() + budget_s
    pause = 0.1
    while True:
        try:
            return work()
        except StoreError as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("%s: store unavailable, retrying in %.1fs: %s", what, pause, exc)
            time.sleep(pause)
            pause = min(pause * 2, 5.0)

_stores: dict[tuple[str, int], Store] = {}
_lock = threading.Lock()


def store_for(url: str, buckets: int) -> Store:
    """This process's store for ``url`` (opened once)."""
    with _lock:
        store = _stores.get((url, buckets))
        if store is None:
            gc.set_threshold(*GC_THRESHOLDS)  # the first use in a dispatcher process
            store = _stores[(url, buckets)] = open_store(url, buckets=buckets)
        return store


class ChannelCache:
    """Channel specs looked up in the store at most every ``ttl_s`` seconds, and one live
    channel per spec; a changed spec closes the old channel and opens a new one."""

    def __init__(self, store: Store, *, ttl_s: float = 5.0) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._specs: dict[tuple[str, str], tuple[float, ChannelSpec | None]] = {}
        self._channels: dict[tuple[str, str], tuple[ChannelSpec, Channel]] = {}

    def spec(self, name: str, *, tenant: str = DEFAULT_TENANT) -> ChannelSpec | None:
        """``tenant``'s registered spec, or None when it has no channel ``name``."""
        cached = self._specs.get((tenant, name))
        if cached is not None and time.monotonic() - cached[0] < self._ttl_s:
            return cached[1]
        try:
            spec: ChannelSpec | None = self._store.get_channel(name, tenant=tenant)
        except NotFoundError:
            spec = None
        self._specs[(tenant, name)] = (time.monotonic(), spec)
        return spec

    def channel(self, spec: ChannelSpec) -> Channel:
        """The live channel for ``spec``."""
        from tocsin.channels import build_channel

        live = self._channels.get((spec.tenant, spec.name))
        if live is not None and live[0] == spec:
            return live[1]
        if live is not None:
            live[1].close()
        channel = build_channel(spec)
        self._channels[(spec.tenant, spec.name)] = (spec, channel)
        return channel

    def close(self) -> None:
        """Close every live channel."""
        for _, channel in self._channels.values():
            channel.close()
        self._channels.clear()


_caches: dict[int, ChannelCache] = {}


def channels_for(store: Store) -> ChannelCache:
    """This process's channel cache for ``store``."""
    with _lock:
        cache = _caches.get(id(store))
        if cache is None:
            cache = _caches[id(store)] = ChannelCache(store)
        return cache
