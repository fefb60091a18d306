"""The audit key: created on first use in a file only its owner can read, kept apart
from the database; given explicitly (file, store URL, environment, a key hook) where
the database is shared; a loud warning when a store writes unkeyed; unkeyed records
recorded as such, sealed by the first keyed writer, and never appended to a keyed
chain; rotation keeps old records verifiable."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock.errors import AuditKeyError
from interlock.store import AuditWriter, SqlStore, open_store
from interlock.store.audit_keys import (
    AuditKey,
    create_key_file,
    read_key_file,
    rotate_key_file,
)
from interlock.store.chain import link_material

T0 = 1_700_000_000_000_000


def entry(tenant: str, n: int) -> tuple[str, int, str, str, str, str, str]:
    return (tenant, T0 + n, "decision", f"dec_{n}", "bot", "allow", f'{{"n":{n}}}')


def execute(store: SqlStore, statement: str, *params: object) -> None:
    with store.transaction() as cur:
        cur.execute(store.q(statement), params)


@pytest.fixture(autouse=True)
def _no_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "INTERLOCK_AUDIT_KEY",
        "INTERLOCK_AUDIT_KEY_FILE",
        "INTERLOCK_AUDIT_REQUIRE_KEY",
        "INTERLOCK_CHECKPOINTS",
        "INTERLOCK_CHECKPOINT_KEY_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def key_ids(store: SqlStore, tenant: str = "acme") -> list[str | None]:
    return [row.key_id for row in store.audit_chain(tenant)]


# -- keyed by default (SQLite) ---------------------------------------------------------


def test_a_sqlite_store_creates_its_key_on_first_write_beside_the_database(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state" / "interlock.db"
    store = open_store(f"sqlite:///{path}")
    key_file = tmp_path / "state" / "interlock.db.audit-key"
    assert not key_file.exists()  # opening (or only reading) creates no key
    assert store.verify_audit().ok
    assert not key_file.exists()

    store.append_audit([entry("acme", 1), entry("acme", 2)])

    assert mode(key_file) == 0o600
    assert mode(key_file.parent) == 0o700
    key = AuditKey(read_key_file(key_file)[0])
    assert key_ids(store) == [key.key_id, key.key_id]
    report = store.verify_audit()
    assert report.ok and report.unkeyed == {}
    store.close()

    # Without the key, nothing verifies: records say which key they need.
    key_file.unlink()
    with open_store(f"sqlite:///{path}") as keyless:
        report = keyless.verify_audit()
    assert not report.ok
    assert f"keyed with key id {key.key_id}, which this verifier does not have" in str(
        report.breaks[0]
    )


def test_an_in_memory_store_is_keyed_with_a_key_that_lives_as_long_as_it() -> None:
    with open_store("sqlite:///:memory:") as store:
        keyring = store.audit_keys.for_writing()
        assert keyring is not None
        assert store.audit_keys.describe().startswith("HMAC-SHA256")


@pytest.mark.parametrize(
    ("loosen", "fix"),
    [
        (lambda key: key.chmod(0o644), "chmod 600"),
        (lambda key: key.chmod(0o660), "chmod 600"),
        (lambda key: key.parent.chmod(0o777), "chmod go-w"),
    ],
    ids=["world-readable", "group-readable", "directory-writable-by-others"],
)
def test_a_key_file_others_can_read_or_replace_is_refused_saying_how_to_fix_it(
    tmp_path: Path, loosen: Callable[[Path], None], fix: str
) -> None:
    path = tmp_path / "db" / "interlock.db"
    with open_store(f"sqlite:///{path}") as store:
        store.append_audit([entry("acme", 1)])
    key_file = Path(f"{path}.audit-key")
    loosen(key_file)
    with open_store(f"sqlite:///{path}") as store, pytest.raises(AuditKeyError) as refused:
        AuditWriter(store)  # refused at startup, not at the first check
    assert str(key_file) in str(refused.value) or str(key_file.parent) in str(refused.value)
    assert fix in str(refused.value)


def test_an_empty_or_short_key_file_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "audit-key"
    key_file.write_text("short\n")
    key_file.chmod(0o600)
    with pytest.raises(AuditKeyError, match="at least 16"):
        read_key_file(key_file)
    key_file.write_text("\n")
    with pytest.raises(AuditKeyError, match="no key"):
        read_key_file(key_file)


def test_two_stores_creating_the_key_at_once_agree_on_one_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'interlock.db'}"
    stores = [open_store(url) for _ in range(4)]
    start = threading.Barrier(len(stores))
    ids: list[str] = []

    def create(store: SqlStore) -> None:
        start.wait(10)
        keyring = store.audit_keys.for_writing()
        assert keyring is not None
        ids.append(keyring.current.key_id)

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(ids) == 4 and len(set(ids)) == 1
    for store in stores:
        store.close()


# -- given explicitly -----------------------------------------------------------------


def test_the_key_file_comes_from_the_url_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_url, from_env = tmp_path / "url-key", tmp_path / "env-key"
    create_key_file(from_url)
    create_key_file(from_env)
    url_id = AuditKey(read_key_file(from_url)[0]).key_id
    env_id = AuditKey(read_key_file(from_env)[0]).key_id
    db = tmp_path / "interlock.db"
    monkeypatch.setenv("INTERLOCK_AUDIT_KEY_FILE", str(from_env))

    with open_store(f"sqlite:///{db}?audit_key_file={from_url}") as store:
        store.append_audit([entry("acme", 1)])
    with open_store(f"sqlite:///{db}") as store:
        store.append_audit([entry("acme", 2)])
        assert key_ids(store) == [url_id, env_id]
    assert not Path(f"{db}.audit-key").exists()


def test_the_environment_key_keeps_working_and_so_do_records_written_under_it_before(
    store: SqlStore, open_replica: Callable[..., SqlStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "a secret shared by every process"
    # A record as the previous version wrote it under INTERLOCK_AUDIT_KEY: HMAC over the
    # fields, no key id column.
    material = link_material("0" * 64, "acme", 1, 10, "note", None, None, None, "{}")
    import hmac

    legacy = hmac.new(secret.encode(), material, hashlib.sha256).hexdigest()
    execute(
        store,
        "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, decision, "
        "body, prev_hash, hash) VALUES ('acme', 1, 10, 'note', NULL, NULL, NULL, '{}', ?, ?)",
        "0" * 64,
        legacy,
    )
    execute(store, "INSERT INTO audit_heads (tenant, seq, hash) VALUES ('acme', 1, ?)", legacy)

    monkeypatch.setenv("INTERLOCK_AUDIT_KEY", secret)
    keyed = open_replica()
    keyed.append_audit([entry("acme", 2)])
    assert key_ids(keyed) == [None, AuditKey(secret.encode()).key_id]
    report = keyed.verify_audit()
    assert report.ok, report
    assert report.unkeyed == {}  # the old record verified under the key: keyed


def test_a_key_hook_gives_the_key_once(open_replica: Callable[..., SqlStore]) -> None:
    calls: list[int] = []

    def from_kms() -> bytes:
        calls.append(1)
        return b"material from a key management service"

    store = open_replica(audit_key=from_kms)
    store.append_audit([entry("acme", 1)])
    store.append_audit([entry("acme", 2)])
    assert calls == [1]
    assert key_ids(store) == [AuditKey(b"material from a key management service").key_id] * 2
    assert store.verify_audit().ok


def test_both_key_variables_at_once_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_key_file(tmp_path / "k")
    monkeypatch.setenv("INTERLOCK_AUDIT_KEY_FILE", str(tmp_path / "k"))
    monkeypatch.setenv("INTERLOCK_AUDIT_KEY", "x" * 20)
    with pytest.raises(AuditKeyError, match="not both"):
        open_store(f"sqlite:///{tmp_path / 'i.db'}")


# -- unkeyed: PostgreSQL without a key -------------------------------------------------


def test_postgres_without_a_key_warns_loudly_and_marks_its_records_unkeyed(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(postgres_url) as store:
        with caplog.at_level(logging.WARNING, logger="interlock"):
            writer = AuditWriter(store)
        assert any("NOT keyed" in r.getMessage() for r in caplog.records), caplog.text
        assert "NOT keyed" in " ".join(writer.integrity_report())
        writer.write_record("acme", "note", {"n": 1})
        writer.close()
        assert key_ids(store) == [None]
        report = store.verify_audit()
        assert report.ok
        assert report.unkeyed == {"acme": 1}


def test_postgres_with_a_required_key_refuses_to_write_unkeyed(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLOCK_AUDIT_REQUIRE_KEY", "1")
    with open_store(postgres_url) as store, pytest.raises(AuditKeyError, match="REQUIRE_KEY"):
        AuditWriter(store)


def test_postgres_never_creates_a_missing_key_file(postgres_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "audit-key"
    with (
        open_store(f"{postgres_url}&audit_key_file={missing}") as store,
        pytest.raises(AuditKeyError, match="interlock audit key --create"),
    ):
        AuditWriter(store)
    assert not missing.exists()


KEY = "a key for this test, long enough"


def test_an_unkeyed_store_never_appends_to_a_keyed_chain(
    open_replica: Callable[..., SqlStore],
) -> None:
    store = open_replica(audit_key=KEY)
    store.append_audit([entry("acme", 1)])
    unkeyed = open_replica(audit_key=False)
    with pytest.raises(AuditKeyError, match="keyed"):
        unkeyed.append_audit([entry("acme", 2)])
    unkeyed.append_audit([entry("globex", 1)])  # an unkeyed chain takes unkeyed records
    assert [row.seq for row in store.audit_chain("acme")] == [1]


# -- unkeyed records: sealed, and no downgrade ------------------------------------------


def test_the_writer_that_creates_a_sqlite_stores_key_seals_the_chains_there(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'interlock.db'}"
    with open_store(url, audit_key=False) as before:  # as an older Interlock wrote it
        before.append_audit([entry("acme", n) for n in range(1, 4)])

    with open_store(url) as store:
        AuditWriter(store, checkpoints=False).close()  # creates the key: seals the chain
        rows = list(store.audit_chain("acme"))
        assert [r.key_id is None for r in rows] == [True, True, True, False]
        assert rows[-1].kind == "audit.sealed"
        report = store.verify_audit()
        assert report.ok, report
        assert report.unkeyed == {"acme": 3}
    with open_store(url, audit_key=False) as keyless:
        assert not keyless.verify_audit().ok  # the sealing record needs the key


def test_an_explicit_key_seals_an_unkeyed_log_only_when_told(
    open_replica: Callable[..., SqlStore],
) -> None:
    unkeyed = open_replica(audit_key=False)
    unkeyed.append_audit([entry("acme", n) for n in range(1, 4)])
    assert unkeyed.verify_audit().ok
    store = open_replica(audit_key=KEY)
    AuditWriter(store, checkpoints=False).close()

    # A verifier with the key does not trust an unkeyed tail: anyone could have written it.
    report = store.verify_audit()
    assert not report.ok
    assert "no keyed record follows" in report.breaks[0].problem
    assert "interlock audit seal" in report.breaks[0].problem

    assert store.seal_unkeyed_chains() == ["acme"]  # what `interlock audit seal` does
    report = store.verify_audit()
    assert report.ok, report
    assert report.unkeyed == {"acme": 3}


def test_a_chain_rewritten_unkeyed_is_not_sealed_by_a_restart(
    open_replica: Callable[..., SqlStore], tmp_path: Path
) -> None:
    """Were every starting writer to seal unkeyed chains, rewriting a keyed chain as
    SHA-256 records (and its head) and waiting for a restart would launder it."""
    store = open_replica(audit_key=KEY)
    writer = AuditWriter(store, checkpoints=False)
    for n in range(3):
        writer.write_record("acme", "note", {"n": n})
    writer.close()
    prev = "0" * 64
    for row in list(store.audit_chain("acme")):
        forged = dataclasses.replace(row, prev_hash=prev, key_id=None, body='{"forged":1}')
        digest = hashlib.sha256(link_material(*_fields(forged))).hexdigest()
        execute(
            store,
            "UPDATE audit_events SET prev_hash = ?, hash = ?, key_id = NULL, body = ? "
            "WHERE tenant = 'acme' AND seq = ?",
            prev,
            digest,
            forged.body,
            row.seq,
        )
        prev = digest
    execute(store, "UPDATE audit_heads SET hash = ?, key_id = NULL WHERE tenant = 'acme'", prev)

    restarted = open_replica(audit_key=KEY)
    AuditWriter(restarted, checkpoints=False).close()

    assert len(list(restarted.audit_chain("acme"))) == 3  # nothing appended to it
    (found,) = restarted.verify_audit().breaks
    assert (found.seq, "unkeyed" in found.problem) == (1, True)


def _fields(row: Any) -> tuple[Any, ...]:
    return (
        row.prev_hash,
        row.tenant,
        row.seq,
        row.ts_us,
        row.kind,
        row.decision_id,
        row.agent,
        row.decision,
        row.body,
    )


# -- rotation -------------------------------------------------------------------------


def test_a_rotated_key_keeps_old_records_verifiable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'interlock.db'}"
    key_file = Path(f"{tmp_path / 'interlock.db'}.audit-key")
    with open_store(url) as store:
        store.append_audit([entry("acme", 1)])
    old_id = AuditKey(read_key_file(key_file)[0]).key_id

    new_id = rotate_key_file(key_file)

    assert mode(key_file) == 0o600
    assert new_id != old_id
    with open_store(url) as store:
        store.append_audit([entry("acme", 2)])
        assert key_ids(store) == [old_id, new_id]
        assert store.verify_audit().ok
    # Drop the old key and the old record cannot be verified any more.
    key_file.write_text(read_key_file(key_file)[0].decode() + "\n")
    with open_store(url) as store:
        report = store.verify_audit()
    assert not report.ok
    assert old_id in report.breaks[0].problem


def test_verifying_reads_the_key_file_but_never_writes_it(tmp_path: Path) -> None:
    db = tmp_path / "interlock.db"
    with open_store(f"sqlite:///{db}") as store:
        store.append_audit([entry("acme", 1)])
    key_file = Path(f"{db}.audit-key")
    before = key_file.stat().st_mtime_ns, os.listdir(tmp_path)
    with open_store(f"sqlite:///{db}") as store:
        assert store.verify_audit().ok
    assert (key_file.stat().st_mtime_ns, os.listdir(tmp_path)) == before


@pytest.mark.parametrize("material", [b"", b"material", b"x" * 700, bytes(range(256)) * 9])
def test_a_key_digests_each_material_as_a_fresh_hmac_sha256_would(material: bytes) -> None:
    import hmac

    key = AuditKey(b"0123456789abcdef0123456789abcdef")
    expected = hmac.new(b"0123456789abcdef0123456789abcdef", material, hashlib.sha256)
    # twice, and after another material: the keyed state is copied, never used up
    assert key.digest(material) == expected.hexdigest()
    assert key.digest(b"something else") != expected.hexdigest()
    assert key.digest(material) == expected.hexdigest()
    other = AuditKey(b"another secret, another digest")
    assert other.digest(material) != expected.hexdigest()
