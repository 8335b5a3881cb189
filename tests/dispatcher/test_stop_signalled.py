"""A dispatcher stopped by a signal that reached Spark's JVM too ends without a traceback."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tocsin.dispatcher.query import _stop_spark


class _GoneQuery:
    """A query whose JVM is gone: Py4J reports the failed command on the root logger, as
    ``py4j.java_gateway`` does, then the call raises."""

    def stop(self) -> None:
        try:
            raise ConnectionResetError("Connection reset by peer")
        except ConnectionResetError:
            logging.exception("Exception while sending command.")
        raise RuntimeError("Py4JNetworkError: Error while sending or receiving")


class _Session:
    def stop(self) -> None:
        pass


@pytest.fixture
def root_filters() -> Any:
    """The root logger's filters, restored after (a signalled stop adds one)."""
    root = logging.getLogger()
    filters = root.filters[:]
    yield root
    root.filters = filters


def _reported(caplog: pytest.LogCaptureFixture) -> bool:
    return any(r.getMessage() == "Exception while sending command." for r in caplog.records)


def test_a_signalled_stop_prints_no_py4j_traceback(root_filters: logging.Logger,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    _stop_spark([_GoneQuery()], _Session(), signalled=True)  # type: ignore[list-item,arg-type]
    assert not _reported(caplog)  # the root logger dropped it: no handler of its prints it


def test_an_unsignalled_stop_still_raises_and_reports(root_filters: logging.Logger,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RuntimeError):
        _stop_spark([_GoneQuery()], _Session(), signalled=False)  # type: ignore[list-item,arg-type]
    assert _reported(caplog)
