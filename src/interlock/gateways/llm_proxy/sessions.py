"""Session-aware rules at the proxy: which session a request belongs to, and what its
messages bring into that session (ADR "proxy sessions"; docs/llm-proxy.md).

Only a guard whose policy reads sessions (``Guard._sessions``) pays for any of this.
A shared-server proxy keeps no history: it tells the server, which keeps the
session, what each request brings in (:mod:`.server_sessions`).

**The session.** Every request carries the whole conversation, so the proxy can tell
which conversation a request continues without the agent's help:

- ``x-interlock-session: <id>`` (when the proxy accepts it: ``ProxyConfig.session_header``)
  names it; else
- the conversation's stable prefix does: its system prompt and first user message.

Either way the session id is a digest of the key's tenant and agent with that seed
(``llmp-`` and 32 hex digits): a key reaches only its own sessions, and cannot write
trusted inputs into another agent's.

**What a request brings in**, each once per session (this process remembers what it
recorded; a replica that did not see the earlier turns records them once more):

- the system prompt and every user message: trusted inputs (``Guard.record_input``);
- each tool result (OpenAI ``role: tool``, Responses ``*_output`` items, Anthropic
  ``tool_result`` blocks): when this proxy judged and allowed the call it answers (its
  ``tool_call_id``), that call's step is settled *executed*, with the result's
  fingerprints — as a body that returned in process; otherwise (another replica, a
  restart, a session that changed, a result for a call the proxy refused or never
  saw) an **untrusted** input, labelled ``untrusted`` and whatever the policy labels a
  call of that tool with (its name and arguments read from the request's own
  assistant message, when it holds the call).

A result, once handled, is not handled again; a call's decision waits for its result
for as long as the session is remembered.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import Context
from interlock.core.decision import Decision
from interlock.session.fingerprints import of_data

if TYPE_CHECKING:
    from interlock.guard import Guard

    from .server_sessions import ServerSessions

__all__ = [
    "SESSION_HEADER",
    "TURN",
    "Inbound",
    "ProxySessions",
    "ToolResult",
    "Turn",
    "inbound_of",
    "session_id_of",
]

#: The request header that names the session (when the proxy accepts it).
SESSION_HEADER: Final = "x-interlock-session"
_GIVEN: Final = re.compile(r"[\x21-\x7e]{1,256}")
#: Sessions this process remembers (what it recorded, calls awaiting their result).
DEFAULT_KEPT: Final = 10_000
#: New text (characters) recorded on the loop when the store is written there.
_INLINE_BYTES: Final = 4_096
#: Per session: allowed calls awaiting their result, results and inputs handled.
_PER_SESSION: Final = 4_096


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's result the agent sends back: the call it answers (``call_id``), the
    call's name and arguments when the request holds the call, and the content."""

    call_id: str | None
    content: object
    name: str | None = None
    arguments: object = None


@dataclass(slots=True)
class Inbound:
    """What one request carries into its session: the conversation's stable prefix
    (system prompt, first user message), every trusted text (system prompts and user
    messages, in order) and the tool results."""

    prefix: list[str] = field(default_factory=list)
    trusted: list[str] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)


# -- reading a request ---------------------------------------------------------------------


def _texts(content: object) -> Iterator[str]:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    yield text


def _text(content: object) -> str:
    return "\n".join(_texts(content))


def _openai(body: Mapping[str, Any]) -> Inbound:
    found = Inbound()
    calls: dict[str, tuple[object, object]] = {}
    first_user = True
    for message in _list(body.get("messages")):
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role in ("system", "developer", "user"):
            text = _text(message.get("content"))
            if first_user:  # what comes up to the first user message, that included
                found.prefix.append(text)
                first_user = role != "user"
            if text:
                found.trusted.append(text)
        elif role == "assistant":
            for call in _list(message.get("tool_calls")):
                if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                    spec = call.get("function") or call.get("custom") or {}
                    if isinstance(spec, Mapping):
                        arguments = spec.get("arguments", spec.get("input"))
                        calls[call["id"]] = (spec.get("name"), arguments)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            key = call_id if isinstance(call_id, str) else None
            name, arguments = calls.get(key, (None, None)) if key else (None, None)
            found.results.append(ToolResult(key, message.get("content"), _name(name), arguments))
        elif role == "function":  # the legacy form: no call id
            found.results.append(
                ToolResult(None, message.get("content"), _name(message.get("name")))
            )
    return found


def _responses(body: Mapping[str, Any]) -> Inbound:
    found = Inbound()
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        found.prefix.append(instructions)
        found.trusted.append(instructions)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    calls: dict[str, tuple[object, object]] = {}
    first_user = True
    for item in _list(items):
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("system", "developer", "user"):
            text = _text(item.get("content"))
            if first_user:
                found.prefix.append(text)
                first_user = role != "user"
            if text:
                found.trusted.append(text)
        elif isinstance(kind, str) and kind.endswith("_call"):
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                arguments = item.get("arguments", item.get("input", item.get("action")))
                calls[call_id] = (item.get("name"), arguments)
        elif isinstance(kind, str) and kind.endswith("_output"):
            call_id = item.get("call_id")
            key = call_id if isinstance(call_id, str) else None
            name, arguments = calls.get(key, (None, None)) if key else (None, None)
            found.results.append(ToolResult(key, item.get("output"), _name(name), arguments))
    return found


