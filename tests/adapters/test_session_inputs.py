"""The trusted-input recorder every adapter shares (:mod:`interlock.adapters.inputs`):
each input once per session, blank ones skipped, a bounded memory, a failure logged
and tried again at the next model call, and nothing at all without sessions."""

from __future__ import annotations

import logging

import pytest

from interlock import Context, Guard
from interlock.adapters.inputs import Input, TrustedInputs, inputs_of, records_inputs
from interlock.errors import SessionUnavailable
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory, NewStep, Step

from .provenance import POLICY, guarded, trusted_inputs

FOUND = [Input("system", "You are the mail assistant."), Input("user", "mail bob@corp.example")]


def test_each_input_is_recorded_once_per_session() -> None:
    guard, history = guarded("s-1")
    inputs = TrustedInputs()
    assert inputs.record(guard, FOUND) == 2
    assert inputs.record(guard, FOUND) == 0
    assert inputs.fresh(guard, FOUND) == []
    assert trusted_inputs(history, "s-1") == 2
    guard.context = Context(session_id="s-2")  # another session: recorded there too
    assert inputs.fresh(guard, FOUND) == FOUND
    assert inputs.record(guard, FOUND) == 2
    assert trusted_inputs(history, "s-2") == 2


def test_an_input_with_an_id_is_known_by_it_and_blank_ones_are_skipped() -> None:
    guard, history = guarded("s-3")
    inputs = TrustedInputs()
    same_id = [Input("user", "first", id="m1"), Input("user", "edited", id="m1")]
    assert inputs.record(guard, [*same_id, Input("user", "  \n")]) == 1
    assert trusted_inputs(history, "s-3") == 1


def test_the_memory_is_bounded() -> None:
    guard, _ = guarded("s-4")
    inputs = TrustedInputs(kept=2)
    for text in ("a", "b", "c"):
        inputs.record(guard, [Input("user", text)])
    assert inputs.fresh(guard, [Input("user", "a")]) == [Input("user", "a")]  # forgotten
    assert inputs.fresh(guard, [Input("user", "c")]) == []


class Unwritable(MemoryHistory):
    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def append(self, tenant: str, session_id: str, step: NewStep) -> Step:
        if self.down:
            raise SessionUnavailable("the session database is unreachable")
        return super().append(tenant, session_id, step)


def test_a_failure_is_logged_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    history = Unwritable()
    guard = Guard(load_policy_text(POLICY), context=Context(session_id="s-5"), sessions=history)
    inputs = TrustedInputs()
    with caplog.at_level(logging.ERROR, logger="interlock"):
        assert inputs.record(guard, FOUND) == 0
    assert "could not be recorded" in caplog.text
    history.down = False
    assert inputs.record(guard, FOUND) == 2


def test_a_guard_without_sessions_records_nothing_and_says_so() -> None:
    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    assert not records_inputs(guard)
    assert guard.record_input("mail bob", trusted=True) is None


def test_one_recorder_per_guard() -> None:
    first, _ = guarded("s-6")
    second, _ = guarded("s-6")
    assert inputs_of(first) is inputs_of(first)
    assert inputs_of(first) is not inputs_of(second)
