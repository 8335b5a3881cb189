"""kill -9 of the dispatcher in the middle of a burst, then a restart: nothing is lost, and a
repeat carries the same delivery id — also with a slow destination in the mix, whose schedules
are in its lane (queued or in flight) when the process dies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tocsin.domain import Status
from tocsin.testing.dispatch import (
    assert_each_delivered_under_one_id,
    dispatcher_env,
    file_store,
    read_lines,
    schedule_burst,
    wait_until,
)
from tocsin.testing.processes import kill_tree, start_tocsin

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 10_000


def test_kill_9_mid_burst_loses_nothing(tmp_path: Path, say: Callable[[str], None]) -> None:
    from tocsin.clock import SystemClock
    from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
    from tocsin.testing.receiver import Receiver

    slow = Receiver().start()
    slow.reset(delay_s=2)
    store, out = file_store(tmp_path, buckets=32)
    store.put_channel(ChannelSpec(name="slow", kind=ChannelKind.WEBHOOK,
                                  config={"url": slow.url + "/slow"}))
    env = dispatcher_env(tmp_path, buckets=32, master="local[*]", lease_s=15)
    first = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-1.log")
    try:
        # the burst starts once Spark is up, so the kill lands mid-burst
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=120,
                   what="the dispatcher to start")
        ids = schedule_burst(store, N, start_in_ms=2_000, over_ms=20_000)
        now = SystemClock().now_ms()
        slow_ids = {s.id for s, _ in store.create(
            [NewSchedule(channel="slow", payload=b"{}", due_ms=now + 2_000 + i * 50)
             for i in range(200)], now_ms=now)}
        wait_until(lambda: len(read_lines(out)) > N // 4, timeout_s=120, what="a quarter")
    finally:
        kill_tree(first)
    delivered_at_kill = len(read_lines(out))
    assert delivered_at_kill < N, "the kill must land mid-burst for this test to mean anything"
    second = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-2.log")
    try:
        wait_until(lambda: {r["schedule_id"] for r in read_lines(out)} >= ids, timeout_s=240,
                   interval_s=1, what="every schedule delivered after the restart")
        wait_until(lambda: {r.headers["tocsin-schedule-id"] for r in slow.received()}
                   >= slow_ids, timeout_s=240, interval_s=1,
                   what="every slow destination's schedule delivered after the restart")
        wait_until(lambda: store.counts()[Status.DELIVERED] == N + len(slow_ids), timeout_s=60,
                   what="every schedule acknowledged")
    finally:
        kill_tree(second)
        slow.stop()
    repeats = assert_each_delivered_under_one_id(out, ids)
    slow_ids_by_delivery: dict[str, set[str]] = {}
    for r in slow.received():
        slow_ids_by_delivery.setdefault(r.headers["tocsin-schedule-id"], set()).add(
            r.headers["tocsin-delivery-id"])
    # a repeat of a slow delivery (in flight at the kill) keeps its delivery id
    assert all(len(d) == 1 for d in slow_ids_by_delivery.values())
    say(f"kill -9 at {delivered_at_kill}/{N} delivered; repeats after restart: {repeats}; "
        f"slow destination: {len(slow.received())} requests for {len(slow_ids)} schedules")
