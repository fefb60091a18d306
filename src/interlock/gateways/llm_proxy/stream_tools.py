"""Tool calls in a streamed answer: held until complete, judged, then released or
replaced. Text is never held.

Every stream the proxy relays passes a gate (whether or not the request offered
tools: a model that calls a tool it was not offered is judged too). A tool call's
fragments are taken out of the stream as they arrive and kept; when the call is
complete — OpenAI: its choice's ``finish_reason``; Anthropic: its block's
``content_block_stop`` — it is judged by the non-streamed path's own
:func:`~.tools.refusal_for_call` (same action, policy, context and refusal text;
an allowed call's tool budget is committed). Then it is sent on whole, or the
refusal takes its place as text the agent reads (``finish_reason`` ``tool_calls`` →
``stop``, ``stop_reason`` ``tool_use`` → ``end_turn`` when no call is left).

Fails closed: a call that cannot complete (the stream ends or breaks first), a
malformed one (no id, a name that changes, an index reused for another id, a
fragment for a call never started, a delta of the wrong kind, arguments that are
not a JSON object), one carried by an event the proxy cannot read, and one that
would take the stream's held bytes past ``max_held_bytes`` is refused, never sent.

    gate = tool_gate("openai", guard, context, max_held_bytes=1 << 20)
    SseRelay(upstream, meter, settle, headers=headers, hide_usage=False, gate=gate)
"""

from __future__ import annotations

from interlock.core.action import Context
from interlock.guard import Guard

from .held import HeldBytes, Judge
from .refusals import Provider
from .relay import Gate
from .stream_anthropic import AnthropicToolGate
from .stream_openai import OpenAIToolGate

__all__ = ["AnthropicToolGate", "OpenAIToolGate", "tool_gate"]


def tool_gate(provider: Provider, guard: Guard, context: Context, *, max_held_bytes: int) -> Gate:
    """The gate for one stream of ``provider``, judging with ``context``."""
    judge = Judge(guard, context)
    held = HeldBytes(max_held_bytes)
    if provider == "openai":
        return OpenAIToolGate(judge, held)
    return AnthropicToolGate(judge, held)
