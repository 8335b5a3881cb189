"""What the dispatcher claims and acknowledges (:class:`~tocsin.abc.DispatchStore`), written
once. The backend supplies the two hot statements with no common form: returning claimed rows
earliest first (``_claim_sorted``) and marking a batch delivered (``_mark_delivered``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from tocsin.abc import BucketOwner, ChannelHold, ClaimedRow, DispatchStore, Membership, RunInfo
from tocsin.domain import Ack, HoldReason, Status
from tocsin.domain.delivery import LATENESS_BOUNDS_MS
from tocsin.stores.rows import (
    CLAIM_COLUMNS,
    DELIVERY_COLUMNS,
    claimed_from_row,
    dead_letter_item,
    delivery_values,
    earliest,
    insert_values,
)
from tocsin.stores.sql.base import (
    Dialect,
    SqlBase,
    executemany,
    refresh_statistics,
    sent,
    tenant_is,
)
from tocsin.stores.sql.fair import (
    NEVER_MS,
    ROUNDS,
    Destination,
    Due,
    WakePages,
    by_destination,
    raise_wakes,
    send_due_destinations,
    send_earliest_wake,
    send_raise_wakes,
    shares,
    weights,
)
from tocsin.stores.sql.metrics import FENCED, add_counts, delivery_counts
from tocsin.stores.sql.operations import not_paused
from tocsin.stores.sql.outcomes import acknowledged_outcomes, record_outcomes
from tocsin.stores.sql.owners import (
    cover_spans,
    epoch_spans,
    free_slot,
    holder_run,
    owned_spans,
    release,
    share,
)
from tocsin.stores.sql.policies import (
    claim_throttled,
    return_tokens,
    send_throttled_due,
    send_throttled_next_ms,
    throttled_next_ms,
)
from tocsin.stores.sql.schedules import INSERT

__all__ = ["SqlDispatch"]

_RETRY = ("UPDATE schedules SET status = 'PENDING', attempts = attempts + 1, next_ms = ?, "
          "last_error = ?, claim_epoch = NULL, claimed_ms = NULL, "
          "chain_ms = coalesce(chain_ms, ?) "
          "WHERE id = ? AND claim_epoch = ? AND status = 'CLAIMED'")
_HOLD_COLUMNS = "tenant, name, reason, since_ms, until_ms, failures, last_error, holder"
_DEAD = ("UPDATE schedules SET status = ?, attempts = attempts + 1, last_error = ? "
         "WHERE id = ? AND claim_epoch = ? AND status = 'CLAIMED' "
         "RETURNING tenant, payload, payload_kind, headers, ordering_key")


_OPEN_OR_PAUSED = ("SELECT 1 FROM paused_channels WHERE tenant = ? AND name = ? UNION ALL "
                   "SELECT 1 FROM channel_holds WHERE tenant = ? AND name = ? "
                   f"AND reason <> '{HoldReason.BUSY}'")
"""Whether a destination (tenant and channel, twice) is paused by an operator or held by
something other than a full lane (its breaker is open): a pull takes nothing then."""


def _claimable(d: Dialect) -> str:
    """An unthrottled PENDING candidate ``s`` of a bucket range (two arguments) due by a time
    (one more) that a claim takes: the head of its key, its channel not paused. ``+s.bucket``
    keeps the planner on the ``next_ms`` index rather than every far-future row of the range.
    The claim and the hand-over window's peek share it, so the peek names what the claim takes."""
    return ("s.status = 'PENDING' AND s.policy IS NULL AND +s.bucket BETWEEN ? AND ? "
            f"AND s.next_ms <= ? AND {d.head} AND {not_paused(d)}")


URGENT_ACK_ROWS = 64
"""An acknowledgement of at most this many verdicts is an urgent write (see
:meth:`~tocsin.stores.sql.base.SqlBase._work`): beside a burst whose lanes acknowledge 1 000
rows at a time, a trickle's lane waited behind them before it could send its next schedule."""
_BY_DESTINATION = "s.tenant, s.channel, s.next_ms"
"""One destination's candidates in time order, spelled as ``schedules_dest``'s columns: by
``next_ms`` alone, PostgreSQL without statistics (a table that just took a burst) walked the
due-time index and filtered out every other destination's rows — 100 000 per claim of a
trickle beside a burst, seconds of claims under load."""


