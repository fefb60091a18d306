"""The server under test for the approvals page: the real app (``create_app`` with
the page mounted) under uvicorn in a thread on a free port, over SQLite, and a real
agent that calls a tool through ``Guard.remote`` and waits for the human.

| key | tenant | role | name |
| --- | --- | --- | --- |
| ``agent`` | acme | agent | ops-bot |
| ``approver`` | acme | approver | alice |
| ``admin_as_agent`` | acme | admin | ops-bot (the agent's own name: it may not decide) |
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from interlock import ApprovalRequired, Guard, load_policy_text
from interlock.server import KeyStore, Role, create_app
from interlock.server.ui import mount_ui
from interlock.store.records import ApprovalRecord

POLICY = """\
version: 1
default: deny
rules:
  - id: lookups
    decision: allow
    reason: lookups are fine
    name: lookup
  - id: pay-big
    decision: require_approval
    reason: payments over 100 need a human
    name: pay
    when: "args.amount > 100"
  - id: shell-needs-a-human
    decision: require_approval
    reason: shell commands need a human
    name: shell
"""

KEYS = {
    "agent": (Role.AGENT, "ops-bot"),
    "approver": (Role.APPROVER, "alice"),
    "admin_as_agent": (Role.ADMIN, "ops-bot"),
}
TENANT = "acme"


class UiServer:
    """The app with the page mounted, served by uvicorn on 127.0.0.1 in a thread."""

    def __init__(self, tmp_path: Path, policy: str = POLICY, **options: Any) -> None:
        """``options`` go to ``create_app``."""
        self.guard = Guard(load_policy_text(policy), store=f"sqlite:///{tmp_path / 'ui.db'}")
        assert self.guard.store is not None
        keys = KeyStore(self.guard.store)
        self.tokens = {
            who: keys.create(tenant=TENANT, role=role, name=name).token
            for who, (role, name) in KEYS.items()
        }
        app = create_app(self.guard, keys=keys, **options)
        mount_ui(app)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.page_url = f"{self.url}/ui/"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        for _ in range(2000):
            if self.server.started:
                break
            threading.Event().wait(0.005)
        assert self.server.started

    def ask(self, name: str = "pay", description: str | None = None, **arguments: Any) -> str:
        """Have the agent key check a call that needs approval (its framework describing
        the tool as ``description``); the approval's id."""
        body: dict[str, Any] = {
            "name": name,
            "arguments": arguments,
            "context": {"session_id": "s-ui"},
        }
        if description is not None:
            body["description"] = description
        answer = httpx.post(f"{self.url}/v1/check", json=body, headers=self.bearer("agent"))
        answer.raise_for_status()
        decision = answer.json()
        assert decision["verdict"] == "require_approval", decision
        approval_id: str = decision["approval"]["id"]
        return approval_id

    def decide_elsewhere(
        self, approval_id: str, verdict: str, reason: str = "decided elsewhere"
    ) -> None:
        """Decide through the API, as another approver's screen would."""
        httpx.post(
            f"{self.url}/v1/approvals/{approval_id}/{verdict}",
            json={"reason": reason},
            headers=self.bearer("approver"),
        ).raise_for_status()

    def approval(self, approval_id: str) -> ApprovalRecord:
        assert self.guard.store is not None
        return self.guard.store.get_approval(approval_id, tenant=TENANT)

    def bearer(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()
        self.guard.close()


class WaitingAgent(threading.Thread):
    """An agent in its own thread: it calls ``pay`` through ``Guard.remote``; told to
    wait for a human, it waits for the decision and retries the identical call once.
    ``ran`` lists each run of the tool's body; ``error`` is what the agent raised."""

    def __init__(self, server: UiServer, amount: int, to: str) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.amount = amount
        self.to = to
        self.ran: list[tuple[int, str]] = []
        self.asked = threading.Event()
        self.approval_id: str | None = None
        self.status: str | None = None
        self.result: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Guard.remote(self.server.url, self.server.tokens["agent"]) as guard:

                @guard.protect
                def pay(amount: int, to: str) -> str:
                    self.ran.append((amount, to))
                    return f"paid {amount} to {to}"

                try:
                    self.result = pay(self.amount, self.to)
                    return
                except ApprovalRequired as asked:
                    self.approval_id = asked.approval_id
                    self.asked.set()
                assert self.approval_id is not None
                record = guard.wait_for_approval(self.approval_id, timeout=60)
                self.status = record.status.value
                self.result = pay(self.amount, self.to)
        except BaseException as exc:
            self.error = exc
        finally:
            self.asked.set()

    def approval_requested(self) -> str:
        """The id of the approval the agent waits on (once it is asking)."""
        assert self.asked.wait(30), "the agent never asked"
        assert self.approval_id is not None, self.error
        return self.approval_id

    def finish(self) -> None:
        self.join(60)
        assert not self.is_alive(), "the agent is still waiting"
