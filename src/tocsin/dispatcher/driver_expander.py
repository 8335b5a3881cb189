"""Recurring expansion in a thread of the dispatcher's driver: the same batches as the
``tocsin-expander`` Spark query (:mod:`tocsin.dispatcher.expander`), without a query.

Each trigger it asks :meth:`~tocsin.dispatcher.expansion.ExpansionCore.next_offset` (one indexed
read); when some recurring schedule is due for expansion it expands every bucket range in turn
and records the batch as the expander's beat. A Spark query for this paid, on an idle machine,
a long-lived Python process (~120 MB resident), its planners at every start, and the JVM's
work for a trigger a second; what it buys — expansion spread over executors — matters only for
a very large set of recurring schedules (``recurring_expander = "spark"``).
"""

from __future__ import annotations

import threading

from tocsin.dispatcher.beat import ExpanderBeat
from tocsin.dispatcher.core import Offset, log
from tocsin.dispatcher.expansion import EXPANDER, ExpandTally, ExpansionCore
from tocsin.errors import StoreError

__all__ = ["DriverExpander"]


class DriverExpander:
    """Runs ``core``'s expansion batches every ``trigger_s`` in a daemon thread until
    :meth:`stop`; :meth:`step` is one trigger (for tests)."""

    def __init__(self, core: ExpansionCore, *, trigger_s: float) -> None:
        self.core, self.trigger_s = core, trigger_s
        self._offset: Offset = {"until": 0}
        self._batch: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-expander",
                                        daemon=True)

    def start(self) -> DriverExpander:
        """Start the thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current batch."""
        self._stop.set()
        self._thread.join(timeout=30)

    def step(self) -> ExpandTally | None:
        """One trigger: the batch's tally, or None when nothing was due for expansion."""
        end = self.core.next_offset(self._offset)
        if end == self._offset:
            return None
        if self._batch is None:  # batch ids go on from the last beat's (its totals too)
            last = self.core.store.last_beat(EXPANDER)
            self._batch = ExpanderBeat.from_info(last[1] if last else None).batch_id + 1
        tally = ExpandTally()
        for lo, hi, until in self.core.parts(self._offset, end):
            tally.add(self.core.expand(lo, hi, until))
        self.core.record_batch(self._batch, tally)
        self._batch += 1
        self._offset = end
        return tally

    def _loop(self) -> None:
        while not self._stop.wait(self.trigger_s):
            try:
                self.step()
            except StoreError as exc:  # expand() retried for a while: try again next trigger
                log.warning("expander: batch failed, store unavailable: %s", exc)
            except Exception:  # never let one bad batch stop the expansion for good
                log.exception("expander: batch failed")
