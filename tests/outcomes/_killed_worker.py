"""A guarded process killed mid-body (run by path by ``test_outcome_kill.py``).

``python _killed_worker.py URL [MODE]``: a guard over the store at URL runs one
guarded body that prints ``{"started": ...}`` and then waits forever; the test kills
the process there with SIGKILL and reads the chain afterwards (the decision id is the
start record's, durable before the body ran). MODE:

- ``protect`` (the default): a protected tool;
- ``budgeted``: a protected tool a budget covers (its start record rides in the
  reservation's transaction);
- ``llm``: a model call under a token budget (``guard.llm_call``: its ``llm_input``
  in the reservation's transaction);
- ``langchain``: a LangChain tool guarded with ``attach`` (the adapter's
  ``run_settled``: its ``tool_invoke`` in the decision's commit).
"""

from __future__ import annotations

import json
import sys
import threading

from interlock import Context, Guard
from interlock.ledger.usage import Usage
from interlock.policy import load_policy_text
from interlock.store import open_store

POLICY = """
version: 1
default: deny
pricing:
  currency: USD
  models:
    "test-model": {input: 2, output: 10}
budgets:
  - id: llm-tokens
    limit: 100000
    unit: tokens
    scope: agent
    kind: llm
  - id: tool-spend
    limit: 10
    unit: USD
    scope: agent
    kind: tool
    name: "paid_*"
rules:
  - id: deploy-ok
    decision: allow
    reason: deploys are allowed
    name: ["deploy", "paid_deploy"]
  - id: models
    decision: allow
    reason: the test model is allowed
    kind: llm
    name: test-model
"""


def _started(what: str) -> None:
    sys.stdout.write(json.dumps({"started": what}) + "\n")
    sys.stdout.flush()
    threading.Event().wait()  # the body never ends: the test kills the process


def main() -> None:
    store = open_store(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "protect"
    guard = Guard(
        load_policy_text(POLICY),
        store=store,
        context=Context(tenant="acme", agent="deployer"),
        reap_interval=None,
    )
    if mode == "llm":
        with guard.llm_call("test-model", estimate=Usage(100, 50)):
            _started("billing")
        return
    if mode == "langchain":
        from langchain_core.tools import tool

        @tool
        def paid_deploy(service: str, est_cost: float) -> str:
            """Deploy a service."""
            _started(service)
            return "deployed"

        guard.attach(paid_deploy)
        paid_deploy.invoke({"service": "billing", "est_cost": 0.5})
        return

    @guard.protect(name="paid_deploy" if mode == "budgeted" else "deploy")
    def deploy(service: str, est_cost: float = 0.5) -> str:
        _started(service)
        return "deployed"

    deploy("billing")


if __name__ == "__main__":
    main()
