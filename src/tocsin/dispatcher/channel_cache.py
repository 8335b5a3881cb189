"""Live channels for the dispatcher: specs looked up at most every few seconds (by the clock),
one open channel per spec; a changed spec closes the old channel and opens a new one.

Builds are off the send path. A channel is built on a small pool of its own
(:data:`BUILD_THREADS`), one build per destination at a time — one whose build does no I/O
(:attr:`~tocsin.abc.Channel.quick_build`: the webhook channel, 0.3 ms) in the caller, so a
burst of new webhook destinations starts no build thread — and a send waits for its own
destination's build only, for at most the build deadline (``channel_build_seconds``): past
it the send gives up with :class:`ChannelBuildTimeout` while the build goes on (the engine
hands its rows back unsent: no attempt was made, so none is spent), and the destination's
next send finds the channel once it is done. Looking up a
built channel takes no lock at all, so a Kafka or RabbitMQ build waiting seconds for DNS holds
no other destination's send (it had held every lane's, behind one lock). A start's warm-up
(:meth:`ChannelCache.warm`) builds every channel at once on the same pool and waits one
deadline in all, not one per channel.

    threads: tocsin-build-N (at most BUILD_THREADS, made as builds need them)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tocsin.abc import Channel
from tocsin.clock import Clock
from tocsin.domain import DEFAULT_TENANT, ChannelSpec

__all__ = ["BUILD_THREADS", "SPEC_TTL_MS", "ChannelBuildTimeout", "ChannelCache"]

SPEC_TTL_MS = 5_000
"""How long a looked-up spec is used before the store is asked again: a changed channel takes
effect within this, and a batch of many schedules asks the store once per channel."""
BUILD_THREADS = 8
"""Channels a process builds at once: a restart's warm-up of up to this many slow builds (a
broker's name taking seconds to resolve) takes one build deadline, not one per channel."""


class ChannelBuildTimeout(TimeoutError):
    """A destination's channel was not built within the build deadline; its build goes on."""


def _build(spec: ChannelSpec) -> Channel:
    from tocsin.channels import build_channel

    return build_channel(spec)


def _quick(spec: ChannelSpec) -> bool:
    from tocsin.channels import builds_quickly

    return builds_quickly(spec.kind)


def _never(spec: ChannelSpec) -> bool:
    return False


def _build_deadline_s() -> float:
    from tocsin.config import Settings

    return Settings().channel_build_seconds


@dataclass
class _Live:
    """A built channel, its spec, and when a send last asked for it (the clock's ms)."""

    spec: ChannelSpec
    channel: Channel
    used_ms: int


@dataclass
class _Build:
    """A build in progress: its spec, its result to come, and when waiting for it ends
    (``time.monotonic`` seconds)."""

    spec: ChannelSpec
    deadline: float
    future: concurrent.futures.Future[Channel] = field(default_factory=concurrent.futures.Future)


