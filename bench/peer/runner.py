"""The peer toolkit's side of the ``peer`` benchmark, run in the peer's own environment:
``bench/.peer-venv/bin/python -m bench.peer.runner`` from the repository root.

A JSON-lines protocol on stdin/stdout, one request and one answer a line:

* ``{"op": "load", "document": {...}}`` — build the peer's ``PolicyEvaluator`` from a
  policy document in its format; answers the installed version.
* ``{"op": "decide", "contexts": [...]}`` — the peer's decision on each context, and
  every rule whose condition holds (by the peer's own condition matcher), untimed.
* ``{"op": "time", "contexts": [...], "calls": n, "warmup": w}`` — ``evaluate`` timed
  call by call with :func:`bench.harness.time_calls` (the loop Interlock's side uses):
  per-call samples in ns and the loop's wall time.

Every answer has ``"ok"``; a failure answers ``{"ok": false, "error": ...}``. This
module imports only the peer and the standard library (and the stdlib-only harness):
never Interlock.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from importlib.metadata import version
from typing import Any

from bench.harness import time_calls

warnings.simplefilter("ignore")  # the peer warns about its own package names on import

PACKAGE = "agent-governance-toolkit-core"


class Peer:
    def __init__(self) -> None:
        self.evaluator: Any = None
        self.document: Any = None

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        from agent_os.policies import PolicyDocument, PolicyEvaluator

        self.document = PolicyDocument.model_validate(request["document"])
        self.evaluator = PolicyEvaluator(policies=[self.document])
        return {"version": version(PACKAGE), "rules": len(self.document.rules)}

    def decide(self, request: dict[str, Any]) -> dict[str, Any]:
        from agent_os.policies.evaluator import _match_condition

        out = []
        for context in request["contexts"]:
            decision = self.evaluator.evaluate(context)
            matching = [
                {"name": rule.name, "action": rule.action.value}
                for rule in self.document.rules
                if _match_condition(rule.condition, context)
            ]
            out.append(
                {
                    "allowed": decision.allowed,
                    "action": decision.action,
                    "matched_rule": decision.matched_rule,
                    "reason": decision.reason,
                    "matching": matching,
                }
            )
        return {"decisions": out}

    def time(self, request: dict[str, Any]) -> dict[str, Any]:
        samples, wall = time_calls(
            self.evaluator.evaluate, request["contexts"], request["calls"], request["warmup"]
        )
        return {"samples": samples, "wall_ns": wall}


def main() -> int:
    peer = Peer()
    handlers = {"load": peer.load, "decide": peer.decide, "time": peer.time}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer = {"ok": True, **handlers[request["op"]](request)}
        except Exception as exc:
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc(file=sys.stderr)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
