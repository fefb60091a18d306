"""Approvals through elicitation at the gateway (``--approve-by-elicitation``; the
trust model and the answers: :mod:`interlock.adapters.mcp_approvals`).

A ``tools/call`` judged ``require_approval`` (an approval a store recorded, still
pending) from a client that declared form-mode elicitation is put to the client's
user instead of refused:

- **2025-11-25**: the gateway sends the client an ``elicitation/create`` request of
  its own (an id the upstream never sees, answered here, never forwarded) and waits
  for the answer while the relay goes on; the client's capabilities are those its
  ``initialize`` declared;
- **2026-07-28**: the gateway answers the call with an ``input_required`` result
  asking the question; the client's retry of the identical call carries the answer,
  which the gateway takes out before the call goes on (the capabilities are those
  the request's own ``_meta`` declares).

Then the call is judged again: approved, the approval is claimed by this very call,
which is forwarded once; denied, it is refused with the denial; left pending, it is
refused with the approval URL. A client without form-mode elicitation, a call too
long to show, a disabled option: the refusal with the approval URL, as before.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import pending_approval
from interlock.adapters.mcp_approvals import (
    ELICITATION_METHOD,
    Answer,
    HeldQuestions,
    answer_of,
    check_can_approve,
    form_supported,
    record_answer,
)
from interlock.gateways.mcp.gate import protocol_version_of
from interlock.gateways.mcp.messages import Message, encode

if TYPE_CHECKING:
    from interlock.core.action import Context
    from interlock.core.decision import Decision
    from interlock.guard import Guard

__all__ = [
    "CLIENT_CAPABILITIES_META",
    "DEFAULT_ELICITATION_TIMEOUT",
    "REQUEST_ID_PREFIX",
    "InBandApprovals",
]

log = logging.getLogger("interlock.gateways.mcp")

#: How long the gateway waits for the client's user to answer (seconds).
DEFAULT_ELICITATION_TIMEOUT: Final = 600.0
#: Where a request of the 2026-07-28 generation declares the client's capabilities.
CLIENT_CAPABILITIES_META: Final = "io.modelcontextprotocol/clientCapabilities"
#: The start of the id of every elicitation request the gateway sends (2025-11-25).
REQUEST_ID_PREFIX: Final = "interlock-elicitation-"

Channel = Literal["request", "result"]


class InBandApprovals:
    """The approvals one gateway session puts to its client's user. ``send`` writes
    a line to the client; ``context`` is the client's trusted context where the
    transport knows it (the HTTP gateway: its key's tenant and agent, whose
    approvals these are)."""

    def __init__(
        self,
        guard: Guard,
        send: Callable[[bytes], None],
        *,
        timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
        context: Context | None = None,
    ) -> None:
        check_can_approve(guard)
        self.guard = guard
        self.context = context
        self.timeout = timeout
        self.questions = HeldQuestions()
        self.client_name: str | None = None
        self._send = send
        self._capabilities: Any = None
        self._asked: dict[str, asyncio.Future[Mapping[str, Any]]] = {}
        self._token = secrets.token_hex(6)
        self._next = 0

    async def record(self, approval_id: str, answer: Answer) -> None:
        """Decide the approval as the client's user answered (as the client's)."""
        await record_answer(self.guard, approval_id, answer, self.client_name, self.context)

    def learn(self, message: Message) -> None:
        """Read the client's capabilities and name from its ``initialize``."""
        params = message.params if isinstance(message.params, Mapping) else {}
        self._capabilities = params.get("capabilities")
        info = params.get("clientInfo")
        name = info.get("name") if isinstance(info, Mapping) else None
        self.client_name = name if isinstance(name, str) else None

    def channel(self, message: Message, decision: Decision) -> Channel | None:
        """How to put ``decision``'s approval to the client's user for this request,
        or ``None`` (it cannot be: refuse with the approval URL)."""
        if pending_approval(decision) is None:
            return None
        if protocol_version_of(message, None) is None:
            return "request" if form_supported(self._capabilities) else None
        params = message.params if isinstance(message.params, Mapping) else {}
        meta = params.get("_meta")
        capabilities = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None
        return "result" if form_supported(capabilities) else None

    # -- 2025-11-25: a request of the gateway's own ---------------------------------------

    async def ask(self, question: dict[str, Any]) -> Answer:
        """Send the client ``question`` and wait for its user's answer (``pending``
        when none comes in time; the client is then told to stop asking)."""
        self._next += 1
        request_id = f"{REQUEST_ID_PREFIX}{self._token}-{self._next}"
        future: asyncio.Future[Mapping[str, Any]] = asyncio.get_running_loop().create_future()
        self._asked[request_id] = future
        body = {"jsonrpc": "2.0", "id": request_id, "method": ELICITATION_METHOD}
        self._send(encode({**body, "params": question}))
        try:
            answer = await asyncio.wait_for(future, self.timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            reason = (
                "the approval was not answered in time"
                if isinstance(exc, TimeoutError)
                else ("the tool call was cancelled")
            )
            cancel = {"requestId": request_id, "reason": reason}
            self._send(
                encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
            )
            if isinstance(exc, asyncio.CancelledError):
                raise
            return "pending"
        finally:
            self._asked.pop(request_id, None)
        return answer_of(answer.get("result")) if "error" not in answer else "pending"

    def answered(self, message: Message) -> bool:
        """Take the client's response to one of the gateway's questions (True: it
        is the gateway's, and never forwarded — an answer to a question no longer
        asked, a replay, is dropped here too)."""
        request_id = message.id
        if not isinstance(request_id, str) or not request_id.startswith(REQUEST_ID_PREFIX):
            return False
        future = self._asked.get(request_id)
        if future is None or future.done():
            log.warning("interlock mcp-gateway: dropped an answer to no question: %r", request_id)
            return True
        future.set_result(message.body)
        return True

    def close(self) -> None:
        for future in self._asked.values():
            if not future.done():
                future.cancel()
