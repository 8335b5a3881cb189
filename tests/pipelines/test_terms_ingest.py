"""Delivery terms by the other ways in, on both stores: the Kafka commands topic's create and
an import's columns (CSV text and Parquet) give ``expires_at``, ``max_lateness`` and ``retry``
as the API does, and a bad value is refused naming the field."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.domain.retry import RetryTerms
from tocsin.domain.terms import Terms
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.pipelines.loader import ImportJob, Loader
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.stores import open_store
from tocsin.stores.rows import item_of

NOW_MS = int(time.time() * 1000)
WANT = Terms(expires_ms=NOW_MS + 7_200_000, max_lateness_ms=90_000,
             retry=RetryTerms(max_attempts=3, base_ms=2_000))


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    opened = open_store(backend_url, buckets=16)
    opened.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    yield opened
    opened.close()


def _iso(ms: int) -> str:
    from tocsin.clock import iso_ms

    return iso_ms(ms)


def test_the_commands_topic_takes_terms_and_names_a_bad_one(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x"))
    good = {"op": "create", "channel": "out", "payload": 1, "delay": 3600,
            "expires_at": _iso(WANT.expires_ms or 0), "max_lateness": 90,
            "retry": {"max_attempts": 3, "base": 2}}
    bad = {"op": "create", "channel": "out", "payload": 1, "delay": 3600,
           "retry": {"jitter": 3}}
    made, refused = applier.apply([Message("t", 0, i, NOW_MS, json.dumps(b).encode())
                                   for i, b in enumerate((good, bad))])
    assert made.outcome is Outcome.APPLIED and made.id is not None
    assert store.get(made.id).terms == WANT
    assert (refused.outcome, refused.field) == (Outcome.INVALID, "retry.jitter")


@pytest.mark.parametrize("fmt", [SourceFormat.CSV, SourceFormat.PARQUET])
def test_an_imports_columns_give_terms_and_a_bad_cell_is_a_reject_naming_it(
        store: Store, backend_url: str, fmt: SourceFormat) -> None:
    home = Path(tempfile.mkdtemp(prefix="tocsin-terms-"))
    loader = Loader(ImportJob(store_url=backend_url, buckets=16, settings=Settings(
        store=backend_url, home=home), now_ms=NOW_MS, shape=RowShape(format=fmt),
        root="file:///in"), store)
    csv = fmt is SourceFormat.CSV  # a CSV's cells are text; a Parquet file's, typed
    lateness: list[Any] = ["90", "90"] if csv else [90.0, 90.0]
    delay: list[Any] = ["3600", "3600"] if csv else [3600.0, 3600.0]
    batch = pa.RecordBatch.from_pydict({
        "channel": ["out", "out"], "payload": ["1", "2"], "delay": delay,
        "expires_at": [_iso(WANT.expires_ms or 0)] * 2, "max_lateness": lateness,
        "retry": ['{"max_attempts": 3, "base": 2}', '{"max_attempts": 0}']})
    checked = loader.check_batch(batch, ["file:///in/a"] * 2)
    [(values, index, _)] = checked.good
    assert index == 0
    assert item_of(values, key_retention_ms=1).terms == WANT
    assert checked.tally.rejected == 1
    assert checked.tally.rejects[0]["field"] == "retry.max_attempts"
