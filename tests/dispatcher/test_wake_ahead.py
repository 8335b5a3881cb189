"""After a quiet spell long enough for Spark to stop the Python workers, the driver starts a
batch ahead of the next due schedule (``WAKE_AHEAD_MS``) instead of keeping workers warm with
a batch every 30 s; while they are warm, a batch starts only within a window."""

from __future__ import annotations

from tests.dispatcher import test_handover
from tests.dispatcher.test_handover import T0, Rig, W
from tocsin.dispatcher.core import WAKE_AHEAD_MS, WORKER_IDLE_MS

rig = test_handover.rig


def test_no_batch_at_rest_by_default(rig: Rig) -> None:
    core = rig.core
    assert core.options.keep_warm_ms == 0
    first = core.next_offset({"until": 0, "epoch": 0})
    for minute in range(1, 10):
        rig.clock.set(T0 + minute * 60_000)
        assert core.next_offset(first) == first


def test_a_quiet_spell_starts_the_batch_ahead_of_the_due_schedule(rig: Rig) -> None:
    core = rig.core
    first = core.next_offset({"until": 0, "epoch": 0})
    quiet = T0 + WORKER_IDLE_MS
    rig.clock.set(quiet)
    rig.schedule(quiet + W + WAKE_AHEAD_MS - 1)
    woke = core.next_offset(first)
    assert woke != first  # the workers may be gone: a batch now, WAKE_AHEAD_MS early
    rig.clock.set(quiet + 1_000)
    rig.schedule(quiet + 1_000 + W + WAKE_AHEAD_MS // 2)
    assert core.next_offset(woke) == woke  # warm again: a batch only within a window
    rig.clock.set(quiet + WAKE_AHEAD_MS)
    assert core.next_offset(woke) != woke


def test_the_warm_up_batch_is_one_task_over_every_bucket(rig: Rig) -> None:
    """It starts one reader and one writer, not one per partition, on the path to ready; a
    schedule already due in any bucket is claimed by it."""
    from dataclasses import replace

    core = rig.core
    core.options = replace(core.options, partitions=4)
    ids = {rig.schedule(T0 - 10) for _ in range(20)}  # spread over the buckets
    start = {"until": 0, "epoch": 0}
    warm = core.next_offset(start)
    assert warm.get("warm") == 1
    [span] = core.parts(start, warm)
    assert (span.lo, span.hi) == (0, rig.store.buckets - 1)
    assert {row.id for row in core.claim(span)} == ids
    rig.clock.advance(1)
    rig.schedule(T0 + 1)
    later = core.next_offset(warm)
    # then one task over every bucket while windows follow (only the first task would hold
    # one), and the partitions, as configured, without windows
    spans = core.parts(warm, later)
    assert [(s.lo, s.hi) for s in spans] == [(0, rig.store.buckets - 1)]
    core.options = replace(core.options, hand_over_ms=0)
    spans = core.parts(warm, later)
    assert len(spans) == 4
