"""``bench/mcp_gateway_http.py`` (``python -m bench mcp-gateway-http``) had no test: a
short run through the real ``interlock mcp-gateway --http`` times the three endpoints
in one run, checks every answer (no problem), sees the denied call refused, and reports
the added p50 against the direct call and the bare relay (as ``tests/bench/
test_mcp_gateway_bench.py`` does for the stdio bench)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")
pytest.importorskip("uvicorn")

from bench import mcp_gateway_http


def test_a_quick_run_through_the_real_http_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INTERLOCK_BENCH_BASELINE_SRC", raising=False)
    monkeypatch.setattr(mcp_gateway_http, "WARMUP", 5)
    monkeypatch.setattr(mcp_gateway_http, "BLOCK", 10)
    result = mcp_gateway_http.run(calls=20, quick=True)
    assert result.problems == []
    labels = [mcp_gateway_http.DIRECT, mcp_gateway_http.GATEWAY, mcp_gateway_http.RELAY]
    assert sorted(s.label for s in result.stats) == sorted(labels)
    assert all(s.calls == 20 and s.p50_ns > 0 for s in result.stats)
    for key in ("added_p50_ms", "relay_added_p50_ms", "p50_ratio gateway / bare relay"):
        assert key in result.info, result.info
    assert any("added by the HTTP gateway" in note for note in result.notes)
