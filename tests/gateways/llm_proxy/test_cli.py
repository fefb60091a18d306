"""``interlock llm-proxy`` as a process: it serves, gates and stops cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
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


def _agent_key(tmp_path: Path) -> tuple[str, str]:
    """A SQLite store in ``tmp_path`` and an agent key of tenant ``acme`` in it: its
    URL and the key's token."""
    database = f"sqlite:///{tmp_path / 'interlock.db'}"
    store = open_store(database)
    assert isinstance(store, SqlStore)
    token = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="bot").token
    store.close()
    return database, token


def test_the_command_serves_the_openai_client_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    database, token = _agent_key(tmp_path)
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


@pytest.mark.parametrize("then", ["lock released", "proxy killed"])
def test_the_answer_leaves_before_the_commit_and_a_crash_between_loses_no_charge(
    tmp_path: Path, then: str
) -> None:
    """The store's write lock is held from the moment the upstream has the request
    (its decision and reservation are durable), so no commit can be written — and the
    client still gets its answer. Then either the lock goes, and the commit that was
    waiting is written with the real usage; or the proxy is killed first, and nothing
    is lost: the reservation is open, and the reaper charges it in full (the
    estimate; the real usage died with the proxy)."""
    import sqlite3

    (tmp_path / "interlock.yaml").write_text(POLICY)
    path = tmp_path / "interlock.db"
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SqlStore)
    token = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="bot").token
    store.close()
    standin = StandIn(mode="hold-answer")
    upstream = Served(standin.app())
    port = _free_port()
    command = [sys.executable, "-m", "interlock.cli", "llm-proxy", "-p", "interlock.yaml"]
    command += ["--store", f"sqlite:///{path}", "--port", str(port), "--log-level", "warning"]
    command += ["--reload-interval", "0", "--openai-upstream", upstream.url + "/v1"]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.DEVNULL)
    lock = sqlite3.connect(path, timeout=30, isolation_level=None)
    answers: list[str | None] = []
    try:
        _wait_until_listening(port, process)
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)
        messages = [{"role": "user", "content": "hi"}]

        def call() -> None:
            reply = api.chat.completions.create(
                model="gpt-4o-mini",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=50,
            )
            answers.append(reply.choices[0].message.content)

        client = threading.Thread(target=call)
        client.start()
        assert standin.holding.wait(timeout=30)  # the upstream has it: decided and reserved
        lock.execute("BEGIN IMMEDIATE")  # from now on no commit can be written
        standin.release.set()
        client.join(timeout=30)
        assert answers == ["Hello there, agent."]  # answered while the commit is impossible
        if then == "proxy killed":
            process.kill()
            process.wait(timeout=30)
        lock.execute("ROLLBACK")  # nothing was written under the lock
        if then == "lock released":
            reader = open_store(f"sqlite:///{path}")
            assert isinstance(reader, SqlStore)
            try:
                for _ in range(3000):  # the commit that waited on the lock now goes in
                    (row,) = reader.budget_rows(tenant="acme", budget_id="tokens")
                    if row.reserved == 0:
                        break
                    threading.Event().wait(0.01)
                assert (row.spent, row.reserved) == (18, 0)  # the real usage, once
            finally:
                reader.close()
            return
    finally:
        lock.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        upstream.close()
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SqlStore)
    try:
        (row,) = store.budget_rows(tenant="acme", budget_id="tokens")
        reserved = row.reserved
        assert (row.spent, reserved > 0) == (0, True)  # open, not lost
        store.reap(now=store.clock() + 3600 * 10**6)  # past its TTL
        (row,) = store.budget_rows(tenant="acme", budget_id="tokens")
        assert (row.spent, row.reserved) == (reserved, 0)  # charged in full
    finally:
        store.close()


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


@pytest.mark.parametrize(
    "local",
    [
        ["--policy", "interlock.yaml"],
        ["--store", "sqlite:///x.db"],
        ["--reload-interval", "0"],
        ["--reservation-ttl", "60"],
    ],
)
def test_server_mode_takes_no_local_policy_or_store(local: list[str]) -> None:
    args = ["llm-proxy", "--server", "http://127.0.0.1:9"]
    args += ["--openai-upstream", "http://127.0.0.1:9/v1", *local]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--server judges on the server" in result.output
    assert local[0] in result.output