class ChannelCache:
    """Channel specs from ``lookup(name, tenant)`` (None: not registered), cached ``ttl_ms`` by
    ``clock``, and one live channel per spec, made by ``build`` off the send path. Channels are
    namespaced by tenant: every cache key is (tenant, name). Safe to share between threads (the
    dispatcher's lanes each send on their own): a lookup of a built channel takes no lock, and
    the lock that guards builds is never held while one runs."""

    def __init__(self, lookup: Callable[[str, str], ChannelSpec | None], *, clock: Clock,
                 ttl_ms: int = SPEC_TTL_MS,
                 build: Callable[[ChannelSpec], Channel] = _build,
                 build_deadline_s: float | None = None,
                 build_threads: int = BUILD_THREADS,
                 quick: Callable[[ChannelSpec], bool] | None = None,
                 version: Callable[[], int] | None = None) -> None:
        self._lookup = lookup
        self._version = version
        """The store's :meth:`~tocsin.abc.ChannelStore.channels_version`: while it is the
        same, a cached spec is good past ``ttl_ms`` (asked at most once a ``ttl_ms``)."""
        self._seen: tuple[int, int] | None = None
        """When the version was last asked (the clock's ms), and what it was."""
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._build = build
        self._quick = quick or (_quick if build is _build else _never)
        """Whether a spec's channel is built in the caller (no I/O, well under a
        millisecond: the webhook channel), not on the build pool."""
        self.build_deadline_s = (_build_deadline_s() if build_deadline_s is None
                                 else build_deadline_s)
        """How long a send waits for its destination's channel to be built."""
        self._build_threads = build_threads
        self._specs: dict[tuple[str, str], tuple[int, ChannelSpec | None]] = {}
        self._channels: dict[tuple[str, str], _Live] = {}
        self._building: dict[tuple[str, str], _Build] = {}
        self._lock = threading.Lock()
        """Guards ``_building`` and the changes of ``_channels``; held for no build or close."""
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    def spec(self, name: str, *, tenant: str = DEFAULT_TENANT) -> ChannelSpec | None:
        """``tenant``'s registered spec, or None when it has no channel ``name``."""
        now = self._clock.now_ms()
        cached = self._specs.get((tenant, name))
        if cached is not None and (now - cached[0] < self._ttl_ms or self._unchanged(now)):
            return cached[1]
        spec = self._lookup(name, tenant)
        self._specs[(tenant, name)] = (now, spec)
        return spec

    def _unchanged(self, now: int) -> bool:
        """Whether no channel or tenant changed since the specs cached before the last look
        at the version (a look at most every ``ttl_ms``; the first forgets every spec). With
        10 000 destinations, each spec read again every ``ttl_ms`` was two store reads a
        send, ~6 % of a dispatcher's CPU."""
        if self._version is None:
            return False
        seen = self._seen
        if seen is not None and now - seen[0] < self._ttl_ms:
            return True
        version = self._version()
        self._seen = (now, version)
        if seen is not None and seen[1] == version:
            return True
        self._specs.clear()
        return False

    def builds_quickly(self, spec: ChannelSpec) -> bool:
        """Whether ``spec``'s channel is built in the caller (no I/O, well under a
        millisecond): :meth:`channel` then never waits on another thread."""
        return self._quick(spec)

    def channel(self, spec: ChannelSpec) -> Channel:
        """The live channel for ``spec``, built now if need be (waiting for this destination's
        build alone, at most until its deadline: then :class:`ChannelBuildTimeout`); a build
        that failed raises its error (the next call builds again)."""
        if (live := self.built(spec)) is not None:
            return live
        build = self._start(spec)
        try:
            return build.future.result(timeout=max(build.deadline - time.monotonic(), 0))
        except concurrent.futures.TimeoutError:
            raise self._timed_out(spec) from None

    async def channel_async(self, spec: ChannelSpec) -> Channel:
        """:meth:`channel` for a caller on an event loop (which it never blocks)."""
        if (live := self.built(spec)) is not None:
            return live
        build = self._start(spec)
        waiting = asyncio.shield(asyncio.wrap_future(build.future))  # others wait for it too
        try:
            return await asyncio.wait_for(waiting, max(build.deadline - time.monotonic(), 0))
        except TimeoutError:
            raise self._timed_out(spec) from None

    def warm(self, specs: Iterable[ChannelSpec]) -> dict[tuple[str, str], BaseException]:
        """Build the channels of ``specs`` at once (:data:`BUILD_THREADS` at a time), waiting
        one build deadline in all; what failed or is not built yet, by (tenant, name) (those
        go on building, for their first sends). A channel built quickly (no I/O: a webhook)
        is left for its first send: each Spark worker process warms up, and building 10 000
        webhook channels ahead held its first batch for seconds and kept them all in memory,
        for nothing a first send would wait on."""
        builds = [self._start(spec) for spec in specs
                  if not self._quick(spec) and self.built(spec) is None]
        concurrent.futures.wait([b.future for b in builds], timeout=self.build_deadline_s)
        failed: dict[tuple[str, str], BaseException] = {}
        for b in builds:
            key = (b.spec.tenant, b.spec.name)
            if not b.future.done():
                failed[key] = self._timed_out(b.spec)
            elif (exc := b.future.exception()) is not None:
                failed[key] = exc
        return failed

    def discard(self, tenant: str, name: str) -> Channel | None:
        """Forget the live channel of ``tenant``'s ``name`` without closing it (its send
        hangs; the caller closes it when it can): the next use builds a new one."""
        with self._lock:
            live = self._channels.pop((tenant, name), None)
        return None if live is None else live.channel

    def close_idle(self, *, idle_ms: int) -> int:
        """Close the channels no send has asked for in ``idle_ms`` (by the clock; far longer
        than a send may take), so a destination gone idle keeps nothing open; how many."""
        now = self._clock.now_ms()
        with self._lock:
            idle = [key for key, live in self._channels.items() if now - live.used_ms >= idle_ms]
            closing = [self._channels.pop(key).channel for key in idle]
        for channel in closing:
            channel.close()
        return len(closing)

    def close(self) -> None:
        """Close every live channel (a build still running closes its own when it ends)."""
        with self._lock:
            self._closed = True
            closing = [live.channel for live in self._channels.values()]
            self._channels.clear()
            pool, self._pool = self._pool, None
        for channel in closing:
            channel.close()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def built(self, spec: ChannelSpec) -> Channel | None:
        """The built channel for ``spec``, marked used now; None when it is not built (a dict
        read: no lock; never waits, never starts a build)."""
        live = self._channels.get((spec.tenant, spec.name))
        if live is None or live.spec != spec:
            return None
        live.used_ms = self._clock.now_ms()
        return live.channel

    def _start(self, spec: ChannelSpec) -> _Build:
        """The build of ``spec`` in progress, started now if there is none."""
        key, quick = (spec.tenant, spec.name), self._quick(spec)
        with self._lock:
            build = self._building.get(key)
            if build is not None and build.spec == spec:
                return build
            build = _Build(spec, time.monotonic() + self.build_deadline_s)
            live = self._channels.get(key)
            if live is not None and live.spec == spec:  # built since the caller looked
                build.future.set_result(live.channel)
                return build
            self._building[key] = build
            if self._pool is None and not quick:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self._build_threads, thread_name_prefix="tocsin-build")
            pool = self._pool
        if quick:  # no I/O: built here, no thread started for it
            self._run(build)
            return build
        assert pool is not None
        try:
            pool.submit(self._run, build)
        except RuntimeError as exc:  # closed meanwhile
            build.future.set_exception(exc)
        return build

    def _run(self, build: _Build) -> None:
        """Build on a pool thread; the channel replaces its destination's old one (closed
        here), unless a newer spec's build or the cache's close came first."""
        key = (build.spec.tenant, build.spec.name)
        try:
            channel = self._build(build.spec)
        except BaseException as exc:
            with self._lock:
                if self._building.get(key) is build:
                    del self._building[key]
            build.future.set_exception(exc)
            return
        old: Channel | None = None
        with self._lock:
            current = self._building.get(key) is build and not self._closed
            if self._building.get(key) is build:
                del self._building[key]
            if current:
                replaced = self._channels.get(key)
                old = None if replaced is None else replaced.channel
                self._channels[key] = _Live(build.spec, channel, self._clock.now_ms())
        if not current:
            channel.close()
            why = "the cache closed" if self._closed else "its spec changed"
            build.future.set_exception(ChannelBuildTimeout(
                f"channel {key[0]}/{key[1]}: {why} while it was being built"))
            return
        build.future.set_result(channel)
        if old is not None:
            old.close()

    def _timed_out(self, spec: ChannelSpec) -> ChannelBuildTimeout:
        return ChannelBuildTimeout(
            f"channel {spec.tenant}/{spec.name}: not built within {self.build_deadline_s:g} s "
            "(still building)")