def _anthropic(body: Mapping[str, Any]) -> Inbound:
    found = Inbound()
    system = _text(body.get("system"))
    if system:
        found.prefix.append(system)
        found.trusted.append(system)
    calls: dict[str, tuple[object, object]] = {}
    first_user = True
    for message in _list(body.get("messages")):
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if message.get("role") == "assistant":
            for block in _list(blocks):
                if (
                    isinstance(block, Mapping)
                    and block.get("type") == "tool_use"
                    and isinstance(block.get("id"), str)
                ):
                    calls[block["id"]] = (block.get("name"), block.get("input"))
            continue
        if message.get("role") != "user":
            continue
        words: list[str] = []
        for block in _list(blocks):
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                words.append(block["text"])
            elif block.get("type") == "tool_result":
                call_id = block.get("tool_use_id")
                key = call_id if isinstance(call_id, str) else None
                name, arguments = calls.get(key, (None, None)) if key else (None, None)
                found.results.append(
                    ToolResult(key, _text(block.get("content")), _name(name), arguments)
                )
        text = "\n".join(words)
        if first_user and text:
            found.prefix.append(text)
            first_user = False
        if text:
            found.trusted.append(text)
    return found


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


_READERS: Final = {"chat": _openai, "responses": _responses, "messages": _anthropic}


def inbound_of(api: str, body: Mapping[str, Any]) -> Inbound:
    """What a request of ``api`` (``chat``, ``responses``, ``messages``) carries."""
    return _READERS[api](body)


def session_id_of(
    headers: Mapping[str, str], inbound: Inbound, context: Context, *, header: bool
) -> str | None:
    """The session of a request: from ``x-interlock-session`` (when ``header``), else
    from the conversation's prefix; scoped to the key's tenant and agent. ``None``: the
    header is present but malformed (the request is refused)."""
    given = headers.get(SESSION_HEADER) if header else None
    if given is not None:
        if not _GIVEN.fullmatch(given):
            return None
        seed = ["header", given]
    else:
        seed = ["conversation", *inbound.prefix]
    digest = hashlib.sha256()
    for part in (context.tenant, context.agent or "", *seed):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return "llmp-" + digest.hexdigest()[:32]


# -- what this process remembers -----------------------------------------------------------


class _Known:
    """One session, as this process knows it."""

    __slots__ = ("calls", "inputs", "results")

    def __init__(self) -> None:
        self.inputs: OrderedDict[bytes, None] = OrderedDict()
        self.results: OrderedDict[str, None] = OrderedDict()
        #: tool_call_id -> the allowed decision, awaiting its result
        self.calls: OrderedDict[str, Decision] = OrderedDict()


def _bounded(table: OrderedDict[Any, Any], key: Any, value: Any, bound: int = _PER_SESSION) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > bound:
        table.popitem(last=False)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass(slots=True)
class Turn:
    """One request's session: the calls the proxy allows in its answer are noted here
    (:func:`~.tools.refusal_for_call` reads :data:`TURN`), to settle when their results
    come back."""

    known: _Known
    session_id: str
    sessions: ProxySessions
    tenant: str
    agent: str
    #: the guard's store is written on the loop (an embedded SQLite): the session's
    #: checks run there too (ADR 0020: two thread hops cost more than its I/O)
    inline: bool = False

    def responded(self, response_id: object) -> None:
        """The upstream named its answer ``response_id`` (Responses): a later request
        continuing it (``previous_response_id``) is of this session."""
        if isinstance(response_id, str) and response_id:
            key = (self.tenant, self.agent, response_id)
            _bounded(self.sessions.responses, key, self.session_id, self.sessions.kept * 4)

    def allowed(self, call_id: object, decision: Decision) -> None:
        if isinstance(call_id, str) and call_id and decision.decision_id is not None:
            _bounded(self.known.calls, call_id, decision)
            self.known.results.pop(call_id, None)  # a new call under an old id: anew


#: The session turn of the request being answered (None: no session handling).
TURN: Final[contextvars.ContextVar[Turn | None]] = contextvars.ContextVar(
    "interlock_proxy_turn", default=None
)


