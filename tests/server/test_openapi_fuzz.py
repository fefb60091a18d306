"""A property test over the published OpenAPI document: schemathesis generates
requests for every operation — valid ones and invalid ones — and sends them to the
real app with an admin key; none may get a 5xx.

(Schemathesis' lazy pytest loader does not run on this pytest, so the test drives
each operation's Hypothesis strategy itself.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from interlock.server import KeyStore, Role, create_app

from .harness import bearer, open_guard

pytestmark = pytest.mark.slow

EXAMPLES = 30  # per operation and mode: 16 operations x 2 modes, well under a minute


def test_no_generated_request_gets_a_server_error(sqlite_url: str, policy_file: Path) -> None:
    guard = open_guard(sqlite_url, policy_file)
    try:
        assert guard.store is not None
        keys = KeyStore(guard.store)
        headers = bearer(keys.create(tenant="acme", role=Role.ADMIN, name="fuzzer").token)
        app = create_app(guard, keys=keys, max_wait=0.05)
        schema = schemathesis.openapi.from_asgi("/v1/openapi.json", app)
        operations = []
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), result  # every operation's definition loads
            operations.append(result.ok())
        assert len(operations) >= 16
        document = app.openapi()["paths"]
        for operation in operations:
            raw = document[operation.path][operation.method.lower()]
            modes = [GenerationMode.POSITIVE]
            if raw.get("parameters") or raw.get("requestBody"):  # else nothing is invalid
                modes.append(GenerationMode.NEGATIVE)
            for mode in modes:
                _fuzz(operation.as_strategy(generation_mode=mode), headers)
    finally:
        guard.close()


def _fuzz(strategy: Any, headers: dict[str, str]) -> None:
    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=[not_a_server_error])

    run()
