"""Dispatcher runs: each start of a dispatcher is a *run* with an id and a heartbeat in the
store, and every epoch it takes is recorded with it. When a run's beat stops (kill -9, a lost
machine), another run releases its claims at once — as a lease that has just ended, so they are
reclaimed under the same attempt and delivery id — instead of waiting out the 120 s lease. A
live run's claims are never released: its beat comes from a thread of its own, not from the
batches, so a long batch does not look like a death. The epoch fence stays: a run thought dead
that wakes up cannot acknowledge a row reclaimed since.

``tocsin up`` registers the run before its API answers (so ``/readyz`` waits for the new run's
first batch rather than trusting the beats of the process that died) and hands its id to the
dispatcher child in :data:`RUN_ENV`.
"""

from __future__ import annotations

import logging
import os
import threading

from tocsin.abc import Store
from tocsin.clock import Clock
from tocsin.errors import StoreError

__all__ = ["RUN_BEAT_MS", "RUN_ENV", "RUN_STALE_MS", "RunBeat", "new_run_id"]

log = logging.getLogger("tocsin.dispatcher")
RUN_BEAT_MS = 2_000
"""A run beats this often."""
RUN_STALE_MS = 10_000
"""A run that has not beaten for this long is dead: five beats missed."""
RUN_ENV = "TOCSIN_DISPATCHER_RUN"
"""The environment variable by which ``tocsin up`` hands its dispatcher child the run id."""


def new_run_id() -> str:
    """A fresh run id (random, 16 hex characters)."""
    return os.urandom(8).hex()


class RunBeat:
    """A daemon thread beating ``run`` every :data:`RUN_BEAT_MS` until :meth:`stop`."""

    def __init__(self, store: Store, run: str, *, clock: Clock) -> None:
        self.store, self.run, self.clock = store, run, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-run-beat", daemon=True)

    def start(self) -> RunBeat:
        """Beat once now (so the run exists before anything else happens), then keep beating."""
        self.store.beat_run(self.run, now_ms=self.clock.now_ms())
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(RUN_BEAT_MS / 1000):
            try:
                self.store.beat_run(self.run, now_ms=self.clock.now_ms())
            except StoreError as exc:  # the next beat tries again
                log.warning("dispatcher run %s: could not beat: %s", self.run, exc)

    def stop(self) -> None:
        """Stop beating and mark the run ended (its claims are released at once)."""
        self._stop.set()
        try:
            self.store.end_run(self.run)
        except StoreError as exc:
            log.warning("dispatcher run %s: could not record its end: %s", self.run, exc)
