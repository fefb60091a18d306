"""The four phases around an allowed call reach the event sink, joined by decision id."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain_core.tools import tool

from interlock import ActionDenied, Guard, Usage, load_policy_text
from interlock.adapters.langchain import guard_tool
from interlock.core.events import MemorySink

from .conformance import POLICY


@tool
def shell(command: str) -> str:
    """Run a shell command."""
    if command == "boom":
        raise RuntimeError("the tool broke")
    return f"ran {command}"


def _records(sink: MemorySink) -> list[dict[str, Any]]:
    return sink.records()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_allowed_tool_call_is_recorded_going_in_and_coming_out(mode: str) -> None:
    sink = MemorySink()
    guarded = guard_tool(shell, Guard(POLICY, sink=sink))
    args = {"command": "ls token=s3cr3t-abc"}
    if mode == "async":
        asyncio.run(guarded.ainvoke(args))
    else:
        guarded.invoke(args)
    decision, invoke, result = _records(sink)
    assert [decision["kind"], invoke["kind"], result["kind"]] == [
        "decision",
        "tool_invoke",
        "tool_result",
    ]
    assert decision["decision_id"] == invoke["decision_id"] == result["decision_id"]
    assert invoke["tool"] == result["tool"] == "shell"
    assert result["ok"] is True and result["output"].startswith("ran ls")
    assert "s3cr3t" not in str(invoke) + str(result)  # redacted like every event


def test_a_tool_that_raises_is_recorded_with_its_error() -> None:
    sink = MemorySink()
    guarded = guard_tool(shell, Guard(POLICY, sink=sink))
    with pytest.raises(RuntimeError):
        guarded.invoke({"command": "boom"})
    *_, result = _records(sink)
    assert result["kind"] == "tool_result" and result["ok"] is False
    assert "the tool broke" in result["error"]


def test_a_refused_call_has_a_decision_and_nothing_else() -> None:
    sink = MemorySink()
    guarded = guard_tool(shell, Guard(POLICY, sink=sink))
    with pytest.raises(ActionDenied):
        guarded.invoke({"command": "rm -rf /"})
    assert [r["kind"] for r in _records(sink)] == ["decision"]


@pytest.mark.parametrize("fails", [False, True])
def test_a_model_call_is_recorded_going_in_and_coming_out(tmp_path: Path, fails: bool) -> None:
    policy = load_policy_text(
        "version: 1\ndefault: deny\nrules:\n"
        "  - {id: m, decision: allow, reason: models are fine, kind: llm}\n"
    )
    sink = MemorySink()
    with Guard(policy, sink=sink, store=f"sqlite:///{tmp_path / 's.db'}") as guard:
        try:
            with guard.llm_call("gpt-x", estimate=Usage(100, 50)) as call:
                if fails:
                    raise TimeoutError("provider timed out")
                call.record({"input_tokens": 90, "output_tokens": 12})
        except TimeoutError:
            assert fails
    kinds = [r["kind"] for r in _records(sink)]
    assert kinds == ["decision", "llm_input", "llm_output"]
    _, started, finished = _records(sink)
    assert started["estimate"] == {"input_tokens": 100, "output_tokens": 50}
    assert finished["ok"] is (not fails)
    if fails:
        assert "provider timed out" in finished["error"]
    else:
        assert finished["usage"] == {"input_tokens": 90, "output_tokens": 12}


def test_without_a_sink_the_call_runs_as_before() -> None:
    guarded = guard_tool(shell, Guard(POLICY))  # no sink: the phases cost nothing
    assert guarded.invoke({"command": "ls"}) == "ran ls"
