"""The dispatcher in one process, without Spark: :class:`LocalDispatcher`.

Each :meth:`~LocalDispatcher.step` is one micro-batch of the recurring expansion and one of the
delivery, through the same cores the Spark query calls
(:class:`~tocsin.dispatcher.expansion.ExpansionCore`,
:class:`~tocsin.dispatcher.core.DispatchCore`), with time from the clock it is given. Driven by
a :class:`~tocsin.clock.ManualClock` it is deterministic: advance the clock, step, look::

    clock = ManualClock()
    local = LocalDispatcher(store, clock=clock, recordings=Recordings())
    store.create([...], now_ms=clock.now_ms())
    clock.advance(1_000)
    local.step()                      # claims, delivers, acknowledges what fell due

``run`` steps it in real time until told to stop (a small deployment without Spark).
"""

from __future__ import annotations

import os
import random
import socket
import threading
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

from tocsin.abc import Channel, Store
from tocsin.clock import Clock
from tocsin.dispatcher.channel_cache import ChannelCache
from tocsin.dispatcher.core import DispatchCore, Offset, channel_spec
from tocsin.dispatcher.deliver import Tally
from tocsin.dispatcher.expansion import ExpandTally, ExpansionCore
from tocsin.dispatcher.handover import key_runs
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runs import RUN_STALE_MS, new_run_id
from tocsin.domain import ChannelKind, ChannelSpec

__all__ = ["LocalDispatcher", "Recorder", "Step"]


@dataclass(kw_only=True, slots=True)
class Step:
    """What one step did: whether each batch ran, and its tally."""

    delivered: Tally = field(default_factory=Tally)
    expanded: ExpandTally = field(default_factory=ExpandTally)
    claimed: int = 0
    """Rows the delivery batch claimed."""
    dispatched: bool = False
    """A delivery batch ran (the store said something was claimable)."""
    expanded_batch: bool = False
    """An expansion batch ran (some recurring schedule was due for expansion)."""

    @property
    def idle(self) -> bool:
        """Nothing was claimed and no recurring schedule moved on (a batch may still have run:
        e.g. the due head of a halted key makes one that claims nothing)."""
        return self.claimed == 0 and self.expanded.recurring == 0


class Recorder(Protocol):
    """Builds recording channels that record in it (:class:`tocsin.testing.Recordings`)."""

    def build(self, spec: ChannelSpec) -> Channel:
        """A recording channel for ``spec``."""
        ...


class LocalDispatcher:
    """Expansion and delivery over ``store``, one batch each per :meth:`step`.

    ``options`` default to the settings' defaults for this store; ``recordings`` (a
    :class:`tocsin.testing.Recordings`) builds its recording channels, which then record there;
    ``rng`` draws the retry jitter."""

    def __init__(self, store: Store, *, clock: Clock, options: DispatchOptions | None = None,
                 recordings: Recorder | None = None,
                 rng: random.Random | None = None) -> None:
        from tocsin.channels import build_channel

        options = options or DispatchOptions(store_url="", buckets=store.buckets)
        # No hand-over windows, no keep-warm batches: a step is one batch at the clock's present,
        # and waits for none.
        options = replace(options, hand_over_ms=0, keep_warm_ms=0)
        self.options = options if options.run else replace(options, run=new_run_id())
        self.clock = clock
        self.recordings = recordings

        builders = {ChannelKind.RECORDING: recordings.build} if recordings else None

        def build(spec: ChannelSpec) -> Channel:
            return build_channel(spec, builders=builders)

        channels = ChannelCache(partial(channel_spec, store), clock=clock, build=build,
                                version=store.channels_version)
        self.dispatch = DispatchCore(store, options=self.options, clock=clock,
                                     channels=channels, rng=rng)
        self.expansion = ExpansionCore(store, options=self.options, clock=clock)
        # a member from the start: its epochs claim only in the buckets its run owns
        store.join_run(self.options.run, now_ms=clock.now_ms(), host=socket.gethostname(),
                       pid=os.getpid(), stale_ms=RUN_STALE_MS)
        self._offset: Offset = {"until": 0, "epoch": 0}
        self._expansion_offset: Offset = {"until": 0}
        self.batches = 0
        """Batches run so far (the batch id of the next one)."""

    def step(self) -> Step:
        """Run the expansion batch, then the delivery batch, if each has work now."""
        step = Step()
        end = self.expansion.next_offset(self._expansion_offset)
        for lo, hi, until in self.expansion.parts(self._expansion_offset, end):
            step.expanded.add(self.expansion.expand(lo, hi, until))
            step.expanded_batch = True
        if step.expanded_batch:
            self.expansion.record_batch(self.batches, step.expanded)
            self._expansion_offset = end
        started = self.clock.now_ms()
        step.delivered.add(self.dispatch.deliver([]))  # the engine's timers, at the clock's now
        end = self.dispatch.next_offset(self._offset)
        if end != self._offset:
            self.dispatch.warm()
        for partition, span in enumerate(self.dispatch.parts(self._offset, end)):
            task_started = self.clock.now_ms()
            rows = self.dispatch.claim(span)
            step.claimed += len(rows)
            step.delivered.add(self.dispatch.deliver(rows))
            more, claimed = key_runs(self.dispatch, partition, rows, started_ms=task_started)
            step.claimed += claimed
            step.delivered.add(more)
            step.dispatched = True
        if step.dispatched:
            self.dispatch.record_batch(self.batches, step.delivered, started_ms=started)
            self.dispatch.prune()
            self._offset = end
        self.batches += 1
        return step

    def run_until_idle(self, *, max_steps: int = 1_000) -> Tally:
        """Step until a step finds nothing to do (time does not move); the delivery tally."""
        total = Tally()
        for _ in range(max_steps):
            step = self.step()
            total.add(step.delivered)
            if step.idle:
                return total
        raise RuntimeError(f"still busy after {max_steps} steps")

    def run(self, stop: threading.Event, *, interval_s: float = 0.2) -> None:
        """Step every ``interval_s`` until ``stop`` is set (a real clock moves on its own)."""
        while not stop.is_set():
            if self.step().idle:
                stop.wait(interval_s)

    def close(self) -> None:
        """Stop the delivery engine and close the live channels (the store is the caller's)."""
        self.dispatch.close()
