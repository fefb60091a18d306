"""A server's sampling requests at the gateway, in both protocol generations: each is
an ``llm`` action (:mod:`interlock.adapters.mcp_sampling`), judged before the client
sees it, its budget held until the client answers.

- **2025-11-25**: a ``sampling/createMessage`` request from the server. Allowed, it
  goes on to the client and is held under its id toward the client until the client
  answers (commit from the result; release on an error). Refused, the client never
  sees it: the server gets the error of a rejected sampling request (``-1``).
- **2026-07-28**: sampling requests embedded in a ``tools/call``, ``prompts/get`` or
  ``resources/read`` result with ``resultType: input_required``. Each is judged; when
  all are allowed, each is held under a key of the gateway's own (the server's keys
  repeat from call to call) and the client's retry carries its answer back under that
  key: committed, and sent on to the server under the server's key. When one is
  refused, the whole result is replaced by the refusal (an ``isError`` result for a
  ``tools/call``, error ``-1`` otherwise): the protocol has no error answer for one
  input request, and a result with the refused request left out would let the server
  ask again — or carry on — behind the verdict. A response under a key of the
  gateway's that it does not hold (answered already, forged) is dropped.

A held request the client has not answered within ``timeout`` seconds is abandoned:
released, and (2025-11-25) the gateway's ``expired`` callback tells both sides. The
server cancelling it, the server exiting and the gateway closing release it too.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from interlock.adapters.mcp_sampling import (
    SAMPLING_METHOD,
    Sampled,
    judge_sampling,
    rejection,
)
from interlock.gateways.mcp.messages import disguised

if TYPE_CHECKING:
    from interlock.core.action import Action, Context
    from interlock.core.decision import Decision
    from interlock.guard import Guard

__all__ = [
    "DEFAULT_SAMPLING_TIMEOUT",
    "INPUT_METHODS",
    "KEY_PREFIX",
    "Held",
    "SamplingGate",
    "SamplingRefused",
    "input_required",
]

log = logging.getLogger("interlock.gateways.mcp")

#: How long an allowed sampling request waits for the client's answer (seconds):
#: below the store's reservation TTL (300 s by default), so that an abandoned request
#: is released here rather than charged in full by the reaper.
DEFAULT_SAMPLING_TIMEOUT: Final = 120.0
#: The requests whose result may ask for input (2026-07-28).
INPUT_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
#: The start of every input-request key the gateway gives a held sampling request.
KEY_PREFIX: Final = "interlock-sampling-"


@dataclass(slots=True)
class Held:
    """An allowed sampling request the client has not answered yet."""

    sampled: Sampled
    origin: object  # the upstream it came from (a gateway's own handle for it)
    request_id: Any = None  # 2025-11-25: its id toward the client
    original_key: str | None = None  # 2026-07-28: the server's own key
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True, slots=True)
class SamplingRefused:
    """A refused sampling request: the decision, and the action (``None`` when the
    request could not be read)."""

    decision: Decision
    action: Action | None

    @property
    def error(self) -> dict[str, Any]:
        """The JSON-RPC error object the server is answered with."""
        return rejection(self.decision, self.action)


def input_required(result: Any) -> bool:
    """True for a result that asks the client for input (2026-07-28)."""
    return isinstance(result, Mapping) and result.get("resultType") == "input_required"


class SamplingGate:
    """The sampling requests of one gateway session: judged, held, settled once."""

    def __init__(
        self,
        guard: Guard,
        *,
        timeout: float | None = DEFAULT_SAMPLING_TIMEOUT,
        expired: Callable[[Held], Awaitable[None]] | None = None,
        context: Context | None = None,
    ) -> None:
        self.guard = guard
        self.context = context  # the session's trusted context (a gateway's client key)
        self.timeout = timeout
        self._expired = expired
        self._held: dict[str, Held] = {}
        self._token = secrets.token_hex(6)
        self._next = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def __contains__(self, key: object) -> bool:
        return key in self._held

    # -- judging -------------------------------------------------------------------------

    async def judge(
        self, method: str, params: Any, *, server: str | None, call_id: str | None = None
    ) -> Sampled | SamplingRefused:
        """The verdict on one sampling request (``method``: as the server wrote it;
        one that only reads as ``sampling/createMessage`` is refused unread)."""
        problem = None
        if method != SAMPLING_METHOD:  # never judged on what it carries
            problem = f"a request that reads as {SAMPLING_METHOD} but is not it: {method!r}"
        verdict = await judge_sampling(
            self.guard,
            params,
            server=server,
            call_id=call_id,
            problem=problem,
            context=self.context,
        )
        if isinstance(verdict, Sampled):
            log.info(
                "interlock mcp-gateway: sampling request from %s: allow [decision %s]",
                _named(server),
                verdict.decision.decision_id or "-",
            )
            return verdict
        decision, action = verdict
        log.info(
            "interlock mcp-gateway: sampling request from %s: %s [decision %s]",
            _named(server),
            decision.verdict.value,
            decision.decision_id or "-",
        )
        return SamplingRefused(decision, action)

    # -- holding and settling ------------------------------------------------------------

    def hold(
        self,
        key: str,
        sampled: Sampled,
        *,
        origin: object,
        request_id: Any = None,
        original_key: str | None = None,
    ) -> None:
        """Hold ``sampled`` under ``key`` until the client answers (or it expires)."""
        if key in self._held:  # pragma: no cover - callers refuse a live id first
            raise ValueError(f"a sampling request is already held under {key!r}")
        held = Held(sampled, origin, request_id, original_key)
        if self.timeout is not None:
            loop = asyncio.get_running_loop()
            held.timer = loop.call_later(self.timeout, self._spawn_expiry, key)
        self._held[key] = held

    def _take(self, key: str) -> Held | None:
        held = self._held.pop(key, None)
        if held is not None and held.timer is not None:
            held.timer.cancel()
        return held

    async def answered(self, key: str, body: Mapping[str, Any]) -> bool:
        """The client's response (its JSON-RPC body) to the request held under
        ``key``: commit from its result, release on an error. False when nothing is
        held there."""
        held = self._take(key)
        if held is None:
            return False
        await _settle(held.sampled, body.get("result") if "error" not in body else None, body)
        return True

    async def abandon(self, key: str, why: str) -> bool:
        """Release the request held under ``key`` (cancelled, its server gone)."""
        held = self._take(key)
        if held is None:
            return False
        await held.sampled.release(why)
        return True

    async def abandon_from(self, origin: object, why: str) -> None:
        """Release every request held for ``origin`` (its server exited)."""
        for key in [key for key, held in self._held.items() if held.origin is origin]:
            await self.abandon(key, why)

    async def close(self, why: str = "the gateway shut down") -> None:
        """Release everything still held; wait for the expiries under way."""
        for key in list(self._held):
            await self.abandon(key, why)
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn_expiry(self, key: str) -> None:
        task = asyncio.ensure_future(self._expire(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire(self, key: str) -> None:
        held = self._take(key)
        if held is None:
            return
        await held.sampled.release(f"the client did not answer within {self.timeout:g} s")
        if self._expired is not None and held.request_id is not None:
            try:
                await self._expired(held)
            except Exception as exc:  # telling the peers must never stop the relay
                log.warning("interlock mcp-gateway: could not end an expired sampling: %s", exc)

    # -- 2026-07-28: input requests in results, their answers in retries -----------------

    async def input_required(
        self, result: Mapping[str, Any], *, server: str | None, origin: object
    ) -> dict[str, Any] | SamplingRefused | None:
        """Judge the sampling requests an ``input_required`` result carries: the
        result with each held under a key of the gateway's, the refusal of the first
        one refused (the others released), or ``None`` when it carries none."""
        requests = result.get("inputRequests")
        if not isinstance(requests, Mapping):
            return None
        asked = {
            key: request
            for key, request in requests.items()
            if isinstance(request, Mapping)
            and isinstance(request.get("method"), str)
            and (
                request["method"] == SAMPLING_METHOD
                or disguised(request["method"], SAMPLING_METHOD)
            )
        }
        if not asked:
            return None
        allowed: list[tuple[str, Sampled]] = []
        for key, request in asked.items():
            verdict = await self.judge(request["method"], request.get("params"), server=server)
            if isinstance(verdict, SamplingRefused):
                for _, sampled in allowed:
                    await sampled.release("another request for input in its result was refused")
                return verdict
            allowed.append((str(key), verdict))
        renamed: dict[str, str] = {}
        for key, sampled in allowed:
            self._next += 1
            ours = f"{KEY_PREFIX}{self._token}-{self._next}"
            self.hold(ours, sampled, origin=origin, original_key=key)
            renamed[key] = ours
        rewritten = {renamed.get(str(key), key): request for key, request in requests.items()}
        return {**result, "inputRequests": rewritten}

    async def input_responses(self, params: Any, *, origin: object) -> dict[str, Any] | None:
        """A retry's params with the client's answers to held requests settled and
        put back under the server's keys (answers under a key of the gateway's that
        is not held for ``origin`` dropped); ``None`` when there is nothing to do."""
        if not isinstance(params, Mapping):
            return None
        responses = params.get("inputResponses")
        if not isinstance(responses, Mapping) or not any(
            isinstance(key, str) and key.startswith(KEY_PREFIX) for key in responses
        ):
            return None
        kept: dict[str, Any] = {}
        restored: dict[str, Any] = {}
        for key, answer in responses.items():
            if not key.startswith(KEY_PREFIX):
                kept[key] = answer
                continue
            held = self._held.get(key)
            if held is None or held.origin is not origin or held.original_key is None:
                log.warning("interlock mcp-gateway: dropped an answer to no held request: %r", key)
                continue
            self._take(key)
            result = answer if isinstance(answer, Mapping) and "model" in answer else None
            await _settle(held.sampled, result, {"result": answer})
            restored[held.original_key] = answer
        merged = {**kept, **restored}  # the judged request's answer wins a clash
        out = {key: value for key, value in params.items() if key != "inputResponses"}
        if merged:
            out["inputResponses"] = merged
        return out


async def _settle(sampled: Sampled, result: Any, body: Mapping[str, Any]) -> None:
    if isinstance(result, Mapping):
        await sampled.commit(result)
        return
    error = body.get("error")
    message = error.get("message") if isinstance(error, Mapping) else None
    why = f"the client answered an error: {message}" if message else "the client answered no result"
    await sampled.release(why)


def _named(server: str | None) -> str:
    return f"upstream {server!r}" if server else "the upstream"
