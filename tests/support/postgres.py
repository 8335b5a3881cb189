"""A real PostgreSQL server for the tests, as a pytest plugin (the server and schema helpers
are :mod:`tocsin.testing.postgres`).

``postgres_url`` (session): ``$TOCSIN_TEST_POSTGRES_URL`` when set (CI runs
``.ci/postgres.sh start`` and exports it), else a throw-away cluster started here with that same
script and stopped at the end of the session by its PID. When no server can be had the tests
that need one are skipped, except under ``CI=true``, where that is a failure.

``postgres_store_url`` (function): a URL whose tables land in a fresh, empty schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tocsin.testing.postgres import (
    PostgresUnavailable,
    check,
    create_schema,
    drop_schema,
    throwaway_server,
)

__all__ = ["postgres_store_url", "postgres_url", "unavailable"]


def unavailable(reason: str) -> None:
    """Skip the test for want of PostgreSQL; under ``CI=true``, fail it."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a PostgreSQL database for this test session."""
    url = os.environ.get("TOCSIN_TEST_POSTGRES_URL")
    if url:
        problem = check(url)
        if problem:
            pytest.fail(f"TOCSIN_TEST_POSTGRES_URL={url} does not answer: {problem}",
                        pytrace=False)
        yield url
        return
    try:
        with throwaway_server() as server:
            yield server.url
    except PostgresUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture
def postgres_store_url(postgres_url: str) -> Iterator[str]:
    """The URL of a fresh, empty schema on the session's server, dropped afterwards."""
    url = create_schema(postgres_url)
    yield url
    drop_schema(postgres_url, url)
