"""The relay in a thread of the driver (``tocsin dispatcher``'s): a look every trigger, a
relay window only when a schedule falls due within one, handing over in the relay's zone —
on a clock whose waits are jumps, over every store."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.dispatcher.conftest import rig_over
from tests.dispatcher.test_handover import T0, Rig, W
from tocsin.dispatcher.driver_relay import DriverRelay, relay_options
from tocsin.dispatcher.handover import relay_zone
from tocsin.dispatcher.options import DispatchOptions
from tocsin.domain import Status
from tocsin.spark.worker import GC_THRESHOLDS


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    with rig_over(backend_url, Rig) as rig:
        rig.core.options = replace(relay_options(rig.core.options), hand_over_ms=W)
        yield rig


def test_nothing_due_within_a_window_costs_one_look(rig: Rig) -> None:
    later = rig.schedule(T0 + 10 * W)
    relay = DriverRelay(rig.core, trigger_s=1)
    assert relay.step() is None
    assert rig.clock.now_ms() == T0  # no window held, no wait
    assert rig.store.get(later).status is Status.PENDING


def test_a_schedule_due_in_the_zone_is_handed_over_at_its_instant(rig: Rig) -> None:
    zone_start, zone_end = relay_zone(T0 + W // 2, W)  # the next period's first half
    sid = rig.schedule(zone_start + 100)
    rig.clock.advance(W // 2 + W // 4)  # 1.5 s ahead of it: within a window
    tally = DriverRelay(rig.core, trigger_s=1).step()
    assert tally is not None
    assert rig.got() == [sid]
    done = rig.store.get(sid)
    assert done.status is Status.DELIVERED and done.lateness_ms == 0
    assert rig.clock.now_ms() <= zone_end


def test_the_relay_options_cover_every_bucket_with_a_partition_share() -> None:
    options = DispatchOptions(store_url="", partitions=4, batch_cap=100_000, keep_warm_ms=30_000)
    relay = relay_options(options)
    assert (relay.relay, relay.partitions, relay.batch_cap, relay.keep_warm_ms) == (
        1, 1, 25_000, 0)


def test_a_started_relay_tunes_its_process_gc(rig: Rig) -> None:
    """The relay's lanes deliver in the driver, as Spark's workers do in theirs."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    relay = DriverRelay(rig.core, trigger_s=60).start()
    try:
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        relay.stop()
        gc.set_threshold(*before)
