"""Signed checkpoints of each tenant's chain head: written by the audit writer off the
check's path — every N records, every T seconds and at a clean shutdown — to a file,
stdout, the log or an HTTP URL; signed with Ed25519 under a key kept like the audit
key; each line linked to the one before it in its stream."""

from __future__ import annotations

import http.server
import json
import logging
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.errors import AuditKeyError
from interlock.store import AuditWriter, SqlStore, open_store
from interlock.store.checkpoints import (
    CheckpointSettings,
    create_signing_key,
    load_public_key,
    load_signing_key,
    public_key_text,
    read_checkpoints,
    settings_from_env,
)


@pytest.fixture(autouse=True)
def _no_settings_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "INTERLOCK_AUDIT_KEY",
        "INTERLOCK_AUDIT_KEY_FILE",
        "INTERLOCK_CHECKPOINTS",
        "INTERLOCK_CHECKPOINT_KEY_FILE",
        "INTERLOCK_CHECKPOINT_EVERY",
        "INTERLOCK_CHECKPOINT_INTERVAL",
    ):
        monkeypatch.delenv(name, raising=False)


def lines_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def signing_key(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoint-key"
    create_signing_key(path)
    return path


def settings(tmp_path: Path, signing_key: Path, **options: Any) -> CheckpointSettings:
    options.setdefault("destinations", (str(tmp_path / "checkpoints.jsonl"),))
    return CheckpointSettings(key_file=signing_key, **options)


def test_the_sqlite_defaults_sign_into_a_file_beside_the_database(tmp_path: Path) -> None:
    db = tmp_path / "interlock.db"
    with open_store(f"sqlite:///{db}") as store:
        writer = AuditWriter(store)
        writer.write_record("acme", "note", {"n": 1})
        writer.close()
        key = Path(f"{db}.checkpoint-key")
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        lines = lines_of(Path(f"{db}.checkpoints.jsonl"))
        assert [(line["kind"], line.get("tenant"), line.get("seq")) for line in lines] == [
            ("head", "acme", 1),
            ("end", None, None),
        ]
        (row,) = store.audit_chain("acme")
        assert lines[0]["head"] == row.hash
        assert lines[0]["key_id"] == row.key_id
        public = load_public_key(public_key_text(load_signing_key(key).public_key()))
        checked = read_checkpoints([Path(f"{db}.checkpoints.jsonl")], trusted=[public])
        assert checked.problems == []
        assert store.verify_audit(checkpoints=checked).ok


def test_every_n_records_a_checkpoint_is_signed_in_the_background(
    store: SqlStore, tmp_path: Path, signing_key: Path
) -> None:
    writer = AuditWriter(store, checkpoints=settings(tmp_path, signing_key, every=5, interval=3600))
    path = tmp_path / "checkpoints.jsonl"
    # Five records make a round; a round covers every record noted before it starts,
    # so each five are waited for (written all at once, a late round could cover nine,
    # and the three left would never make another before the hour's interval).
    for n in range(5):
        writer.write_record("acme", "note", {"n": n})
    wait_for(lambda: any(line.get("seq", 0) >= 5 for line in lines_of(path)))
    for n in range(5, 10):
        writer.write_record("acme", "note", {"n": n})
    wait_for(lambda: any(line.get("seq", 0) >= 10 for line in lines_of(path)))
    for n in range(10, 12):
        writer.write_record("acme", "note", {"n": n})
    time.sleep(0.2)
    assert max(line["seq"] for line in lines_of(path)) == 10  # two records: no round yet
    assert all(line["kind"] == "head" for line in lines_of(path))  # no end: still running
    writer.close()
    lines = lines_of(path)
    assert lines[-2]["seq"] == 12 and lines[-1]["kind"] == "end"
    assert [line["n"] for line in lines] == list(range(1, len(lines) + 1))
    assert len({line["stream"] for line in lines}) == 1


def test_every_t_seconds_a_checkpoint_is_signed(
    store: SqlStore, tmp_path: Path, signing_key: Path
) -> None:
    writer = AuditWriter(store, checkpoints=settings(tmp_path, signing_key, interval=0.05))
    writer.write_record("acme", "note", {"n": 1})
    path = tmp_path / "checkpoints.jsonl"
    wait_for(lambda: len(lines_of(path)) == 1)
    writer.write_record("acme", "note", {"n": 2})
    wait_for(lambda: len(lines_of(path)) == 2)
    time.sleep(0.2)  # nothing new was written: no new line
    assert [line["seq"] for line in lines_of(path)] == [1, 2]
    writer.close()


def test_two_writers_write_two_streams_to_one_file_and_both_verify(
    store: SqlStore, tmp_path: Path, signing_key: Path
) -> None:
    first = AuditWriter(store, checkpoints=settings(tmp_path, signing_key))
    second = AuditWriter(store, checkpoints=settings(tmp_path, signing_key))
    first.write_record("acme", "note", {"n": 1})
    second.write_record("globex", "note", {"n": 1})
    first.write_record("acme", "note", {"n": 2})
    first.close()
    second.close()
    path = tmp_path / "checkpoints.jsonl"
    assert len({line["stream"] for line in lines_of(path)}) == 2
    public = settings(tmp_path, signing_key).public_key()
    checked = read_checkpoints([path], trusted=[public])
    assert checked.problems == [] and checked.notes == []
    assert store.verify_audit(checkpoints=checked).ok


def test_stdout_and_the_log_carry_the_same_signed_lines(
    store: SqlStore,
    tmp_path: Path,
    signing_key: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="interlock.audit.checkpoints")
    writer = AuditWriter(
        store,
        checkpoints=settings(
            tmp_path, signing_key, destinations=(str(tmp_path / "f.jsonl"), "stdout", "log")
        ),
    )
    writer.write_record("acme", "note", {"n": 1})
    writer.close()
    in_file = (tmp_path / "f.jsonl").read_text().splitlines()
    on_stdout = capsys.readouterr().out.splitlines()
    in_log = [r.getMessage() for r in caplog.records if r.name == "interlock.audit.checkpoints"]
    assert len(in_file) == 2
    assert on_stdout == in_file
    assert in_log == in_file


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list[str]
    fail_first: list[bool]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        if self.fail_first and self.fail_first.pop():
            self.send_response(503)
            self.end_headers()
            return
        assert self.headers["Content-Type"] == "application/x-ndjson"
        self.received.extend(body.splitlines())
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[str], list[bool]]]:
    received: list[str] = []
    fail_first: list[bool] = []
    handler = type("Handler", (_Receiver,), {"received": received, "fail_first": fail_first})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/checkpoints", received, fail_first
    server.shutdown()
    server.server_close()