class ProxySessions:
    """The sessions this proxy process has seen (the most recently used ``kept``)."""

    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self.kept = kept
        self._known: OrderedDict[tuple[str, str], _Known] = OrderedDict()
        #: (tenant, agent, Responses response id) -> its session
        self.responses: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    def continued(self, context: Context, body: Mapping[str, Any]) -> str | None:
        """The session of the Responses answer a request continues
        (``previous_response_id``), when this process answered it for the same key."""
        previous = body.get("previous_response_id")
        if not isinstance(previous, str):
            return None
        return self.responses.get((context.tenant, context.agent or "", previous))

    def _session(self, tenant: str, session_id: str) -> _Known:
        key = (tenant, session_id)
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = _Known()
            while len(self._known) > self.kept:
                self._known.popitem(last=False)
        else:
            self._known.move_to_end(key)
        return known

    async def take_in(
        self,
        guard: Guard,
        context: Context,
        inbound: Inbound,
        *,
        inline: bool = False,
        server: ServerSessions | None = None,
    ) -> Turn:
        """Record what ``inbound`` brings into the session of ``context`` (only what is
        new to it); the turn. Raises when the history cannot be written (the request is
        then refused: a tool result left out would make its data read as new).
        ``inline``: the guard's store is written on the loop (an embedded SQLite), so a
        few KiB of new text are recorded here, not on a thread."""
        assert context.session_id is not None
        known = self._session(context.tenant, context.session_id)
        turn = Turn(known, context.session_id, self, context.tenant, context.agent or "", inline)
        inputs = [(t, d) for t in inbound.trusted if (d := _digest(t)) not in known.inputs]
        results = [r for r in inbound.results if r.call_id not in known.results]
        if not (inputs or results):
            return turn
        if server is not None:  # the shared server keeps the session: told, on the loop
            await self._report(server, context, known, inputs, results)
            return turn
        size = sum(len(t) for t, _ in inputs) + sum(_size(r.content) for r in results)
        if inline and size <= _INLINE_BYTES:
            self._record(guard, context, known, inputs, results)
        else:  # fingerprints (~0.5 ms per KiB) and the store's writes: off the loop
            await asyncio.to_thread(self._record, guard, context, known, inputs, results)
        return turn

    def _record(
        self,
        guard: Guard,
        context: Context,
        known: _Known,
        inputs: list[tuple[str, bytes]],
        results: list[ToolResult],
    ) -> None:
        for text, digest in inputs:
            guard.record_input(text, trusted=True, context=context)
            _bounded(known.inputs, digest, None)
        history = guard.sessions
        # the tails of the guard's flow tests (None: no test joins calls)
        tails = getattr(getattr(guard, "_sessions", None), "tails", None)
        for result in results:
            decision = known.calls.pop(result.call_id, None) if result.call_id else None
            if decision is not None and decision.decision_id is not None and history is not None:
                assert context.session_id is not None
                history.settle(
                    context.tenant,
                    context.session_id,
                    decision.decision_id,
                    executed=True,
                    fingerprints=of_data(result.content),
                )
                if tails is not None:  # its tokens, for pieces sent in any order
                    tails.pieces.learn(context.tenant, context.session_id, result.content)
            elif result.call_id is None:
                # no id: known by its content, so each is recorded once
                digest = _digest("result\0" + _text_of(result.content))
                if digest in known.inputs:
                    continue
                self._untrusted(guard, context, result)
                _bounded(known.inputs, digest, None)
                continue
            else:
                self._untrusted(guard, context, result)
            if result.call_id:
                _bounded(known.results, result.call_id, None)

    async def _report(
        self,
        server: ServerSessions,
        context: Context,
        known: _Known,
        inputs: list[tuple[str, bytes]],
        results: list[ToolResult],
    ) -> None:
        """:meth:`_record` at a shared-server proxy: the same, told to the server (the
        labels of an untrusted result's call added there, by its policy)."""
        for text, digest in inputs:
            await server.record_input(text, context, trusted=True)
            _bounded(known.inputs, digest, None)
        for result in results:
            # the call's decision is let go once its result is told (a failed report
            # refuses the request; the agent's retry settles the same step)
            decision = known.calls.get(result.call_id) if result.call_id else None
            if result.call_id is None:
                digest = _digest("result\0" + _text_of(result.content))
                if digest not in known.inputs:
                    await _report_untrusted(server, context, result)
                    _bounded(known.inputs, digest, None)
                continue
            settled = decision is not None and decision.decision_id is not None
            if settled:
                assert decision is not None
                settled = await server.settle(context, decision, result.content)
            if not settled:  # not a call this process let through, or no longer held there
                await _report_untrusted(server, context, result)
            known.calls.pop(result.call_id, None)
            _bounded(known.results, result.call_id, None)

    @staticmethod
    def _untrusted(guard: Guard, context: Context, result: ToolResult) -> None:
        labels = {"untrusted", *fallback_labels(guard, context, result)}
        guard.record_input(result.content, trusted=False, context=context, labels=sorted(labels))


async def _report_untrusted(server: ServerSessions, context: Context, result: ToolResult) -> None:
    tool = (result.name, result.arguments) if result.name is not None else None
    await server.record_input(
        result.content, context, trusted=False, labels=("untrusted",), tool=tool
    )


def _size(content: object) -> int:
    return len(content) if isinstance(content, str) else len(repr(content))


def _text_of(content: object) -> str:
    return content if isinstance(content, str) else repr(content)


def fallback_labels(guard: Guard, context: Context, result: ToolResult) -> frozenset[str]:
    """The labels the policy attaches to an allowed call of the tool ``result`` answers
    (empty when the request does not name it); every label the policy could attach to
    such a call when its label rules cannot be evaluated (the stricter reading)."""
    if result.name is None:
        return frozenset()
    from interlock.policy.call_labels import labels_of_call

    return labels_of_call(guard.policy, context, result.name, result.arguments)
