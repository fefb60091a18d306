"""The ``llm-proxy`` benchmark's logic: a short run through the real proxy (standalone
and in front of the shared server) and the stand-in finds no problem (every answer
right, every proxied call settled in the budget) and reports every side and both
targets; a wrong answer is a problem.

LiteLLM's side runs only when its environment (``bench/.litellm-venv``, built by the
benchmark or ``python -m bench.llm_litellm --setup``) is installed."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from bench.__main__ import BENCHMARKS

from bench import llm_litellm, llm_proxy

WHATS = ("create", "stream first chunk", "stream end")
#: what only Interlock's sides, the relay and direct are timed on
OURS = (
    "responses create",
    "responses stream first event",
    "responses stream end",
    "tools stream first text",
    "tools stream end",
)
LITELLM = llm_litellm.litellm_command()
if LITELLM is None and os.environ.get("INTERLOCK_REQUIRE_LITELLM"):
    raise RuntimeError(
        "INTERLOCK_REQUIRE_LITELLM is set but LiteLLM's environment is not installed "
        "(python -m bench.llm_litellm --setup)"
    )


def test_a_quick_run_checks_every_answer_and_the_budget() -> None:
    result = llm_proxy.run(calls=10, quick=True, litellm=False)
    assert result.problems == []
    labels = [s.label for s in result.stats]
    sides = (
        llm_proxy.DIRECT,
        llm_proxy.SPLICE,
        llm_proxy.LEAN,
        llm_proxy.RELAY,
        llm_proxy.PROXY,
        llm_proxy.REMOTE,
    )
    assert labels == [f"{side}, {what}" for side in sides for what in WHATS + OURS]
    calls = result.info["calls"]
    assert {s.calls for s in result.stats} == {
        calls["create"],
        calls["stream"],
        calls["responses create"],
        calls["responses stream"],
    }
    assert "bare_relay_added_p50_ms create" in result.info
    assert "lean_relay_added_p50_ms create" in result.info
    assert "splice_added_p50_ms create" in result.info
    assert "remote_added_p50_ms create" in result.info
    assert "litellm_added_p50_ms create" not in result.info
    assert any("LiteLLM's side left out" in note for note in result.notes)
    assert [t.name for t in result.targets] == [
        "added p50, create",
        "added p50, first streamed chunk",
    ]
    # every timed and warm-up call through each proxy (streams twice: plain and with
    # tools), 18 tokens each
    proxied = (
        calls["create"]
        + 2 * calls["stream"]
        + calls["responses create"]
        + calls["responses stream"]
        + 5 * calls["warmup"]
    )
    assert result.info["budget_spent_tokens"] == proxied * 18
    assert result.info["server_budget_spent_tokens"] == proxied * 18
    cpu = result.info["cpu_ms_per_call"]
    sides_with_processes = {llm_proxy.PROXY, llm_proxy.RELAY, llm_proxy.LEAN, llm_proxy.SPLICE}
    assert set(cpu) == {*sides_with_processes, llm_proxy.REMOTE}
    # the splice copies bytes and little else: over a quick run its CPU can stay under
    # one clock tick of /proc's (10 ms) and read 0; every side that speaks HTTP cannot
    assert cpu[llm_proxy.SPLICE] >= 0
    assert all(ms > 0 for side, ms in cpu.items() if side != llm_proxy.SPLICE)


@pytest.mark.skipif(LITELLM is None, reason="LiteLLM's environment is not built")
def test_a_tiny_round_beside_litellm_reports_the_ratio() -> None:
    result = llm_proxy.run(calls=4, quick=True, litellm=True, remote=False)
    assert result.problems == []  # LiteLLM's answers were checked like the others
    labels = [s.label for s in result.stats]
    ours = (llm_proxy.DIRECT, llm_proxy.SPLICE, llm_proxy.LEAN, llm_proxy.RELAY, llm_proxy.PROXY)
    expected = [f"{side}, {what}" for side in ours for what in WHATS + OURS]
    expected += [f"{llm_proxy.LITELLM}, {what}" for what in WHATS]  # chat calls only
    assert labels == expected
    for what in WHATS:
        assert f"litellm_added_p50_ms {what}" in result.info
        assert f"litellm_added_p99_ms {what}" in result.info
    assert result.info["litellm"] == "1.106.12"


def test_litellm_is_configured_with_a_master_key_and_off_the_network() -> None:
    config = llm_litellm.config_yaml("gpt-4o-mini", "http://127.0.0.1:1/v1", "sk-x")
    assert "model: openai/gpt-4o-mini" in config
    assert "api_base: http://127.0.0.1:1/v1" in config
    assert f"master_key: {llm_litellm.MASTER_KEY}" in config
    assert llm_litellm.litellm_env()["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    pins = llm_litellm.REQUIREMENTS.read_text().splitlines()
    assert "litellm[proxy]==1.106.12" in pins
    assert all("==" in line for line in pins if line and not line.startswith("#"))


def test_it_is_registered() -> None:
    assert "llm-proxy" in BENCHMARKS


def _completion(text: str, total: int) -> SimpleNamespace:
    message = SimpleNamespace(content=text)
    return SimpleNamespace(
        choices=[SimpleNamespace(message=message)], usage=SimpleNamespace(total_tokens=total)
    )


def test_a_wrong_answer_is_a_problem() -> None:
    assert llm_proxy.check_completion(_completion("Hello there, agent.", 18)) is None
    assert llm_proxy.check_completion(_completion("refused", 18)) is not None
    assert llm_proxy.check_completion(_completion("Hello there, agent.", 0)) is not None


def _chunk(text: str | None, total: int | None = None) -> SimpleNamespace:
    choices = [] if text is None else [SimpleNamespace(delta=SimpleNamespace(content=text))]
    usage = None if total is None else SimpleNamespace(total_tokens=total)
    return SimpleNamespace(choices=choices, usage=usage)


def test_a_stream_without_its_usage_chunk_is_a_problem() -> None:
    good = [_chunk(""), *(_chunk(p) for p in llm_proxy.TEXT), _chunk(None, 18)]
    assert llm_proxy.check_stream(good) is None
    assert llm_proxy.check_stream(good[:-1]) is not None
    assert llm_proxy.check_stream(good[:-2] + good[-1:]) is not None
