"""The check of one schedule (tocsin.validation.schedule.ScheduleCheck): a plainly valid item is
built without the model, and must come out exactly as the model builds it — the same schedule,
the same payload bytes, the same request digest — while anything else is left to the model."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tocsin.config import Settings
from tocsin.validation.schedule import Problem, ScheduleCheck

NOW_MS = 1_800_000_000_000
_MISSING = object()


def _known(kind: str, name: str, *, tenant: str) -> bool:
    return name in ("out", "p") and tenant != "closed"


def _checks(max_payload: int = 256) -> tuple[ScheduleCheck, ScheduleCheck]:
    """The check as it runs, and one that always asks the model."""
    config = Settings(max_payload_bytes=max_payload)
    fast = ScheduleCheck(config, now_ms=NOW_MS, known=_known)
    model = ScheduleCheck(config, now_ms=NOW_MS, known=_known)
    model._plainly_valid = lambda item: None  # type: ignore[method-assign]
    return fast, model


_texts = st.sampled_from(["out", "p", "", "k" * 128, "k" * 129, "k" * 256, "k" * 257, "é",
                          "a\x00b", "\ud800", "😀", " out", "a\n"])
_json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 70),
                                                         max_value=2 ** 70)
                 | st.floats(allow_nan=True, allow_infinity=True)
                 | st.text(alphabet=st.characters(codec=None), max_size=8))
_json = st.recursive(_json_scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
_odd_payloads = st.sampled_from([(1, 2), {1: "a"}, b"x", {"a": (1,)}, float("inf"),
                                 "x" * 300, {"x": "\ud800"}, {"a\x00": 1}])


def _maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.just(_MISSING) | st.none() | values


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value a plain item holds, now and then something odd: most items are plainly
    valid, and each odd value is tried against an otherwise plain item."""
    return st.integers(0, 11).flatmap(lambda n: odd if n == 0 else usual)


_names = st.text(min_size=1, max_size=10)
_item = st.fixed_dictionaries({
    "channel": _mostly(st.just("out"), _maybe(_texts | st.integers())),
    "payload": _mostly(_json, _maybe(_odd_payloads)),
    "payload_text": _mostly(st.just(_MISSING),
                            _maybe(st.text(max_size=5) | st.integers()
                                   | st.sampled_from(["a\x00", "\ud800", "x" * 300]))),
    "payload_base64": _mostly(st.just(_MISSING), st.none() | st.just("aGk=")),
    "headers": _mostly(st.just(_MISSING) | st.dictionaries(_names, st.text(max_size=3),
                                                           max_size=2),
                       _maybe(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
                              | st.sampled_from([{"a\x00": "b"}, {"h": "\ud800"},
                                                 {"h": "x" * 300}]))),
    "due_at": _mostly(st.just(_MISSING), _maybe(
        st.sampled_from(["2027-01-15T09:00:00Z", "2027-01-15T09:00:00+02:00",
                         "2027-01-15T09:00:00", "2020-01-01T00:00:00Z",
                         "2027-01-15 09:00:00.5z", "9999-12-31T23:59:59Z", "x"])
        | st.integers())),
    "delay": _mostly(st.floats(min_value=0, max_value=1e6) | st.integers(0, 10 ** 6)
                     | st.sampled_from(["PT5M", "P1DT2H", 2 ** 53]),
                     _maybe(st.sampled_from([-1, "3600", True, 2 ** 60, 10 ** 400, math.nan,
                                             math.inf, 1e300, "P"]))),
    "key": _mostly(st.just(_MISSING) | _names, _maybe(_texts | st.integers())),
    "tenant": _mostly(st.just(_MISSING) | st.just("t1"), _maybe(
        st.sampled_from(["a.b-c_D", "bad name", "a\n", "x" * 65, "", "closed", "é"])
        | st.integers())),
    "ordering_key": _mostly(st.just(_MISSING) | _names, _maybe(_texts)),
    "policy": _mostly(st.just(_MISSING) | st.just("p"), _maybe(_texts)),
    "key_mode": _mostly(st.just(_MISSING) | st.just("idempotent"),
                        _maybe(st.sampled_from(["task", "other"]))),
    "uniqueness_key": _mostly(st.just(_MISSING), st.none() | st.just("u")),
    "bogus": _mostly(st.just(_MISSING), st.just(1)),
}).map(lambda d: {k: v for k, v in d.items() if v is not _MISSING})


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(items=st.lists(_item, min_size=1, max_size=3), check_text=st.booleans())
def test_an_item_comes_out_as_the_model_makes_it(items: list[dict[str, Any]],
                                                 check_text: bool) -> None:
    fast, model = _checks()
    for index, item in enumerate(items):
        got = fast.check(dict(item), index=index, check_text=check_text)
        want = model.check(dict(item), index=index, check_text=check_text)
        assert got == want, item


def test_a_plain_item_skips_the_model() -> None:
    fast, _ = _checks()
    item = {"channel": "out", "payload": {"order": 7, "amount": 1250, "note": "é"},
            "delay": 3600, "key": "k-7", "ordering_key": "o", "policy": "p",
            "headers": {"h": "v"}, "tenant": "t1"}
    value = fast._plainly_valid(item)
    assert value is not None
    assert value.payload == b'{"order":7,"amount":1250,"note":"\\u00e9"}'
    assert value.due_ms == NOW_MS + 3_600_000 and value.tenant == "t1"
    assert value.request_digest is not None and len(value.request_digest) == 64
    assert fast._plainly_valid({**item, "payload_text": "hi", "payload": _MISSING}) is None


@pytest.mark.parametrize("item", [
    {"channel": "out", "payload": 1, "delay": 5, "key": "a\x00b"},
    {"channel": "out", "payload": 1, "delay": 5, "ordering_key": "\ud800"},
    {"channel": "out", "payload": {"x": "\ud800"}, "delay": 5},
])
def test_text_the_store_cannot_hold_is_refused(item: dict[str, Any]) -> None:
    fast, _ = _checks()
    assert fast._plainly_valid(item) is None
    problems = fast.check(item, check_text=True)
    assert isinstance(problems, list) and isinstance(problems[0], Problem)
