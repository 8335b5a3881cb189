"""Delivery of claimed schedules: group by channel, send, and judge each answer (delivered, a
retry after back-off, or dead: dead-lettered, halting its ordering key when the channel says).

Pure of Spark and of the store: the delivery engine (:mod:`tocsin.dispatcher.engine`) sends
with :func:`send` or :func:`send_async`, judges the answers with :func:`verdicts`, and its
writer acknowledges them.
"""

from __future__ import annotations

import json
import random
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from tocsin import tracing
from tocsin.abc import Channel, ClaimedRow
from tocsin.dispatcher.terms import deadline_ms, expiry_reason, retry_policy
from tocsin.domain import Ack, ChannelSpec, Envelope, Outcome, Result, RetryPolicy, Status
from tocsin.domain.delivery import LATENESS_BOUNDS_MS, NO_HEADERS
from tocsin.domain.schedule import PayloadKind
from tocsin.domain.terms import terms_of
from tocsin.ids import delivery_id

__all__ = ["LATENESS_BOUNDS_MS", "Tally", "envelope_of", "send", "send_async",
           "verdicts"]

@dataclass(kw_only=True, slots=True)
class Tally:
    """What a batch of deliveries came to; tallies from many tasks add up."""

    delivered: int = 0
    retried: int = 0
    dead: int = 0
    expired: int = 0
    fenced: int = 0
    lateness_sum_ms: int = 0
    lateness_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENESS_BOUNDS_MS) + 1))

    def add(self, other: Tally) -> None:
        """Fold ``other`` into this tally."""
        self.delivered += other.delivered
        self.retried += other.retried
        self.dead += other.dead
        self.expired += other.expired
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
        terms=None if row.terms is None else terms_of(row.terms),
    )


def _verdict(env: Envelope, result: Result, spec: ChannelSpec | None, retry: RetryPolicy,
             started_ms: int, ended_ms: int, rng: random.Random, row: ClaimedRow) -> Ack:
    """The verdict on one attempt of ``row``: its retry policy and deadline are its terms'
    (:mod:`tocsin.dispatcher.terms`); a retry that would go out at or after its deadline
    expires it now, one past its ``max_retry_duration`` makes it dead."""
    status, next_ms, error = Status.DELIVERED, None, result.error
    if result.outcome is Outcome.EXPIRED:
        status = Status.EXPIRED
    elif result.outcome is not Outcome.DELIVERED:
        terms = terms_of(row.terms)
        policy = retry_policy(retry, spec, terms)
        tries = env.attempt - row.chain_base  # its number within its chain
        status = Status.DEAD
        if result.outcome is Outcome.RETRY and tries < policy.max_attempts:
            wait = result.retry_after_ms  # the receiver's Retry-After wins over the back-off
            at = ended_ms + (policy.delay_ms(tries, rng) if wait is None else wait)
            first = started_ms if row.chain_ms is None else row.chain_ms
            deadline = deadline_ms(row, spec, terms)
            if policy.max_duration_ms is not None and at > first + policy.max_duration_ms:
                error = (f"{error}; no retry after max_retry_duration "
                         f"({policy.max_duration_ms} ms since the first attempt)")
            elif deadline is not None and at >= deadline:
                status, error = Status.EXPIRED, f"{expiry_reason(row, deadline, at)}; {error}"
            else:
                status, next_ms = Status.PENDING, at
    dead = status is Status.DEAD
    return Ack(schedule_id=env.schedule_id, delivery_id=env.delivery_id, attempt=env.attempt,
               outcome=result.outcome, error=error, started_ms=started_ms,
               ended_ms=ended_ms, due_ms=env.due_ms, status=status, next_ms=next_ms,
               dead_letter=spec.dead_letter if spec and dead else None,
               halt=bool(spec and spec.halts_on_dead and dead and env.ordering_key),
               tenant=env.tenant, channel=env.channel,
               events=spec.events if spec else None,
               every_attempt=bool(spec and spec.events_attempts))


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
        ack = _verdict(env, result, spec, retry, started_ms, ended_ms, rng, row)
        by_epoch[env.epoch].append(ack)
        if ack.status is Status.DELIVERED:
            tally.delivered += 1
            tally.observe_lateness(ended_ms - env.due_ms)
        elif ack.status is Status.PENDING:
            tally.retried += 1
        elif ack.status is Status.EXPIRED:
            tally.expired += 1
        else:
            tally.dead += 1
    return by_epoch, tally


def _send_span(name: str, envelopes: Sequence[Envelope]) -> AbstractContextManager[Any]:
    """A ``tocsin.send`` span linked to each schedule's trace context (nothing when off)."""
    if not tracing.active():
        return nullcontext()
    return tracing.span("tocsin.send", links=(
        tracing.trace_headers(e.headers) for e in envelopes),
        attributes={"tocsin.channel": name, "tocsin.rows": len(envelopes)})


async def send_async(channel: Channel, name: str,
                     envelopes: Sequence[Envelope]) -> list[Result]:
    """Await ``channel``'s :meth:`~tocsin.abc.Channel.send_async`: one result each, never
    raising (a transport that raises is RETRY)."""
    if not envelopes:
        return []
    try:
        with _send_span(name, envelopes):
            return await channel.send_async(envelopes)
    except Exception as exc:  # a broken transport must not lose the batch: retry it
        return [Result(delivery_id=e.delivery_id, outcome=Outcome.RETRY,
                       error=f"channel {name!r} failed: {exc!r}"[:1000]) for e in envelopes]


def send(channel: Channel | Exception | None, spec: ChannelSpec | None, name: str,
         envelopes: Sequence[Envelope]) -> list[Result]:
    """Hand ``envelopes`` to ``channel``, the live channel of ``spec`` (or why it could not be
    built): one result each, never raising (an unregistered channel rejects, a channel that
    could not be built or a transport that raises is RETRY)."""
    if not envelopes:
        return []
    if spec is None or channel is None:
        return [Result(delivery_id=e.delivery_id, outcome=Outcome.REJECTED,
                       error=f"channel {name!r} is not registered") for e in envelopes]
    try:
        if isinstance(channel, Exception):
            raise channel
        with _send_span(name, envelopes):
            return channel.send(envelopes)
    except Exception as exc:  # a broken transport must not lose the batch: retry it
        return [Result(delivery_id=e.delivery_id, outcome=Outcome.RETRY,
                       error=f"channel {name!r} failed: {exc!r}"[:1000]) for e in envelopes]