def test_an_http_url_receives_each_round_and_a_failed_post_is_sent_again(
    store: SqlStore,
    tmp_path: Path,
    signing_key: Path,
    receiver: tuple[str, list[str], list[bool]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, received, fail_first = receiver
    fail_first.append(True)  # the first POST gets a 503
    writer = AuditWriter(
        store,
        checkpoints=settings(tmp_path, signing_key, destinations=(str(tmp_path / "f.jsonl"), url)),
    )
    writer.write_record("acme", "note", {"n": 1})
    with caplog.at_level(logging.WARNING, logger="interlock"):
        writer.checkpoint()
    assert received == []
    assert "503" in caplog.text
    writer.write_record("acme", "note", {"n": 2})
    writer.close()
    assert received == (tmp_path / "f.jsonl").read_text().splitlines()
    assert [json.loads(line).get("seq") for line in received] == [1, 2, None]


def test_a_signing_key_others_can_read_is_refused(
    store: SqlStore, tmp_path: Path, signing_key: Path
) -> None:
    signing_key.chmod(0o640)
    with pytest.raises(AuditKeyError, match="chmod 600"):
        AuditWriter(store, checkpoints=settings(tmp_path, signing_key))


def test_postgres_needs_its_checkpoint_signing_key_given(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLOCK_CHECKPOINTS", str(tmp_path / "c.jsonl"))
    with open_store(postgres_url) as store, pytest.raises(AuditKeyError) as refused:
        AuditWriter(store)
    assert "INTERLOCK_CHECKPOINT_KEY_FILE" in str(refused.value)


def test_postgres_without_checkpoints_warns(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(postgres_url, audit_key=b"k" * 32) as store:
        with caplog.at_level(logging.WARNING, logger="interlock"):
            writer = AuditWriter(store)
        writer.close()
    assert "no audit checkpoints" in caplog.text


def test_settings_from_the_environment(
    tmp_path: Path, signing_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLOCK_CHECKPOINTS", f"stdout, {tmp_path / 'c.jsonl'}")
    monkeypatch.setenv("INTERLOCK_CHECKPOINT_KEY_FILE", str(signing_key))
    monkeypatch.setenv("INTERLOCK_CHECKPOINT_EVERY", "50")
    monkeypatch.setenv("INTERLOCK_CHECKPOINT_INTERVAL", "2.5")
    found = settings_from_env()
    assert found is not None
    assert found.destinations == ("stdout", str(tmp_path / "c.jsonl"))
    assert (found.key_file, found.every, found.interval) == (signing_key, 50, 2.5)
    monkeypatch.setenv("INTERLOCK_CHECKPOINT_EVERY", "often")
    with pytest.raises(ValueError, match="INTERLOCK_CHECKPOINT_EVERY"):
        settings_from_env()


def test_public_keys_read_from_text_a_file_or_pem(tmp_path: Path, signing_key: Path) -> None:
    public = load_signing_key(signing_key).public_key()
    text = public_key_text(public)
    assert text.startswith("ed25519:")
    (tmp_path / "pub.txt").write_text(text + "\n")
    from cryptography.hazmat.primitives import serialization

    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "pub.pem").write_bytes(pem)
    loaded = {
        load_public_key(text).key_id,
        load_public_key(str(tmp_path / "pub.txt")).key_id,
        load_public_key(str(tmp_path / "pub.pem")).key_id,
    }
    assert len(loaded) == 1
    other = Ed25519PrivateKey.generate().public_key()
    assert load_public_key(public_key_text(other)).key_id not in loaded
    with pytest.raises(ValueError, match="ed25519:"):
        load_public_key("not a key")


def test_lines_that_are_not_checkpoints_are_skipped_and_a_garbled_one_shows_as_missing(
    store: SqlStore, tmp_path: Path, signing_key: Path
) -> None:
    writer = AuditWriter(store, checkpoints=settings(tmp_path, signing_key))
    writer.write_record("acme", "note", {"n": 1})
    writer.checkpoint()
    writer.write_record("acme", "note", {"n": 2})
    writer.close()
    path = tmp_path / "checkpoints.jsonl"
    public = settings(tmp_path, signing_key).public_key()
    lines = path.read_text().splitlines()
    # A shipped log: an access-log line, a prefix before each line, and the last write
    # cut short by a crash.
    shipped = [
        'INFO:     127.0.0.1:5000 - "POST /v1/check HTTP/1.1" 200 OK',
        *(f"2026-12-03T10:30:00Z host interlock[42]: {line}" for line in lines),
        lines[0][:80],
    ]
    path.write_text("\n".join(shipped))
    read = read_checkpoints([path], trusted=[public])
    assert read.problems == []
    assert read.lines == 3
    assert any("2 line(s) that are not checkpoints skipped (line 1, 5)" in n for n in read.notes)

    garbled = [
        lines[0].replace("interlock.audit.checkpoint", "interlock.audit.garbled"),
        *lines[1:],
    ]
    path.write_text("\n".join(garbled) + "\n")
    checked = read_checkpoints([path], trusted=[public])
    assert [(p.line, "checkpoint 1 of stream" in p.problem) for p in checked.problems] == [
        (2, True)
    ]
