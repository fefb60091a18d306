"""``interlock audit verify --checkpoints``, ``audit key`` and ``audit checkpoint-key``:
a cut tail, a deleted tenant or a forged checkpoint is named (tenant, record, what is
wrong) with exit 1; the keys are shown by id, never by secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner, Result

from interlock.cli import app
from interlock.store import AuditWriter, SqlStore, open_store
from interlock.store.audit_keys import AuditKey, read_key_file
from interlock.store.checkpoints import public_key_text

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_interlock_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "INTERLOCK_DATABASE_URL",
        "INTERLOCK_DATA_DIR",
        "INTERLOCK_AUDIT_KEY",
        "INTERLOCK_AUDIT_KEY_FILE",
        "INTERLOCK_CHECKPOINTS",
        "INTERLOCK_CHECKPOINT_KEY_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "interlock.db"


@pytest.fixture
def url(db: Path) -> str:
    return f"sqlite:///{db}"


@pytest.fixture
def written(url: str) -> Iterator[SqlStore]:
    """acme: 6 records, globex: 2, written and checkpointed by a writer that shut down."""
    store = open_store(url)
    writer = AuditWriter(store)
    for n in range(6):
        writer.write_record("acme", "note", {"n": n})
    for n in range(2):
        writer.write_record("globex", "note", {"n": n})
    writer.close()
    yield store
    store.close()


def run(url: str, *args: str) -> Result:
    return runner.invoke(app, [*args, "-d", url])


def execute(store: SqlStore, statement: str, *params: object) -> None:
    with store.transaction() as cur:
        cur.execute(store.q(statement), params)


def cut_acme_to(store: SqlStore, seq: int) -> None:
    rows = list(store.audit_chain("acme"))
    execute(store, "DELETE FROM audit_events WHERE tenant = 'acme' AND seq > ?", seq)
    execute(
        store,
        "UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = 'acme'",
        seq,
        rows[seq - 1].hash,
    )


def test_verify_checks_the_default_checkpoint_file_and_passes(url: str, written: SqlStore) -> None:
    result = run(url, "audit", "verify")
    assert result.exit_code == 0, result.output
    assert "tenant 'acme': 6 records, intact" in result.output
    assert "against 3 signed checkpoint lines" in result.output
    assert "HMAC-SHA256" in result.output


def test_a_cut_tail_is_named_with_exit_1(url: str, written: SqlStore, db: Path) -> None:
    cut_acme_to(written, 3)
    assert run(url, "audit", "verify", "--no-checkpoints").exit_code == 0  # the chain alone
    result = run(url, "audit", "verify", "--checkpoints", f"{db}.checkpoints.jsonl")
    assert result.exit_code == 1, result.output
    assert "tenant 'acme', record 4: records 4..6 are missing" in result.output
    assert "the tail was cut" in result.output
    assert "tenant 'globex': 2 records, intact" in result.output


def test_a_deleted_tenant_is_named_with_exit_1(url: str, written: SqlStore) -> None:
    execute(written, "DELETE FROM audit_events WHERE tenant = 'globex'")
    execute(written, "DELETE FROM audit_heads WHERE tenant = 'globex'")
    result = run(url, "audit", "verify")
    assert result.exit_code == 1, result.output
    assert "tenant 'globex', record 1:" in result.output
    assert "was deleted" in result.output


def test_checkpoints_from_another_key_are_refused(
    url: str, written: SqlStore, db: Path, tmp_path: Path
) -> None:
    other = public_key_text(Ed25519PrivateKey.generate().public_key())
    result = run(
        url,
        "audit",
        "verify",
        "--checkpoints",
        f"{db}.checkpoints.jsonl",
        "--public-key",
        other,
    )
    assert result.exit_code == 1, result.output
    assert "line 1" in result.output
    assert "not a trusted key" in result.output


def test_an_edited_checkpoint_line_is_named(url: str, written: SqlStore, db: Path) -> None:
    path = Path(f"{db}.checkpoints.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["seq"] = 2
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run(url, "audit", "verify")
    assert result.exit_code == 1, result.output
    assert f"{path}, line 1" in result.output
    assert "the signature does not match" in result.output


def test_checkpoints_without_a_public_key_to_trust_exit_2(
    url: str, written: SqlStore, db: Path
) -> None:
    Path(f"{db}.checkpoint-key").unlink()
    result = run(url, "audit", "verify", "--checkpoints", f"{db}.checkpoints.jsonl")
    assert result.exit_code == 2
    assert "--public-key" in result.output


def test_checkpoint_key_prints_the_public_key_to_pin(url: str, written: SqlStore, db: Path) -> None:
    result = run(url, "audit", "checkpoint-key")
    assert result.exit_code == 0, result.output
    public = result.stdout.splitlines()[0]
    assert public.startswith("ed25519:")
    pinned = run(
        url,
        "audit",
        "verify",
        "--checkpoints",
        f"{db}.checkpoints.jsonl",
        "--public-key",
        public,
    )
    assert pinned.exit_code == 0, pinned.output


def test_checkpoint_key_creates_a_key_only_when_asked(tmp_path: Path) -> None:
    key_file = tmp_path / "signing-key"
    url = f"sqlite:///{tmp_path / 'i.db'}"
    missing = run(url, "audit", "checkpoint-key", "--key-file", str(key_file))
    assert missing.exit_code == 1
    assert "--create" in missing.output
    created = run(url, "audit", "checkpoint-key", "--key-file", str(key_file), "--create")
    assert created.exit_code == 0, created.output
    assert key_file.exists()


def test_audit_key_shows_the_key_id_never_the_secret_and_rotates(
    url: str, written: SqlStore, db: Path
) -> None:
    key_file = Path(f"{db}.audit-key")
    secret = read_key_file(key_file)[0]
    shown = run(url, "audit", "key")
    assert shown.exit_code == 0, shown.output
    assert AuditKey(secret).key_id in shown.output
    assert str(key_file) in shown.output
    assert secret.decode() not in shown.output

    rotated = run(url, "audit", "key", "--rotate")
    assert rotated.exit_code == 0, rotated.output
    new_secret = read_key_file(key_file)[0]
    assert new_secret != secret
    with open_store(url) as restarted:  # a process writes with the new key once restarted
        writer = AuditWriter(restarted)
        writer.write_record("acme", "note", {"n": "after rotation"})
        writer.close()
    result = run(url, "audit", "verify")
    assert result.exit_code == 0, result.output
    assert {row.key_id for row in written.audit_chain("acme")} == {
        AuditKey(secret).key_id,
        AuditKey(new_secret).key_id,
    }


def test_require_keyed_fails_on_unkeyed_records(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'i.db'}"
    with open_store(url, audit_key=False) as store:
        store.append_audit([("acme", 1, "note", None, None, None, "{}")])
    assert run(url, "audit", "verify").exit_code == 0
    strict = run(url, "audit", "verify", "--require-keyed")
    assert strict.exit_code == 1
    assert "tenant 'acme'" in strict.output and "unkeyed" in strict.output


def test_seal_vouches_for_an_unkeyed_log_given_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'i.db'}"
    with open_store(url, audit_key=False) as store:
        store.append_audit([("acme", 1, "note", None, None, None, "{}")])
    key_file = tmp_path / "audit-key"
    assert run(url, "audit", "key", "--create", "--key-file", str(key_file)).exit_code == 0
    monkeypatch.setenv("INTERLOCK_AUDIT_KEY_FILE", str(key_file))
    before = run(url, "audit", "verify")
    assert before.exit_code == 1
    assert "interlock audit seal" in before.output

    sealed = run(url, "audit", "seal")
    assert sealed.exit_code == 0, sealed.output
    assert "sealed 1 chain: 'acme'" in sealed.output
    after = run(url, "audit", "verify")
    assert after.exit_code == 0, after.output
    assert "1 of them unkeyed, sealed by a keyed record" in after.output
    assert "nothing to seal" in run(url, "audit", "seal").output
