"""Channel builds off the send path: a destination whose build blocks holds no other
destination's lookup or build, its own sends give up at the build deadline, a start's warm-up
builds every channel that does I/O at once, and channels gone idle are closed. Builds that
block stand in for a broker's name taking seconds to resolve (the end-to-end case, through
``tocsin dispatcher``, is in test_slow_build_e2e.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.channels.envelopes import envelopes
from tocsin.abc import Channel
from tocsin.channels import build_channel
from tocsin.clock import ManualClock
from tocsin.dispatcher.channel_cache import ChannelBuildTimeout, ChannelCache
from tocsin.dispatcher.core import DispatchCore, channel_spec
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.dispatcher.options import DispatchOptions
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Outcome, Status
from tocsin.stores import open_store
from tocsin.testing.receiver import Receiver
from tocsin.testing.recording import RecordingChannel, Recordings

SLOW_S = 3.0
"""How long a slow build blocks."""


def _spec(name: str, tenant: str = "default", **config: object) -> ChannelSpec:
    return ChannelSpec(name=name, tenant=tenant, kind=ChannelKind.RECORDING,
                       config=dict(config))


class Builds:
    """Builds recording channels; those named ``slow*`` wait for :attr:`release` (or
    :data:`SLOW_S`)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []

    def __call__(self, spec: ChannelSpec) -> Channel:
        self.started.append(spec.name)
        if spec.name.startswith("slow"):
            self.release.wait(SLOW_S)
        return build_channel(spec)


def test_a_blocked_build_holds_no_other_destinations_lookup_or_build() -> None:
    builds = Builds()
    cache = ChannelCache(lambda n, t: None, clock=ManualClock(0), build=builds)
    fast = _spec("fast", "b")
    cache.channel(fast)  # built before the slow one starts
    with ThreadPoolExecutor(3) as pool:
        slow = pool.submit(cache.channel, _spec("slow", "a"))
        while "slow" not in builds.started:
            time.sleep(0.01)
        looked_up = pool.submit(cache.channel, fast)
        built = pool.submit(cache.channel, _spec("other", "c"))
        try:
            assert looked_up.result(timeout=1).spec == fast
            assert built.result(timeout=1).spec.name == "other"
            assert not slow.done()
        finally:
            builds.release.set()
        assert slow.result(timeout=5).spec.name == "slow"
    cache.close()


def test_a_build_past_its_deadline_fails_its_own_sends_and_serves_them_once_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_CHANNEL_BUILD_SECONDS", "0.3")
    builds = Builds()
    cache = ChannelCache(lambda n, t: None, clock=ManualClock(0), build=builds)
    slow = _spec("slow")
    started = time.monotonic()
    with pytest.raises(ChannelBuildTimeout, match=r"default/slow: not built within 0\.3 s"):
        cache.channel(slow)
    assert time.monotonic() - started < SLOW_S / 2
    with pytest.raises(ChannelBuildTimeout):  # the same build, still running: no second one
        cache.channel(slow)
    assert builds.started == ["slow"]
    builds.release.set()
    deadline = time.monotonic() + 5
    while True:
        try:
            channel = cache.channel(slow)
            break
        except ChannelBuildTimeout:
            assert time.monotonic() < deadline
    assert channel.send(envelopes(1))[0].outcome is Outcome.DELIVERED
    assert builds.started == ["slow"]
    cache.close()


def test_a_failed_build_raises_for_its_sends_and_the_next_send_builds_again() -> None:
    calls: list[str] = []

    def flaky(spec: ChannelSpec) -> Channel:
        calls.append(spec.name)
        if len(calls) == 1:
            raise OSError("name does not resolve")
        return build_channel(spec)

    cache = ChannelCache(lambda n, t: None, clock=ManualClock(0), build=flaky)
    with pytest.raises(OSError, match="does not resolve"):
        cache.channel(_spec("x"))
    assert cache.channel(_spec("x")).spec.name == "x"
    assert calls == ["x", "x"]
    cache.close()


