"""A dispatcher covers for a member that left a schedule overdue in its buckets (a frozen one
keeps them until its beats time out): on a manual clock, over both stores, the real windows
and engine of the local dispatcher."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.dispatcher.conftest import rig_over
from tests.dispatcher.test_handover import T0
from tests.dispatcher.test_handover import Rig as HandOverRig
from tocsin.abc import Membership, Store
from tocsin.dispatcher.cover import PeerCover, behind_peers
from tocsin.dispatcher.knobs import PEER_COVER_MS, PEER_LATE_MS
from tocsin.dispatcher.runs import RUN_STALE_MS
from tocsin.domain import NewSchedule, Status


class Rig(HandOverRig):
    """The hand-over tests' rig as run "me" of two members, "me" and "peer"."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.core.options = replace(self.core.options, run="me")
        for run in ("me", "peer"):
            store.join_run(run, now_ms=T0, host="h", pid=1, stale_ms=RUN_STALE_MS)
            store.beat_run(run, now_ms=T0, ready=True)
        self.membership = store.share_buckets(now_ms=T0, stale_ms=RUN_STALE_MS, me="me")
        self.cover = PeerCover(store, lambda: self.core, "me", lambda: self.membership,
                               clock=self.clock)

    def owned(self, run: str) -> set[int]:
        return {b for o in self.membership.owners if o.run == run
                for b in range(o.lo, o.hi + 1)}

    def schedule_of(self, due_ms: int, of: str) -> str:
        """A schedule due at ``due_ms`` in a bucket ``of`` owns."""
        while True:
            [(made, _)] = self.store.create(
                [NewSchedule(channel="out", payload=b"{}", due_ms=due_ms)],
                now_ms=self.clock.now_ms())
            if made.bucket in self.owned(of):
                return made.id
            self.store.cancel(made.id, now_ms=self.clock.now_ms())


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    with rig_over(backend_url, Rig) as rig:
        yield rig


def test_only_a_member_covers_and_only_for_the_others() -> None:
    from tocsin.abc import BucketOwner

    owners = [BucketOwner(0, 3, "me", 1, T0), BucketOwner(4, 7, "peer", 1, T0),
              BucketOwner(8, 9, "third", 1, T0)]
    assert behind_peers(Membership(owners, False, [], 0), "me") == ["peer", "third"]
    assert behind_peers(Membership(owners[1:], False, [], 0), "me") == []  # fenced: none
    assert behind_peers(None, "me") == []


def test_a_peer_that_left_a_schedule_overdue_is_covered_until_it_beats_again(
        rig: Rig) -> None:
    late = rig.schedule_of(T0 + 100, "peer")
    rig.clock.set(T0 + 100 + PEER_LATE_MS - 1)
    assert rig.cover.step() == 0  # not late enough: the peer may still take it
    assert rig.store.get(late).status is Status.PENDING
    rig.clock.set(T0 + 100 + PEER_LATE_MS)
    later = [rig.schedule_of(T0 + 300 + i * 400, "peer") for i in range(3)]
    beats_at = T0 + 100 + PEER_LATE_MS + PEER_COVER_MS + 300  # in the second window
    rig.clock.at(beats_at, lambda: rig.store.beat_run("peer", now_ms=beats_at))
    after = rig.schedule_of(beats_at + PEER_COVER_MS + 100, "peer")
    mine = rig.schedule_of(beats_at + 5_000, "me")  # its own windows', not the cover's
    assert rig.cover.step() == 4
    assert rig.got() == [late, *later]
    assert rig.store.get(late).lateness_ms == PEER_LATE_MS
    assert all(rig.store.get(sid).lateness_ms == 0 for sid in later)  # at their due instants
    # the peer beat: the cover ended with its window; the rest is the peer's again
    assert rig.store.get(after).status is Status.PENDING
    assert rig.store.get(mine).status is Status.PENDING
    assert {o.run for o in rig.store.owners()} == {"me", "peer"}  # nobody's ownership moved


def test_a_peer_that_is_on_time_is_not_covered(rig: Rig) -> None:
    rig.schedule_of(T0 + 100, "peer")
    rig.clock.set(T0 + 100)  # due now: the peer's to take
    assert rig.cover.step() == 0
    # "me" was fenced (it owns nothing): it covers for nobody, however late
    rig.membership = Membership([o for o in rig.membership.owners if o.run == "peer"],
                                True, ["me"], 0)
    rig.clock.set(T0 + 10_000)
    assert rig.cover.step() == 0
    assert rig.got() == []


def test_a_cover_ends_when_the_peer_claims_again_before_its_next_beat(rig: Rig) -> None:
    # A busy member's batch turn left one schedule late; it then claims its next one itself.
    # The cover takes the late one, loses the next to the member, and stops there: it does not
    # go on claiming in the member's buckets until the member's next beat.
    late = rig.schedule_of(T0 + 100, "peer")
    taken = rig.schedule_of(T0 + 300, "peer")
    left = rig.schedule_of(T0 + 500, "peer")
    epoch = rig.store.next_epoch(run="peer", now_ms=T0)

    def peer_claims() -> None:
        now = rig.clock.now_ms()
        rows = rig.store.claim(epoch=epoch, bucket_lo=0, bucket_hi=rig.store.buckets - 1,
                               until_ms=T0 + 300, now_ms=now, lease_ms=now - 1, limit=10,
                               replay=False)
        assert [r.id for r in rows] == [taken]

    rig.clock.at(T0 + 299, peer_claims)
    beats_at = T0 + 2_000  # its next beat (a second after the last, plus a late one)
    rig.clock.at(beats_at, lambda: rig.store.beat_run("peer", now_ms=beats_at))
    rig.clock.set(T0 + 100 + PEER_LATE_MS)
    assert rig.cover.step() == 1
    assert rig.got() == [late]
    assert rig.clock.now_ms() < T0 + 100 + PEER_LATE_MS + PEER_COVER_MS  # before its window's end
    assert rig.store.get(left).status is Status.PENDING  # the peer's, though it has not beaten
