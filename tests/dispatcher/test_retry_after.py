"""A receiver's ``Retry-After`` becomes the retry time of that delivery, through ``deliver``
on a real store (both backends) and a real HTTP receiver (no Spark needed)."""

from __future__ import annotations

import random

from tocsin.clock import ManualClock
from tocsin.dispatcher.core import DispatchCore
from tocsin.dispatcher.options import DispatchOptions
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores import open_store
from tocsin.testing.receiver import Receiver

NOW = 1_900_000_000_000


def _deliver_once(backend_url: str, receiver: Receiver) -> tuple[int, int | None, str | None]:
    store = open_store(backend_url, buckets=4)
    clock = ManualClock(NOW)
    options = DispatchOptions(store_url=backend_url, buckets=4, retry_base_ms=1_000,
                              retry_cap_ms=300_000, max_attempts=5)
    core = DispatchCore(store, options=options, clock=clock, rng=random.Random(1))
    try:
        store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                                      config={"url": receiver.url + "/in"}))
        [(made, _)] = store.create([NewSchedule(channel="hook", payload=b"1", due_ms=NOW)],
                                   now_ms=NOW)
        epoch = store.next_epoch()
        rows = store.claim(epoch=epoch, bucket_lo=0, bucket_hi=3, until_ms=NOW, now_ms=NOW,
                           lease_ms=60_000, limit=10)
        tally = core.deliver(rows)
        after = store.get(made.id)
        assert tally.retried == 1 and after.status is Status.PENDING
        return clock.now_ms(), after.next_ms, after.last_error
    finally:
        core.close()
        store.close()


def test_retry_after_sets_the_next_attempt(backend_url: str, receiver: Receiver) -> None:
    receiver.reset(status=429, headers={"Retry-After": "90"},
                   body=b"slow down, internal quota db-7")
    ended, next_ms, error = _deliver_once(backend_url, receiver)
    assert next_ms == ended + 90_000  # not the policy's 1 s back-off
    assert error == "HTTP 429 Too Many Requests"


def test_without_retry_after_the_back_off_applies(backend_url: str, receiver: Receiver) -> None:
    receiver.reset(status=503)
    ended, next_ms, _ = _deliver_once(backend_url, receiver)
    assert next_ms is not None and ended < next_ms <= ended + 2_000
