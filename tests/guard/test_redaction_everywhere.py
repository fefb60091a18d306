"""The policy's own ``redaction.patterns``, and the built-in secret shapes, reach every
place a guard writes or says something: every event sink (the JSON Lines file, the
in-memory one, a sink of the user's own), the phase events, the reason and the error
message an agent sees. And everything is redacted *before* it is cut short, so a cut
never leaves part of a key too short to be recognised.

Fake secrets are assembled at run time so that secret scanners do not flag this file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from interlock import Action, ActionUndetermined, Decision, Guard, load_policy_text
from interlock.core.events import Event, JsonlSink, MemorySink, read_jsonl
from interlock.core.phases import tool_finished
from interlock.errors import MappingError

INTERNAL = "INTERNAL-" + "123456"  # what the policy's own pattern knows to be secret
KEY_BODY = "Zq8Xv2Lm9Pw4Rt7Ks1Nb6Hy3Jd5Fg0AcUe"  # no 4 characters of it recur
KEY = "sk-" + "proj-" + KEY_BODY

POLICY = load_policy_text(
    """
version: 1
default: deny
redaction:
  patterns: ['INTERNAL-[0-9]{6}']
rules:
  - id: lookups
    decision: allow
    reason: lookups are fine
    name: lookup
  - id: big-payments
    decision: require_approval
    reason: big payments need a human
    name: pay
    params:
      args.amount: {gt: 100}
"""
)


def _pieces(secret: str, size: int = 6) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def _leaks(text: str) -> list[str]:
    """The parts of the secrets that show in ``text``."""
    return [
        piece
        for secret in (INTERNAL, KEY_BODY)
        for piece in _pieces(secret)
        if piece in text and piece not in ("INTERN", "NTERNA", "TERNAL")
    ]


class _ListSink:
    """A sink of the user's own: it keeps each event's own record."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def emit(self, event: Event) -> None:
        self.records.append(event.to_record())


# -- every sink --------------------------------------------------------------------------


def test_the_policy_patterns_reach_a_jsonl_sink(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "events.jsonl")
    guard = Guard(POLICY, sink=sink)
    guard.check(Action.tool("lookup", {"ref": INTERNAL, "key": KEY}))
    sink.close()
    written = (tmp_path / "events.jsonl").read_text()
    assert _leaks(written) == []
    (record,) = read_jsonl(tmp_path / "events.jsonl")
    assert record["action"]["arguments"] == {
        "ref": "[REDACTED:policy]",
        "key": "[REDACTED:openai-key]",
    }


def test_the_policy_patterns_reach_a_sink_of_the_users_own() -> None:
    sink = _ListSink()
    Guard(POLICY, sink=sink).check(Action.tool("lookup", {"ref": INTERNAL}))
    (record,) = sink.records
    assert record["action"]["arguments"] == {"ref": "[REDACTED:policy]"}


def test_the_policy_patterns_reach_the_memory_sinks_records() -> None:
    sink = MemorySink()
    Guard(POLICY, sink=sink).check(Action.tool("lookup", {"ref": INTERNAL}))
    assert _leaks(json.dumps(sink.records())) == []


def test_a_sink_given_its_own_redactor_applies_it_and_the_policys() -> None:
    from interlock.core.redaction import Redactor

    sink = MemorySink()
    Guard(POLICY, sink=sink).check(Action.tool("lookup", {"ref": INTERNAL, "id": "ACME-42"}))
    (record,) = sink.records(Redactor(extra_patterns=["ACME-[0-9]+"]))
    assert record["action"]["arguments"] == {"ref": "[REDACTED:policy]", "id": "[REDACTED:policy]"}


def test_the_policy_patterns_reach_the_phase_events(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "events.jsonl")
    guard = Guard(POLICY, sink=sink)
    decision = guard.check(Action.tool("lookup", {"q": "x"}))
    tool_finished(guard, decision, "lookup", time.perf_counter_ns(), result=f"found {INTERNAL}")
    tool_finished(
        guard, decision, "lookup", time.perf_counter_ns(), error=RuntimeError(f"bad {INTERNAL}")
    )
    sink.close()
    assert _leaks((tmp_path / "events.jsonl").read_text()) == []


