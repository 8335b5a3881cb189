"""A claimed row's delivery terms as the delivery engine applies them: its deadline (expiry)
and its retry policy, each the schedule's own over its channel's over the dispatcher's.

Pure: the engine asks :func:`split_expired` just before a send, and
:func:`~tocsin.dispatcher.deliver.verdicts` asks :func:`retry_policy` and :func:`deadline_ms`
when it judges a failed attempt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tocsin.abc import ClaimedRow
from tocsin.clock import iso_ms
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result, RetryPolicy
from tocsin.domain.terms import Terms, terms_of

__all__ = ["deadline_ms", "expiry_reason", "retry_policy", "split_expired"]


def deadline_ms(row: ClaimedRow, spec: ChannelSpec | None,
                terms: Terms | None) -> int | None:
    """The instant from which ``row`` must not be sent (None: none): the earlier of its
    ``expires_at`` and its due time plus its ``max_lateness`` (the channel's when the
    schedule gives none). A re-driven schedule (a new attempt chain: an operator's decision
    to send it) has none."""
    if row.chain_base:
        return None
    expires = terms.expires_ms if terms else None
    lateness = terms.max_lateness_ms if terms else None
    if lateness is None and spec is not None:
        lateness = spec.max_lateness_ms
    late = None if lateness is None else row.due_ms + lateness
    if expires is None:
        return late
    return expires if late is None else min(expires, late)


def expiry_reason(row: ClaimedRow, deadline: int, at_ms: int) -> str:
    """Why ``row`` expired: it would have gone out at ``at_ms``, at or after ``deadline``."""
    return (f"expired: it would have gone out at {iso_ms(at_ms)}, "
            f"{at_ms - row.due_ms} ms after its due time {iso_ms(row.due_ms)}; "
            f"its deadline was {iso_ms(deadline)}")


def split_expired(rows: Sequence[ClaimedRow], envelopes: list[Envelope],
                  spec: ChannelSpec | None,
                  now_ms: int) -> tuple[list[Envelope], list[Result]]:
    """The envelopes still to send at ``now_ms``, and an EXPIRED result for each of the
    others (never sent). Costs a comparison per row that has terms, or a channel default."""
    if ((spec is None or spec.max_lateness_ms is None)
            and all(r.terms is None for r in rows)):
        return envelopes, []
    live, expired = [], []
    for row, env in zip(rows, envelopes, strict=True):
        deadline = deadline_ms(row, spec, terms_of(row.terms))
        if deadline is not None and now_ms >= deadline:
            expired.append(Result(delivery_id=env.delivery_id, outcome=Outcome.EXPIRED,
                                  error=expiry_reason(row, deadline, now_ms)))
        else:
            live.append(env)
    return live, expired


def with_tenant_events(spec: ChannelSpec, store: Any) -> ChannelSpec:
    """``spec`` with its tenant's events channel when it names none of its own (and is not
    that channel)."""
    if spec.events is not None:
        return spec
    events = store.get_tenant(spec.tenant).events
    if not events or events == spec.name:
        return spec
    return dataclasses.replace(spec, config={**spec.config, "events": events})


def retry_policy(base: RetryPolicy, spec: ChannelSpec | None,
                 terms: Terms | None) -> RetryPolicy:
    """``row``'s retry policy: the schedule's ``retry`` over its channel's over ``base``."""
    policy = base
    if spec is not None:
        if spec.max_attempts is not None:
            policy = policy.overridden_attempts(spec.max_attempts)
        policy = policy.overridden(spec.retry_terms)
    return policy.overridden(terms.retry if terms else None)
