"""The ``llm-proxy`` benchmark's logic: a short run through the real proxy and the
stand-in finds no problem (every answer right, every proxied call settled in the
budget) and reports the three sides and both targets; a wrong answer is a problem."""

from __future__ import annotations

from types import SimpleNamespace

from bench.__main__ import BENCHMARKS

from bench import llm_proxy


def test_a_quick_run_checks_every_answer_and_the_budget() -> None:
    result = llm_proxy.run(calls=10, quick=True)
    assert result.problems == []
    labels = [s.label for s in result.stats]
    for side in (llm_proxy.DIRECT, llm_proxy.RELAY, llm_proxy.PROXY):
        for what in ("create", "stream first chunk", "stream end"):
            assert f"{side}, {what}" in labels
    for what in ("responses create", "responses stream end", "tools stream first text"):
        assert f"{llm_proxy.PROXY}, {what}" in labels
    assert len(labels) == 3 * 8
    calls = result.info["calls"]
    assert {s.calls for s in result.stats} == {
        calls["create"],
        calls["stream"],
        calls["responses create"],
        calls["responses stream"],
    }
    assert "bare_relay_added_p50_ms create" in result.info
    assert [t.name for t in result.targets] == [
        "added p50, create",
        "added p50, first streamed chunk",
    ]
    # every timed and warm-up call through the proxy (streams twice: plain and with
    # tools), 18 tokens each
    proxied = (
        calls["create"]
        + 2 * calls["stream"]
        + calls["responses create"]
        + calls["responses stream"]
        + 5 * calls["warmup"]
    )
    assert result.info["budget_spent_tokens"] == proxied * 18


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
