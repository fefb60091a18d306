"""The ``mcp-gateway`` benchmark's logic: its answer checks tell an echo from a wrong
answer and a refusal from a result, and a short run through the real gateway times
both sides, finds no problem and reports the added p50 against its target."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from bench import mcp_gateway


def _result(text: str, *, is_error: bool = False) -> dict[str, object]:
    content = [{"type": "text", "text": text}]
    return {"jsonrpc": "2.0", "id": 1, "result": {"content": content, "isError": is_error}}


def test_an_echo_is_told_from_a_wrong_answer() -> None:
    assert mcp_gateway.echoed(_result("hello 3"), "hello 3")
    assert not mcp_gateway.echoed(_result("hello 4"), "hello 3")
    assert not mcp_gateway.echoed(_result("hello 3", is_error=True), "hello 3")
    assert not mcp_gateway.echoed({"id": 1, "error": {"code": -1, "message": "x"}}, "hello 3")


def test_a_refusal_is_told_from_a_result() -> None:
    assert mcp_gateway.refused(_result("denied", is_error=True))
    assert not mcp_gateway.refused(_result("deleted"))
    assert not mcp_gateway.refused({"id": 1, "error": {"code": -1, "message": "x"}})


def test_a_quick_run_through_the_real_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_gateway, "WARMUP", 5)
    result = mcp_gateway.run(calls=20, quick=True)
    assert result.problems == []
    labels = [mcp_gateway.DIRECT, mcp_gateway.GATEWAY, mcp_gateway.MERGED]
    assert [s.label for s in result.stats] == labels
    assert [s.calls for s in result.stats] == [20, 20, 20]
    assert [t.name for t in result.targets] == ["added p50, gateway - direct"]
    assert "added_p50_ms" in result.info and "merged_added_p50_ms" in result.info
