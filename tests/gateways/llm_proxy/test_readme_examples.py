"""The proxy's copy-paste examples, run as written: the ```console blocks of the README
("A model proxy for agents you cannot change") and of docs/llm-proxy.md (the key made
with ``interlock keys create``, the proxy started with the provider keys in its
environment, the agent changing nothing but ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` and its key). ``tests/test_docs.py`` runs ```bash lines only,
so without this nothing ran those lines.

Only what cannot be copied is replaced: the provider's URLs by a local stand-in's, the
port (8760, the default, checked in ``--help``) by a free one so that parallel runs do
not collide, ``<interlock agent key>`` / ``ilk_...`` by the key the documented
``keys create`` printed, and ``python my_agent.py`` by an agent that builds its clients
from the environment alone (``openai.OpenAI()``, ``anthropic.Anthropic()``)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .conftest import POLICY, Served
from .standin import StandIn

ROOT = Path(__file__).resolve().parents[3]
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.DOTALL | re.MULTILINE)
KEY = re.compile(r"\bilk_[A-Za-z0-9_\-]+")
AGENT = """\
import anthropic
import openai

chat = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY
HI = [{"role": "user", "content": "hi"}]
reply = chat.chat.completions.create(model="gpt-4o-mini", messages=HI)
print("openai:", reply.choices[0].message.content)
try:
    chat.chat.completions.create(model="o1", messages=HI)
except openai.PermissionDeniedError as exc:
    print("openai refused:", exc.status_code)
if "ANTHROPIC_BASE_URL" in __import__("os").environ:
    claude = anthropic.Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY
    message = claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=64, messages=HI
    )
    print("anthropic:", message.content[0].text)
