"""Delivery of claimed schedules: group by channel, send, and judge each answer (delivered, a
retry after back-off, or dead: dead-lettered, halting its ordering key when the channel says).

Pure of Spark and of the store: :meth:`tocsin.dispatcher.core.DispatchCore.deliver` calls
:func:`judge` and acknowledges the verdicts it returns.
"""

from __future__ import annotations

import json
import random
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tocsin.abc import ClaimedRow
from tocsin.clock import Clock
from tocsin.dispatcher.channel_cache import ChannelCache
from tocsin.domain import Ack, ChannelSpec, Envelope, Outcome, Result, RetryPolicy, Status
from tocsin.domain.delivery import LATENESS_BOUNDS_MS, NO_HEADERS
from tocsin.domain.schedule import PayloadKind
from tocsin.ids import delivery_id

__all__ = ["LATENESS_BOUNDS_MS", "Tally", "envelope_of", "judge", "send", "verdicts"]

@dataclass(kw_only=True, slots=True)
class Tally:
    """What a batch of deliveries came to; tallies from many tasks add up."""

    delivered: int = 0
    retried: int = 0
    dead: int = 0
    fenced: int = 0
    lateness_sum_ms: int = 0
    lateness_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENESS_BOUNDS_MS) + 1))

    def add(self, other: Tally) -> None:
        """Fold ``other`` into this tally."""
        self.delivered += other.delivered
        self.retried += other.retried
        self.dead += other.dead
        self.fenced += other.fenced
        self.lateness_sum_ms += other.lateness_sum_ms
        self.lateness_buckets = [a + b for a, b in zip(self.lateness_buckets,
                                                       other.lateness_buckets, strict=True)]

    def observe_lateness(self, lateness_ms: int) -> None:
        """Count one delivered schedule's lateness."""
        self.lateness_sum_ms += lateness_ms
        self.lateness_buckets[bisect_left(LATENESS_BOUNDS_MS, lateness_ms)] += 1


_KINDS = {k.value: k for k in PayloadKind}


def envelope_of(row: ClaimedRow) -> Envelope:
    """The envelope handed to a channel for one claimed row."""
    return Envelope(
        schedule_id=row.id, delivery_id=delivery_id(row.id, row.attempt), attempt=row.attempt,
        epoch=row.epoch, tenant=row.tenant, channel=row.channel, payload=row.payload,
        payload_kind=_KINDS[row.payload_kind],
        headers=json.loads(row.headers) if row.headers != "{}" else NO_HEADERS,
        due_ms=row.due_ms, key=row.key, ordering_key=row.ordering_key,
    )


def _verdict(env: Envelope, result: Result, spec: ChannelSpec | None, retry: RetryPolicy,
             started_ms: int, ended_ms: int, rng: random.Random, tries: int) -> Ack:
    """``tries``: the attempt's number within its chain (a re-drive starts a new chain)."""
    status, next_ms = Status.DELIVERED, None
    if result.outcome is not Outcome.DELIVERED:
        limit = (spec.max_attempts if spec else None) or retry.max_attempts
        if result.outcome is Outcome.RETRY and tries < limit:
            wait = result.retry_after_ms  # the receiver's Retry-After wins over the back-off
            status, next_ms = Status.PENDING, ended_ms + (
                retry.delay_ms(tries, rng) if wait is None else wait)
        else:
            status = Status.DEAD
    return Ack(schedule_id=env.schedule_id, delivery_id=env.delivery_id, attempt=env.attempt,
               outcome=result.outcome, error=result.error, started_ms=started_ms,
               ended_ms=ended_ms, due_ms=env.due_ms, status=status, next_ms=next_ms,
               dead_letter=spec.dead_letter if spec and status is Status.DEAD else None,
               halt=bool(spec and spec.halts_on_dead and status is Status.DEAD
                         and env.ordering_key), tenant=env.tenant, channel=env.channel)


def judge(rows: Iterable[ClaimedRow], *, channels: ChannelCache, retry: RetryPolicy,
          clock: Clock, rng: random.Random) -> tuple[dict[int, list[Ack]], Tally]:
    """Hand claimed rows to their channels, one destination after another; the verdict on
    each, by epoch, and their tally (``fenced`` is left to the acknowledgement). The
    dispatcher's lanes (:mod:`tocsin.dispatcher.lanes`) make the same calls per destination,
    each on its own thread."""
    by_destination: dict[tuple[str, str], list[ClaimedRow]] = defaultdict(list)
    for row in rows:  # a schedule goes to the channel of its own tenant
        by_destination[(row.tenant, row.channel)].append(row)
    tally = Tally()
    by_epoch: dict[int, list[Ack]] = defaultdict(list)
    for (tenant, name), group in by_destination.items():
        spec = channels.spec(name, tenant=tenant)
        envelopes = [envelope_of(r) for r in group]
        started = clock.now_ms()
        results = send(channels, spec, name, envelopes)
        acks, part = verdicts(group, envelopes, results, spec=spec, retry=retry,
                              started_ms=started, ended_ms=clock.now_ms(), rng=rng)
        for epoch, items in acks.items():
            by_epoch[epoch].extend(items)
        tally.add(part)
    return by_epoch, tally


def verdicts(rows: Sequence[ClaimedRow], envelopes: Sequence[Envelope], results: list[Result],
             *, spec: ChannelSpec | None, retry: RetryPolicy, started_ms: int, ended_ms: int,
             rng: random.Random) -> tuple[dict[int, list[Ack]], Tally]:
    """The verdict on each of one destination's envelopes (``rows[i]`` made
    ``envelopes[i]``) from the channel's ``results`` (an envelope without one is RETRY),
    by epoch, and their tally."""
    by_id = {r.delivery_id: r for r in results}
    tally = Tally()
    by_epoch: dict[int, list[Ack]] = defaultdict(list)
    for row, env in zip(rows, envelopes, strict=True):
        result = by_id.get(env.delivery_id) or Result(
            delivery_id=env.delivery_id, outcome=Outcome.RETRY,
            error=f"channel {env.channel} gave no answer for this delivery")
        ack = _verdict(env, result, spec, retry, started_ms, ended_ms, rng,
                       env.attempt - row.chain_base)
        by_epoch[env.epoch].append(ack)
        if ack.status is Status.DELIVERED:
            tally.delivered += 1
            tally.observe_lateness(ended_ms - env.due_ms)
        elif ack.status is Status.PENDING:
            tally.retried += 1
        else:
            tally.dead += 1
    return by_epoch, tally


def send(channels: ChannelCache, spec: ChannelSpec | None, name: str,
         envelopes: Sequence[Envelope]) -> list[Result]:
    """Hand ``envelopes`` to the live channel of ``spec``: one result each, never raising
    (an unregistered channel rejects, a transport that raises is RETRY)."""
    if spec is None:
        return [Result(delivery_id=e.delivery_id, outcome=Outcome.REJECTED,
                       error=f"channel {name!r} is not registered") for e in envelopes]
    try:
        return channels.channel(spec).send(envelopes)
    except Exception as exc:  # a broken transport must not lose the batch: retry it
        return [Result(delivery_id=e.delivery_id, outcome=Outcome.RETRY,
                       error=f"channel {name!r} failed: {exc!r}"[:1000]) for e in envelopes]
