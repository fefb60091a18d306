"""Policy hot reload: a good file replaces the policy, a bad one never does."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from interlock import Action, Guard, Verdict, load_policy
from interlock.policy.reload import HeldDigestMismatch, NothingHeld, PolicyWatcher

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


# -- never a half-written file -----------------------------------------------------------

RM = Action.tool("shell", {"command": "ls /tmp; rm -rf /"})

# What the operator means to serve: shell, but never rm. Each rule is one chunk of the
# file as it is written; every prefix that ends between rules parses — and the one
# with the first rule alone allows `rm`.
SHELL_RULES = [
    "version: 1\ndefault: deny\nrules:\n",
    "  - id: shell\n    decision: allow\n    reason: shell is fine\n    name: shell\n",
    "  - id: no-rm\n    decision: deny\n    reason: never rm\n    name: shell\n"
    "    params:\n      command: {regex: '(^|[;&|]\\s*)rm\\s'}\n",
    "  - id: read\n    decision: allow\n    reason: reads are fine\n    name: read\n",
]
SERVING = "".join(SHELL_RULES[:3]).replace("never rm", "rm is never run")


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _write_in_place(path: Path, chunks: list[str], between: object = None) -> None:
    """Rewrite ``path`` in place, chunk by chunk, as `cp` or an editor saving in
    place does; ``between()`` runs after each chunk reached the file."""
    with path.open("w") as out:
        for chunk in chunks:
            out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
            if callable(between):
                between()


def test_a_policy_written_in_chunks_with_pauses_is_never_served_half_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(SERVING)
    guard = Guard(load_policy(path))
    served: list[tuple[str, ...]] = []
    watcher = PolicyWatcher(
        guard, path, interval=0.01, on_reload=lambda p: served.append(p.rule_ids)
    ).start()
    verdicts: set[Verdict] = set()
    stop = threading.Event()

    def check_forever() -> None:
        while not stop.is_set():
            verdicts.add(guard.check(RM).verdict)
            time.sleep(0.001)

    checker = threading.Thread(target=check_forever)
    checker.start()
    try:
        # Pauses of 0.1 s between chunks: ten polls see each prefix.
        _write_in_place(path, SHELL_RULES, between=lambda: time.sleep(0.1))
        assert _eventually(lambda: served and served[-1] == ("shell", "no-rm", "read"))
    finally:
        stop.set()
        checker.join()
        watcher.stop()
    assert verdicts == {Verdict.DENY}  # never allowed by the prefix with `shell` alone
    assert served == [("shell", "no-rm", "read")]  # the complete file, once


def test_a_file_changing_in_place_is_read_only_once_it_settled(tmp_path: Path) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(SERVING)
    guard = Guard(load_policy(path))
    clock = FakeMonotonic()
    watcher = PolicyWatcher(guard, path, settle=1.0, monotonic=clock)
    _write_in_place(path, SHELL_RULES[:2])  # stopped after the first rule
    assert watcher.poll() is False  # just seen changing
    clock.now += 0.9
    assert watcher.poll() is False  # not yet unchanged for a second
    _write_in_place(path, SHELL_RULES)  # the writer goes on
    clock.now += 0.9
    assert watcher.poll() is False  # changed again: the second starts over
    assert guard.check(RM).verdict is Verdict.DENY and watcher.status.reloads == 0
    clock.now += 1.0
    assert watcher.poll() is True
    assert guard.policy is not None and guard.policy.rule_ids == ("shell", "no-rm", "read")
    assert watcher.poll() is False  # nothing new


def test_a_file_renamed_into_place_is_taken_at_once(tmp_path: Path) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(SERVING)
    guard = Guard(load_policy(path))
    clock = FakeMonotonic()
    watcher = PolicyWatcher(guard, path, settle=60.0, monotonic=clock)
    _write(path, "".join(SHELL_RULES))  # a new inode: complete by construction
    assert watcher.poll() is True
    assert guard.policy is not None and guard.policy.rule_ids == ("shell", "no-rm", "read")


def test_a_new_file_that_does_not_parse_yet_waits_for_the_settle_window(tmp_path: Path) -> None:
    # Removed and created anew, then written: a new inode, but not written whole.
    path = tmp_path / "interlock.yaml"
    path.write_text(SERVING)
    errors: list[str] = []
    guard = Guard(load_policy(path))
    clock = FakeMonotonic()
    watcher = PolicyWatcher(guard, path, settle=1.0, monotonic=clock, on_error=errors.append)
    path.unlink()
    path.write_text(SHELL_RULES[0] + SHELL_RULES[1][:30])
    assert watcher.poll() is False and errors == []  # perhaps still being written
    clock.now += 1.5
    assert watcher.poll() is False
    assert len(errors) == 1 and watcher.last_error == errors[0]  # settled, and broken
    assert guard.check(RM).verdict is Verdict.DENY


# -- a reload that removes most rules waits for a human --------------------------------------

FOUR_RULES = "".join(SHELL_RULES) + (
    "  - id: write\n    decision: allow\n    reason: writes are fine\n    name: write\n"
)


def test_a_truncation_that_removes_most_rules_is_held_and_the_old_policy_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(FOUR_RULES)
    held: list[object] = []
    guard = Guard(load_policy(path))
    watcher = PolicyWatcher(guard, path, on_held=held.append)
    before = watcher.status.serving_sha256
    _write(path, "".join(SHELL_RULES[:2]))  # 1 rule of 4 left: 75% removed
    with caplog.at_level("WARNING", logger="interlock"):
        assert watcher.reload() is False
    status = watcher.status
    assert status.serving_sha256 == before and status.last_error is None
    assert status.held is not None and held == [status.held]
    assert status.held.removed == ("no-rm", "read", "write")
    assert (status.held.serving_rules, status.held.new_rules) == (4, 1)
    assert "removes 3 of 4 rules (75% > 50%)" in status.held.reason
    assert "HELD" in caplog.text and "no-rm" in caplog.text
    assert guard.check(RM).verdict is Verdict.DENY  # the old policy is in force
    assert watcher.reload() is False and len(held) == 1  # the same bytes: not again

    assert watcher.confirm(status.held.sha256) is True
    assert guard.check(RM).verdict is Verdict.ALLOW  # what the file says, confirmed
    assert watcher.status.held is None and watcher.status.reloads == 1


def test_a_held_reload_is_dropped_when_the_file_changes_again(tmp_path: Path) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(FOUR_RULES)
    guard = Guard(load_policy(path))
    watcher = PolicyWatcher(guard, path)
    _write(path, "version: 1\ndefault: deny\nrules: []\n")  # no rules at all
    assert watcher.reload() is False and watcher.status.held is not None
    stale = watcher.status.held.sha256
    _write(path, FOUR_RULES.replace("writes are fine", "writes are fine, really"))
    assert watcher.reload() is True and watcher.status.held is None
    with pytest.raises(NothingHeld):
        watcher.confirm(stale)


def test_confirming_another_digest_than_the_held_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(FOUR_RULES)
    guard = Guard(load_policy(path))
    watcher = PolicyWatcher(guard, path)
    _write(path, "".join(SHELL_RULES[:2]))
    assert watcher.reload() is False and watcher.status.held is not None
    with pytest.raises(HeldDigestMismatch):
        watcher.confirm("0" * 64)
    assert guard.check(RM).verdict is Verdict.DENY


@pytest.mark.parametrize(("max_removed", "held"), [(0.75, False), (0.5, True), (0.0, True)])
def test_the_share_of_rules_a_reload_may_remove_is_configurable(
    tmp_path: Path, max_removed: float, held: bool
) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(FOUR_RULES)
    guard = Guard(load_policy(path))
    watcher = PolicyWatcher(guard, path, max_removed=max_removed)
    _write(path, "".join(SHELL_RULES[:2]))  # 75% removed
    assert watcher.reload() is (not held)
    assert (watcher.status.held is not None) is held


def test_a_reload_that_removes_one_rule_of_two_is_not_held(tmp_path: Path) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text(ALLOW_SHELL)
    guard = Guard(load_policy(path))
    watcher = PolicyWatcher(guard, path)
    _write(path, DENY_SHELL)  # 50%: not more than the default share
    assert watcher.reload() is True


# -- a digest beside the file -----------------------------------------------------------


def _sidecar(path: Path, text: str) -> None:
    digest = hashlib.sha256(text.encode()).hexdigest()
    _write(path.with_name(path.name + ".sha256"), f"{digest}  {path.name}\n")


def test_a_file_that_does_not_match_its_digest_sidecar_is_not_loaded(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file)
    _sidecar(policy_file, ALLOW_SHELL)  # the digest of what is to come
    _write(policy_file, ALLOW_SHELL[:-20])  # not all of it
    assert watcher.reload() is False
    assert "does not match its digest" in (watcher.last_error or "")
    assert guard.check(SHELL).verdict is Verdict.DENY
    _write(policy_file, ALLOW_SHELL)
    assert watcher.reload() is True and watcher.last_error is None
    assert guard.check(SHELL).verdict is Verdict.ALLOW


def test_a_digest_sidecar_written_after_the_file_is_picked_up(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    clock = FakeMonotonic()
    watcher = PolicyWatcher(guard, policy_file, settle=0.5, monotonic=clock)
    _sidecar(policy_file, DENY_SHELL)  # the digest of the file serving
    watcher.poll()
    _write(policy_file, ALLOW_SHELL)
    assert watcher.poll() is False  # does not match the digest: its own is yet to come
    assert watcher.last_error is None
    clock.now += 1
    assert watcher.poll() is False  # settled, and still not matching: reported
    assert "does not match its digest" in (watcher.last_error or "")
    _sidecar(policy_file, ALLOW_SHELL)  # renamed into place: looked at at once
    assert watcher.poll() is True
    assert guard.check(SHELL).verdict is Verdict.ALLOW and watcher.last_error is None


def test_a_sidecar_that_is_not_a_digest_fails_closed(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file))
    watcher = PolicyWatcher(guard, policy_file)
    _write(policy_file.with_name(policy_file.name + ".sha256"), "not a digest\n")
    _write(policy_file, ALLOW_SHELL)
    assert watcher.reload() is False
    assert "not a SHA-256 digest" in (watcher.last_error or "")
    assert guard.check(SHELL).verdict is Verdict.DENY
