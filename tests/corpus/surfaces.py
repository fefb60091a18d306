"""What every surface shares: a guard per policy that records each decision, the tool
bodies that record each run, and the one assertion a row makes on any surface.

The assertion is the corpus's contract, the same wherever a row runs:

- the call was judged (a decision was recorded);
- every decision is one the row allows (:class:`~corpus.case.Expect`) — for an
  adversarial row never ``allow``;
- the tool body ran with the row's arguments exactly when the row is benign, and not
  at all otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from interlock import Action, Decision, Guard, Verdict, load_policy_text

from .case import POLICIES, Case, PolicyName

__all__ = ["Bodies", "Recorder", "assert_outcome", "make_guards"]


class Recorder:
    """The decisions a guard made (its ``on_decision`` hook), from any thread."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self._lock = threading.Lock()

    def __call__(self, decision: Decision, action: Action | None = None) -> None:
        with self._lock:
            self.decisions.append(decision)

    def clear(self) -> None:
        with self._lock:
            self.decisions.clear()


class Bodies:
    """Tool bodies that record every run, from any thread."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def run(self, tool: str, arguments: Mapping[str, Any]) -> str:
        with self._lock:
            self.ran.append((tool, dict(arguments)))
        return f"{tool} ran"

    def clear(self) -> None:
        with self._lock:
            self.ran.clear()


def make_guards(**options: Any) -> tuple[dict[PolicyName, Guard], Recorder]:
    """A guard per corpus policy, all recording into one :class:`Recorder`."""
    recorder = Recorder()
    guards: dict[PolicyName, Guard] = {
        name: Guard(load_policy_text(text, file=f"{name}.yaml"), on_decision=recorder, **options)
        for name, text in POLICIES.items()
    }
    return guards, recorder


@contextmanager
def fresh(recorder: Recorder, bodies: Bodies | None = None) -> Iterator[None]:
    """Start a row with nothing recorded."""
    recorder.clear()
    if bodies is not None:
        bodies.clear()
    yield


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(item) for item in value]
    return value


def assert_outcome(
    case: Case,
    decisions: Sequence[Decision] | Sequence[tuple[str, Sequence[str], str]],
    ran: Sequence[tuple[str, Mapping[str, Any]]] | None,
    surface: str,
) -> None:
    """The row's contract on ``surface``. ``decisions`` are Decisions or
    ``(verdict, rule_ids, reason)`` triples (the HTTP API's answer); ``ran`` is what the
    tool bodies ran (None where a surface has no body, as ``/v1/check``)."""
    # pytest.fail without a traceback: a recorded hole (a strict xfail) fails here on
    # every surface, and formatting hundreds of tracebacks would cost more than the rows.
    if not decisions:
        pytest.fail(f"{case.id} on {surface}: no decision was recorded (not judged)", pytrace=False)
    for decision in decisions:
        if isinstance(decision, Decision):
            verdict, rule_ids, reason = decision.verdict, decision.rule_ids, decision.reason
        else:
            verdict, rule_ids, reason = Verdict(decision[0]), decision[1], decision[2]
        if not case.expect.holds(verdict, rule_ids):
            pytest.fail(
                f"{case.id} on {surface}: expected {case.expect.describe()}, got "
                f"{verdict.value} {list(rule_ids)} ({reason}); intent: {case.intent}",
                pytrace=False,
            )
    if ran is None:
        return
    if case.expect.allows:
        wanted = [(case.tool, _plain(case.args))]
        if [(tool, _plain(args)) for tool, args in ran] != wanted:
            pytest.fail(
                f"{case.id} on {surface}: the allowed call did not run once: {ran!r}", pytrace=False
            )
    elif ran:
        pytest.fail(
            f"{case.id} on {surface}: the tool body ran on a refused call: {ran!r}", pytrace=False
        )
