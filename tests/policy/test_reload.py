"""Policy hot reload: a good file replaces the policy, a bad one never does."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from interlock import Action, Guard, Verdict, load_policy
from interlock.policy.reload import PolicyWatcher

DENY_SHELL = """\
version: 1
default: deny
rules:
  - id: read
    decision: allow
    reason: reads are fine
    name: read
"""

ALLOW_SHELL = """\
version: 1
default: deny
rules:
  - id: read
    decision: allow
    reason: reads are fine
    name: read
  - id: shell
    decision: allow
    reason: shell is fine now
    name: shell
"""

BROKEN = """\
version: 1
default: deny
rules:
  - id: shell
    decision: allow
    reason: shell
    name: shell
    when: "args.command.startsWith("
"""

SHELL = Action.tool("shell", {"command": "ls"})


def _write(path: Path, text: str) -> None:
    # write then rename, as editors and config mounts do: a reader never sees half
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def _eventually(condition: object, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "interlock.yaml"
    path.write_text(DENY_SHELL)
    return path


def test_a_changed_file_replaces_the_policy(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file)
    assert guard.check(SHELL).verdict is Verdict.DENY
    assert watcher.reload() is False  # unchanged: nothing to do
    _write(policy_file, ALLOW_SHELL)
    assert watcher.reload() is True
    decision = guard.check(SHELL)
    assert (decision.verdict, decision.rule_ids) == (Verdict.ALLOW, ("shell",))
    assert watcher.status.reloads == 1 and watcher.last_error is None


def test_a_bad_file_is_reported_and_the_old_policy_keeps_serving(policy_file: Path) -> None:
    errors: list[str] = []
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file, on_error=errors.append)
    before = watcher.status.serving_sha256
    _write(policy_file, BROKEN)
    assert watcher.reload() is False
    assert guard.check(SHELL).verdict is Verdict.DENY  # still the good policy
    assert watcher.last_error is not None
    assert f"{policy_file}:8" in watcher.last_error and "'when'" in watcher.last_error
    assert errors == [watcher.last_error]
    assert watcher.status.serving_sha256 == before
    assert watcher.reload() is False and len(errors) == 1  # the same bad bytes: not again
    _write(policy_file, ALLOW_SHELL)
    assert watcher.reload() is True
    assert guard.check(SHELL).verdict is Verdict.ALLOW
    assert watcher.last_error is None


def test_a_missing_file_keeps_the_policy(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file)
    policy_file.unlink()
    assert watcher.reload(force=True) is False
    assert "cannot read" in (watcher.last_error or "")
    assert guard.check(Action.tool("read")).verdict is Verdict.ALLOW


def test_the_polling_thread_picks_up_a_change(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    reloaded = threading.Event()
    watcher = PolicyWatcher(
        guard, policy_file, interval=0.01, on_reload=lambda _: reloaded.set()
    ).start()
    try:
        _write(policy_file, ALLOW_SHELL)
        assert reloaded.wait(20)
        assert guard.check(SHELL).verdict is Verdict.ALLOW
    finally:
        watcher.stop()


def test_sighup_reloads_now(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file, interval=3600)  # polling would never see it
    previous = signal.getsignal(signal.SIGHUP)
    try:
        watcher.install_sighup()
        _write(policy_file, ALLOW_SHELL)
        os.kill(os.getpid(), signal.SIGHUP)
        assert _eventually(lambda: guard.check(SHELL).verdict is Verdict.ALLOW)
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_checks_racing_a_reload_get_one_policy_or_the_other(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file)
    seen: set[Verdict] = set()
    stop = threading.Event()

    def check_forever() -> None:
        while not stop.is_set():
            seen.add(guard.check(SHELL).verdict)

    threads = [threading.Thread(target=check_forever) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for text in (ALLOW_SHELL, BROKEN, DENY_SHELL, ALLOW_SHELL) * 4:
            _write(policy_file, text)
            watcher.reload()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert seen <= {Verdict.ALLOW, Verdict.DENY}  # never undetermined, never an error
    assert guard.check(SHELL).verdict is Verdict.ALLOW


def test_a_stateful_guard_keeps_its_budgets_across_a_reload(
    policy_file: Path, tmp_path: Path
) -> None:
    budgeted = """\
version: 1
default: deny
budgets:
  - id: spend
    limit: 1
    unit: USD
    kind: tool
rules:
  - id: pay
    decision: allow
    reason: pay
    name: pay
"""
    _write(policy_file, budgeted)
    with Guard(load_policy(policy_file), store=f"sqlite:///{tmp_path / 's.db'}") as guard:
        watcher = PolicyWatcher(guard, policy_file)
        first = guard.check(Action.tool("pay", {"est_cost": 0.6}))
        guard.commit(first)
        _write(policy_file, budgeted.replace("reason: pay\n", "reason: pay, reloaded\n"))
        assert watcher.reload() is True
        second = guard.check(Action.tool("pay", {"est_cost": 0.6}))
        assert second.verdict is Verdict.DENY and "spend" in second.reason  # 0.6 + 0.6 > 1


def test_a_guard_with_a_custom_decider_refuses_a_new_policy(policy_file: Path) -> None:
    from support import SlowDecider

    guard = Guard(decider=SlowDecider(0.0))
    watcher = PolicyWatcher(guard, policy_file)
    _write(policy_file, ALLOW_SHELL)
    assert watcher.reload() is False
    assert "custom decider" in (watcher.last_error or "")