def test_the_command_judges_through_the_server_with_the_clients_key(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from interlock import Guard
    from interlock.server import create_app as server_app

    (tmp_path / "interlock.yaml").write_text(POLICY)
    guard = Guard.from_file(tmp_path / "interlock.yaml", store=f"sqlite:///{tmp_path / 's.db'}")
    assert isinstance(guard.store, SqlStore)
    token = KeyStore(guard.store).create(tenant="acme", role=Role.AGENT, name="bot").token
    server = Served(server_app(guard))
    standin = StandIn()
    upstream = Served(standin.app())
    port = _free_port()
    env = {**os.environ, "OPENAI_API_KEY": "sk-held-by-the-proxy"}
    env.pop("INTERLOCK_API_KEY", None)  # the proxy holds no Interlock key
    command = [sys.executable, "-m", "interlock.cli", "llm-proxy", "--server", server.url]
    command += ["--port", str(port), "--log-level", "warning"]
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
        with pytest.raises(openai.PermissionDeniedError):
            api.chat.completions.create(model="o1", messages=[{"role": "user", "content": "hi"}])
        assert standin.calls == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        said.thread.join(timeout=60)
        upstream.close()
        server.close()
    (row,) = guard.store.budget_rows(tenant="acme", budget_id="tokens")
    guard.close()
    assert (row.spent, row.reserved) == (18, 0)
    assert process.returncode == 0, said.text()
    assert f"judging through the server at {server.url}" in said.text()
    assert "does not answer" not in said.text()


def test_a_server_that_does_not_answer_at_startup_is_a_warning(tmp_path: Path) -> None:
    port, dead = _free_port(), _free_port()
    command = [sys.executable, "-m", "interlock.cli", "llm-proxy"]
    command += ["--server", f"http://127.0.0.1:{dead}", "--port", str(port)]
    command += ["--openai-upstream", "http://127.0.0.1:9/v1", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE)
    said = _Lines(process)
    try:
        _wait_until_listening(port, process)
        said.wait_for("every call is refused (503) until it does")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        said.thread.join(timeout=60)
    assert process.returncode == 0, said.text()


SESSION_POLICY = """\
version: 1
default: deny
rules:
  - id: models
    decision: allow
    reason: the agent may use this model
    kind: llm
    name: gpt-4o-mini
  - id: no-mail-after-a-page
    decision: deny
    reason: no mail once the session fetched a page
    name: send_email
    session:
      after: {name: fetch_url}
"""


@pytest.mark.parametrize(("flag", "status"), [([], 400), (["--no-session-header"], 200)])
def test_the_session_header_can_be_turned_off(tmp_path: Path, flag: list[str], status: int) -> None:
    """With a policy that reads sessions, a malformed ``x-interlock-session`` is refused
    (the header names the session); with ``--no-session-header`` the proxy never reads
    it: the session is the conversation's own and the call goes on."""
    (tmp_path / "interlock.yaml").write_text(SESSION_POLICY)
    database, token = _agent_key(tmp_path)
    standin = StandIn()
    upstream = Served(standin.app())
    port = _free_port()
    command = [sys.executable, "-m", "interlock.cli", "llm-proxy", "-p", "interlock.yaml"]
    command += ["--store", database, "--port", str(port), "--log-level", "warning", *flag]
    command += ["--openai-upstream", upstream.url + "/v1"]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE)
    said = _Lines(process)
    try:
        _wait_until_listening(port, process)
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {token}", "x-interlock-session": "a b"},
            timeout=30,
        )
        assert answer.status_code == status, answer.text
        assert standin.calls == (1 if status == 200 else 0)
        if status == 400:  # refused for the header, before any model call
            assert "x-interlock-session" in answer.json()["error"]["message"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        said.thread.join(timeout=60)
        upstream.close()
    assert process.returncode == 0, said.text()