"""


def _console_commands(path: Path, after: str) -> list[str]:
    """The ``$`` lines of the first console block after the heading ``after``, with
    their continuation lines joined and comments dropped."""
    text = path.read_text(encoding="utf-8")
    start = text.index(after)
    block = CONSOLE.search(text, start)
    assert block is not None, f"no console block after {after!r} in {path.name}"
    commands: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
        elif commands and commands[-1].rstrip().endswith("\\"):
            commands[-1] = commands[-1].rstrip()[:-1] + " " + line.strip()
    return [" ".join(shlex.split(command, comments=True)) for command in commands]


def _split_env(command: str) -> tuple[dict[str, str], list[str]]:
    """``A=1 B=2 cmd args`` → ({A: 1, B: 2}, [cmd, args])."""
    words = shlex.split(command)
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def _clean_env() -> dict[str, str]:
    drop = ("OPENAI_", "ANTHROPIC_", "INTERLOCK_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(drop)}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


def _interlock(words: list[str]) -> list[str]:
    assert words[0] == "interlock", words
    return [sys.executable, "-m", "interlock.cli", *words[1:]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _agent_key(cwd: Path, command: str, env: dict[str, str]) -> str:
    """Run the documented ``interlock keys create`` line; the key it printed."""
    done = subprocess.run(
        _interlock(shlex.split(command, comments=True)),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    keys = KEY.findall(done.stdout + done.stderr)
    assert len(keys) == 1, done.stdout + done.stderr
    return keys[0]


class _Proxy:
    """The proxy process started from a documented command line, stderr read in a
    thread until it says where it listens."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def text(self) -> str:
        with self.changed:
            return "".join(self.lines)

    def wait_listening(self, port: int) -> None:
        for _ in range(3000):
            assert self.process.poll() is None, f"the proxy exited: {self.text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                threading.Event().wait(0.01)
        pytest.fail(f"the proxy did not start listening: {self.text()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(timeout=60)
        self.thread.join(timeout=60)
        return code


def _run_agent(cwd: Path, env: dict[str, str]) -> str:
    (cwd / "my_agent.py").write_text(AGENT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "my_agent.py"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_documented_default_port_is_the_commands() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "interlock.cli", "llm-proxy", "--help"],
        env={**_clean_env(), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert re.search(r"--port\b.*\b8760\b", help_text), help_text
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "OPENAI_BASE_URL=http://127.0.0.1:8760/v1" in readme


def test_the_readmes_two_lines(tmp_path: Path) -> None:
    proxy_line, agent_line = _console_commands(
        ROOT / "README.md", "## A model proxy for agents you cannot change"
    )
    docs_key_line = "interlock keys create --tenant acme --role agent --name support-bot"
    assert docs_key_line in (ROOT / "README.md").read_text(encoding="utf-8")
    (tmp_path / "interlock.yaml").write_text(POLICY, encoding="utf-8")  # ./interlock.yaml
    base = _clean_env()
    key = _agent_key(tmp_path, docs_key_line, base)  # the default store, as the proxy's

    standin = StandIn()
    upstream = Served(standin.app())
    port = _free_port()
    proxy_env, proxy_words = _split_env(proxy_line)
    assert proxy_env == {"OPENAI_API_KEY": "sk-..."}
    assert proxy_words[:2] == ["interlock", "llm-proxy"]
    proxy_words = [
        upstream.url + "/v1" if word == "https://api.openai.com/v1" else word
        for word in proxy_words
    ]
    proxy = _Proxy(_interlock([*proxy_words, "--port", str(port)]), tmp_path, {**base, **proxy_env})
    try:
        proxy.wait_listening(port)
        agent_env, agent_words = _split_env(
            agent_line.replace(":8760/", f":{port}/").replace("<interlock agent key>", key)
        )
        assert agent_words == ["python", "my_agent.py"]
        assert set(agent_env) == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
        said = _run_agent(tmp_path, {**base, **agent_env})
    finally:
        code = proxy.stop()
        upstream.close()
    assert f"interlock: llm-proxy on http://127.0.0.1:{port}/v1 — policy" in proxy.text()
    assert "openai: Hello there, agent." in said
    assert "openai refused: 403" in said
    assert standin.calls == 1  # the refused model never reached the provider
    headers = standin.seen[0].headers
    assert headers["authorization"] == "Bearer sk-..."  # the proxy's key, not the agent's
    assert key not in str(headers)
    assert code == 0, proxy.text()


def test_the_guides_proxy_and_both_clients_from_the_environment(tmp_path: Path) -> None:
    guide = ROOT / "docs" / "llm-proxy.md"
    run_lines = _console_commands(guide, "## Run it")
    exports = [line for line in run_lines if line.startswith("export ")]
    proxy_line = [line for line in run_lines if not line.startswith("export ")]
    assert len(proxy_line) == 1, run_lines
    agent_lines = _console_commands(guide, "## Point a client at it")
    text = guide.read_text(encoding="utf-8")
    key_line = re.search(r"^(interlock keys create [^#\n]*?)\s+#", text, re.MULTILINE)
    assert key_line is not None
    banner = re.search(r"^interlock: llm-proxy on .*— policy interlock\.yaml$", text, re.MULTILINE)
    assert banner is not None

    (tmp_path / "interlock.yaml").write_text(POLICY, encoding="utf-8")
    base = _clean_env()
    key = _agent_key(tmp_path, key_line.group(1), base)
    standin = StandIn()
    upstream = Served(standin.app())
    port = _free_port()
    proxy_env: dict[str, str] = {}
    for line in exports:
        proxy_env.update(_split_env(line.removeprefix("export "))[0])
    assert set(proxy_env) == {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}
    words = shlex.split(proxy_line[0])
    swap = {
        "https://api.openai.com/v1": upstream.url + "/v1",
        "https://api.anthropic.com": upstream.url,
    }
    assert set(swap) <= set(words), words
    words = [swap.get(word, word) for word in words]
    proxy = _Proxy(_interlock([*words, "--port", str(port)]), tmp_path, {**base, **proxy_env})
    try:
        proxy.wait_listening(port)
        agent_env: dict[str, str] = {}
        for line in agent_lines:
            if line.startswith("export "):
                agent_env.update(_split_env(line.removeprefix("export "))[0])
            else:
                assert _split_env(line)[1] == ["python", "my_agent.py"]
        assert set(agent_env) == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
        agent_env["OPENAI_BASE_URL"] = agent_env["OPENAI_BASE_URL"].replace(":8760/", f":{port}/")
        assert agent_env["OPENAI_API_KEY"].startswith("ilk_")  # an Interlock key's shape
        agent_env["OPENAI_API_KEY"] = key
        # "(or ANTHROPIC_BASE_URL)": the base URL without /v1, the same key
        assert 'anthropic.Anthropic(base_url="http://127.0.0.1:8760"' in text
        agent_env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{port}"
        agent_env["ANTHROPIC_API_KEY"] = key
        said = _run_agent(tmp_path, {**base, **agent_env})
    finally:
        code = proxy.stop()
        upstream.close()
    expected_banner = banner.group(0).replace(":8760/", f":{port}/")
    assert expected_banner in proxy.text(), proxy.text()
    assert "openai: Hello there, agent." in said
    assert "openai refused: 403" in said
    assert "anthropic: Hello there, agent." in said
    assert [seen.path for seen in standin.seen] == ["/v1/chat/completions", "/v1/messages"]
    assert standin.seen[0].headers["authorization"] == "Bearer sk-..."
    assert standin.seen[1].headers["x-api-key"] == "sk-ant-..."
    assert all(key not in str(seen.headers) for seen in standin.seen)
    assert code == 0, proxy.text()
