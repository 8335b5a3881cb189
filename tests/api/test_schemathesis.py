"""schemathesis over the whole OpenAPI document of a real running API, on every store, with
an admin key: for every operation, valid and invalid requests generated from the document
never answer 5xx, and every status answered is one the document names.

Bounded so that it fits CI: ``EXAMPLES`` requests per operation and mode, no shrinking (a
failure is reported with the request that caused it, as generated).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import status_code_conformance

from tocsin.testing.api_server import ApiServer

EXAMPLES = int(os.environ.get("TOCSIN_SCHEMATHESIS_EXAMPLES", "25"))
"""Requests per operation and generation mode (about 30 s per store on a 2-core machine);
raise it to search harder."""
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)


def _failures(operation: Any, mode: Any, base_url: str, headers: dict[str, str]) -> list[str]:
    """What went wrong calling ``operation`` with ``EXAMPLES`` generated requests."""
    found: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        try:
            case.call_and_validate(base_url=base_url, headers=headers,
                                   checks=[not_a_server_error, status_code_conformance],
                                   timeout=30)
        except (Exception, FailureGroup) as exc:  # failed checks, or no answer at all
            found.append(f"{operation.label} ({mode.value}): {exc}"[:2000])

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (an operation without parameters)
        assert mode is schemathesis.GenerationMode.NEGATIVE
    return found


def test_no_5xx_and_every_status_documented(api_server: ApiServer, api: httpx.Client) -> None:
    schema = schemathesis.openapi.from_url(f"{api_server.url}/openapi.json")
    headers = dict(api.headers)  # the admin key
    headers.pop("user-agent", None)
    assert httpx.get(f"{api_server.url}/v1/channels", headers=headers).status_code == 200
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 30, "the document lost its operations"
    for operation in operations:
        for mode in MODES:
            failures += _failures(operation, mode, api_server.url, headers)
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:20])
