"""Issue 40, finding 4, at the store: caps with no holes, on every backend.

Rule expansion looks at the tenant's pending cap (a rule used to expand its next 600 s
whatever the cap: cap 100 became 20 000 pending), the commands topic applies the API's caps
(it applied none), and a key's dashboard sessions are bounded (they were not)."""

from __future__ import annotations

import json
import time

from tocsin.abc import Store
from tocsin.apikeys.tokens import digest_of
from tocsin.config import Settings
from tocsin.dispatcher.expander import expand_due
from tocsin.domain import ChannelKind, ChannelSpec, Role, SkipReason
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.stores.sql.keys import MAX_SESSIONS_PER_KEY

from .conftest import BUCKETS
from .test_recurring_policies import HORIZON, MIN, T0, rec


def test_expansion_stops_at_the_pending_cap(store: Store) -> None:
    store.create_recurring(rec(count=30), now_ms=T0)
    tally = expand_due(store, bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=T0,
                       horizon_ms=HORIZON, max_pending=100)
    assert tally.messages == 90  # three whole firings of 30; a fourth would pass 100
    assert store.pending_count(tenant="default") == 90
    firings = store.recurring_firings("rec-1", limit=100)
    skipped = [f for f in firings if f.outcome == "skipped"]
    assert len(skipped) == 7 and {f.reason for f in skipped} == {SkipReason.PENDING_CAP}
    assert tally.reasons == {SkipReason.PENDING_CAP: 7}
    # Without a cap the same rule fills its horizon: 10 firings of 30.
    store.create_recurring(rec("rec-2", count=30), now_ms=T0)
    assert expand_due(store, bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=T0,
                      horizon_ms=HORIZON).messages == 300
    assert T0 + 10 * MIN in {f.firing_ms for f in store.recurring_firings("rec-2", limit=100)}


def test_the_commands_topic_applies_the_pending_cap(store: Store) -> None:
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    applier = CommandApplier(store, Settings(store="x", tenant_max_pending=3))
    now = int(time.time() * 1000)
    body = json.dumps({"op": "create", "channel": "out", "payload": 1, "delay": 60}).encode()
    answers = applier.apply([Message("t", 0, i, now, body) for i in range(5)])
    assert [a.outcome for a in answers] == [Outcome.APPLIED] * 3 + [Outcome.REFUSED] * 2
    assert {a.field for a in answers[3:]} == {"tenant"}
    assert "pending cap of 3" in str(answers[3].reason)
    assert store.pending_count(tenant="default") == 3


def test_the_commands_topic_applies_the_create_rate(store: Store) -> None:
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    applier = CommandApplier(store, Settings(store="x", tenant_creates_per_second=2))
    now = int(time.time() * 1000)
    body = json.dumps({"op": "create", "channel": "out", "payload": 1, "delay": 60}).encode()
    first = applier.apply([Message("t", 0, i, now, body) for i in range(3)])
    assert [a.outcome for a in first].count(Outcome.APPLIED) == 2
    later = applier.apply([Message("t", 0, 3, now, body)])
    assert later[0].outcome is Outcome.REFUSED and "a second" in str(later[0].reason)


def test_a_keys_dashboard_sessions_are_bounded(store: Store) -> None:
    from tocsin.apikeys.tokens import issue_key

    key, _ = issue_key(store, role=Role.ADMIN, now_ms=0)
    for n in range(MAX_SESSIONS_PER_KEY + 8):
        store.open_session(digest_of(f"s{n}"), key_digest=key.digest, now_ms=n,
                           expires_ms=10**12)
    alive = [n for n in range(MAX_SESSIONS_PER_KEY + 8)
             if store.session_key(digest_of(f"s{n}"), now_ms=100) is not None]
    assert alive == list(range(8, MAX_SESSIONS_PER_KEY + 8))