def destination_candidates(d: Dialect, column: str, *, lock: bool) -> str:
    """``column`` of one destination's claimable candidates ``s``, earliest first, up to a
    limit: :func:`_claimable`'s three arguments, then tenant, channel, its wake-up time (the
    seek starts there, past the entries of rows claimed earlier) and the limit (the claim's
    rows ``lock``-ed as the claim takes them, the peek's read)."""
    return (f"SELECT s.{column} FROM schedules s WHERE {_claimable(d)} AND s.tenant = ? "
            f"AND s.channel = ? AND s.next_ms >= ? ORDER BY {_BY_DESTINATION} LIMIT ?"
            f"{d.skip_locked if lock else ''}")


def _pull_candidates(d: Dialect, column: str, *, lock: bool, ranged: bool = False) -> str:
    """``column`` of one destination's unthrottled PENDING candidates ``s`` due by a time, heads
    of their keys, earliest first, up to a limit (tenant, channel, its wake-up time, the time,
    the limit; with ``ranged``, the first and last bucket before the limit), for
    :meth:`~tocsin.abc.DispatchStore.pull` (``lock``-ed as it takes them) and its peek."""
    buckets = " AND +s.bucket BETWEEN ? AND ?" if ranged else ""
    return (f"SELECT s.{column} FROM schedules s WHERE s.status = 'PENDING' "
            "AND s.policy IS NULL AND s.tenant = ? AND s.channel = ? "
            f"AND s.next_ms >= ? AND s.next_ms <= ?{buckets} AND {d.head} "
            f"ORDER BY {_BY_DESTINATION} "
            f"LIMIT ?{d.skip_locked if lock else ''}")


def _wake(conn: Any, d: Dialect, tenant: str, channel: str) -> int:
    """A destination's wake-up time: none of its PENDING schedules is earlier."""
    row = conn.execute(d.q("SELECT wake_ms FROM destinations WHERE tenant = ? AND channel = ?"),
                       (tenant, channel)).fetchone()
    return NEVER_MS if row is None else int(row[0])


