"""Dispatcher runs: each start of a dispatcher is a *run* with an id and a heartbeat in the
store, and every epoch it takes is recorded with it. Several dispatchers on one store share the
buckets between their runs (:mod:`tocsin.stores.sql.owners`): the store decides who is a
member from the beats, and each dispatcher looks at the membership every :data:`WATCH_MS`
while it shares the buckets (every :data:`RUN_BEAT_MS` alone).

When a run's beat stops for :data:`RUN_STALE_MS` (a frozen process, a lost machine), or at once
when its process dies (PostgreSQL: the session holding its lock closes), the next look fences
it — it owns no bucket any more, so its claims, windows and pulls take nothing — releases its
claims as ended leases (reclaimed under the same attempt and delivery id) and shares its
buckets out between the others. A live run's claims are never released: its beat comes from a
thread of its own, not from the batches, so a long batch does not look like a death. The epoch
fence stays: a run thought dead that wakes up cannot acknowledge a row reclaimed since, and its
first beat tells it that it was fenced (:class:`RunBeat` then ends the process, whose
supervisor starts it again as a new run).

``tocsin up`` registers the run before its API answers (so ``/readyz`` waits for the new run's
first batch rather than trusting the beats of the process that died) and hands its id to the
dispatcher child in :data:`RUN_ENV`.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
from collections.abc import Callable

from tocsin.abc import Membership, Store
from tocsin.clock import Clock
from tocsin.errors import StoreError

__all__ = ["DRAIN_MS", "RUN_BEAT_MS", "RUN_ENV", "RUN_STALE_MS", "WATCH_MS", "RunBeat",
           "look_every_ms", "new_run_id"]

log = logging.getLogger("tocsin.dispatcher")
RUN_BEAT_MS = 1_000
"""A run beats this often."""
RUN_STALE_MS = 5_000
"""A run that has not beaten for this long is fenced out: five beats missed (a frozen process;
one that died is seen sooner where the store has session locks)."""
WATCH_MS = 100
"""How often a dispatcher that shares the buckets looks at the membership where the store
shows a death at once (a read, and a write only when the assignment changes): a dead
dispatcher's buckets are taken over within this, plus the windows' poll. A dispatcher that owns
every bucket alone looks every :data:`RUN_BEAT_MS` (:func:`look_every_ms`)."""
DRAIN_MS = 5_000
"""On a stop, how long a dispatcher that gave its buckets up waits for its lanes to send and
acknowledge what they hold before it releases the rest to the others."""
RUN_ENV = "TOCSIN_DISPATCHER_RUN"
"""The environment variable by which ``tocsin up`` hands its dispatcher child the run id."""


def look_every_ms(membership: Membership, run: str, *, session_locks: bool) -> int:
    """How long ``run`` waits before its next look at the membership after ``membership``:
    :data:`WATCH_MS` while it shares the buckets with another run on a store that shows a
    death at once, else :data:`RUN_BEAT_MS`. Alone, there is nobody to take over from: the
    look only finds a dispatcher that joins, which takes its share by its own looks. On
    PostgreSQL the look ten times a second was most of an idle dispatcher process's CPU
    (1.2 % of a core, the server's own not counted)."""
    if session_locks and any(o.run != run for o in membership.owners):
        return WATCH_MS
    return RUN_BEAT_MS


def new_run_id() -> str:
    """A fresh run id (random, 16 hex characters)."""
    return os.urandom(8).hex()


class RunBeat:
    """A daemon thread that beats ``run`` every :data:`RUN_BEAT_MS` and looks at the
    membership (:meth:`~tocsin.abc.DispatchStore.share_buckets`) every :data:`WATCH_MS` while
    it shares the buckets (every beat alone, or where the store has no session locks), until
    :meth:`stop` or :meth:`leave`. ``on_fenced`` is called (from the thread) when a beat finds
    the run fenced out."""

    def __init__(self, store: Store, run: str, *, clock: Clock,
                 on_fenced: Callable[[], None] | None = None) -> None:
        self.store, self.run, self.clock = store, run, clock
        self.on_fenced = on_fenced
        self.slot = 0
        """The run's checkpoint slot (from :meth:`start`)."""
        self.membership: Membership | None = None
        """What the last look at the membership found (None before the first)."""
        self._lock_id: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-run-beat", daemon=True)

    def start(self) -> RunBeat:
        """Join the membership now (so the run exists and has its slot before anything else
        happens), then keep beating and looking."""
        lock_id = random.randrange(1, 2**31)
        if self.store.hold_run_lock(lock_id):
            self._lock_id = lock_id
        self.slot = self.store.join_run(self.run, now_ms=self.clock.now_ms(),
                                        host=socket.gethostname(), pid=os.getpid(),
                                        stale_ms=RUN_STALE_MS, lock_id=self._lock_id)
        self._thread.start()
        return self

    def _loop(self) -> None:
        every_ms = WATCH_MS if self._lock_id is not None else RUN_BEAT_MS
        next_beat = 0
        while not self._stop.wait(every_ms / 1000):
            now = self.clock.now_ms()
            try:
                if now >= next_beat:
                    if self._lock_id is not None:  # again after a server restart
                        self.store.hold_run_lock(self._lock_id)
                    if not self.store.beat_run(self.run, now_ms=now):
                        self._fenced()
                        return
                    next_beat = now + RUN_BEAT_MS
                membership = self.membership = self.store.share_buckets(
                    now_ms=now, stale_ms=RUN_STALE_MS, me=self.run)
                if membership.released:
                    log.warning("dispatcher: released %d claims of dispatcher runs that "
                                "stopped beating", membership.released)
                every_ms = look_every_ms(membership, self.run,
                                         session_locks=self._lock_id is not None)
            except StoreError as exc:  # the next turn tries again
                log.warning("dispatcher run %s: could not beat: %s", self.run, exc)

    def _fenced(self) -> None:
        log.error("dispatcher run %s was fenced out: it missed its beats for %.0f s and its "
                  "buckets and claims went to the other dispatchers", self.run,
                  RUN_STALE_MS / 1000)
        if self.on_fenced is not None:
            self.on_fenced()

    def leave(self) -> None:
        """Stop beating and give the run's buckets up at once (the others take them); its
        claims stay its own until :meth:`stop`."""
        self._stop.set()
        try:
            self.store.leave_run(self.run, now_ms=self.clock.now_ms(), stale_ms=RUN_STALE_MS)
        except StoreError as exc:
            log.warning("dispatcher run %s: could not give its buckets up: %s", self.run, exc)

    def stop(self) -> None:
        """Stop beating and mark the run ended (its claims are released, its buckets shared
        out between the others at once)."""
        self._stop.set()
        try:
            self.store.end_run(self.run, now_ms=self.clock.now_ms())
        except StoreError as exc:
            log.warning("dispatcher run %s: could not record its end: %s", self.run, exc)
