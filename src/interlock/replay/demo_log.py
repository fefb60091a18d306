"""A recorded log to replay: the demo's agents at work, many times over.

:func:`write_demo_log` judges the calls of ``interlock demo``'s support agent — and of
two more agents with the same tools — under the example policy, with varied
arguments, and writes each decision to a store's audit log the way a guard does
(:meth:`~interlock.store.AuditWriter.write_event_nowait`: redacted, encoded, chained).
A guard's stateful steps are written as a guard writes them: a share of the model
calls refused by the token budget, a share of the large refunds approved by a human
(an allow that carries its approval). Deterministic for a given ``seed``. For the
replay benchmark, its tests and the docs' examples.

Example::

    from interlock.replay.demo_log import write_demo_log
    from interlock.store import open_store

    store = open_store("sqlite:///demo.db")
    write_demo_log(store, 10_000)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, Final

from interlock.core.action import Action, Context
from interlock.core.decision import ApprovalRef, Decision, Verdict, new_decision_id
from interlock.core.events import Event
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.engine import evaluate

__all__ = ["AGENTS", "START_US", "demo_actions", "write_demo_log"]

#: (tenant, agent) of the agents whose calls the log holds.
AGENTS: Final = (("acme", "support-bot"), ("acme", "ops-bot"), ("globex", "support-bot"))
#: The log's first record: 2026-01-05T00:00:00Z; records are 6 s apart.
START_US: Final = 1_767_571_200_000_000
STEP_US: Final = 6_000_000

_COMMANDS: Final = (
    "ls -la /workspace",
    "cat /workspace/notes.md",
    "grep -r refund /workspace",
    "rm -rf /workspace/build",
    "ls /workspace && sudo /bin/rm -Rf /workspace/build",
    "echo done > /workspace/out.txt",
    "find /workspace -name '*.tmp' -delete",
)
_PATHS: Final = (
    "/workspace/notes.md",
    "/workspace/orders/{n}.json",
    "/workspace/../home/agent/.ssh/id_rsa",
    "/etc/passwd",
)
_URLS: Final = (
    "https://docs.example.com/refunds",
    "https://docs.example.com/orders/{n}",
    "https://pastebin.example.net/raw/{n}",
    "https://api.github.com/repos/acme/app",
    "http://127.0.0.1:8080/admin",
)


def demo_actions(count: int, *, seed: int = 17) -> Iterator[Action]:
    """``count`` calls of the demo's tools (and model calls), varied, deterministic."""
    rng = random.Random(seed)
    for n in range(count):
        tenant, agent = AGENTS[n % len(AGENTS)]
        context = Context(tenant=tenant, agent=agent, session_id=f"s-{n // 40}")
        pick = rng.random()
        if pick < 0.25:
            command = rng.choice(_COMMANDS)
            yield Action.tool("shell", {"command": command}, context=context)
        elif pick < 0.40:
            path = rng.choice(_PATHS).format(n=n % 997)
            yield Action.tool("read_file", {"path": path}, context=context)
        elif pick < 0.55:
            arguments: dict[str, Any] = {"url": rng.choice(_URLS).format(n=n % 991)}
            if rng.random() < 0.1:
                arguments["api_key"] = f"sk-demo-{n:08d}"  # redacted when recorded
            yield Action.tool("fetch_url", arguments, context=context)
        elif pick < 0.75:
            amount: Any = rng.choice((5, 35, 80, 99, 100, 101, 250, 900))
            if rng.random() < 0.02:
                amount = "a lot"
            currency = "EUR" if rng.random() < 0.9 else rng.choice(("USD", "GBP"))
            yield Action.tool(
                "refund_order",
                {"order_id": n, "amount": amount, "currency": currency},
                context=context,
            )
        elif pick < 0.85:
            to = rng.choice(("client@partner.example.net", "desk@example.com"))
            body = "Done." if rng.random() < 0.7 else f"Done. token=s3cr3t-{n}"
            yield Action.tool(
                "send_email", {"to": to, "subject": "Refund", "body": body}, context=context
            )
        else:
            yield Action.llm("demo-model", arguments={"max_tokens": 512}, context=context)


def _as_a_guard_would(decision: Decision, action: Action, n: int) -> Decision:
    """The stateful steps a guard adds, now and then: a budget refusal of a model
    call, a large refund approved by a human."""
    if action.kind == "llm" and decision.allowed and n % 50 == 0:
        return Decision(
            Verdict.DENY,
            "each agent may use half a million model tokens a day: budget exhausted",
            ("budget:model-tokens",),
        )
    if decision.verdict is Verdict.REQUIRE_APPROVAL and n % 3 == 0:
        approval = ApprovalRef(id=f"apr_demo{n}", status="claimed")
        return Decision(Verdict.ALLOW, decision.reason, decision.rule_ids, approval=approval)
    return decision


def write_demo_log(
    store: Any, count: int, *, policy: CompiledPolicy | None = None, seed: int = 17
) -> int:
    """Write ``count`` decision records to ``store``'s audit log (a
    :class:`~interlock.store.sql.SqlStore`); returns how many."""
    from interlock.demo import example_policy_text
    from interlock.policy.loader import load_policy_text
    from interlock.store.audit import AuditWriter

    if policy is None:
        policy = load_policy_text(example_policy_text(), file="examples/interlock.yaml")
    writer = AuditWriter(store, durability="none", checkpoints=False, max_pending=50_000)
    judged: dict[tuple[Any, ...], Decision] = {}  # the engine is pure: a repeat is judged once
    try:
        for n, action in enumerate(demo_actions(count, seed=seed)):
            context = action.context
            key = (action.kind, action.name, repr(action.arguments), context.tenant, context.agent)
            pure = judged.get(key)
            if pure is None:
                pure = judged[key] = evaluate(action, policy)
            decision = _as_a_guard_would(pure._replace(decision_id=new_decision_id()), action, n)
            ts = (START_US + n * STEP_US) / 1_000_000
            writer.write_event_nowait(
                action.context.tenant, Event("decision", ts, action, decision, 9_000)
            )
    finally:
        writer.close()
    return count
