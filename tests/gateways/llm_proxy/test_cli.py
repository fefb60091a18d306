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


def test_the_old_unjudged_streams_flag_only_warns(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    args = ["llm-proxy", "-p", str(tmp_path / "interlock.yaml"), "--allow-unjudged-streamed-tools"]
    result = CliRunner().invoke(app, args)
    assert "--allow-unjudged-streamed-tools is deprecated and does nothing" in result.output
    assert result.exit_code == 2  # and the command goes on as without it: no upstream named
    assert (
        "--allow-unjudged-streamed-tools"
        not in CliRunner().invoke(app, ["llm-proxy", "--help"]).output
    )


def test_a_held_bytes_cap_below_one_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    args = ["llm-proxy", "-p", str(tmp_path / "interlock.yaml"), "--max-held-bytes", "0"]
    args += ["--openai-upstream", "http://127.0.0.1:9/v1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--max-held-bytes" in result.output


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
        assert process.poll() is None, "the proxy exited"
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
    command += ["--reload-interval", "0"]  # reloads on SIGHUP only
    command += ["--openai-upstream", upstream.url + "/v1"]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    said = _Lines(process)
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
        # A new policy, renamed into place, then SIGHUP: o1 is allowed from now on.
        (tmp_path / "next.yaml").write_text(POLICY.replace('"gpt-4o-mini",', '"gpt-4o-mini", o1,'))
        os.replace(tmp_path / "next.yaml", tmp_path / "interlock.yaml")
        process.send_signal(signal.SIGHUP)
        said.wait_for("reloaded")
        api.chat.completions.create(model="o1", messages=[{"role": "user", "content": "hi"}])
        assert standin.calls == 2
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        said.thread.join(timeout=60)
        upstream.close()
    assert process.returncode == 0, said.text()
    assert "llm-proxy stopped" in said.text()


class _Lines:
    """The process's stderr, read line by line in a thread, to wait on."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.thread.start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            with self.changed:
                self.lines.append(raw.decode(errors="replace"))
                self.changed.notify_all()

    def text(self) -> str:
        with self.changed:
            return "".join(self.lines)

    def wait_for(self, words: str) -> None:
        with self.changed:
            found = self.changed.wait_for(lambda: words in "".join(self.lines), timeout=60)
        assert found, self.text()