class SqlDispatch(SqlBase, DispatchStore):
    """The :class:`~tocsin.abc.DispatchStore` role over a backend's ``_work``."""

    def _claim_sorted(self, conn: Any, update: str,
                      args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run ``update`` (an UPDATE of schedules, in this dialect, without RETURNING) and
        return its rows as ``CLAIM_COLUMNS`` plus ``next_ms``, ordered by (next_ms, id)."""
        raise NotImplementedError

    def _send_claim_sorted(self, conn: Any, update: str,
                           args: Sequence[Any]) -> Callable[[], list[tuple[Any, ...]]]:
        """:meth:`_claim_sorted`, sent now and read when called (in a pipeline, with the next
        statement read: :func:`~tocsin.stores.sql.base.sent`)."""
        rows = self._claim_sorted(conn, update, args)
        return lambda: rows

    def _mark_delivered(self, conn: Any, ids: Sequence[str], *, epoch: int, now_ms: int) -> int:
        """Mark the schedules ``ids`` still CLAIMED by ``epoch`` DELIVERED; how many were."""
        raise NotImplementedError

    def _acknowledge_delivered(self, ids: Sequence[str], rows: Sequence[Sequence[Any]],
                               counts: Counter[tuple[str, str]], *, epoch: int, now_ms: int,
                               urgent: bool) -> int | None:
        """:meth:`acknowledge` of verdicts that are all deliveries (the schedules ``ids``,
        their attempt-log ``rows`` and what they add to the counters) in a backend's own
        fewer steps; None where it has none (the general path runs)."""
        return None

    def _log_deliveries(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Add ``rows`` (``DELIVERY_COLUMNS``) to the attempt log in the caller's transaction."""
        self._insert_many(conn, f"deliveries ({DELIVERY_COLUMNS})", rows)

    def next_epoch(self, *, run: str | None = None, now_ms: int = 0) -> int:
        d = self._dialect

        def work(conn: Any) -> int:
            # A transactional counter, not a SEQUENCE: a sequence's increments are not durable
            # until some later commit flushes them, so after a crash it could hand out an
            # epoch twice.
            epoch = int(conn.execute("UPDATE meta SET v = CAST(CAST(v AS BIGINT) + 1 AS TEXT) "
                                     "WHERE k = 'epoch' RETURNING v").fetchall()[0][0])
            if run:
                conn.execute(d.q("INSERT INTO epoch_runs VALUES (?, ?, ?)"), (epoch, run, now_ms))
            return epoch

        return self._work(work, idempotent=True)

    def beat_run(self, run: str, *, now_ms: int, ready: bool = False) -> bool:
        # A fenced run is not brought back by a late beat: its row is left as it is, and the
        # statement returns nothing (one statement, its own transaction: a beat a second)
        return bool(self._write(
            "INSERT INTO runs (run, started_ms, beat_ms, ready_ms) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (run) DO UPDATE SET beat_ms = excluded.beat_ms, "
            "ready_ms = coalesce(runs.ready_ms, excluded.ready_ms) "
            "WHERE runs.fenced_ms IS NULL RETURNING 1",
            (run, now_ms, now_ms, now_ms if ready else None), idempotent=True))

    def join_run(self, run: str, *, now_ms: int, host: str, pid: int, stale_ms: int,
                 lock_id: int | None = None) -> int:
        d = self._dialect

        def work(conn: Any) -> int:
            share(conn, d, buckets=self.buckets, now_ms=now_ms, stale_ms=stale_ms,
                  lost=self._lost_runs(conn, now_ms=now_ms), me=run, write=True)
            slot = free_slot(conn)
            conn.execute(d.q("INSERT INTO runs (run, started_ms, beat_ms, ready_ms, host, pid, "
                             "slot, lock_id) VALUES (?, ?, ?, NULL, ?, ?, ?, ?) "
                             "ON CONFLICT (run) DO UPDATE SET beat_ms = excluded.beat_ms, "
                             "host = excluded.host, pid = excluded.pid, slot = excluded.slot, "
                             "lock_id = excluded.lock_id"),
                         (run, now_ms, now_ms, host, pid, slot, lock_id))
            share(conn, d, buckets=self.buckets, now_ms=now_ms, stale_ms=stale_ms, me=run,
                  write=True)
            return slot

        return self._work(work)

    def leave_run(self, run: str, *, now_ms: int, stale_ms: int) -> None:
        d = self._dialect

        def work(conn: Any) -> None:
            conn.execute(d.q("UPDATE runs SET fenced_ms = coalesce(fenced_ms, ?), slot = NULL "
                             "WHERE run = ?"), (now_ms, run))
            share(conn, d, buckets=self.buckets, now_ms=now_ms, stale_ms=stale_ms, write=True)

        self._work(work, idempotent=True)

    def end_run(self, run: str, *, now_ms: int = 0) -> None:
        d = self._dialect

        def work(conn: Any) -> None:
            conn.execute(d.q("UPDATE runs SET beat_ms = 0 WHERE run = ?"), (run,))
            if conn.execute(d.q("SELECT 1 FROM runs WHERE run = ? AND released_ms IS NULL"),
                            (run,)).fetchone():
                release(conn, d, run, now_ms=now_ms)
            # the others take its buckets now (no run is fenced by this look: no timeout)
            share(conn, d, buckets=self.buckets, now_ms=now_ms, stale_ms=now_ms + 1, write=True)

        self._work(work, idempotent=True)

    def _lost_runs(self, conn: Any, *, now_ms: int) -> frozenset[str]:
        """Runs whose lock shows them gone before their beats do (none by default)."""
        return frozenset()

    def share_buckets(self, *, now_ms: int, stale_ms: int, me: str = "") -> Membership:
        d = self._dialect

        def look(write: bool) -> Membership:
            def work(conn: Any) -> Membership:
                return share(conn, d, buckets=self.buckets, now_ms=now_ms, stale_ms=stale_ms,
                             lost=self._lost_runs(conn, now_ms=now_ms), me=me, write=write)

            return self._work(work, write=write, idempotent=True)

        seen = look(False)  # a read when nothing changed: every dispatcher looks often
        if seen.fenced:
            self._cut_off(seen.fenced)
        return look(True) if seen.changed else seen

    def _cut_off(self, runs: list[str]) -> None:
        """End the store sessions of ``runs``, about to be fenced (nothing by default): a
        frozen process's open transaction holds the locks the fence needs."""

    def release_dead_runs(self, *, now_ms: int, stale_ms: int) -> int:
        return self.share_buckets(now_ms=now_ms, stale_ms=stale_ms).released

    def run_claims(self, run: str) -> int:
        return int(self._rows(
            "SELECT count(*) FROM schedules WHERE status = 'CLAIMED' AND claim_epoch IN "
            "(SELECT epoch FROM epoch_runs WHERE run = ?)", (run,))[0][0])

    def owners(self) -> list[BucketOwner]:
        return [BucketOwner(int(r[0]), int(r[1]), str(r[2]), int(r[3]), int(r[4]))
                for r in self._rows("SELECT bucket_lo, bucket_hi, run, generation, since_ms "
                                    "FROM bucket_owners ORDER BY bucket_lo")]

    def runs(self) -> list[RunInfo]:
        return [RunInfo(str(r[0]), int(r[1]), int(r[2]), None if r[3] is None else int(r[3]),
                        str(r[4]), int(r[5]), None if r[6] is None else int(r[6]))
                for r in self._rows("SELECT run, started_ms, beat_ms, ready_ms, host, pid, slot "
                                    "FROM runs WHERE fenced_ms IS NULL "
                                    "ORDER BY started_ms DESC, run")]

    def next_due_ms(self, *, now_ms: int, lease_ms: int, run: str = "") -> int | None:
        d = self._dialect

        def work(conn: Any) -> tuple[int | None, Any, int | None]:
            # By destination: idle destinations and a held burst's rows are passed over, not
            # read; a destination whose wake-up time is later counts by that time (no later
            # than its schedules: a claim at that time raises it if it is early). The four
            # reads go out together (one round trip in a pipeline): a dispatcher asks this
            # every trigger, idle or not.
            listed = send_due_destinations(conn, d, now_ms, run)
            wake = send_earliest_wake(conn, d, now_ms, run)
            oldest = sent(conn, d, "SELECT min(claimed_ms) FROM schedules "
                                   "WHERE status = 'CLAIMED'")
            throttled = send_throttled_next_ms(conn, d, now_ms=now_ms)
            due = [x.first_ms for x in listed() if x.first_ms is not None]
            later = wake()
            pending = min([*due, *([] if later is None else [later])], default=None)
            return pending, oldest()[0][0], throttled()

        pending, claimed, throttled = self._work(work, write=False, pipelined=True)
        return earliest(pending if throttled is None else min(throttled, pending or throttled),
                        claimed, lease_ms)

    def claim(
        self,
        *,
        epoch: int,
        bucket_lo: int,
        bucket_hi: int,
        until_ms: int,
        now_ms: int,
        lease_ms: int,
        limit: int,
        replay: bool = True,
        cover: str = "",
    ) -> list[ClaimedRow]:
        d = self._dialect
        replay = replay and not cover

        def work(conn: Any) -> list[tuple[Any, ...]]:
            # The marker first: a concurrent replay of this (epoch, range) waits on it. It is
            # read after the epoch's buckets, and sent with them.
            marked = sent(conn, d, d.q("INSERT INTO claims VALUES (?, ?, ?, ?) "
                                       "ON CONFLICT DO NOTHING RETURNING 1"),
                          (epoch, bucket_lo, bucket_hi, now_ms)) if replay else None
            # Only in the buckets the epoch's run owns now (read in this transaction), or,
            # covering, in those the peer owns (as the peer sees its holds)
            run, spans = (cover, cover_spans(conn, d, epoch, cover, lo=bucket_lo,
                                             hi=bucket_hi)) if cover \
                else epoch_spans(conn, d, epoch, lo=bucket_lo, hi=bucket_hi)
            if marked is not None and not marked():
                return list(conn.execute(d.q(
                    f"SELECT {CLAIM_COLUMNS} FROM schedules WHERE status = 'CLAIMED' "
                    "AND claim_epoch = ? AND bucket BETWEEN ? AND ? ORDER BY next_ms, id"),
                    (epoch, bucket_lo, bucket_hi)).fetchall())
            rows: list[tuple[Any, ...]] = []
            for lo, hi in spans:
                rows += self._claim_span(conn, epoch=epoch, span=(lo, hi, until_ms),
                                         now_ms=now_ms, lease_ms=lease_ms, run=run or "",
                                         limit=limit - len(rows))
                if len(rows) >= limit:
                    break
            return rows

        # Repeating a claim is a replay: it returns what the first run claimed.
        return [claimed_from_row(r) for r in self._work(work, idempotent=replay, urgent=True,
                                                        pipelined=True)]

    def _claim_span(self, conn: Any, *, epoch: int, span: tuple[int, int, int], now_ms: int,
                    lease_ms: int, run: str, limit: int) -> list[tuple[Any, ...]]:
        """Claim for ``epoch`` (of ``run``, or '') up to ``limit`` rows of one bucket range
        (``span``: its first and last bucket, and the time due by): ended leases, then by
        destination, then throttled."""
        d, (bucket_lo, bucket_hi, until_ms) = self._dialect, span
        # read after the ended leases, and sent with them (one round trip in a pipeline)
        listed = send_due_destinations(conn, d, until_ms, run)
        throttled = send_throttled_due(conn, d, bucket_lo=bucket_lo, bucket_hi=bucket_hi,
                                       until_ms=until_ms)
        rows = self._claim_sorted(conn, d.q(
            "UPDATE schedules SET claim_epoch = ?, claimed_ms = ? WHERE " + d.among(
                "SELECT s.id FROM schedules s WHERE s.status = 'CLAIMED' AND s.claimed_ms < ? "
                f"AND s.bucket BETWEEN ? AND ? ORDER BY s.claimed_ms LIMIT ?{d.skip_locked}")),
            (epoch, now_ms, now_ms - lease_ms, bucket_lo, bucket_hi, limit))
        if len(rows) < limit:
            rows += self._claim_fair(conn, epoch=epoch, span=span, now_ms=now_ms,
                                     listed=listed(), room=limit - len(rows))
        if len(rows) < limit and throttled():
            rows += claim_throttled(conn, d, epoch=epoch, bucket_lo=bucket_lo,
                                    bucket_hi=bucket_hi, until_ms=until_ms, now_ms=now_ms,
                                    limit=limit - len(rows))
        return rows

    def _claim_fair(self, conn: Any, *, epoch: int, span: tuple[int, int, int], now_ms: int,
                    listed: list[Due], room: int) -> list[tuple[Any, ...]]:
        """Claim up to ``room`` due rows of a bucket range (``span``: its first and last
        bucket, and the time due by), destination by destination (``listed``: those whose
        wake-up time has come, :func:`~tocsin.stores.sql.fair.due_destinations`), each its fair
        share (:mod:`~tocsin.stores.sql.fair`); a share a destination cannot fill goes, in the
        next round, to those that filled theirs. Rows as :meth:`_claim_sorted`'s, over all."""
        d = self._dialect
        due = [x for x in listed if x.first_ms is not None and x.first_ms <= span[2]]
        active: list[Destination] = [x.destination for x in due]
        floor = {x.destination: x.wake_ms for x in due}
        weight = weights(conn, d, sorted({tenant for tenant, _ in active}))
        candidate = destination_candidates(d, "id", lock=True)
        rows: list[tuple[Any, ...]] = []
        raised: Callable[[], None] | None = None
        for _ in range(ROUNDS):
            share = shares(active, weight, room)
            taken: Counter[Destination] = Counter()
            claims = [self._send_claim_sorted(conn, d.q(
                "UPDATE schedules SET status = 'CLAIMED', claim_epoch = ?, claimed_ms = ? "
                f"WHERE {d.among(sql)}"), (epoch, now_ms, *args))
                for sql, args in by_destination(share, candidate, span, floor)]
            if raised is None:  # behind the first round's claims, read with them: one round
                raised = send_raise_wakes(conn, d, listed, span[2])  # trip for both
            for claimed in claims:
                got = claimed()
                taken.update((str(r[1]), str(r[2])) for r in got)
                rows += got
            room -= sum(taken.values())
            active = [dest for dest in active if dest in share and taken[dest] >= share[dest]]
            if room <= 0 or not active:
                break
        if raised is not None:  # a later round only empties more: what it found stays stale
            raised()
        rows.sort(key=lambda r: (r[-1], r[0]))
        return rows

    def pull(self, *, epoch: int, tenant: str, channel: str, now_ms: int,
             limit: int) -> list[ClaimedRow]:
        d = self._dialect
        candidates = _pull_candidates(d, "id", lock=True)
        in_range = _pull_candidates(d, "id", lock=True, ranged=True)

        def work(conn: Any) -> list[tuple[Any, ...]]:
            if conn.execute(d.q(_OPEN_OR_PAUSED), (tenant, channel, tenant, channel)).fetchone():
                return []
            wake = _wake(conn, d, tenant, channel)
            run, spans = epoch_spans(conn, d, epoch, lo=0, hi=self.buckets - 1)
            rows: list[tuple[Any, ...]] = []
            if run is None:
                rows = self._claim_sorted(conn, d.q(
                    "UPDATE schedules SET status = 'CLAIMED', claim_epoch = ?, claimed_ms = ? "
                    f"WHERE {d.among(candidates)}"),
                    (epoch, now_ms, tenant, channel, wake, now_ms, limit))
            for lo, hi in [] if run is None else spans:  # only in the buckets the run owns
                rows += self._claim_sorted(conn, d.q(
                    "UPDATE schedules SET status = 'CLAIMED', claim_epoch = ?, claimed_ms = ? "
                    f"WHERE {d.among(in_range)}"),
                    (epoch, now_ms, tenant, channel, wake, now_ms, lo, hi, limit - len(rows)))
                if len(rows) >= limit:
                    break
            if rows:
                raise_wakes(conn, d, [Due(tenant, channel, wake, None)], now_ms)
            return rows

        # Not urgent: a backlog's next rows go after any claim that someone's due schedule
        # waits for (on SQLite, a 1 000-row share of a burst in the window's claim held the
        # writer 37-146 ms while a trickle's schedule fell due behind it).
        return [claimed_from_row(r) for r in self._work(work)]

    def next_pull_ms(self, *, tenant: str, channel: str, until_ms: int,
                     run: str = "") -> int | None:
        d = self._dialect
        earliest = _pull_candidates(d, "next_ms", lock=False)  # with a limit of one
        in_range = _pull_candidates(d, "next_ms", lock=False, ranged=True)

        def work(conn: Any) -> int | None:
            if conn.execute(d.q(_OPEN_OR_PAUSED), (tenant, channel, tenant, channel)).fetchone():
                return None
            wake = _wake(conn, d, tenant, channel)
            if not run:
                row = conn.execute(d.q(earliest), (tenant, channel, wake, until_ms, 1)).fetchone()
                return None if row is None else int(row[0])
            found = [int(r[0]) for lo, hi in owned_spans(conn, d, run=run, lo=0,
                                                          hi=self.buckets - 1)
                     if (r := conn.execute(d.q(in_range), (tenant, channel, wake, until_ms,
                                                           lo, hi, 1)).fetchone())]
            return min(found, default=None)

        return self._work(work, write=False)

    def claimable_times(self, *, bucket_lo: int, bucket_hi: int, until_ms: int, now_ms: int,
                        lease_ms: int, run: str = "", count: int) -> list[int]:
        d = self._dialect

        def work(conn: Any) -> list[int]:
            # sent together with the first statement read (the run's buckets, or a look for
            # ended leases): one round trip of the pipeline for all
            pages = WakePages(conn, d, until_ms, run)
            # (where nothing is sent ahead, asked only when nothing unthrottled is due first)
            throttled = send_throttled_next_ms(conn, d, now_ms=now_ms) if d.sends_ahead else (
                lambda: throttled_next_ms(conn, d, now_ms=now_ms))
            spans = owned_spans(conn, d, run=run, lo=bucket_lo,
                                hi=bucket_hi) if run else [(bucket_lo, bucket_hi)]
            found: set[int] = set()
            for lo, hi in spans:
                found.update(span(conn, lo, hi, pages, throttled))
            return sorted(found)[:count]

        def span(conn: Any, bucket_lo: int, bucket_hi: int, pages: WakePages,
                 throttled: Callable[[], int | None]) -> list[int]:
            reclaim = conn.execute(d.q(
                "SELECT 1 FROM schedules WHERE status = 'CLAIMED' AND claimed_ms < ? "
                "AND bucket BETWEEN ? AND ? LIMIT 1"),
                (now_ms - lease_ms, bucket_lo, bucket_hi)).fetchone()
            if reclaim:
                return [now_ms]
            times: list[int] = []  # the earliest ``count`` found so far, in order
            candidate = destination_candidates(d, "next_ms", lock=False)
            for page in pages:
                # none of a destination's schedules is earlier than its first pending one
                listed = [x for x in page if x.first_ms is not None and x.first_ms <= until_ms
                          and (len(times) < count or x.first_ms < times[-1])]
                floor = {x.destination: x.wake_ms for x in listed}
                for sql, args in by_destination({x.destination: count for x in listed},
                                                candidate, (bucket_lo, bucket_hi, until_ms),
                                                floor, column="next_ms"):
                    rows = conn.execute(d.q(
                        f"SELECT DISTINCT next_ms FROM ({sql}) AS m ORDER BY next_ms LIMIT ?"),
                        (*args, count)).fetchall()
                    times = sorted({*times, *(int(r[0]) for r in rows)})[:count]
                if len(times) == count and times[-1] <= max(x.wake_ms for x in page):
                    break  # the later pages' destinations wake no earlier
            if not times or times[0] > now_ms:
                wait = throttled()
                if wait is not None and wait <= until_ms:
                    times = sorted({*times, wait})[:count]
            return times

        return self._work(work, write=False, pipelined=True)

    def acknowledge(self, *, epoch: int, acks: Sequence[Ack], now_ms: int) -> int:
        if not acks:
            return 0
        d, buckets = self._dialect, self.buckets
        delivered = [a.schedule_id for a in acks if a.status is Status.DELIVERED]
        retries = [(a.next_ms, a.error, a.started_ms, a.schedule_id, epoch) for a in acks
                   if a.status is Status.PENDING]
        dead = [a for a in acks if a.status is Status.DEAD or a.status is Status.EXPIRED]
        told = [a for a in acks if a.events]  # their channels' outcome events (outcomes.py)

        urgent = len(acks) <= URGENT_ACK_ROWS
        if not retries and not dead and not told:
            done = self._acknowledge_delivered(
                delivered, delivery_values(acks, epoch), delivery_counts(acks, LATENESS_BOUNDS_MS),
                epoch=epoch, now_ms=now_ms, urgent=urgent)
            if done is not None:
                return done

        def work(conn: Any) -> int:
            if d.unflushed:
                # A verdict lost in a crash of the database leaves its schedule CLAIMED: it is
                # sent again once its run's claims are released, under the same delivery id
                # (SQLite's dispatcher writes never wait for the disk either). Waiting for the
                # flush held each lane's next chunk 2-4 ms (an fdatasync here) behind it.
                conn.execute(d.unflushed)
            applied, final_ids = 0, set()
            if delivered:
                applied += self._mark_delivered(conn, delivered, epoch=epoch, now_ms=now_ms)
            if retries:
                applied += executemany(conn, d.q(_RETRY), retries)
            for ack in dead:
                row = conn.execute(d.q(_DEAD), (ack.status.value, ack.error, ack.schedule_id,
                                                epoch)).fetchone()
                if row is None:
                    continue
                applied += 1
                final_ids.add(ack.schedule_id)
                if ack.halt and row[4]:
                    conn.execute(d.q("INSERT INTO halted_keys VALUES (?, ?, ?, ?, ?) "
                                     "ON CONFLICT DO NOTHING"),
                                 (row[0], row[4], ack.schedule_id, now_ms, ack.error))
                if ack.dead_letter:  # a channel of the dead schedule's own tenant
                    item = dead_letter_item(ack, row, now_ms=now_ms)
                    conn.execute(d.q(INSERT), insert_values(item, buckets=buckets, now_ms=now_ms))
            if told:
                record_outcomes(conn, d, acknowledged_outcomes(
                    conn, d, told, final_ids=final_ids, epoch=epoch, now_ms=now_ms),
                    buckets=buckets, now_ms=now_ms)
            self._log_deliveries(conn, delivery_values(acks, epoch))
            if retries or dead:
                return_tokens(conn, d, [a.delivery_id for a in acks
                                        if a.status is not Status.DELIVERED])
            counts = delivery_counts(acks, LATENESS_BOUNDS_MS)
            counts[(FENCED, "{}")] += len(acks) - applied
            add_counts(conn, d, counts)  # in this transaction: counted exactly when applied
            return applied

        # A lane sends its next chunk once this one is acknowledged: a trickle's small
        # acknowledgement goes before a burst's (shortest first), as a claim does.
        return self._work(work, urgent=urgent)

    def unclaim(self, *, epoch: int, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        d = self._dialect

        def work(conn: Any) -> int:
            released = executemany(conn, d.q(
                "UPDATE schedules SET status = 'PENDING', claim_epoch = NULL, claimed_ms = NULL "
                "WHERE id = ? AND claim_epoch = ? AND status = 'CLAIMED'"),
                [(i, epoch) for i in ids])
            if released:  # a throttled schedule's token goes back to its policy
                executemany(conn, d.q("DELETE FROM tokens WHERE schedule_id = ?"),
                            [(i,) for i in ids])
            return released

        return self._work(work, idempotent=True)

    def refresh_statistics(self, *, when_stale: bool = False) -> bool:
        return refresh_statistics(self, when_stale=when_stale)

    def hold_channel(self, hold: ChannelHold) -> None:
        self._changed(f"INSERT INTO channel_holds ({_HOLD_COLUMNS}, run) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                      "ON CONFLICT (tenant, name, holder) DO UPDATE SET reason = excluded.reason, "
                      "since_ms = excluded.since_ms, until_ms = excluded.until_ms, "
                      "failures = excluded.failures, last_error = excluded.last_error",
                      # urgent: until it is written, the windows' claims take shares of the
                      # destination's backlog, and a trickle due meanwhile waits for them
                      (*hold, holder_run(hold.holder)), idempotent=True, urgent=True)

    def unhold_channel(self, tenant: str, name: str, *, reason: str | None = None,
                       holder: str | None = None) -> bool:
        return bool(self._changed(
            "DELETE FROM channel_holds WHERE tenant = ? AND name = ? "
            "AND (CAST(? AS TEXT) IS NULL OR reason = ?) "
            "AND (CAST(? AS TEXT) IS NULL OR holder = ?)",
            (tenant, name, reason, reason, holder, holder), idempotent=True))

    def channel_holds(self, *, tenant: str | None = None) -> list[ChannelHold]:
        where, args = ("WHERE tenant = ? ", (tenant,)) if tenant is not None else ("", ())
        return [ChannelHold(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5]),
                            r[6], str(r[7]))
                for r in self._rows(f"SELECT {_HOLD_COLUMNS} FROM channel_holds {where}"
                                    "ORDER BY tenant, name, holder", args)]

    def claimed_by_channel(self, *, tenant: str | None = None) -> dict[tuple[str, str], int]:
        rows = self._rows("SELECT tenant, channel, count(*) FROM schedules "
                          f"WHERE status = 'CLAIMED' AND {tenant_is()} GROUP BY tenant, channel",
                          (tenant, tenant))
        return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}

    def expire_holds(self, *, now_ms: int) -> int:
        return self._changed("DELETE FROM channel_holds WHERE until_ms <= ?", (now_ms,),
                             idempotent=True)

    def forget_claims(self, *, before_ms: int) -> int:
        d = self._dialect

        def work(conn: Any) -> int:
            conn.execute(d.q("DELETE FROM epoch_runs WHERE taken_ms < ?"), (before_ms,))
            return int(conn.execute(d.q("DELETE FROM claims WHERE claimed_ms < ?"),
                                    (before_ms,)).rowcount)

        return self._work(work, idempotent=True)
