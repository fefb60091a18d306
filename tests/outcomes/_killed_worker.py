"""A guarded process killed mid-body (run by path by ``test_kill.py``).

``python _killed_worker.py URL``: a guard over the store at URL runs one protected
tool whose body prints ``{"started": service}`` and then waits forever; the test
kills the process there with SIGKILL and reads the chain afterwards (the decision id
is the ``tool_invoke`` record's, durable before the body ran).
"""

from __future__ import annotations

import json
import sys
import threading

from interlock import Context, Guard
from interlock.policy import load_policy_text
from interlock.store import open_store

POLICY = """
version: 1
default: deny
rules:
  - id: deploy-ok
    decision: allow
    reason: deploys are allowed
    name: deploy
"""


def main() -> None:
    store = open_store(sys.argv[1])
    guard = Guard(
        load_policy_text(POLICY),
        store=store,
        context=Context(tenant="acme", agent="deployer"),
        reap_interval=None,
    )

    @guard.protect(name="deploy")
    def deploy(service: str) -> str:
        sys.stdout.write(json.dumps({"started": service}) + "\n")
        sys.stdout.flush()
        threading.Event().wait()  # the body never ends: the test kills the process
        return "deployed"

    deploy("billing")


if __name__ == "__main__":
    main()
