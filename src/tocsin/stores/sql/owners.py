"""Membership and bucket ownership: several dispatchers on one store share the buckets.

The store decides who is a member. A run is *live* while it beats (and, on PostgreSQL, while
the session that holds its lock is open: a process that dies closes it, so a kill -9 is seen
at the next look rather than after the beats' timeout). Every look (:func:`share`, each
dispatcher every :data:`~tocsin.dispatcher.runs.WATCH_MS`) fences the runs that are no longer
live — they stop being members and their claims are released as ended leases, so the next
claim takes them under the same attempt and delivery id — and shares the buckets out between
the members: contiguous ranges (:func:`assignment`) over the members sorted by checkpoint slot,
written as ``bucket_owners`` rows under a new *generation* whenever the assignment changes
(a row that keeps its range and run keeps its ``since_ms``). Runs that are ready (their first
batch done) are the members; while none is, every live run is, so a lone dispatcher owns every
bucket from its start and a joining one takes its share only once it can deliver.

A live member may also *cover* for another (:func:`cover_spans`): claim, under its own epoch,
in the buckets the other owns, what that one left overdue (a frozen process keeps its buckets
until its beats time out; :mod:`tocsin.dispatcher.cover`). Only a member covers: a run that
was fenced out owns nothing and claims nothing, its own buckets or another's.

Ownership is fenced in the claim itself (:func:`epoch_spans`): a claim, a pull or a window's
claim reads, in its own transaction and under a share lock on PostgreSQL (a change of the
assignment waits for the claims under way, and they for it), the ranges its epoch's run owns,
and claims only inside them. A run that lost its share claims nothing from it; its late
acknowledgements are refused by the epoch fence as before. An epoch taken without a run (the
test kit's queries) is not fenced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tocsin.abc import BucketOwner, Membership
from tocsin.stores.sql.base import Dialect

__all__ = ["assignment", "cover_spans", "epoch_spans", "free_slot", "holder_run", "intersect",
           "owned_spans", "release", "share"]

_BOUNDED_WAIT = "SET LOCAL lock_timeout = '2s'"
_RUNS = ("SELECT run, slot, started_ms, beat_ms, ready_ms, fenced_ms, released_ms, lock_id "
         "FROM runs")


def assignment(buckets: int, members: Sequence[str]) -> list[tuple[int, int, str]]:
    """``buckets`` shared out as contiguous, nearly equal ranges ``(lo, hi, run)`` between
    ``members`` in their order (a member beyond the bucket count gets none)."""
    members = list(members)[:buckets]
    if not members:
        return []
    edges = [round(i * buckets / len(members)) for i in range(len(members) + 1)]
    return [(edges[i], edges[i + 1] - 1, run) for i, run in enumerate(members)]


def intersect(ranges: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of ``ranges`` inside ``[lo, hi]``, in order."""
    return sorted((max(a, lo), min(b, hi)) for a, b in ranges if max(a, lo) <= min(b, hi))


def epoch_spans(conn: Any, d: Dialect, epoch: int, *, lo: int,
                hi: int) -> tuple[str | None, list[tuple[int, int]]]:
    """The run that took ``epoch`` (None: an epoch taken without a run, not fenced) and the
    parts of buckets ``[lo, hi]`` it may claim in: all of them without a run, else those the
    run owns now, read in the caller's transaction and share-locked where rows are locked (an
    assignment changing them waits for this transaction). One statement, not a read of the
    run and then of its ranges: each is a round trip of the claim."""
    share_lock = " FOR SHARE OF b" if d.lock_row else ""
    rows = conn.execute(d.q(
        "SELECT e.run, o.bucket_lo, o.bucket_hi FROM epoch_runs e LEFT JOIN ("
        "SELECT b.run, b.bucket_lo, b.bucket_hi FROM bucket_owners b WHERE b.run IN "
        f"(SELECT run FROM epoch_runs WHERE epoch = ?){share_lock}) o ON o.run = e.run "
        "WHERE e.epoch = ?"), (epoch, epoch)).fetchall()
    if not rows:
        return None, [(lo, hi)]
    owned = ((int(a), int(b)) for _, a, b in rows if a is not None)
    return str(rows[0][0]), intersect(owned, lo, hi)


def cover_spans(conn: Any, d: Dialect, epoch: int, peer: str, *, lo: int,
                hi: int) -> list[tuple[int, int]]:
    """The parts of buckets ``[lo, hi]`` that run ``peer`` owns now, where ``epoch``'s run may
    cover for it: it is a member itself (owns buckets), and is not ``peer``; else none. Read
    and share-locked as :func:`epoch_spans` (an assignment changing either run's buckets waits
    for the claim)."""
    share_lock = " FOR SHARE OF b, m" if d.lock_row else ""
    rows = conn.execute(d.q(
        "SELECT b.bucket_lo, b.bucket_hi FROM bucket_owners b, bucket_owners m, epoch_runs e "
        f"WHERE b.run = ? AND e.epoch = ? AND m.run = e.run AND e.run <> ?{share_lock}"),
        (peer, epoch, peer)).fetchall()
    return intersect({(int(a), int(b)) for a, b in rows}, lo, hi)


