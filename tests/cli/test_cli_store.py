"""The store commands: db, audit verify/tail/export, approvals and budgets.

Each test fills a SQLite store in tmp_path through the store API, then runs the
command against it with ``-d`` and checks what it prints and how it exits: 0 done,
1 a finding (broken chain, pending migration, approval missing or not decidable),
2 a usage error or a store that cannot be used.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from interlock.cli import app
from interlock.store import (
    ApprovalRecord,
    ApprovalStatus,
    BudgetLine,
    ReservationStatus,
    SqlStore,
    open_store,
)
from interlock.store.chain import encode_body
from interlock.store.migrate import known_migrations
from interlock.store.records import now_us

runner = CliRunner()

HOUR_US = 3_600_000_000
T0 = 1_714_564_800_000_000  # 2024-05-01T12:00:00Z


@pytest.fixture(autouse=True)
def _no_interlock_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "INTERLOCK_DATABASE_URL",
        "INTERLOCK_DATA_DIR",
        "INTERLOCK_AUDIT_KEY",
        "INTERLOCK_APPROVER",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'interlock.db'}"


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    return tmp_path / "interlock.db"


@pytest.fixture
def store(url: str) -> Iterator[SqlStore]:
    opened = open_store(url)
    yield opened
    opened.close()


def run(url: str | None, *args: str) -> Result:
    return runner.invoke(app, [*args, *(["-d", url] if url else [])])


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def decision_body(
    tenant: str, decision: str, name: str = "shell", rule: str = "r1", agent: str = "bot"
) -> str:
    return encode_body(
        {
            "kind": "decision",
            "tenant": tenant,
            "agent": agent,
            "decision": decision,
            "decision_id": f"dec_{name}_{decision}",
            "action": {"kind": "tool", "name": name, "arguments": {"x": 1}},
            "reason": "because",
            "rule_ids": [rule],
        }
    )


def add_decisions(store: SqlStore) -> None:
    """acme: deny shell (T0), allow search (T0 + 1 h), approval-needed refund
    (T0 + 2 h, agent other); beta: allow shell (T0 + 30 min)."""
    store.append_audit(
        [
            ("acme", T0, "decision", "d1", "bot", "deny", decision_body("acme", "deny")),
            (
                "beta",
                T0 + HOUR_US // 2,
                "decision",
                "d2",
                "bot",
                "allow",
                decision_body("beta", "allow"),
            ),
            (
                "acme",
                T0 + HOUR_US,
                "decision",
                "d3",
                "bot",
                "allow",
                decision_body("acme", "allow", "search"),
            ),
            (
                "acme",
                T0 + 2 * HOUR_US,
                "decision",
                "d4",
                "other",
                "require_approval",
                decision_body("acme", "require_approval", "refund", agent="other"),
            ),
        ]
    )


def open_approval(
    store: SqlStore,
    *,
    tenant: str = "acme",
    agent: str = "bot",
    intent: str = "a",
    amount: int = 250,
) -> ApprovalRecord:
    return store.resolve_approval(
        tenant=tenant,
        intent_hash=intent * 64,
        action={
            "kind": "tool",
            "name": "refund_order",
            "arguments": {"order_id": 42, "amount": amount, "api_key": "[REDACTED]"},
        },
        context={"tenant": tenant, "agent": agent, "session_id": "s1"},
        rule_ids=["refund-large"],
        reason="refunds over 100 need a human",
        requested_by=agent,
        ttl_us=HOUR_US,
        grant_ttl_us=HOUR_US // 6,
    ).record


def open_expired_approval(url: str) -> ApprovalRecord:
    """A request opened two hours ago with a one-hour TTL: expired on the real clock."""
    past = open_store(url, clock=lambda: now_us() - 2 * HOUR_US)
    try:
        return open_approval(past, intent="e")
    finally:
        past.close()


def tamper(db_file: Path, sql: str) -> None:
    with sqlite3.connect(db_file) as conn:
        conn.execute(sql)


# -- db --------------------------------------------------------------------------------


def test_db_migrate_applies_once_then_is_up_to_date(url: str) -> None:
    first = run(url, "db", "migrate")
    assert first.exit_code == 0, first.output
    assert "applied 0001_initial" in first.output
    again = run(url, "db", "migrate")
    assert again.exit_code == 0
    assert "up to date" in again.output and "applied" not in again.output


def test_db_status_exits_1_while_a_migration_is_pending(url: str, db_file: Path) -> None:
    missing = run(url, "db", "status")
    assert missing.exit_code == 1
    assert "no database at" in missing.output and "interlock db migrate" in missing.output
    assert not db_file.exists()  # asking did not create it
    unmigrated = open_store(url, migrate=False)
    unmigrated.migration_status()  # creates the ledger, applies nothing
    unmigrated.close()
    pending = run(url, "db", "status")
    assert pending.exit_code == 1
    assert re.search(r"0001\W+initial\W+no\b", pending.output), pending.output
    pending_count = len(known_migrations("sqlite"))
    assert f"{pending_count} pending; run: interlock db migrate" in pending.output
    run(url, "db", "migrate")
    done = run(url, "db", "status")
    assert done.exit_code == 0
    assert re.search(r"0001\W+initial\W+yes\b", done.output), done.output
    assert "up to date" in done.output


def test_the_default_database_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(None, "db", "migrate").exit_code == 0
    assert (tmp_path / ".interlock" / "interlock.db").exists()
    monkeypatch.setenv("INTERLOCK_DATA_DIR", str(tmp_path / "data"))
    assert run(None, "db", "migrate").exit_code == 0
    assert (tmp_path / "data" / "interlock.db").exists()
    monkeypatch.setenv("INTERLOCK_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    assert run(None, "db", "migrate").exit_code == 0
    assert (tmp_path / "env.db").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["audit", "verify"],
        ["audit", "tail"],
        ["audit", "export"],
        ["approvals", "list"],
        ["approvals", "show", "apr_1"],
        ["approvals", "approve", "apr_1", "--as", "alice", "--reason", "checked"],
        ["budgets", "status"],
        ["budgets", "reap"],
    ],
)
def test_reading_a_database_that_does_not_exist_exits_2(
    url: str, db_file: Path, command: list[str]
) -> None:
    result = run(url, *command)
    assert result.exit_code == 2, result.output
    assert "error: no database at" in result.output
    assert not db_file.exists()


@pytest.mark.parametrize(
    ("database", "message"),
    [
        ("mysql://db/x", "unknown database URL scheme 'mysql'"),
        ("sqlite://relative.db", "invalid SQLite URL"),
    ],
)
def test_an_unusable_database_url_exits_2(database: str, message: str) -> None:
    result = run(database, "audit", "verify")
    assert result.exit_code == 2
    assert f"error: {message}" in result.output


# -- audit verify ----------------------------------------------------------------------


def test_audit_verify_counts_each_tenants_records(url: str, store: SqlStore) -> None:
    add_decisions(store)
    result = run(url, "audit", "verify")
    assert result.exit_code == 0, result.output
    assert "tenant 'acme': 3 records, intact" in result.output
    assert "tenant 'beta': 1 record, intact" in result.output
    assert "chain intact: 4 records in 2 tenants" in result.output


def test_audit_verify_on_an_empty_log_exits_0(url: str, store: SqlStore) -> None:
    result = run(url, "audit", "verify")
    assert result.exit_code == 0
    assert "no audit records yet" in result.output


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        (
            'UPDATE audit_events SET body = \'{"decision":"allow"}\' '
            "WHERE tenant = 'acme' AND seq = 2",
            "tenant 'acme', record 2: hash mismatch",
        ),
        (
            "DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 2",
            "tenant 'acme', record 2: record 2 is missing",
        ),
        (
            "DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 3",
            "tenant 'acme', record 3: records 3..3 are missing",
        ),
        (
            "UPDATE audit_events SET decision = 'allow' WHERE tenant = 'acme' AND seq = 1",
            "tenant 'acme', record 1: hash mismatch",
        ),
    ],
    ids=["body-edited", "record-deleted", "last-record-deleted", "column-edited"],
)
def test_audit_verify_on_a_tampered_log_exits_1_naming_the_link(
    url: str, store: SqlStore, db_file: Path, sql: str, problem: str
) -> None:
    add_decisions(store)
    tamper(db_file, sql)
    result = run(url, "audit", "verify")
    assert result.exit_code == 1, result.output
    assert problem in result.output
    assert "tenant 'beta': 1 record, intact" in result.output
    assert "chain BROKEN in 1 of 2 tenants" in result.output
    only_beta = run(url, "audit", "verify", "--tenant", "beta")
    assert only_beta.exit_code == 0
    assert "acme" not in only_beta.output


def test_audit_verify_under_another_audit_key_breaks_at_record_1(
    url: str, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_decisions(store)
    monkeypatch.setenv("INTERLOCK_AUDIT_KEY", "not-the-key-it-was-written-with")
    result = run(url, "audit", "verify")
    assert result.exit_code == 1
    # Each record names the key it was written with (the store's key file's), which
    # this verifier does not have.
    assert "tenant 'acme', record 1: record 1 is keyed with key id" in result.output
    assert "tenant 'beta', record 1: record 1 is keyed with key id" in result.output
    assert "written with another audit key?" in result.output


def test_audit_verify_with_the_audit_key_it_was_written_with(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLOCK_AUDIT_KEY", "k1")
    with open_store(url) as keyed:
        add_decisions(keyed)
    result = run(url, "audit", "verify")
    assert result.exit_code == 0
    assert "HMAC-SHA256" in result.output
    monkeypatch.delenv("INTERLOCK_AUDIT_KEY")
    assert run(url, "audit", "verify").exit_code == 1


# -- audit tail ------------------------------------------------------------------------


def test_audit_tail_shows_the_newest_records_newest_last(url: str, store: SqlStore) -> None:
    add_decisions(store)
    result = run(url, "audit", "tail", "-n", "2", "--json")
    assert result.exit_code == 0
    assert [(r["tenant"], r["seq"]) for r in json_lines(result)] == [("acme", 2), ("acme", 3)]
    table = run(url, "audit", "tail")
    assert table.exit_code == 0
    for text in ("tool shell", "tool search", "require_approval", "2024-05-01T14:00:00Z"):
        assert text in table.output
    assert table.output.index("tool search") < table.output.index("tool refund")


def test_audit_tail_filters_by_tenant(url: str, store: SqlStore) -> None:
    add_decisions(store)
    result = run(url, "audit", "tail", "--tenant", "beta", "--json")
    assert [r["tenant"] for r in json_lines(result)] == ["beta"]
    empty = run(url, "audit", "tail", "--tenant", "nobody")
    assert empty.exit_code == 0
    assert "no audit records for tenant 'nobody'" in empty.output


def test_audit_tail_events_still_reads_a_jsonl_file(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(
        "\n".join(
            json.dumps(
                {
                    "kind": "decision",
                    "tenant": tenant,
                    "decision_id": f"dec_{i}",
                    "agent": "bot",
                    "action": {"kind": "tool", "name": f"tool_{i}"},
                    "decision": "allow",
                    "rule_ids": ["r"],
                    "latency_us": 3.5,
                }
            )
            for i, tenant in enumerate(["acme", "beta", "acme"])
        )
        + "\n"
    )
    result = run(None, "audit", "tail", "--events", str(events), "--json", "-n", "5")
    assert [r["decision_id"] for r in json_lines(result)] == ["dec_0", "dec_1", "dec_2"]
    only = run(None, "audit", "tail", "--events", str(events), "--tenant", "acme", "--json")
    assert [r["decision_id"] for r in json_lines(only)] == ["dec_0", "dec_2"]
    table = run(None, "audit", "tail", "--events", str(events))
    assert table.exit_code == 0 and "tool tool_2" in table.output
    missing = run(None, "audit", "tail", "--events", str(tmp_path / "none.jsonl"))
    assert missing.exit_code == 2 and "no such event file" in missing.output


# -- audit export ----------------------------------------------------------------------


def test_audit_export_writes_every_record_oldest_first(url: str, store: SqlStore) -> None:
    add_decisions(store)
    result = run(url, "audit", "export", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    records = json_lines(result)
    assert [(r["tenant"], r["seq"]) for r in records] == [
        ("acme", 1),
        ("beta", 1),
        ("acme", 2),
        ("acme", 3),
    ]
    first = records[0]
    assert set(first) == {
        "tenant",
        "seq",
        "ts",
        "ts_us",
        "kind",
        "decision_id",
        "agent",
        "decision",
        "record",
        "prev_hash",
        "hash",
    }
    assert first["ts"] == "2024-05-01T12:00:00.000000Z" and first["ts_us"] == T0
    assert first["record"]["action"]["name"] == "shell"
    assert first["prev_hash"] == "0" * 64
    assert records[2]["prev_hash"] == first["hash"]  # acme's second link


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["--tenant", "acme"], [("acme", 1), ("acme", 2), ("acme", 3)]),
        (["--agent", "other"], [("acme", 3)]),
        (["--decision", "allow"], [("beta", 1), ("acme", 2)]),
        (["--kind", "decision", "--decision", "deny"], [("acme", 1)]),
        (["--since", "2024-05-01T13:00:00"], [("acme", 2), ("acme", 3)]),
        (["--until", "2024-05-01T13:00:00Z"], [("acme", 1), ("beta", 1)]),
        (["--since", "2024-05-01T14:45:00+02:00"], [("acme", 2), ("acme", 3)]),
        (["--since", "2024-05-01", "--until", "2024-05-01T12:30:00"], [("acme", 1)]),
        (["--since", "2024-05-02"], []),
        (["--kind", "approval"], []),
    ],
)
def test_audit_export_filters(
    url: str, store: SqlStore, filters: list[str], expected: list[tuple[str, int]]
) -> None:
    add_decisions(store)
    result = run(url, "audit", "export", *filters)
    assert result.exit_code == 0, result.output
    assert [(r["tenant"], r["seq"]) for r in json_lines(result)] == expected


def test_audit_export_to_a_file(url: str, store: SqlStore, tmp_path: Path) -> None:
    add_decisions(store)
    target = tmp_path / "out" / "audit.jsonl"
    target.parent.mkdir()
    result = run(url, "audit", "export", "--tenant", "beta", "--output", str(target))
    assert result.exit_code == 0
    assert f"exported 1 record to {target}" in result.output
    assert [json.loads(line)["tenant"] for line in target.read_text().splitlines()] == ["beta"]
    assert not (tmp_path / "out" / "audit.jsonl.partial").exists()
    unwritable = run(url, "audit", "export", "--output", str(tmp_path / "no" / "dir" / "x"))
    assert unwritable.exit_code == 2 and "error:" in unwritable.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "csv"], "unknown export format 'csv': the only format is jsonl"),
        (["--since", "yesterday"], "--since 'yesterday' is not an ISO-8601 date"),
        (["--until", "2024-13-01"], "--until '2024-13-01' is not an ISO-8601 date"),
        (["--decision", "maybe"], "--decision must be one of allow, deny, require_approval"),
        (["--since", "2024-05-02", "--until", "2024-05-01"], "is not before --until"),
    ],
)
def test_audit_export_usage_errors_exit_2(
    url: str, store: SqlStore, args: list[str], message: str
) -> None:
    result = run(url, "audit", "export", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert result.stdout == ""


# -- approvals -------------------------------------------------------------------------


def test_approvals_list_shows_pending_requests_by_default(url: str, store: SqlStore) -> None:
    pending = open_approval(store)
    decided = open_approval(store, intent="b")
    store.deny(decided.id, by="alice")
    result = run(url, "approvals", "list")
    assert result.exit_code == 0, result.output
    assert pending.id in result.output and decided.id not in result.output
    for text in ("pending", "bot", "refund_order", "refund-large", "refunds over 100"):
        assert text in result.output
    everything = json_lines(run(url, "approvals", "list", "--status", "all", "--json"))
    assert {r["id"]: r["status"] for r in everything} == {
        pending.id: "pending",
        decided.id: "denied",
    }


def test_approvals_list_json_fields_and_filters(url: str, store: SqlStore) -> None:
    first = open_approval(store)
    open_approval(store, tenant="beta", intent="c")
    expired = open_expired_approval(url)
    [record] = json_lines(run(url, "approvals", "list", "--tenant", "acme", "--json"))
    assert record["id"] == first.id
    assert record["requested_by"] == "bot"
    assert record["action"]["arguments"]["amount"] == 250
    assert record["context"]["session_id"] == "s1"
    assert record["rule_ids"] == ["refund-large"]
    assert record["created"].endswith("Z") and record["expires"].endswith("Z")
    assert len(json_lines(run(url, "approvals", "list", "--limit", "1", "--json"))) == 1
    gone = json_lines(run(url, "approvals", "list", "--status", "expired", "--json"))
    assert [(r["id"], r["status"]) for r in gone] == [(expired.id, "expired")]
    none = run(url, "approvals", "list", "--status", "claimed")
    assert none.exit_code == 0 and "no claimed approvals" in none.output


def test_approvals_list_rejects_an_unknown_status(url: str, store: SqlStore) -> None:
    result = run(url, "approvals", "list", "--status", "open")
    assert result.exit_code == 2
    assert "--status must be one of pending, approved, denied, expired, claimed, all" in (
        result.output
    )


def test_approvals_show_prints_the_action_context_and_decision(url: str, store: SqlStore) -> None:
    record = open_approval(store)
    store.approve(record.id, by="alice", reason="order checked")
    result = run(url, "approvals", "show", record.id)
    assert result.exit_code == 0, result.output
    for text in (
        record.id,
        "approved",
        "by alice at",
        "order checked",
        '"order_id": 42',
        '"api_key": "[REDACTED]"',
        '"session_id": "s1"',
        record.intent_hash,
    ):
        assert text in result.output, text
    data = json.loads(run(url, "approvals", "show", record.id, "--json").stdout)
    assert data["status"] == "approved" and data["decided_by"] == "alice"
    assert data["decision_reason"] == "order checked"
    assert data["action"]["name"] == "refund_order"


@pytest.mark.parametrize("extra", [[], ["--tenant", "beta"]], ids=["unknown-id", "other-tenant"])
def test_approvals_show_of_a_missing_approval_exits_1(
    url: str, store: SqlStore, extra: list[str]
) -> None:
    record = open_approval(store)
    approval_id = "apr_nope" if not extra else record.id
    result = run(url, "approvals", "show", approval_id, *extra)
    assert result.exit_code == 1
    assert f"error: no approval '{approval_id}'" in result.output


def test_approve_decides_and_appends_an_audit_record(url: str, store: SqlStore) -> None:
    record = open_approval(store)
    result = run(
        url, "approvals", "approve", record.id, "--as", "alice", "--reason", "order checked"
    )
    assert result.exit_code == 0, result.output
    assert f"approval {record.id}: approved by alice" in result.output
    after = store.get_approval(record.id)
    assert after.status is ApprovalStatus.APPROVED and after.decided_by == "alice"
    [audit] = json_lines(run(url, "audit", "export", "--kind", "approval"))
    assert audit["tenant"] == "acme" and audit["agent"] == "alice"
    assert audit["decision"] is None and audit["decision_id"] is None
    assert audit["record"] == {
        "kind": "approval",
        "approval_id": record.id,
        "intent_hash": record.intent_hash,
        "status": "approved",
        "decided_by": "alice",
        "reason": "order checked",
        "rule_ids": ["refund-large"],
    }
    assert run(url, "audit", "verify").exit_code == 0


def test_deny_takes_the_approver_from_the_environment(
    url: str, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = open_approval(store)
    monkeypatch.setenv("INTERLOCK_APPROVER", "carol")
    result = run(url, "approvals", "deny", record.id, "--reason", "not this one")
    assert result.exit_code == 0, result.output
    assert "denied by carol" in result.output
    assert store.get_approval(record.id).status is ApprovalStatus.DENIED
    [audit] = json_lines(run(url, "audit", "export", "--kind", "approval"))
    assert audit["agent"] == "carol" and audit["record"]["status"] == "denied"


@pytest.mark.parametrize("identity", [None, "", "   "], ids=["absent", "empty", "blank"])
def test_deciding_without_an_approver_exits_2(
    url: str, store: SqlStore, identity: str | None
) -> None:
    record = open_approval(store)
    args = [] if identity is None else ["--as", identity]
    result = run(url, "approvals", "approve", record.id, *args, "--reason", "checked")
    assert result.exit_code == 2
    assert "must name its approver" in result.output and "INTERLOCK_APPROVER" in result.output
    assert store.get_approval(record.id).status is ApprovalStatus.PENDING


@pytest.mark.parametrize("verb", ["approve", "deny"])
@pytest.mark.parametrize(
    "reason", [None, "", "   ", "\u200b\u00a0"], ids=["absent", "empty", "blank", "invisible"]
)
def test_deciding_without_a_reason_exits_2_and_decides_nothing(
    url: str, store: SqlStore, verb: str, reason: str | None
) -> None:
    record = open_approval(store)
    args = [] if reason is None else ["--reason", reason]
    result = run(url, "approvals", verb, record.id, "--as", "alice", *args)
    assert result.exit_code == 2, result.output
    assert "a decision needs a reason" in result.output
    assert store.get_approval(record.id).status is ApprovalStatus.PENDING


def test_reason_optional_decides_without_one(url: str, store: SqlStore) -> None:
    record = open_approval(store)
    result = run(url, "approvals", "approve", record.id, "--as", "alice", "--reason-optional")
    assert result.exit_code == 0, result.output
    assert store.get_approval(record.id).status is ApprovalStatus.APPROVED


@pytest.mark.parametrize("command", ["approve", "deny"])
@pytest.mark.parametrize(
    "identity",
    ["bot", " bot ", "\uff42\uff4f\uff54", "b\u200bot", "b\u043et", "B0T"],
    ids=["same", "padded", "fullwidth", "zero width", "cyrillic o", "zero for o"],
)
def test_the_requester_cannot_decide_its_own_request(
    url: str, store: SqlStore, command: str, identity: str
) -> None:
    record = open_approval(store, agent="bot")
    result = run(url, "approvals", command, record.id, "--as", identity, "--reason", "mine")
    assert result.exit_code == 1
    assert "'bot'" in result.output and "cannot decide it" in result.output
    assert store.get_approval(record.id).status is ApprovalStatus.PENDING
    assert json_lines(run(url, "audit", "export")) == []


def test_a_decided_approval_cannot_be_decided_again(url: str, store: SqlStore) -> None:
    record = open_approval(store)
    assert (
        run(
            url, "approvals", "approve", record.id, "--as", "alice", "--reason", "checked"
        ).exit_code
        == 0
    )
    again = run(url, "approvals", "deny", record.id, "--as", "dave", "--reason", "checked")
    assert again.exit_code == 1
    assert f"error: approval {record.id} is approved, not pending" in again.output
    assert len(json_lines(run(url, "audit", "export", "--kind", "approval"))) == 1


def test_an_expired_approval_cannot_be_decided(url: str, store: SqlStore) -> None:
    record = open_expired_approval(url)
    result = run(url, "approvals", "approve", record.id, "--as", "alice", "--reason", "checked")
    assert result.exit_code == 1
    assert f"approval {record.id} expired" in result.output


def test_deciding_a_missing_approval_exits_1(url: str, store: SqlStore) -> None:
    record = open_approval(store)
    for args in (["apr_nope"], [record.id, "--tenant", "beta"]):
        result = run(url, "approvals", "approve", *args, "--as", "alice", "--reason", "checked")
        assert result.exit_code == 1
        assert f"error: no approval '{args[0]}'" in result.output
    assert store.get_approval(record.id).status is ApprovalStatus.PENDING


# -- budgets ---------------------------------------------------------------------------


def fill_budgets(store: SqlStore) -> None:
    """acme's daily USD budget (cap 10): 2 spent of 1.5 reserved (0.5 over, within the
    1 held for overruns); a token budget with no window: 2500 reserved of 100000, 500
    held for overruns; beta: 1 USD reserved."""
    day = 1_714_521_600  # 2024-05-01T00:00:00Z, in seconds
    usd = BudgetLine("daily-usd", "agent:bot", day, "USD", 10_000_000, 1_500_000, 1_000_000)
    spent = store.reserve(tenant="acme", idempotency_key="k1", lines=[usd], ttl_us=HOUR_US)
    assert spent.reservation is not None
    store.commit(spent.reservation.id, {"daily-usd": 2_000_000})
    tokens = BudgetLine("tokens", "tenant", 0, "tokens", 100_000, 2_500, 500)
    store.reserve(tenant="acme", idempotency_key="k2", lines=[tokens], ttl_us=HOUR_US)
    beta = BudgetLine("daily-usd", "agent:bot", day, "USD", 10_000_000, 1_000_000)
    store.reserve(tenant="beta", idempotency_key="k3", lines=[beta], ttl_us=HOUR_US)


def test_budgets_status_shows_amounts_in_their_unit(url: str, store: SqlStore) -> None:
    fill_budgets(store)
    rows = json_lines(run(url, "budgets", "status", "--tenant", "acme", "--json"))
    assert rows == [
        {
            "tenant": "acme",
            "budget_id": "daily-usd",
            "scope_key": "agent:bot",
            "window_start": "2024-05-01T00:00:00Z",
            "unit": "USD",
            "cap": "10",
            "spent": "2",
            "reserved": "0",
            "headroom": "0",
            "available": "8",
            "overage": "0.5",
            "excess": "0",
            "closed": None,
            "updated": rows[0]["updated"],
        },
        {
            "tenant": "acme",
            "budget_id": "tokens",
            "scope_key": "tenant",
            "window_start": None,
            "unit": "tokens",
            "cap": "100000",
            "spent": "0",
            "reserved": "2500",
            "headroom": "500",
            "available": "97000",
            "overage": "0",
            "excess": "0",
            "closed": None,
            "updated": rows[1]["updated"],
        },
    ]
    table = run(url, "budgets", "status")
    assert table.exit_code == 0
    for text in ("daily-usd", "2024-05-01T00:00:00Z", "—", "97000", "0.5", "beta"):
        assert text in table.output
    only = json_lines(run(url, "budgets", "status", "--budget", "daily-usd", "--json"))
    assert [(r["tenant"], r["reserved"]) for r in only] == [("acme", "0"), ("beta", "1")]


def test_budgets_status_with_no_counters(url: str, store: SqlStore) -> None:
    result = run(url, "budgets", "status")
    assert result.exit_code == 0
    assert "no budget counters yet" in result.output


def test_budgets_reap_charges_expired_reservations_and_expires_approvals(
    url: str, store: SqlStore
) -> None:
    past = open_store(url, clock=lambda: now_us() - 2 * HOUR_US)
    line = BudgetLine("tokens", "tenant", 0, "tokens", 1_000, 400)
    stale = past.reserve(tenant="acme", idempotency_key="old", lines=[line], ttl_us=HOUR_US)
    open_approval(past, intent="e")
    past.close()
    fresh = open_approval(store)
    result = run(url, "budgets", "reap")
    assert result.exit_code == 0, result.output
    assert "charged 1 expired reservation(s); expired 1 approval(s)" in result.output
    assert stale.reservation is not None
    assert store.get_reservation(stale.reservation.id).status is ReservationStatus.EXPIRED
    assert (store.budget_rows()[0].reserved, store.budget_rows()[0].spent) == (0, 400)
    assert store.get_approval(fresh.id).status is ApprovalStatus.PENDING
    again = run(url, "budgets", "reap")
    assert "charged 0 expired reservation(s); expired 0 approval(s)" in again.output


def test_budgets_reopen_lifts_a_closure_names_who_and_audits_it(url: str, store: SqlStore) -> None:
    line = BudgetLine("daily-usd", "agent:bot", 0, "USD", 10_000_000, 1_000_000)
    overrun = store.reserve(tenant="acme", idempotency_key="k1", lines=[line], ttl_us=HOUR_US)
    assert overrun.reservation is not None
    store.commit(overrun.reservation.id, {"daily-usd": 1_250_000})
    status = json_lines(run(url, "budgets", "status", "--json"))
    assert (status[0]["excess"], status[0]["closed"] is not None) == ("0.25", True)

    nameless = run(url, "budgets", "reopen", "daily-usd", "--tenant", "acme")
    assert nameless.exit_code == 2 and "--as" in nameless.output
    wrong = run(url, "budgets", "reopen", "daily-usd", "--tenant", "beta", "--as", "root")
    assert wrong.exit_code == 1 and "is not closed" in wrong.output
    done = run(url, "budgets", "reopen", "daily-usd", "--tenant", "acme", "--as", "root")
    assert done.exit_code == 0, done.output
    assert "budget daily-usd (agent:bot) reopened by root" in done.output
    assert "ran 0.25 USD past" in done.output
    assert store.budget_closures() == []
    (record,) = [r for r in store.audit_rows(tenant="acme") if r.kind == "budget"]
    body = json.loads(record.body)
    assert (body["status"], body["by"], body["reopened"][0]["excess"]) == (
        "reopened",
        "root",
        250_000,
    )


# -- both back ends --------------------------------------------------------------------


def test_a_round_trip_on_each_back_end(store_url: str) -> None:
    """migrate, decide an approval, verify, export: on SQLite and on PostgreSQL
    (skipped when no PostgreSQL server answers; see tests/conftest.py)."""
    assert run(store_url, "db", "migrate").exit_code == 0
    assert run(store_url, "db", "status").exit_code == 0
    with open_store(store_url) as opened:
        record = open_approval(opened)
        add_decisions(opened)
    approved = run(
        store_url, "approvals", "approve", record.id, "--as", "alice", "--reason", "checked"
    )
    assert approved.exit_code == 0, approved.output
    verified = run(store_url, "audit", "verify")
    assert verified.exit_code == 0, verified.output
    assert "tenant 'acme': 4 records, intact" in verified.output
    kinds = [r["kind"] for r in json_lines(run(store_url, "audit", "export", "--tenant", "acme"))]
    assert kinds == ["decision", "decision", "decision", "approval"]
