"""``interlock serve`` reloads its policy file — on change and on SIGHUP — and a bad
policy never replaces a good one: the error is reported and the old one keeps serving."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from interlock.server import KeyStore, Role
from interlock.store import open_store

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


def test_serve_holds_a_reload_that_removes_most_rules_until_an_admin_confirms(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'i.db'}"
    keys = make_keys(url)
    with open_store(url) as store:
        admin = KeyStore(store).create(tenant="acme", role=Role.ADMIN, name="root").token
    port = free_port()
    truncated = POLICY[: POLICY.index("  - id: no-shell")]  # 1 rule of 5 left
    with (
        serving(tmp_path, "--port", str(port), "--reload-interval", "0.05") as proc,
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        wait_until_up(proc, client)
        _write(tmp_path / "interlock.yaml", truncated)
        assert _eventually(lambda: client.get("/v1/ready").json()["policy_reload_held"])
        ready = client.get("/v1/ready")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        held = ready.json()["policy_reload_held"]
        assert _verdict(client, keys["agent"]) == "deny"  # still the five rules

        confirmed = client.post(
            "/v1/policy/reload/confirm", json={"sha256": held["sha256"]}, headers=bearer(admin)
        )
        assert confirmed.status_code == 200, confirmed.text
        assert confirmed.json()["rules"] == 1
        assert client.get("/v1/ready").json()["checks"]["policy_reload"] == "ok"
        output = stop(proc)
    assert "reload HELD" in output and "removes 4 of 5 rules" in output


def test_serve_refuses_a_policy_that_does_not_match_its_digest_sidecar(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from interlock.cli import app as cli

    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICY)
    sidecar = tmp_path / "interlock.yaml.sha256"
    sidecar.write_text(f"{hashlib.sha256(b'another file').hexdigest()}  interlock.yaml\n")
    args = ["serve", "-p", str(policy), "-d", f"sqlite:///{tmp_path / 'i.db'}"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "does not match its digest in interlock.yaml.sha256" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["mcp-gateway", "--", "true"],
        ["mcp-gateway", "--http", "--port", "0", "--", "true"],
        ["llm-proxy", "--openai-upstream", "http://127.0.0.1:9/v1", "--port", "0"],
    ],
    ids=["mcp-gateway", "mcp-gateway --http", "llm-proxy"],
)
def test_the_gateways_refuse_a_policy_that_does_not_match_its_digest_sidecar(
    tmp_path: Path, command: list[str]
) -> None:
    """As `interlock serve`: a sidecar that disagrees stops the command before it
    serves anything (exit 2, the file named)."""
    import subprocess
    import sys

    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICY)
    sidecar = tmp_path / "interlock.yaml.sha256"
    sidecar.write_text(f"{hashlib.sha256(b'another file').hexdigest()}  interlock.yaml\n")
    interlock = str(Path(sys.executable).with_name("interlock"))
    args = [interlock, command[0], "-p", str(policy), "-d", f"sqlite:///{tmp_path / 'i.db'}"]
    done = subprocess.run(
        [*args, *command[1:]], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "does not match its digest in interlock.yaml.sha256" in done.stderr
    assert done.stdout == ""
