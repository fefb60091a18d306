"""``interlock serve`` says at startup what protects its audit log — the key id, where
checkpoints go and the key they are signed with — and warns when the log is unkeyed
or unchecked; a clean shutdown signs the last checkpoint, and ``audit verify`` then
checks the log against it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from .harness import POLICY, bearer
from .test_serve_process import (
    STARTUP,
    free_port,
    interlock_exe,
    make_keys,
    serving,
    stop,
    wait_until_up,
)

pytestmark = pytest.mark.slow

ACCELERATORS = (
    "interlock.session._speedups",
    "interlock.session._history",
    "interlock.core._redaction",
    "interlock.store._chain",
)


def test_serve_names_its_key_and_checkpoints_and_signs_the_last_one_at_shutdown(
    tmp_path: Path,
) -> None:
    db = tmp_path / "i.db"
    tokens = make_keys(f"sqlite:///{db}")
    port = free_port()
    with serving(tmp_path, "--port", str(port)) as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
            body = {"name": "refund_order", "arguments": {"amount": 5}}
            client.post("/v1/check", json=body, headers=bearer(tokens["agent"]))
        output = stop(proc)
    assert "interlock: audit log: HMAC-SHA256, key id" in output
    assert "interlock: audit checkpoints: signed by ed25519:" in output
    # and whether its hot paths run in C (a warning, with the remedy, where they do not)
    if all(importlib.util.find_spec(module) for module in ACCELERATORS):
        assert "interlock: accelerators: fingerprints, session records, redaction, chain " in output
        assert "WARNING" not in output
    else:
        assert "interlock: WARNING: accelerators: " in output
    lines = [json.loads(line) for line in Path(f"{db}.checkpoints.jsonl").read_text().splitlines()]
    assert [(line["kind"], line.get("tenant")) for line in lines] == [
        ("head", "acme"),
        ("end", None),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    verified = subprocess.run(
        [interlock_exe(), "audit", "verify", "-d", f"sqlite:///{db}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "against 2 signed checkpoint lines" in verified.stdout


def test_serve_on_postgres_without_a_key_warns_at_startup(
    tmp_path: Path, postgres_url: str
) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    port = free_port()
    proc = subprocess.Popen(
        [interlock_exe(), "serve", "-d", postgres_url, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
        output = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "interlock: WARNING: audit log: NOT keyed (plain SHA-256" in output
    assert "interlock: WARNING: audit checkpoints: NONE" in output
