"""The recurring expansion in a thread of the driver (the default, ``recurring_expander =
driver``): the same batches as the Spark query, on a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tocsin.abc import Store
from tocsin.clock import ManualClock
from tocsin.dispatcher.driver_expander import DriverExpander
from tocsin.dispatcher.expansion import EXPANDER, ExpansionCore
from tocsin.dispatcher.options import DispatchOptions
from tocsin.domain import ChannelKind, ChannelSpec, CronTrigger, Recurring, Status
from tocsin.stores import open_store

T0 = 1_700_000_040_000


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    store = open_store(backend_url, buckets=8)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, config={}))
    try:
        yield store
    finally:
        store.close()


def test_firings_are_expanded_once_and_the_batches_beat(store: Store) -> None:
    clock = ManualClock(T0)
    trigger = CronTrigger.parse("* * * * * *", "UTC", start_ms=T0 + 1_000, end_ms=T0 + 3_000)
    store.create_recurring(Recurring(id="rec", trigger=trigger, channel="out",
                                     payload=b"{}", count=2), now_ms=T0)
    options = DispatchOptions(store_url="", buckets=8, partitions=2)
    expander = DriverExpander(ExpansionCore(store, options=options, clock=clock), trigger_s=1)
    tally = expander.step()
    assert tally is not None and tally.messages == 6  # three firings within the horizon
    assert expander.step() is None  # nothing more is due for expansion
    assert store.counts()[Status.PENDING] == 6
    beat = store.last_beat(EXPANDER)
    assert beat is not None and beat[1]["batch_id"] == 0
    again = DriverExpander(ExpansionCore(store, options=options, clock=clock), trigger_s=1)
    clock.advance(3_600_000)  # the rule ended: its expansion point moves on, nothing new
    again.step()
    assert store.counts()[Status.PENDING] == 6
    last = store.last_beat(EXPANDER)
    assert last is not None and last[1]["batch_id"] in (0, 1)  # ids go on from the last beat
