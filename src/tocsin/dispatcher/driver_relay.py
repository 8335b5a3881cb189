"""The relay in a thread of the dispatcher's driver: the hand-overs in the main query's gaps
between batches (:mod:`tocsin.dispatcher.handover`), without a query of its own.

Each trigger it asks the store when the next schedule falls due (one indexed read); when one
falls due within a hand-over window it holds one relay window over every bucket — handing
over only at the start of each period of the main grid, for a second at most
(:func:`~tocsin.dispatcher.handover.relay_zone`) — and looks again at once. What it claims
goes to the delivery engine of the driver process, which sends and acknowledges it under the
window's epoch like any other claim.

A ``tocsin-relay`` Spark query did the same at the cost, on an idle machine, of a long-lived
Python process for its source (~115 MB resident), its planners' and workers' Python processes
at every start, and the JVM's work for a trigger a second; what the relay claims is the
trickle due in the gaps, which one thread hands over as well as an executor.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from tocsin.dispatcher.core import DispatchCore, log
from tocsin.dispatcher.deliver import Tally
from tocsin.dispatcher.handover import hold, window_end
from tocsin.dispatcher.options import DispatchOptions
from tocsin.errors import StoreError

__all__ = ["DriverRelay", "relay_options"]


def relay_options(options: DispatchOptions) -> DispatchOptions:
    """The relay's options from the dispatcher's: one range over every bucket, a partition's
    share of the batch cap, no keep-warm batches of its own."""
    import math

    return replace(options, relay=1, partitions=1, keep_warm_ms=0,
                   batch_cap=math.ceil(options.batch_cap / options.partitions))


class DriverRelay:
    """Runs ``core``'s relay windows (``core.options`` from :func:`relay_options`) in a daemon
    thread until :meth:`stop`, looking every ``trigger_s`` while nothing falls due; :meth:`step`
    is one look (for tests)."""

    def __init__(self, core: DispatchCore, *, trigger_s: float) -> None:
        self.core, self.trigger_s = core, trigger_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-relay", daemon=True)

    def start(self) -> DriverRelay:
        """Start the thread, with the GC of this process tuned as in every process that
        delivers (:func:`~tocsin.spark.worker.tune_gc`): the relay's engine takes a whole burst
        when they find it first."""
        from tocsin.spark.worker import tune_gc

        tune_gc()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current window; the engine finishes or hands back what it holds,
        then the channels close."""
        self._stop.set()
        self._thread.join(timeout=30)
        self.core.close()

    def step(self) -> Tally | None:
        """One look: when a schedule falls due within a window, hold one relay window and
        return its tally; else None."""
        core, window = self.core, self.core.options.hand_over_ms
        now = core.clock.now_ms()
        due = core.store.next_due_ms(now_ms=now, lease_ms=core.options.lease_ms,
                                     run=core.options.run)
        if window <= 0 or due is None or due > now + window:
            return None
        core.warm()  # its first window opens the channels
        return hold(core, 0, relay=True,
                    end_ms=window_end(now, window,
                                      shift_ms=core.options.grid_ms + window // 2))[0]

    def _loop(self) -> None:
        pause = self.trigger_s
        while not self._stop.wait(pause):
            pause = self.trigger_s
            try:
                if self.step() is not None:
                    pause = 0  # something was due: look again at once, the next window
            except StoreError as exc:  # the window ended early: the next trigger tries again
                log.warning("relay: store unavailable: %s", exc)
            except Exception:  # never let one bad window stop the relay for good
                log.exception("relay: window failed")
