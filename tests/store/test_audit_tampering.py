"""Tampering with the audit log, as someone with write access to the database (and to
the checkpoint file) would: every kind is detected with the audit key and the signed
checkpoints, on SQLite and on PostgreSQL, and ``verify`` names the tenant, the record
and what is wrong.

Each case starts from the same log: tenant ``acme`` has 8 records and ``globex`` 3,
written through the group-commit writer; a checkpoint round was signed after acme's
4th record (acme@4, globex@3) and the writer's clean shutdown signed acme@8 and the
stream's end — four lines in the checkpoint file.

What the file alone cannot show (deleting its *last* lines; records written after the
newest checkpoint) is pinned at the end, with how a copy shipped elsewhere catches it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.store import AuditRow, AuditWriter, SqlStore, VerifyReport, open_store
from interlock.store.audit_keys import AuditKey, create_key_file
from interlock.store.chain import GENESIS, link_material
from interlock.store.checkpoints import (
    CheckpointSettings,
    PublicKey,
    create_signing_key,
    read_checkpoints,
    sign_line,
)


@dataclass
class Log:
    """The store under attack, where its checkpoints are, and the key they trust."""

    store: SqlStore
    checkpoints: Path
    public_key: PublicKey
    key: AuditKey

    def verify(self, *extra: Path) -> VerifyReport:
        log = read_checkpoints([self.checkpoints, *extra], trusted=[self.public_key])
        return self.store.verify_audit(checkpoints=log)

    def rows(self, tenant: str = "acme") -> list[AuditRow]:
        return list(self.store.audit_chain(tenant))

    def execute(self, statement: str, *params: Any) -> None:
        with self.store.transaction() as cur:
            cur.execute(self.store.q(statement), params)

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.checkpoints.read_text().splitlines()]

    def write_lines(self, lines: list[dict[str, Any]]) -> None:
        self.checkpoints.write_text("".join(json.dumps(line) + "\n" for line in lines))


def open_log(store_url: str, backend: str, tmp_path: Path, clock: Any) -> SqlStore:
    if backend == "sqlite":  # the defaults: key files and checkpoints beside the database
        return open_store(store_url, clock=clock)
    # PostgreSQL is shared by many hosts: every key is given explicitly.
    create_key_file(tmp_path / "audit-key")
    create_signing_key(tmp_path / "checkpoint-key")
    return open_store(
        f"{store_url}&audit_key_file={tmp_path / 'audit-key'}",
        clock=clock,
        checkpoints=CheckpointSettings(
            destinations=(str(tmp_path / "checkpoints.jsonl"),),
            key_file=tmp_path / "checkpoint-key",
        ),
    )


@pytest.fixture
def log(store_url: str, backend: str, tmp_path: Path, clock: Any) -> Any:
    store = open_log(store_url, backend, tmp_path, clock)
    writer = AuditWriter(store)
    for n in range(1, 5):
        clock.advance(1)
        writer.write_record("acme", "note", {"n": n})
    for n in range(1, 4):
        writer.write_record("globex", "note", {"n": n})
    writer.checkpoint()
    for n in range(5, 9):
        clock.advance(1)
        writer.write_record("acme", "note", {"n": n})
    writer.close()  # the clean shutdown's checkpoint: acme@8, then the stream's end
    settings = writer.checkpoint_settings
    assert settings is not None
    keyring = store.audit_keys.for_verifying()
    assert keyring is not None
    made = Log(store, Path(settings.destinations[0]), settings.public_key(), keyring.current)
    assert [(line.get("tenant"), line.get("seq")) for line in made.lines()] == [
        ("acme", 4),
        ("globex", 3),
        ("acme", 8),
        (None, None),
    ]
    report = made.verify()
    assert report.ok, report
    assert report.checked == {"acme": 8, "globex": 3}
    yield made
    store.close()


# -- what an attacker does -------------------------------------------------------------


def forge(
    row: AuditRow, *, key: AuditKey | None = None, key_id: str | None = None, **changes: Any
) -> AuditRow:
    """``row`` changed, its hash recomputed — plain SHA-256 without a key (the key id
    cleared, as an unkeyed row has none), or HMAC under ``key`` claiming ``key_id``."""
    import hashlib

    changed = dataclasses.replace(row, key_id=key_id, **changes)
    material = link_material(
        changed.prev_hash,
        changed.tenant,
        changed.seq,
        changed.ts_us,
        changed.kind,
        changed.decision_id,
        changed.agent,
        changed.decision,
        changed.body,
        key_id,
    )
    digest = key.digest(material) if key is not None else hashlib.sha256(material).hexdigest()
    return dataclasses.replace(changed, hash=digest)


def insert(log: Log, row: AuditRow) -> None:
    log.execute(
        "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, decision, "
        "body, prev_hash, hash, key_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        row.tenant,
        row.seq,
        row.ts_us,
        row.kind,
        row.decision_id,
        row.agent,
        row.decision,
        row.body,
        row.prev_hash,
        row.hash,
        row.key_id,
    )


def replace(log: Log, row: AuditRow) -> None:
    log.execute("DELETE FROM audit_events WHERE tenant = ? AND seq = ?", row.tenant, row.seq)
    insert(log, row)


def move_head(log: Log, tenant: str, row: AuditRow | None) -> None:
    seq, digest = (0, GENESIS) if row is None else (row.seq, row.hash)
    log.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?", seq, digest, tenant)


def edit_a_middle_row(log: Log) -> None:
    log.execute("UPDATE audit_events SET body = '{\"n\":0}' WHERE tenant = 'acme' AND seq = 3")


def edit_the_newest_row(log: Log) -> None:
    log.execute("UPDATE audit_events SET decision = 'allow' WHERE tenant = 'acme' AND seq = 8")


def delete_a_middle_row(log: Log) -> None:
    log.execute("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 5")


def delete_the_newest_row(log: Log) -> None:
    log.execute("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 8")


def reorder_two_rows(log: Log) -> None:
    log.execute("UPDATE audit_events SET seq = -1 WHERE tenant = 'acme' AND seq = 3")
    log.execute("UPDATE audit_events SET seq = 3 WHERE tenant = 'acme' AND seq = 6")
    log.execute("UPDATE audit_events SET seq = 6 WHERE tenant = 'acme' AND seq = -1")


def insert_a_row_in_the_middle(log: Log) -> None:
    rows = log.rows()
    for row in reversed(rows[4:]):  # make room at 5: 5..8 become 6..9
        log.execute(
            "UPDATE audit_events SET seq = ? WHERE tenant = 'acme' AND seq = ?",
            row.seq + 1,
            row.seq,
        )
    inserted = forge(rows[3], seq=5, prev_hash=rows[3].hash, body='{"n":"inserted"}')
    insert(log, inserted)
    move_head(log, "acme", dataclasses.replace(rows[-1], seq=9))


def append_unkeyed(log: Log) -> None:
    last = log.rows()[-1]
    appended = forge(last, seq=9, prev_hash=last.hash, body='{"n":9}')
    insert(log, appended)
    move_head(log, "acme", appended)


def append_with_a_guessed_key(log: Log) -> None:
    last = log.rows()[-1]
    guess = AuditKey(b"correct horse battery staple")
    # It claims the real key's id (which every row shows): only the HMAC can tell.
    appended = forge(last, key=guess, key_id=last.key_id, seq=9, prev_hash=last.hash)
    insert(log, appended)
    move_head(log, "acme", appended)


def rewrite_the_whole_chain_unkeyed(log: Log) -> None:
    prev = GENESIS
    for row in log.rows():
        rewritten = forge(row, prev_hash=prev, body=row.body.replace('"n"', '"N"'))
        replace(log, rewritten)
        prev = rewritten.hash
    move_head(log, "acme", log.rows()[-1])


def cut_the_tail(count: int) -> Callable[[Log], None]:
    def attack(log: Log) -> None:
        rows = log.rows()
        log.execute("DELETE FROM audit_events WHERE tenant = 'acme' AND seq > ?", 8 - count)
        move_head(log, "acme", rows[7 - count])

    return attack


def delete_a_tenant(log: Log) -> None:
    log.execute("DELETE FROM audit_events WHERE tenant = 'globex'")
    log.execute("DELETE FROM audit_heads WHERE tenant = 'globex'")


def move_rows_to_another_tenant(log: Log) -> None:
    log.execute("UPDATE audit_events SET tenant = 'initech' WHERE tenant = 'globex'")
    log.execute("UPDATE audit_heads SET tenant = 'initech' WHERE tenant = 'globex'")


def renumber_after_a_deletion(log: Log) -> None:
    log.execute("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 4")
    for seq in range(5, 9):
        log.execute(
            "UPDATE audit_events SET seq = ? WHERE tenant = 'acme' AND seq = ?", seq - 1, seq
        )
    move_head(log, "acme", log.rows()[-1])


def edit_a_timestamp(log: Log) -> None:
    log.execute(
        "UPDATE audit_events SET ts_us = ts_us - 3600000000 WHERE tenant = 'acme' AND seq = 6"
    )


def downgrade_the_newest_row(log: Log) -> None:
    newest = log.rows()[-1]
    downgraded = forge(newest, decision="deny")  # key id cleared, plain SHA-256
    replace(log, downgraded)
    move_head(log, "acme", downgraded)


def claim_an_unknown_key(log: Log) -> None:
    row = log.rows()[5]
    guess = AuditKey(b"a key the attacker made up himself")
    replace(log, forge(row, key=guess, key_id=guess.key_id, body='{"n":"mine"}'))


def edit_a_checkpoint_line(log: Log) -> None:
    # Cut acme's newest record and make the checkpoint that saw it say 7.
    rows = log.rows()
    cut_the_tail(1)(log)
    lines = log.lines()
    lines[2].update(seq=7, count=7, head=rows[6].hash)
    log.write_lines(lines)


def delete_a_middle_checkpoint_line(log: Log) -> None:
    lines = log.lines()
    del lines[1]  # globex@3
    delete_a_tenant(log)
    log.write_lines(lines)


def sign_a_checkpoint_with_another_key(log: Log) -> None:
    cut_the_tail(4)(log)
    lines = log.lines()
    forged = {k: v for k, v in lines[2].items() if k != "sig"}
    rows = log.rows()
    forged.update(seq=4, count=4, head=rows[3].hash)
    lines[2] = sign_line(forged, Ed25519PrivateKey.generate())
    log.write_lines(lines)


def reorder_checkpoint_lines(log: Log) -> None:
    lines = log.lines()
    lines[0], lines[2] = lines[2], lines[0]
    log.write_lines(lines)


@dataclass(frozen=True)
class Finding:
    """Where verify must report the attack: a tenant's record, or a checkpoint line."""

    problem: str
    tenant: str | None = None
    seq: int | None = None
    line: int | None = None


