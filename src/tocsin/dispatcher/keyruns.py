"""A key's due run in one task: after a task delivers what its claim took, while any of it had
an ordering key and the task's budget remains, it claims its bucket range again — the next
heads of the keys just delivered, and anything else now due — under a new epoch of the same
run, delivers and acknowledges, and so on. A key with a backlog then drains in order at the
speed of its channel, not one schedule per micro-batch.

Each round is an ordinary claim (its own epoch and replay marker, a lease, the dead-run
release), so a crash mid-run repeats at most one round's deliveries, under their delivery ids.
"""

from __future__ import annotations

import math

from tocsin.dispatcher.core import BucketSpan, DispatchCore, bucket_ranges, retrying
from tocsin.dispatcher.deliver import Tally

__all__ = ["KEY_RUN_BUDGET_MS", "continue_key_runs", "span_of"]

KEY_RUN_BUDGET_MS = 1_000
"""How long a task keeps claiming the next heads of its keys, from its start. The micro-batch
ends when its slowest task does, so this bounds how long one hot key can hold every other
bucket range's next batch back: about one trigger."""


def span_of(core: DispatchCore, partition: int, *, epoch: int, until_ms: int) -> BucketSpan:
    """Partition ``partition``'s bucket range (as :meth:`DispatchCore.parts` cut it) for a
    claim by ``epoch``."""
    ranges = bucket_ranges(core.store.buckets, core.options.partitions)
    lo, hi = ranges[partition]
    return BucketSpan(epoch, lo, hi, until_ms, math.ceil(core.options.batch_cap / len(ranges)))


def continue_key_runs(core: DispatchCore, partition: int, *, keyed: bool,
                      started_ms: int) -> tuple[Tally, int]:
    """While the last round (the first: the task's own claim, already delivered; ``keyed``:
    it held a row with an ordering key) held a keyed row and the budget from ``started_ms``
    remains, claim ``partition``'s range again and deliver. The extra rounds' tally, and how
    many rows they claimed."""
    tally, claimed = Tally(), 0
    opts, store = core.options, core.store
    while keyed:
        now = core.clock.now_ms()
        if now - started_ms >= KEY_RUN_BUDGET_MS:
            break
        epoch = retrying(lambda n=now: store.next_epoch(run=opts.run, now_ms=n),  # type: ignore[misc]
                         what="epoch")
        rows = core.claim(span_of(core, partition, epoch=epoch, until_ms=now))
        claimed += len(rows)
        tally.add(core.deliver(rows))
        keyed = any(r.ordering_key is not None for r in rows)
    return tally, claimed
