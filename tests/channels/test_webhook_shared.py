"""Webhook channels share one loop and one connection pool per process: a real HTTP receiver,
a thousand channel instances, and the threads of this process counted (the receiver's own
threads, one per connection it serves, are left out of the count)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from tests.channels.envelopes import envelopes
from tocsin.abc import Channel
from tocsin.channels import build_channel
from tocsin.channels.shared import close_shared, shared_loop
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.receiver import Receiver

CHANNELS = 1_000
PER_CHANNEL = 3
SPARE_THREADS = 8
"""What the process may add to its threads however many channels: the shared loop's thread
and its resolver's few (none here: the receiver is an address, not a name)."""


def _threads() -> int:
    """This process's threads but the receiver's per-connection ones."""
    return sum(1 for t in threading.enumerate() if "process_request_thread" not in t.name)


def _hook(i: int, url: str, **config: object) -> ChannelSpec:
    return ChannelSpec(name=f"hook{i}", tenant=f"t{i % 100}", kind=ChannelKind.WEBHOOK,
                       config={"url": f"{url}/d{i}", "concurrency": 4, **config})


def test_a_thousand_channels_deliver_everything_on_a_bounded_number_of_threads(
        receiver: Receiver) -> None:
    before = _threads()
    channels = [build_channel(_hook(i, receiver.url)) for i in range(CHANNELS)]
    with ThreadPoolExecutor(8) as senders:  # eight callers at once, like a dispatcher's
        outcomes = list(senders.map(lambda c: {r.outcome for r in c.send(envelopes(PER_CHANNEL))},
                                    channels))
        peak = _threads() - 8
    assert outcomes == [{Outcome.DELIVERED}] * CHANNELS
    receiver.wait_for(CHANNELS * PER_CHANNEL)
    got = receiver.received()
    assert len(got) == CHANNELS * PER_CHANNEL
    assert {r.path for r in got} == {f"/d{i}" for i in range(CHANNELS)}
    assert peak - before <= SPARE_THREADS, f"{peak - before} threads for {CHANNELS} channels"
    for channel in channels:
        channel.close()
    assert _threads() - before <= SPARE_THREADS


def test_closed_channels_leave_no_thread_and_the_shared_loop_stops_on_close(
        receiver: Receiver) -> None:
    close_shared()
    before = _threads()
    channels = [build_channel(_hook(i, receiver.url)) for i in range(50)]
    for channel in channels:
        assert channel.send(envelopes(1))[0].outcome is Outcome.DELIVERED
        channel.close()
    assert _threads() - before <= SPARE_THREADS
    close_shared()  # what a process does at exit
    assert _threads() == before
    again = build_channel(_hook(0, receiver.url))  # used again: the loop starts anew
    assert again.send(envelopes(1))[0].outcome is Outcome.DELIVERED


def test_send_async_awaits_from_another_loop_and_blocking_channels_run_on_the_pool(
        receiver: Receiver) -> None:
    hooks: list[Channel] = [build_channel(_hook(i, receiver.url)) for i in range(50)]
    assert all(h.is_async for h in hooks)
    file = build_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={}))
    assert not file.is_async

    async def all_of_them() -> list[list[object]]:
        assert asyncio.get_running_loop() is not shared_loop().loop
        sends = [c.send_async(envelopes(2)) for c in [*hooks, file]]
        return [[r.outcome for r in results] for results in await asyncio.gather(*sends)]

    assert asyncio.run(all_of_them()) == [[Outcome.DELIVERED] * 2] * 51
    assert len(receiver.received()) == 100


def test_concurrency_caps_each_channel_not_the_origin(receiver: Receiver) -> None:
    """Two channels to one origin: one's held requests take none of the other's slots."""
    receiver.reset(hold=2)
    slow = build_channel(_hook(1, receiver.url, concurrency=2))
    fast = build_channel(_hook(2, receiver.url, concurrency=2))
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(slow.send, envelopes(4))
        receiver.wait_held(2)
        assert [r.outcome for r in fast.send(envelopes(4))] == [Outcome.DELIVERED] * 4
        assert not held.done()
        receiver.release()
        assert {r.outcome for r in held.result(30)} == {Outcome.DELIVERED}
