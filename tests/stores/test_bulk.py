"""The pipelines' bulk keyed create answers exactly as ``create``."""

from __future__ import annotations

import pytest

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
from tocsin.errors import ConflictError, NotFoundError
from tocsin.stores.sql import bulk
from tocsin.stores.sql.schedules import SqlSchedules

NOW = 1_800_000_000_000


def _item(key: str, n: int = 0, tenant: str = "default") -> NewSchedule:
    return NewSchedule(channel="out", payload=b'{"n": %d}' % n, due_ms=NOW + 60_000, key=key,
                       tenant=tenant)


def test_create_keyed(store: Store) -> None:
    """New keys are created, a stored key with the same request is a repeat (the same
    schedule), a repeat within the items too, another request on a stored key a conflict;
    the lookup by key finds each in its tenant."""
    assert isinstance(store, SqlSchedules)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    first = bulk.create_keyed(store, [_item("a"), _item("b"), _item("a", tenant="t2")],
                              now_ms=NOW)
    assert [new for _, new in first] == [True, True, True]
    again = bulk.create_keyed(store, [_item("b"), _item("c"), _item("c")], now_ms=NOW)
    assert (again[0][0].id, again[0][1]) == (first[1][0].id, False)
    assert [new for _, new in again] == [False, True, False]
    assert again[1][0].id == again[2][0].id
    with pytest.raises(ConflictError):
        bulk.create_keyed(store, [_item("d"), _item("a", n=1)], now_ms=NOW)
    with pytest.raises(NotFoundError):  # nothing of the refused call was stored
        bulk.schedule_id_for_key(store, tenant="default", key="d")
    assert bulk.schedule_id_for_key(store, tenant="t2", key="a") == first[2][0].id
    assert bulk.schedule_id_for_key(store, tenant="default", key="a") == first[0][0].id
