"""Covering for a peer: a dispatcher claims, in another live dispatcher's buckets, what that one
left overdue.

A dispatcher that dies is seen at once on PostgreSQL (the session holding its lock closes) and
its buckets are shared out within a look (:data:`~tocsin.dispatcher.runs.WATCH_MS`). One that
freezes (SIGSTOP, a stalled virtual machine) keeps its buckets until its beats time out
(:data:`~tocsin.dispatcher.runs.RUN_STALE_MS`): a timeout short enough to hand them over
within a heartbeat would fence healthy dispatchers on a busy machine. Its schedules must not
wait for the fence.

Each dispatcher that shares the buckets looks, every
:data:`~tocsin.dispatcher.knobs.PEER_LOOK_MS`, in each other member's buckets for a schedule a
claim would take that fell due :data:`~tocsin.dispatcher.knobs.PEER_LATE_MS` ago or earlier
(one indexed read per member, as that member sees its holds and pauses). A member that left
one so late is *covered*: this dispatcher holds windows over its buckets
(:func:`~tocsin.dispatcher.handover.hold` with ``cover``), claiming there under its own epoch
and handing each schedule over at its due time, until that member beats again (a live one
beats every :data:`~tocsin.dispatcher.runs.RUN_BEAT_MS`) or leaves the membership (fenced: its
buckets are shared out, this dispatcher's share with them).

Covering changes nobody's ownership. A claim is the same compare-and-set whoever makes it, so a
schedule goes out once whether its owner or the cover took it; what the frozen dispatcher had
claimed stays its own (its lease, or its release at the fence, as before), and when it wakes it
finds what the cover took already claimed. A slow but live member claims again soon: the
cover's first claim that finds its schedule taken ends the cover's window, and the cover ends
when nothing is left overdue. Covered until its next beat instead, a busy member whose batch
turn left a schedule 50 ms late had the cover claim the same instants for up to a second, each
backing off from the other's wins (`bench/run failover`: six covers in 20 s at 200 a second
with both alive, p99 73 ms against 17 ms for one dispatcher).
Covering only while this dispatcher's own buckets are on time (else the machine is behind, not
the member) was tried and dropped: the survivor of a SIGSTOP, itself behind at moments, left
the frozen one's schedules waiting (p99 196 ms after the freeze against 64 ms without it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tocsin.abc import Membership, Store
from tocsin.clock import Clock
from tocsin.dispatcher.core import BucketSpan, DispatchCore, log
from tocsin.dispatcher.handover import hold, released_only
from tocsin.dispatcher.knobs import CLAIM_ROWS, PEER_COVER_MS, PEER_LATE_MS, PEER_LOOK_MS
from tocsin.dispatcher.runs import RUN_BEAT_MS
from tocsin.errors import StoreError

__all__ = ["PeerCover", "behind_peers"]


def behind_peers(membership: Membership | None, me: str) -> list[str]:
    """The other members whose buckets ``me`` may cover: none unless ``me`` is a member."""
    if membership is None or not any(o.run == me for o in membership.owners):
        return []
    return sorted({o.run for o in membership.owners if o.run != me})


class PeerCover:
    """Covers for the other members of ``run``'s membership (``membership()``, the last look
    of its :class:`~tocsin.dispatcher.runs.RunBeat`) on ``store`` in a daemon thread until
    :meth:`stop`; :meth:`step` is one look (for tests). ``make_core`` builds the delivery core
    of the cover's windows (options of ``run``, over ``store``), on the first cover."""

    def __init__(self, store: Store, make_core: Callable[[], DispatchCore], run: str,
                 membership: Callable[[], Membership | None], *, clock: Clock) -> None:
        self.store, self.make_core, self.run = store, make_core, run
        self.membership, self.clock = membership, clock
        self._core: DispatchCore | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-cover", daemon=True)

    def start(self) -> PeerCover:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current window; its engine finishes or hands back what it holds."""
        self._stop.set()
        self._thread.join(timeout=30)
        if self._core is not None:
            self._core.close()

    def step(self) -> int:
        """One look at each other member's buckets; cover each that left a schedule overdue,
        until it beats again. How many schedules the cover claimed."""
        claimed = 0
        for peer in behind_peers(self.membership(), self.run):
            if self._stop.is_set():
                break
            claimed += self._cover_if_behind(peer)
        return claimed

    def _cover_if_behind(self, peer: str) -> int:
        late = self._overdue_ms(peer)
        if late is None:
            return 0
        if self._core is None:
            self._core = self.make_core()
        core, beat = self._core, self._beat_ms(peer)
        log.warning("dispatcher: covering for run %s, behind by %d ms (it keeps its buckets "
                    "until its beats time out or it beats again)", peer,
                    self.clock.now_ms() - late)
        core.warm()
        span = BucketSpan(0, 0, self.store.buckets - 1, 0, CLAIM_ROWS)
        claimed = 0
        while not self._stop.is_set():
            end = self.clock.now_ms() + PEER_COVER_MS
            claimed += hold(core, 0, span=span, cover=peer, end_ms=end)[1]
            if (peer not in behind_peers(self.membership(), self.run)
                    or self._beat_ms(peer) != beat):
                break
            if self.clock.now_ms() < end:  # a claim there lost its race: someone claims there
                if self._overdue_ms(peer) is None:  # again, and nothing is left overdue: the
                    break  # member is back (or another cover took it all)
                core.pause_until(self.clock.now_ms() + PEER_LOOK_MS)
        log.info("dispatcher: stopped covering for run %s", peer,
                 extra={"claimed": claimed})
        return claimed

    def _overdue_ms(self, run: str) -> int | None:
        """The due time of a schedule a claim would take in ``run``'s buckets that fell due
        :data:`~tocsin.dispatcher.knobs.PEER_LATE_MS` ago or earlier, or None."""
        now = self.clock.now_ms()
        return self.store.next_claimable_ms(bucket_lo=0, bucket_hi=self.store.buckets - 1,
                                            until_ms=now - PEER_LATE_MS, now_ms=now,
                                            lease_ms=released_only(now), run=run)

    def _beat_ms(self, run: str) -> int | None:
        return next((r.beat_ms for r in self.store.runs() if r.run == run), None)

    def _loop(self) -> None:
        pause_ms = PEER_LOOK_MS
        while not self._stop.wait(pause_ms / 1000):
            alone = not behind_peers(self.membership(), self.run)
            pause_ms = RUN_BEAT_MS if alone else PEER_LOOK_MS
            try:
                self.step()
            except StoreError as exc:  # the next look tries again
                log.warning("dispatcher: could not look at the other members: %s", exc)
            except Exception:  # never let one bad look stop the cover for good
                log.exception("dispatcher: cover failed")