def owned_spans(conn: Any, d: Dialect, *, run: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of buckets ``[lo, hi]`` that ``run`` owns now, as a read sees them (not
    locked: a look ahead of a claim, which reads them again, :func:`epoch_spans`)."""
    owned = conn.execute(d.q("SELECT bucket_lo, bucket_hi FROM bucket_owners WHERE run = ?"),
                         (run,)).fetchall()
    return intersect(((int(a), int(b)) for a, b in owned), lo, hi)


def _owners(conn: Any) -> list[BucketOwner]:
    return [BucketOwner(int(r[0]), int(r[1]), str(r[2]), int(r[3]), int(r[4]))
            for r in conn.execute("SELECT bucket_lo, bucket_hi, run, generation, since_ms "
                                  "FROM bucket_owners ORDER BY bucket_lo").fetchall()]


def _plan(conn: Any, *, buckets: int, now_ms: int, stale_ms: int, lost: frozenset[str],
          me: str) -> tuple[list[str], list[tuple[int, int, str]], list[BucketOwner]]:
    """The runs to fence now (never ``me``, the run looking: it is alive), the assignment
    wanted after that, and the owners as they are."""
    runs = conn.execute(_RUNS).fetchall()
    fence = [str(r[0]) for r in runs if r[6] is None and str(r[0]) != me
             and (int(r[3]) < now_ms - stale_ms or str(r[0]) in lost)]
    live = sorted((r for r in runs if r[5] is None and str(r[0]) not in fence),
                  key=lambda r: (r[1] is None, r[1] or 0, int(r[2]), str(r[0])))
    members = [str(r[0]) for r in live if r[4] is not None] or [str(r[0]) for r in live]
    return fence, assignment(buckets, members), _owners(conn)


def _same(wanted: list[tuple[int, int, str]], owners: list[BucketOwner]) -> bool:
    return wanted == [(o.lo, o.hi, o.run) for o in owners]


def share(conn: Any, d: Dialect, *, buckets: int, now_ms: int, stale_ms: int,
          lost: frozenset[str] = frozenset(), me: str = "", write: bool) -> Membership:
    """Fence the runs that stopped beating (or whose lock is ``lost``; never ``me``), release
    their claims, and share the buckets out between the members; with ``write`` false only
    look (the membership as it would be, ``changed`` when a write is needed)."""
    if write:  # one assigner at a time: the generation's row is the lock
        if d.lock_row:  # never wait for long on a lock: the next look tries again
            conn.execute(_BOUNDED_WAIT)
        generation = int(conn.execute(d.q("SELECT v FROM meta WHERE k = 'owners_generation'"
                                          f"{d.lock_row}")).fetchone()[0])
    fence, wanted, owners = _plan(conn, buckets=buckets, now_ms=now_ms, stale_ms=stale_ms,
                                  lost=lost, me=me)
    changed = bool(fence) or not _same(wanted, owners)
    if not write or not changed:
        return Membership(owners, changed, fence, 0)
    if not _same(wanted, owners):
        generation += 1
        since = {(o.lo, o.hi, o.run): o.since_ms for o in owners}
        conn.execute("DELETE FROM bucket_owners")
        owners = [BucketOwner(lo, hi, run, generation, since.get((lo, hi, run), now_ms))
                  for lo, hi, run in wanted]
        for owner in owners:
            conn.execute(d.q("INSERT INTO bucket_owners VALUES (?, ?, ?, ?, ?)"), tuple(owner))
        conn.execute(d.q("UPDATE meta SET v = ? WHERE k = 'owners_generation'"),
                     (str(generation),))
    released = sum(release(conn, d, run, now_ms=now_ms) for run in fence)
    return Membership(owners, True, fence, released)


def release(conn: Any, d: Dialect, run: str, *, now_ms: int) -> int:
    """Fence ``run`` (no longer a member, its checkpoint slot free) and release its claims as
    ended leases (``claimed_ms`` 0: the next claim takes them under the same attempt and
    delivery id); how many. Its epochs stay recorded, so its claims stay fenced."""
    released = int(conn.execute(d.q(
        "UPDATE schedules SET claimed_ms = 0 WHERE status = 'CLAIMED' "
        "AND claim_epoch IN (SELECT epoch FROM epoch_runs WHERE run = ?)"), (run,)).rowcount)
    conn.execute(d.q("UPDATE runs SET fenced_ms = coalesce(fenced_ms, ?), released_ms = ?, "
                     "slot = NULL WHERE run = ?"), (now_ms, now_ms, run))
    return released


def free_slot(conn: Any) -> int:
    """The lowest checkpoint slot no unfenced run holds."""
    taken = {int(r[0]) for r in conn.execute(
        "SELECT slot FROM runs WHERE slot IS NOT NULL AND fenced_ms IS NULL").fetchall()}
    return next(i for i in range(len(taken) + 1) if i not in taken)


def holder_run(holder: str) -> str:
    """The run a busy hold's ``holder`` names (``host:pid@run``), or '' (any run's)."""
    return holder.rpartition("@")[2] if "@" in holder else ""
