"""Attacks on the session endpoints (``/v1/sessions/outcome``, ``/v1/sessions/input``)
of the real app over a real store (SQLite and PostgreSQL): a key that may check
reports outcomes that would rewrite what the session did — a refused call reported as
run, a run call reported again as not run, a label removed — next to the honest
reports that must still count."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from interlock.session.fingerprints import of_data
from interlock.session.packing import pack_text
from server.harness import Api, open_api

POLICY = """\
version: 1
default: deny
labels:
  - id: untrusted-fetch
    attach: [untrusted]
    name: fetch_url
rules:
  - id: fetch
    decision: allow
    reason: fetching is fine
    name: fetch_url
  - id: unit-tests
    decision: allow
    reason: the unit suite may run
    name: run_tests
    params:
      args.suite: {glob: ["unit"]}
  - id: deploy-after-tests
    decision: allow
    reason: a deploy once the tests ran
    name: deploy
    session:
      after: {name: run_tests}
  - id: deletes
    decision: allow
    reason: deleting is fine
    name: delete
  - id: deletes-capped
    decision: deny
    reason: at most two deletes per session
    name: delete
    session:
      after: {name: delete, at_least: 2}
  - id: shell
    decision: allow
    reason: shell is fine
    name: shell
  - id: no-shell-after-untrusted
    decision: deny
    reason: no shell after untrusted content
    name: shell
    session:
      labels: [untrusted]
"""


@pytest.fixture
async def api(store_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    path = tmp_path / "interlock.yaml"
    path.write_text(POLICY)
    async for opened in open_api(store_url, path):
        yield opened


async def _check(api: Api, session: str, name: str, **arguments: Any) -> dict[str, Any]:
    return await api.check("agent", name=name, arguments=arguments, context={"session_id": session})


async def _outcome(api: Api, session: str, decision_id: str, **body: Any) -> Any:
    answer = await api.client.post(
        "/v1/sessions/outcome",
        json={"session_id": session, "decision_id": decision_id, **body},
        headers=api.h("agent"),
    )
    assert answer.status_code in (200, 422), answer.text
    return answer


async def test_a_refused_call_reported_as_run_does_not_count(api: Api) -> None:
    refused = await _check(api, "s-1", "run_tests", suite="nightly")
    assert refused["verdict"] == "deny"
    await _outcome(api, "s-1", refused["decision_id"], executed=True)
    assert (await _check(api, "s-1", "deploy"))["verdict"] == "deny"
    # benign: the allowed suite, reported as run, lets the deploy through
    ran = await _check(api, "s-2", "run_tests", suite="unit")
    assert ran["verdict"] == "allow"
    await _outcome(api, "s-2", ran["decision_id"], executed=True)
    assert (await _check(api, "s-2", "deploy"))["verdict"] == "allow"


async def test_a_run_call_cannot_be_reported_again_as_not_run(api: Api) -> None:
    ids = []
    for path in ("/tmp/a", "/tmp/b"):
        decided = await _check(api, "s-1", "delete", path=path)
        assert decided["verdict"] == "allow"
        await _outcome(api, "s-1", decided["decision_id"], executed=True)
        ids.append(decided["decision_id"])
    assert (await _check(api, "s-1", "delete", path="/tmp/c"))["verdict"] == "deny"
    for decision_id in ids:  # the agent takes its deletes back
        await _outcome(api, "s-1", decision_id, executed=False)
    assert (await _check(api, "s-1", "delete", path="/tmp/c"))["verdict"] == "deny"
    # benign: a delete that really failed does not count
    failed = await _check(api, "s-2", "delete", path="/tmp/a")
    await _outcome(api, "s-2", failed["decision_id"], executed=False)
    one = await _check(api, "s-2", "delete", path="/tmp/b")
    await _outcome(api, "s-2", one["decision_id"], executed=True)
    assert (await _check(api, "s-2", "delete", path="/tmp/c"))["verdict"] == "allow"


async def test_no_report_removes_a_label(api: Api) -> None:
    fetched = await _check(api, "s-1", "fetch_url", url="https://blog.example")
    assert fetched["verdict"] == "allow"
    await _outcome(api, "s-1", fetched["decision_id"], executed=False, labels=[])
    for label in ("-untrusted", "!untrusted", "UNTRUSTED", "untrusted\u200b", "untrusted "):
        answer = await _outcome(api, "s-1", fetched["decision_id"], executed=True, labels=[label])
        assert answer.status_code in (200, 422)
    inputs = {"session_id": "s-1", "trusted": True, "fingerprints": pack_text(of_data("ok"))}
    answer = await api.client.post("/v1/sessions/input", json=inputs, headers=api.h("agent"))
    assert answer.status_code == 200
    assert (await _check(api, "s-1", "shell", command="ls"))["verdict"] == "deny"
    assert (await _check(api, "s-2", "shell", command="ls"))["verdict"] == "allow"


async def test_a_session_of_another_tenant_is_not_reachable(api: Api) -> None:
    fetched = await _check(api, "s-1", "fetch_url", url="https://blog.example")
    body = {"session_id": "s-1", "decision_id": fetched["decision_id"], "executed": True}
    answer = await api.client.post("/v1/sessions/outcome", json=body, headers=api.h("other_agent"))
    assert answer.status_code == 200 and answer.json()["recorded"] is False
    other = await api.check(
        "other_agent", name="shell", arguments={"command": "ls"}, context={"session_id": "s-1"}
    )
    assert other["verdict"] == "allow"  # globex's s-1 is its own, untouched by acme's
    assert (await _check(api, "s-1", "shell", command="ls"))["verdict"] == "deny"
