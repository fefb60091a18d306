"""The verdict-fixture table (tests/adapters/conformance.py) through the proxy: one
policy, the same verdict and the same refusal in-process, at the proxy standalone and
at the proxy in front of the shared server.

At the proxy a row's tool call arrives as a tool call in the model's non-streamed
answer (OpenAI ``tool_calls`` and Anthropic ``tool_use`` alike). The verdict is read
from the audit log of the guard that judged it (the proxy's own, or the server's);
the text that replaces a refused call must carry the in-process refusal, word for
word. The judging guard — the proxy's, or the server's — gets the row's guard
options, as the in-process guard does.

Rows that cannot apply at the proxy, and why:

- the three mapper rows (a mapper that throws, returns garbage, returns None): the
  proxy has no mapper — it maps a tool call from the wire itself (its name and its
  parsed arguments); a mapper is an in-process adapter's hook.

The ``timeout`` row is driven with a decider that is slow for tool calls only and a
2 s timeout (in-process too), so that the model call before it is not what times out.

The model-call side (the ``llm`` action) is the second table: the refusal the client
reads is the in-process ``guard.llm_call`` error, word for word.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from adapters.conformance import POLICY_YAML, ROWS, Row, SlowDecider, make_guard
from interlock import Action, Blocked, Guard, Verdict, load_policy_text
from interlock.core.action import Context
from interlock.deciders.local import LocalDecider
from interlock.gateways.llm_proxy import ProxyConfig, SharedServer, Upstream, create_app
from interlock.gateways.llm_proxy.flavours import flavour_of
from interlock.guard import raise_for
from interlock.server import KeyStore, Role

from .conftest import Served
from .standin import StandIn

MODES = ["standalone", "server"]
MODEL = "gpt-4o-mini"
CLAUDE = "claude-sonnet-4-5"
MESSAGES = [{"role": "user", "content": "go"}]
#: the table's policy, and the model the agent calls allowed
PROXY_POLICY_YAML = (
    POLICY_YAML
    + """  - id: models
    decision: allow
    reason: the agent may call its models
    kind: llm
"""
)
TIMEOUT = 2.0
_DECISION_ID = re.compile(r"dec_[0-9a-f]+")

APPLICABLE = [row for row in ROWS if row.mapper is None]
NOT_APPLICABLE = [row for row in ROWS if row.mapper is not None]


class SlowTools:
    """The timeout row's decider: slow for tool calls (a stand-in for a slow decision
    point), the table's policy for everything else."""

    def __init__(self) -> None:
        self.slow = SlowDecider(30.0)
        self.local = LocalDecider(load_policy_text(PROXY_POLICY_YAML))

    def decide(self, action: Action, **options: Any) -> Any:
        decider = self.slow if action.kind == "tool" else self.local
        return decider.decide(action, **options)

    async def adecide(self, action: Action, **options: Any) -> Any:
        decider = self.slow if action.kind == "tool" else self.local
        return await decider.adecide(action, **options)


def guard_options(row: Row) -> dict[str, Any]:
    """The row's options, the timeout row's as described in the module docstring."""
    options = dict(row.guard_options)
    if "decider" in options:
        options.update(decider=SlowTools(), timeout=TIMEOUT)
    return options


class Rig:
    """The stand-in upstream, the judging guard (with the row's options) on a store,
    the shared server in ``server`` mode, and the proxy; an agent key."""

    def __init__(
        self,
        tmp_path: Path,
        mode: str,
        options: dict[str, Any],
        policy_yaml: str = PROXY_POLICY_YAML,
        answer: str = "tools",
    ) -> None:
        policy = None if "decider" in options else load_policy_text(policy_yaml)
        self.guard = Guard(policy, store=f"sqlite:///{tmp_path / 'j.db'}", **options)
        assert self.guard.store is not None
        keys = KeyStore(self.guard.store)
        self.token = keys.create(tenant="acme", role=Role.AGENT, name="ops-bot").token
        self.standin = StandIn(mode=answer)
        self.upstream = Served(self.standin.app())
        config = ProxyConfig(
            openai=Upstream(self.upstream.url + "/v1", "sk-upstream-openai"),
            anthropic=Upstream(self.upstream.url, "sk-upstream-anthropic"),
        )
        self.server: Served | None = None
        judge: Guard | SharedServer = self.guard
        if mode == "server":
            pytest.importorskip("fastapi")
            from interlock.server import create_app as server_app

            self.server = Served(server_app(self.guard))
            judge = SharedServer(self.server.url)
        self.proxy = Served(create_app(judge, config))

    def close(self) -> None:
        self.proxy.close()
        if self.server is not None:
            self.server.close()
        self.upstream.close()
        self.guard.close()

    def tool_verdicts(self) -> list[tuple[str, str]]:
        """(tool, verdict) of every tool decision in the judging guard's audit log."""
        assert self.guard.audit is not None and self.guard.audit.flush()
        assert self.guard.store is not None
        rows = self.guard.store.audit_rows(tenant="acme", kind="decision")
        bodies = [json.loads(row.body) for row in rows]
        return [
            (b["action"]["name"], b["decision"]) for b in bodies if b["action"]["kind"] == "tool"
        ]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def in_process(row: Row) -> tuple[Verdict, str | None]:
    """The row in-process: its verdict and the refusal a raise-style adapter raises
    (decision ids masked), on the row's own guard."""
    action = Action.tool(row.tool, row.args)
    guard = make_guard(row, **guard_options(row))
    decision = guard.check(action)
    try:
        raise_for(decision, action)
    except Blocked as exc:
        return decision.verdict, _DECISION_ID.sub("dec_…", str(exc))
    return decision.verdict, None


