"""The shipped session example policies: each loads, passes ``interlock policy lint``
and its ``steps:`` cases (``interlock policy test``), and is packaged."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from interlock import load_policy
from interlock.policy.testing import run_cases

EXAMPLES = resources.files("interlock").joinpath("examples")
NAMES = [
    "session-no-exfil",
    "session-untrusted-approval",
    "session-cross-domain",
    "session-destructive-cap",
]


def _path(name: str) -> Path:
    return Path(str(EXAMPLES.joinpath(name)))


@pytest.mark.parametrize("name", NAMES)
def test_the_example_reads_sessions_and_its_cases_pass(name: str) -> None:
    policy = load_policy(_path(f"{name}.yaml"))
    assert policy.sessions is not None  # a session-aware policy
    _, results = run_cases(_path(f"{name}.cases.yaml"))
    assert results and all(r.passed for r in results), [r for r in results if not r.passed]
    assert any("steps" in line for line in _path(f"{name}.cases.yaml").read_text().splitlines())


@pytest.mark.parametrize("name", NAMES)
def test_the_example_passes_lint_and_policy_test(name: str) -> None:
    for command in (
        ["policy", "lint", str(_path(f"{name}.yaml"))],
        ["policy", "test", str(_path(f"{name}.cases.yaml"))],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "interlock", *command],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "!" not in done.stdout.split("\n", 1)[-1], done.stdout  # no lint warning


def test_a_case_fails_when_the_session_rule_is_gone(tmp_path: Path) -> None:
    """The cases can fail: without its flow rule the exfiltration case does not pass."""
    text = _path("session-no-exfil.yaml").read_text()
    cut = text.index("  - id: no-secret-out")
    (tmp_path / "session-no-exfil.yaml").write_text(text[:cut])
    (tmp_path / "cases.yaml").write_text(_path("session-no-exfil.cases.yaml").read_text())
    _, results = run_cases(tmp_path / "cases.yaml")
    failed = {r.name for r in results if not r.passed}
    assert "the secret mailed after it was read is refused" in failed
