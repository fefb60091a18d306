"""``interlock llm-proxy`` as a process: it serves, gates and stops cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from interlock.cli_app import app
from interlock.server import KeyStore, Role
from interlock.store import open_store
from interlock.store.sql import SqlStore

from .conftest import POLICY, Served
from .standin import StandIn


def test_without_an_upstream_it_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    result = CliRunner().invoke(app, ["llm-proxy", "-p", str(tmp_path / "interlock.yaml")])
    assert result.exit_code == 2
    assert "--openai-upstream" in result.output


def test_an_upstream_that_is_not_http_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    args = ["llm-proxy", "-p", str(tmp_path / "interlock.yaml"), "--openai-upstream", "file:///x"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(2000):
        assert process.poll() is None, process.stderr.read() if process.stderr else b""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            threading.Event().wait(0.01)
    pytest.fail("the proxy did not start listening")


def test_the_command_serves_the_openai_client_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    database = f"sqlite:///{tmp_path / 'interlock.db'}"
    store = open_store(database)
    assert isinstance(store, SqlStore)
    token = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="bot").token
    store.close()
    standin = StandIn()
    upstream = Served(standin.app())
    port = _free_port()
    env = {**os.environ, "OPENAI_API_KEY": "sk-held-by-the-proxy"}
    command = [sys.executable, "-m", "interlock.cli", "llm-proxy", "-p", "interlock.yaml"]
    command += ["--store", database, "--port", str(port), "--log-level", "warning"]
    command += ["--openai-upstream", upstream.url + "/v1"]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    try:
        _wait_until_listening(port, process)
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)
        reply = api.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "Hello there, agent."
        assert standin.seen[0].headers["authorization"] == "Bearer sk-held-by-the-proxy"
        with pytest.raises(openai.PermissionDeniedError):
            api.chat.completions.create(model="o1", messages=[{"role": "user", "content": "hi"}])
        assert standin.calls == 1
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        upstream.close()
    assert process.returncode == 0, stderr.decode()
    assert b"llm-proxy stopped" in stderr
