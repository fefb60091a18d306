"""The restart path of the outcome-unknown rule, run by the reaper rather than by hand:
a body killed with SIGKILL leaves its decision and its ``tool_invoke``; the guard
started on the same store afterwards closes it with exactly one ``outcome_unknown``
once the start is older than the guard's bound (one hour), and leaves it open while it
is younger (it may still be running elsewhere). The store's clock is moved past the
bound instead of waiting an hour; everything else is the real guard, store and worker.

(``test_outcome_kill.py`` calls ``recover_outcomes`` itself; nothing else runs the
reaper's own recovery pass.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from interlock import Context, Guard
from interlock.policy import load_policy_text
from interlock.store import open_store
from interlock.store.reaper import Reaper
from interlock.store.sql import SqlStore
from interlock.store.story import action_story

WORKER = Path(__file__).with_name("_killed_worker.py")
HOUR_US = 3600 * 1_000_000
POLICY = """
version: 1
default: deny
rules:
  - id: deploy-ok
    decision: allow
    reason: deploys are allowed
    name: deploy
"""


def _run_and_kill(url: str) -> None:
    """The worker of ``test_outcome_kill.py``: killed with SIGKILL once its body runs."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, "protect"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line, f"the worker stopped before its body started: {proc.stderr.read()}"
        assert json.loads(line) == {"started": "billing"}
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _killed_start(url: str) -> str:
    """A worker killed mid-body; the decision id of its open ``tool_invoke``."""
    _run_and_kill(url)
    store = open_store(url)
    try:
        (start,) = list(store.audit_rows(tenant="acme", kind="tool_invoke"))
        assert start.decision_id is not None
        return start.decision_id
    finally:
        store.close()


def _unknowns(store: SqlStore) -> list[str]:
    return [row.decision_id or "" for row in store.audit_rows(kind="outcome_unknown")]


def _rounds(reaper: Reaper, count: int) -> None:
    """Wait until the reaper has finished ``count`` more rounds (each round makes a new
    ``total``)."""
    seen = reaper.total
    done = 0
    for _ in range(20_000):
        if reaper.total is not seen:
            seen = reaper.total
            done += 1
            if done == count:
                return
        threading.Event().wait(0.005)
    raise AssertionError(f"the reaper did not finish {count} rounds")


def _shifted(offset_us: int) -> Callable[[], int]:
    from interlock.store.records import now_us

    return lambda: now_us() + offset_us


def test_a_guard_started_after_the_kill_closes_the_start_once_past_its_bound(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    killed = _killed_start(url)
    # the restart, an hour and a minute later by the store's clock
    store = open_store(url, clock=_shifted(HOUR_US + 60 * 1_000_000))
    try:
        with Guard(
            load_policy_text(POLICY),
            store=store,
            context=Context(tenant="acme", agent="deployer"),
            reap_interval=0.01,
        ) as guard:

            @guard.protect(name="deploy")
            def deploy(service: str) -> str:
                return f"deployed {service}"

            assert deploy("search") == "deployed search"  # a call that finishes
            reaper = guard._reaper
            assert reaper is not None
            _rounds(reaper, 3)
            assert reaper.unknown == 1
        assert _unknowns(store) == [killed]  # once, and only the killed call
        story = action_story(store, killed, tenant="acme")
        assert story["outcome"] == "unknown"
        assert [step["step"] for step in story["steps"]] == [
            "decided",
            "started",
            "outcome unknown",
        ]
        finished = [row.decision_id for row in store.audit_rows(kind="tool_result")]
        assert len(finished) == 1 and finished[0] != killed
        assert action_story(store, finished[0] or "", tenant="acme")["outcome"] != "unknown"
        assert store.verify_audit().ok
    finally:
        store.close()


def test_within_the_bound_the_reaper_leaves_the_start_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    killed = _killed_start(url)
    store = open_store(url)  # restarted at once: the body may still be running elsewhere
    try:
        reaper = Reaper(store, interval=0.01, audited=True)  # the guard's bound: one hour
        reaper.start()
        try:
            _rounds(reaper, 3)
        finally:
            reaper.stop()
        assert reaper.unknown == 0
        assert _unknowns(store) == []
        assert action_story(store, killed, tenant="acme")["outcome"] == "running"
    finally:
        store.close()


def test_a_reaper_with_a_zero_bound_closes_it_in_its_first_round_and_never_again(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    killed = _killed_start(url)
    store = open_store(url)
    try:
        reaper = Reaper(store, interval=0.01, audited=True, outcome_bound=0.0)
        reaper.start()
        try:
            _rounds(reaper, 4)
        finally:
            reaper.stop()
        assert reaper.unknown == 1
        assert _unknowns(store) == [killed]
    finally:
        store.close()