TAMPERING: list[tuple[str, Callable[[Log], None], Finding]] = [
    ("edit a field of a middle row", edit_a_middle_row, Finding("modified", "acme", 3)),
    ("edit the newest row", edit_the_newest_row, Finding("modified", "acme", 8)),
    ("delete a middle row", delete_a_middle_row, Finding("record 5 is missing", "acme", 5)),
    ("delete the newest row", delete_the_newest_row, Finding("are missing", "acme", 8)),
    ("reorder two rows", reorder_two_rows, Finding("prev_hash does not match", "acme", 3)),
    (
        "insert a row in the middle",
        insert_a_row_in_the_middle,
        Finding("unkeyed (plain SHA-256) after keyed", "acme", 5),
    ),
    (
        "append a row with recomputed unkeyed hashes",
        append_unkeyed,
        Finding("unkeyed (plain SHA-256) after keyed", "acme", 9),
    ),
    ("append a row with a guessed key", append_with_a_guessed_key, Finding("modified", "acme", 9)),
    (
        "rewrite the whole chain with recomputed hashes",
        rewrite_the_whole_chain_unkeyed,
        Finding("does not match the signed checkpoint", "acme", 4),
    ),
    ("head moved back by 1", cut_the_tail(1), Finding("the tail was cut", "acme", 8)),
    ("head moved back by 5", cut_the_tail(5), Finding("the tail was cut", "acme", 4)),
    ("tenant deleted", delete_a_tenant, Finding("was deleted", "globex", 1)),
    (
        "tenant's rows moved to another tenant",
        move_rows_to_another_tenant,
        Finding("was deleted", "globex", 1),
    ),
    (
        "seq renumbered after a deletion",
        renumber_after_a_deletion,
        Finding("prev_hash does not match", "acme", 4),
    ),
    ("timestamp edited", edit_a_timestamp, Finding("modified", "acme", 6)),
    (
        "a keyed row downgraded to an unkeyed one",
        downgrade_the_newest_row,
        Finding("does not match the signed checkpoint", "acme", 8),
    ),
    (
        "a row re-keyed under a key the attacker made",
        claim_an_unknown_key,
        Finding("which this verifier does not have", "acme", 6),
    ),
    (
        "a checkpoint line edited",
        edit_a_checkpoint_line,
        Finding("signature does not match", line=3),
    ),
    (
        "a middle checkpoint line deleted",
        delete_a_middle_checkpoint_line,
        Finding("checkpoint 2 of stream", line=2),
    ),
    (
        "a checkpoint signed by another key",
        sign_a_checkpoint_with_another_key,
        Finding("not a trusted key", line=3),
    ),
    ("checkpoint lines reordered", reorder_checkpoint_lines, Finding("out of order", line=1)),
]