@pytest.mark.parametrize("row", APPLICABLE, ids=[row.behaviour for row in APPLICABLE])
def test_the_conformance_table_through_the_proxy(tmp_path: Path, mode: str, row: Row) -> None:
    verdict, refusal = in_process(row)
    assert verdict is row.verdict
    rig = Rig(tmp_path, mode, guard_options(row))
    rig.standin.tool_calls = [(row.tool, row.args)]
    try:
        chat = openai.OpenAI(base_url=rig.proxy.url + "/v1", api_key=rig.token, max_retries=0)
        reply = chat.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
        claude = anthropic.Anthropic(base_url=rig.proxy.url, api_key=rig.token, max_retries=0)
        message = claude.messages.create(model=CLAUDE, max_tokens=100, messages=MESSAGES)  # type: ignore[arg-type]
        verdicts = rig.tool_verdicts()
    finally:
        rig.close()

    assert verdicts == [(row.tool, row.verdict.value)] * 2  # type: ignore[union-attr]
    choice = reply.choices[0]
    uses = [b for b in message.content if b.type == "tool_use"]
    texts = [b.text for b in message.content if b.type == "text"]
    if row.runs:  # the agent gets the call as the model made it
        (call,) = choice.message.tool_calls or []
        assert call.function.name == row.tool  # type: ignore[union-attr]
        assert json.loads(call.function.arguments) == row.args  # type: ignore[union-attr]
        assert choice.finish_reason == "tool_calls"
        assert [(u.name, u.input) for u in uses] == [(row.tool, row.args)]
        assert message.stop_reason == "tool_use"
        return
    assert refusal is not None and row.says in refusal
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    said = _DECISION_ID.sub("dec_…", choice.message.content or "")
    assert said.startswith(refusal + " [tool call call_0; decision dec_…]")
    assert uses == [] and message.stop_reason == "end_turn"
    assert _DECISION_ID.sub("dec_…", texts[-1]) == refusal + " [tool call toolu_0; decision dec_…]"


def test_the_rows_left_out_are_exactly_the_mapper_rows() -> None:
    assert [row.behaviour for row in NOT_APPLICABLE] == [
        "a mapper that throws is undetermined",
        "a mapper that returns garbage is undetermined",
        "a mapper that returns None passes the call through",
    ]
    assert len(APPLICABLE) + len(NOT_APPLICABLE) == len(ROWS)


# -- the model call: the llm action ------------------------------------------------------

LLM_POLICY = """\
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
budgets:
  - id: tokens
    limit: 1000
    unit: tokens
    scope: agent
    kind: llm
rules:
  - id: small-models
    decision: allow
    reason: the agent may call its small models
    kind: llm
    name: gpt-4o-mini
  - id: big-model
    decision: require_approval
    reason: the big model needs a human
    kind: llm
    name: gpt-5-pro
  - id: short-answers
    decision: deny
    reason: answers are kept short
    kind: llm
    when: "args.max_tokens > 500"
"""

#: (what, request body, status, OpenAI error code or None for a 200)
LLM_ROWS: list[tuple[str, dict[str, Any], int, str | None]] = [
    ("allow reaches the model", {"model": MODEL, "max_tokens": 100}, 200, None),
    (
        "no rule: the default denies",
        {"model": "gpt-4.1", "max_tokens": 100},
        403,
        "interlock_denied",
    ),
    ("a deny rule denies", {"model": MODEL, "max_tokens": 600}, 403, "interlock_denied"),
    (
        "require_approval holds the call",
        {"model": "gpt-5-pro", "max_tokens": 100},
        403,
        "interlock_approval_required",
    ),
    (
        "a budget that cannot take it",
        {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "x" * 8000}]},
        429,
        "interlock_budget_exceeded",
    ),
    (
        "a bound that is not a number is undetermined",
        {"model": MODEL, "max_tokens": "lots"},
        503,
        "interlock_undetermined",
    ),
]
_APPROVAL_ID = re.compile(r"apr_[0-9a-zA-Z_-]+")


def _masked(text: str) -> str:
    return _APPROVAL_ID.sub("apr_…", _DECISION_ID.sub("dec_…", text))


@pytest.mark.parametrize("row", LLM_ROWS, ids=[row[0] for row in LLM_ROWS])
def test_the_model_call_table_through_the_proxy(
    tmp_path: Path, mode: str, row: tuple[str, dict[str, Any], int, str | None]
) -> None:
    _, extra, status, code = row
    body = {"messages": MESSAGES, **extra}
    # In-process: the same llm action, on a guard of the same policy and a store.
    local = Guard(load_policy_text(LLM_POLICY), store=f"sqlite:///{tmp_path / 'l.db'}")
    context = Context(tenant="acme", agent="ops-bot")
    arguments = flavour_of("openai").arguments(body)
    expected: str | None = None
    try:
        with local.llm_call(str(body["model"]), context=context, arguments=arguments):
            pass
    except Blocked as exc:
        expected = _masked(str(exc))
    finally:
        local.close()
    assert (expected is None) == (status == 200)

    rig = Rig(tmp_path, mode, {}, policy_yaml=LLM_POLICY, answer="text")
    try:
        api = openai.OpenAI(base_url=rig.proxy.url + "/v1", api_key=rig.token, max_retries=0)
        if code is None:
            reply = api.chat.completions.create(**body)  # type: ignore[call-overload]
            assert reply.choices[0].message.content == "Hello there, agent."
            assert rig.standin.calls == 1
            return
        with pytest.raises(openai.APIStatusError) as raised:
            api.chat.completions.create(**body)  # type: ignore[call-overload]
        assert rig.standin.calls == 0
    finally:
        rig.close()
    error = raised.value.body
    assert raised.value.status_code == status
    assert isinstance(error, dict) and error["code"] == code
    assert _masked(error["message"]) == expected
