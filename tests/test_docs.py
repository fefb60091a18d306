"""Every example in the README and docs/ runs.

- a ```yaml block with `version:` is a policy and must load; one with `cases:` is a
  case file and must pass against the document's policy; one with `upstreams:` is an
  MCP gateway configuration and must load; a fragment with `params:`
  or `when:` must compile inside a rule;
- the ```python blocks of one document run in order, in one namespace, in a scratch
  directory whose `interlock.yaml` is the document's first policy (or the shipped
  example when it has none); a block that starts with `# name.py ` is a complete file,
  also saved there under that name (for an example that runs it as a process);
- a document that starts with `<!-- requires: module -->` is one whose framework cannot
  share this environment: without that module its ```python blocks are skipped here,
  and its framework's own test module runs them in the framework's environment
  (`run_python_examples`);
- a ```bash line that runs `interlock` and carries `# exit N` runs and exits N; the
  lines of one document run in order, in one scratch directory (holding the document's
  first policy as `interlock.yaml`, unless its first command is `interlock init`), with
  no `INTERLOCK_*` variable set.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from interlock import load_policy_text
from interlock.demo import example_policy_text
from interlock.gateways.mcp.config import load_config
from interlock.policy import compile_policy
from interlock.policy.testing import run_cases

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks(path: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text()) if lang == language]


def policy_of(path: Path) -> str:
    for body in blocks(path, "yaml"):
        if re.search(r"^version:", body, re.MULTILINE):
            return body
    return example_policy_text()


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_docs_have_examples() -> None:
    # a TypeScript page's ```ts blocks are files of clients/typescript/examples/ that the
    # TypeScript tests run and check the page includes verbatim (test/examples.test.ts)
    bare = [
        doc_id(p)
        for p in DOCS
        if not (blocks(p, "yaml") or blocks(p, "python"))
        and not (p.name.startswith("typescript") and blocks(p, "ts"))
    ]
    assert not bare, f"pages without a runnable example: {bare}"


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_yaml_examples_load(path: Path, tmp_path: Path) -> None:
    for body in blocks(path, "yaml"):
        data: Any = yaml.safe_load(body)
        if "version" in data:
            load_policy_text(body, file=f"{doc_id(path)} example")
        elif "upstreams" in data:  # an MCP gateway's configuration
            config = tmp_path / "gateway.yaml"
            config.write_text(body)
            names = dict.fromkeys(re.findall(r"\$\{(\w+)\}", body), "set-for-the-test")
            load_config(config, environ=names)
        elif "cases" in data:
            (tmp_path / "interlock.yaml").write_text(policy_of(path))
            (tmp_path / "cases.yaml").write_text(body)
            _, results = run_cases(tmp_path / "cases.yaml")
            assert all(r.passed for r in results), results
        else:
            rule = {"id": "doc", "decision": "deny", "reason": "doc", **data}
            compile_policy({"version": 1, "rules": [rule]})


REQUIRES = re.compile(r"^<!-- requires: ([\w.]+) -->$", re.MULTILINE)


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p, "python")], ids=doc_id)
def test_python_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in REQUIRES.findall(path.read_text()):
        pytest.importorskip(module, reason="run by that framework's tests in its environment")
    run_python_examples(path, tmp_path, monkeypatch)


def run_python_examples(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the ```python blocks of ``path`` in order, in one namespace, in ``tmp_path``."""
    (tmp_path / "interlock.yaml").write_text(policy_of(path))
    monkeypatch.chdir(tmp_path)
    # a framework's tests may have turned the OpenTelemetry SDK off for the process
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    for number, body in enumerate(blocks(path, "python"), 1):
        saved = re.match(r"# ([\w.-]+\.py) ", body)
        if saved is not None:  # a complete file, as shown: saved for what runs it
            (tmp_path / saved.group(1)).write_text(body)
        code = compile(body, f"{doc_id(path)} python block {number}", "exec")
        exec(code, namespace)
    sink = namespace.get("sink")
    if sink is not None and hasattr(sink, "close"):
        sink.close()


def _interlock_lines(path: Path) -> list[tuple[str, int]]:
    lines = []
    for body in blocks(path, "bash"):
        for line in body.splitlines():
            match = re.search(r"#\s*exit (\d+)", line)
            if line.startswith("interlock ") and match:
                lines.append((line[: match.start()].strip(), int(match.group(1))))
    return lines


@pytest.mark.parametrize("path", [p for p in DOCS if _interlock_lines(p)], ids=doc_id)
def test_command_line_examples_exit_as_documented(path: Path, tmp_path: Path) -> None:
    lines = _interlock_lines(path)
    if lines[0][0] != "interlock init":  # a document that starts with init starts empty
        (tmp_path / "interlock.yaml").write_text(policy_of(path))
    exe = shutil.which("interlock", path=str(Path(sys.executable).parent))
    assert exe is not None
    # The examples describe a fresh environment: no database, data dir, key or approver
    # of the developer's may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["XDG_CACHE_HOME"] = str(tmp_path / ".cache")  # `interlock check`'s policy cache
    env["PATH"] = f"{Path(exe).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    for command, code in lines:
        shlex.split(command)  # the example is valid shell
        result = subprocess.run(
            command,
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == code, f"{command}\n{result.stdout}\n{result.stderr}"