# -- what an agent is told ---------------------------------------------------------------


def _refusing_mapper(*_: Any) -> Action:
    raise MappingError(f"order {INTERNAL} is unknown; key {KEY}")


def test_an_undetermined_error_message_names_no_secret() -> None:
    guard = Guard(POLICY)

    @guard.protect(mapper=_refusing_mapper)
    def pay(amount: int) -> str:
        return "paid"

    with pytest.raises(ActionUndetermined) as raised:
        pay(5)
    assert _leaks(str(raised.value)) == []
    assert "[REDACTED:policy]" in str(raised.value)
    decision = raised.value.decision
    assert isinstance(decision, Decision)
    assert _leaks(decision.reason) == []


async def test_an_undetermined_decision_of_an_async_check_names_no_secret() -> None:
    decision = await Guard(POLICY).acheck_mapped(_refusing_mapper)
    assert decision is not None
    assert _leaks(decision.reason) == []


# -- redaction before any cut ------------------------------------------------------------


@pytest.mark.parametrize("offset", range(0, 44, 3))
def test_a_reason_cut_short_keeps_no_part_of_a_key(offset: int) -> None:
    # The matcher quotes at most 40 characters of the value it cannot compare; wherever
    # that cut falls in the key, no part of the key shows.
    decision = Guard(POLICY).check(Action.tool("pay", {"amount": "x" * offset + " " + KEY}))
    assert decision.verdict == "undetermined"
    assert "not a finite number" in decision.reason
    assert _leaks(decision.reason) == []


@pytest.mark.parametrize("offset", range(150, 204, 4))
def test_a_tool_result_preview_is_redacted_before_it_is_cut(offset: int) -> None:
    sink = MemorySink()
    guard = Guard(POLICY, sink=sink)
    decision = guard.check(Action.tool("lookup", {"q": "x"}))
    output = "y" * offset + " " + KEY + " and " + INTERNAL + " " + "z" * 100
    tool_finished(guard, decision, "lookup", time.perf_counter_ns(), result=output)
    record = sink.records()[-1]
    assert record["kind"] == "tool_result"
    assert len(record["output"]) <= 200
    assert _leaks(record["output"]) == []


@pytest.mark.parametrize("offset", range(180, 204, 3))
def test_a_server_error_cut_short_keeps_no_part_of_a_key(offset: int) -> None:
    body = "e" * offset + " " + KEY + " " + "f" * 50

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text=body)

    guard = Guard.remote(
        "http://interlock.test", "ilk_test_key", transport=httpx.MockTransport(upstream)
    )
    decision = guard.check(Action.tool("lookup", {"q": "x"}))
    assert decision.verdict == "undetermined"
    assert "HTTP 502" in decision.reason
    assert _leaks(decision.reason) == []


def _refusing(reason: str, patterns: str = "[]") -> Any:
    return load_policy_text(
        f"""
version: 1
default: deny
redaction:
  patterns: {patterns}
rules:
  - id: no-pay
    decision: deny
    reason: "{reason}"
    name: pay
"""
    )


def test_a_remembered_reason_follows_the_redactor_of_a_replaced_policy() -> None:
    # The guard remembers refusal reasons it has redacted (the same rule text is said
    # on every refusal); a new policy with a new pattern must not be answered from
    # the old memo.
    guard = Guard(_refusing("code SHOWN-42 refused"))
    action = Action(kind="tool", name="pay", arguments={})
    for _ in range(3):
        assert guard.check(action).reason == "code SHOWN-42 refused"
    guard.replace_policy(_refusing("code SHOWN-42 refused", "['SHOWN-[0-9]+']"))
    for _ in range(3):
        reason = guard.check(action).reason
        assert "SHOWN-42" not in reason and "REDACTED" in reason


def test_a_reason_with_a_secret_is_redacted_every_time_it_is_said() -> None:
    guard = Guard(_refusing(f"refused for {INTERNAL}", "['INTERNAL-[0-9]{6}']"))
    action = Action(kind="tool", name="pay", arguments={})
    for _ in range(3):
        reason = guard.check(action).reason
        assert INTERNAL not in reason and "REDACTED" in reason
    assert all(INTERNAL not in text for text in guard._shown_memo[1])  # never kept
