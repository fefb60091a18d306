"""``interlock serve`` reloads its policy file — on change and on SIGHUP — and a bad
policy never replaces a good one: the error is reported and the old one keeps serving."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from .harness import POLICY, bearer
from .test_serve_process import free_port, make_keys, serving, stop, wait_until_up

pytestmark = pytest.mark.slow

SHELL = {"kind": "tool", "name": "shell", "arguments": {"command": "ls"}}
ALLOW_SHELL = POLICY.replace(
    "  - id: no-shell\n    decision: deny\n    reason: no shell for support agents\n",
    "  - id: no-shell\n    decision: allow\n    reason: shell is fine now\n",
)
BROKEN = "version: 1\nrules:\n  - {id: broken, decision: maybe}\n"


def _write(path: Path, text: str) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def _verdict(client: httpx.Client, key: str) -> str:
    answer = client.post("/v1/check", json=SHELL, headers=bearer(key))
    assert answer.status_code == 200, answer.text
    return str(answer.json()["verdict"])


def _eventually(condition: object, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("trigger", ["file change", "SIGHUP"])
def test_serve_reloads_a_good_policy_and_keeps_serving_through_a_bad_one(
    tmp_path: Path, trigger: str
) -> None:
    assert ALLOW_SHELL != POLICY  # the edit below changes the verdict
    keys = make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    port = free_port()
    interval = "0.05" if trigger == "file change" else "0"
    with (
        serving(tmp_path, "--port", str(port), "--reload-interval", interval) as proc,
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        wait_until_up(proc, client)
        policy = tmp_path / "interlock.yaml"
        assert _verdict(client, keys["agent"]) == "deny"

        def poke() -> None:
            if trigger == "SIGHUP":
                proc.send_signal(signal.SIGHUP)

        _write(policy, BROKEN)
        poke()
        assert _eventually(
            lambda: (
                "serving the last good policy"
                in client.get("/v1/ready").json()["checks"].get("policy_reload", "")
            )
        )
        ready = client.get("/v1/ready")
        assert ready.status_code == 200  # still ready: the good policy serves
        assert "field 'decision'" in ready.json()["checks"]["policy_reload"]
        assert _verdict(client, keys["agent"]) == "deny"

        _write(policy, ALLOW_SHELL)
        poke()
        assert _eventually(lambda: _verdict(client, keys["agent"]) == "allow")
        assert client.get("/v1/ready").json()["checks"]["policy_reload"] == "ok"
        output = stop(proc)
    assert "policy NOT reloaded" in output and "reloaded (" in output