def test_warm_up_with_slow_builds_takes_about_one_deadline_not_one_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six channels whose builds block 3 s each, a 0.5 s build deadline: the warm-up waits
    about one deadline (before, one build after another: 18 s)."""
    monkeypatch.setenv("TOCSIN_CHANNEL_BUILD_SECONDS", "0.5")
    url = f"sqlite:///{tmp_path / 't.db'}"
    store = open_store(url, buckets=4)
    for i in range(6):
        store.put_channel(_spec(f"slow{i}", f"t{i}"))
    store.put_channel(_spec("fast"))
    clock = ManualClock(0)
    builds = Builds()
    cache = ChannelCache(lambda n, t: channel_spec(store, n, t), clock=clock, build=builds)
    core = DispatchCore(store, options=DispatchOptions(store_url=url), clock=clock, channels=cache)
    started = time.monotonic()
    core.warm()
    took = time.monotonic() - started
    assert took < 2.0, f"warm-up took {took:.1f} s"
    assert sorted(builds.started) == ["fast", *(f"slow{i}" for i in range(6))]
    assert cache.channel(_spec("fast")).spec.name == "fast"  # built: no wait
    builds.release.set()
    core.close()
    store.close()


def test_the_warm_up_builds_only_what_does_io(tmp_path: Path) -> None:
    """A thousand webhook channels (built in the caller, no I/O) and one file channel: the
    warm-up builds the file channel and leaves the webhooks to their first sends (a Spark
    worker's first batch had built 10 000 of them), which build them at once."""
    cache = ChannelCache(lambda n, t: None, clock=ManualClock(0))
    hooks = [ChannelSpec(name=f"h{i}", tenant=f"t{i % 10}", kind=ChannelKind.WEBHOOK,
                         config={"url": "http://127.0.0.1:9/in"}) for i in range(1_000)]
    file = ChannelSpec(name="f", kind=ChannelKind.FILE,
                       config={"path": str(tmp_path / "out.jsonl")})
    assert cache.warm([*hooks, file]) == {}
    assert cache.built(file) is not None
    assert [h.name for h in hooks if cache.built(h) is not None] == []
    assert cache.channel(hooks[0]).spec == hooks[0]
    cache.close()


def test_specs_are_read_again_only_when_the_store_says_channels_changed(
        tmp_path: Path) -> None:
    """Past the spec TTL a cached spec is kept while the store's channels version is the same
    (one read for every destination), and read again once a channel changed."""
    from tocsin.dispatcher.channel_cache import SPEC_TTL_MS
    from tocsin.domain import Tenant

    store = open_store(f"sqlite:///{tmp_path / 't.db'}", buckets=4)
    for i in range(3):
        store.put_channel(_spec(f"c{i}", a=0))
    clock, reads = ManualClock(0), []

    def lookup(name: str, tenant: str) -> ChannelSpec | None:
        reads.append(name)
        return channel_spec(store, name, tenant)

    cache = ChannelCache(lookup, clock=clock, version=store.channels_version)
    assert [cache.spec(f"c{i}").config for i in range(3)] == [{"a": 0}] * 3  # type: ignore[union-attr]
    for _ in range(3):
        clock.advance(SPEC_TTL_MS + 1)
        assert [cache.spec(f"c{i}").config for i in range(3)] == [{"a": 0}] * 3  # type: ignore[union-attr]
    assert reads == ["c0", "c1", "c2"] * 2  # read once, then once more at the first look
    store.put_channel(_spec("c1", a=1))
    clock.advance(SPEC_TTL_MS + 1)
    assert cache.spec("c1").config == {"a": 1}  # type: ignore[union-attr]
    store.put_tenant(Tenant("default"), now_ms=0)
    clock.advance(SPEC_TTL_MS + 1)
    before = len(reads)
    cache.spec("c0")
    assert len(reads) == before + 1
    store.close()


def test_channels_gone_idle_are_closed_and_leave_no_thread(receiver: Receiver) -> None:
    """A thousand webhook destinations through the cache, then idle: closing them leaves the
    process as many threads as before they were built (the shared loop aside)."""
    def threads() -> int:
        return sum(1 for t in threading.enumerate() if "process_request_thread" not in t.name)

    clock = ManualClock(0)
    cache = ChannelCache(lambda n, t: None, clock=clock)
    specs = [ChannelSpec(name=f"h{i}", tenant=f"t{i % 100}", kind=ChannelKind.WEBHOOK,
                         config={"url": f"{receiver.url}/d{i}"}) for i in range(1_000)]
    before = threads()
    for spec in specs:
        assert cache.channel(spec).send(envelopes(1))[0].outcome is Outcome.DELIVERED
    assert len(receiver.received()) == 1_000
    clock.advance(60_000)
    cache.channel(specs[0])  # still in use
    assert cache.close_idle(idle_ms=60_000) == 999
    cache.close()  # the last one, and the build threads
    time.sleep(0.1)
    assert threads() - before <= 2  # the channel loop, started by the first send


def test_a_webhook_channel_is_built_in_the_caller_and_starts_no_build_thread(
        receiver: Receiver) -> None:
    """A webhook channel's build does no I/O (0.3 ms): a burst of new webhook destinations
    starts no build thread (it had started the whole pool in every process), while a kind
    whose build may wait on the network still builds on the pool."""
    def build_threads() -> int:
        return sum(1 for t in threading.enumerate() if t.name.startswith("tocsin-build"))

    before = build_threads()
    cache = ChannelCache(lambda n, t: None, clock=ManualClock(0))
    specs = [ChannelSpec(name=f"h{i}", tenant=f"t{i % 10}", kind=ChannelKind.WEBHOOK,
                         config={"url": f"{receiver.url}/d{i}"}) for i in range(200)]
    with ThreadPoolExecutor(8) as callers:  # builds asked for at once, as a burst does
        built = list(callers.map(cache.channel, specs))
    assert [c.spec for c in built] == specs
    assert build_threads() == before
    slow = Builds()
    slow.release.set()
    pooled = ChannelCache(lambda n, t: None, clock=ManualClock(0), build=slow)
    assert pooled.channel(_spec("x")).spec.name == "x"
    assert build_threads() == before + 1
    cache.close()
    pooled.close()


def test_channel_async_gives_up_at_the_deadline_without_cancelling_the_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    monkeypatch.setenv("TOCSIN_CHANNEL_BUILD_SECONDS", "0.2")
    builds = Builds()
    cache = ChannelCache(lambda n, t: None, clock=ManualClock(0), build=builds)

    async def twice() -> tuple[BaseException | Channel, Channel]:
        first = await asyncio.gather(cache.channel_async(_spec("slow")),
                                     return_exceptions=True)
        builds.release.set()
        for _ in range(100):  # the same build, finished: no second one
            try:
                return first[0], await cache.channel_async(_spec("slow"))
            except ChannelBuildTimeout:
                await asyncio.sleep(0.05)
        raise AssertionError("never built")

    timed_out, built = asyncio.run(twice())
    assert isinstance(timed_out, ChannelBuildTimeout)
    assert built.spec.name == "slow" and builds.started == ["slow"]
    cache.close()


class SlowRecordings(Recordings):
    """Recording channels whose builds wait for :attr:`release` (or :data:`SLOW_S`)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.builds = 0

    def build(self, spec: ChannelSpec) -> RecordingChannel:
        self.builds += 1
        self.release.wait(SLOW_S)
        return super().build(spec)


def test_a_send_that_outlasts_its_channels_build_goes_back_unsent_and_spends_no_attempt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No attempt was made, so none is spent: the chunk goes back PENDING (it had been
    answered RETRY, a first build on a busy machine costing a schedule an attempt and its
    back-off), and once the channel is built it is delivered on its first attempt."""
    monkeypatch.setenv("TOCSIN_CHANNEL_BUILD_SECONDS", "0.2")
    store = open_store(f"sqlite:///{tmp_path / 't.db'}", buckets=4)
    store.put_channel(_spec("slow"))
    clock = ManualClock(1_700_000_000_000)
    recordings = SlowRecordings()
    local = LocalDispatcher(store, clock=clock, recordings=recordings)
    try:
        [(made, _)] = store.create([NewSchedule(channel="slow", payload=b"{}",
                                                due_ms=clock.now_ms())], now_ms=clock.now_ms())
        for _ in range(3):  # each claims it, waits out the deadline and hands it back
            local.step()
        waiting = store.get(made.id)
        assert (waiting.status, waiting.attempts, waiting.last_error) == (
            Status.PENDING, 0, None)
        assert recordings.recorded("slow") == []
        recordings.release.set()
        local.run_until_idle()
        done = store.get(made.id)
        assert (done.status, done.attempts) == (Status.DELIVERED, 1)
        assert [e.schedule_id for e in recordings.recorded("slow")] == [made.id]
        assert [e.attempt for e in recordings.recorded("slow")] == [1]
        assert recordings.builds == 1  # one build, waited for by every send
    finally:
        local.close()
        store.close()