def test_the_table_holds_nineteen_distinct_attacks_or_more() -> None:
    assert len(TAMPERING) >= 19
    assert len({name for name, _, _ in TAMPERING}) == len(TAMPERING)


@pytest.mark.parametrize(
    ("attack", "finding"), [pytest.param(a, f, id=name) for name, a, f in TAMPERING]
)
def test_every_kind_of_tampering_is_detected_and_named(
    log: Log, attack: Callable[[Log], None], finding: Finding
) -> None:
    attack(log)

    report = log.verify()

    assert not report.ok
    if finding.tenant is not None:
        assert finding.tenant in {b.tenant for b in report.breaks}, report
        (found,) = [b for b in report.breaks if b.tenant == finding.tenant]
        assert (found.seq, finding.problem in found.problem) == (finding.seq, True), found
        assert str(found).startswith(f"tenant {finding.tenant!r}, record {finding.seq}:")
    else:
        assert report.checkpoint_problems, report
        found_line = report.checkpoint_problems[0]
        assert finding.problem in found_line.problem, found_line
        assert found_line.line == finding.line, found_line


# -- what the checkpoint file alone cannot show ------------------------------------------


def test_deleting_the_last_checkpoint_lines_needs_a_copy_shipped_elsewhere(log: Log) -> None:
    shipped = log.checkpoints.with_name("shipped.jsonl")  # e.g. what a log shipper kept
    shipped.write_text(log.checkpoints.read_text())
    cut_the_tail(2)(log)
    log.write_lines(log.lines()[:2])  # acme@8 and the stream's end removed from the file

    alone = log.verify()
    assert alone.ok  # undetectable from this file alone: documented
    assert any("no closing checkpoint" in note for note in alone.notes)

    with_copy = log.verify(shipped)
    assert not with_copy.ok
    (found,) = with_copy.breaks
    assert (found.tenant, found.seq) == ("acme", 7)
    assert "the tail was cut" in found.problem


def test_records_after_the_newest_checkpoint_can_be_cut_undetected(log: Log) -> None:
    """The exposure window: what was written since the newest checkpoint. Keep it small
    with ``every`` and ``interval``."""
    store = log.store
    writer = AuditWriter(store, checkpoints=False)
    writer.write_record("acme", "note", {"n": 9})
    writer.close()
    rows = log.rows()
    log.execute("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 9")
    move_head(log, "acme", rows[7])
    assert log.verify().ok
