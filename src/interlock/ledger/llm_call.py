"""One guarded model call: check and reserve before, commit real usage after.

Example::

    from interlock.ledger.usage import Usage

    with guard.llm_call("gpt-5", estimate=Usage(1_200, 800)) as call:
        response = client.chat.completions.create(model="gpt-5", messages=messages)
        call.record(response.usage)            # committed on exit

    async with guard.llm_call("claude-sonnet-4-5", estimate=Usage(900, 400)) as call:
        message = await client.messages.create(...)
        call.record(message.usage)

On entry the call is checked like any action (kind ``llm``, the model as its name, the
estimate as ``input_tokens`` / ``max_output_tokens``, with ``arguments`` such as the
``messages``): anything but ``allow`` raises before the model is called — a budget
that cannot take the estimate, and a budget that covers the call when nothing says
what it may cost (no estimate, and no ``default_estimate`` in the policy), included.
On a normal exit the reservation is committed with the recorded usage, charged in
full (or, when nothing was recorded, with what was reserved: the call happened and its
cost is not known to be lower). On an exception or a cancellation it is released.
Exactly one of the two.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from interlock.core.action import Action, Context
from interlock.core.phases import (
    LLMInput,
    LLMOutput,
    Observed,
    emit_phase,
    failure,
    record_phase,
    start_joined,
)
from interlock.core.refusal import raise_for
from interlock.core.starting import STARTING, Starting
from interlock.errors import describe
from interlock.ledger.usage import Usage

if TYPE_CHECKING:
    from types import TracebackType

    from interlock.core.decision import Decision
    from interlock.store.records import Reservation

__all__ = ["LLMCall", "ModelGuard"]


class ModelSpan(Protocol):
    """A model call's telemetry span (:class:`interlock.otel.Execution` is one)."""

    def __enter__(self) -> ModelSpan: ...

    def usage(self, usage: Usage | None) -> None: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ModelTelemetry(Protocol):
    """Spans for model calls (:class:`interlock.otel.Telemetry` is one)."""

    def model_call(self, decision: Decision, model: str) -> ModelSpan: ...


class ModelGuard(Observed, Protocol):
    """What a model call needs of its guard (:class:`interlock.Guard` is one; the ledger
    does not import it): check, settle, and the sink and telemetry to report to."""

    @property
    def telemetry(self) -> ModelTelemetry | None: ...

    def check(self, action: Action, *, timeout: float | None = None) -> Decision: ...

    async def acheck(self, action: Action, *, timeout: float | None = None) -> Decision: ...

    def commit(
        self,
        decision: Decision,
        usage: object | None = None,
        *,
        model: str | None = None,
        by: str | None = None,
    ) -> Reservation | None: ...

    def release(self, decision: Decision, *, by: str | None = None) -> Reservation | None: ...

    async def acommit(
        self,
        decision: Decision,
        usage: object | None = None,
        *,
        model: str | None = None,
        by: str | None = None,
    ) -> Reservation | None: ...

    async def arelease(
        self, decision: Decision, *, by: str | None = None
    ) -> Reservation | None: ...


log = logging.getLogger("interlock")


class LLMCall:
    """Made by :meth:`interlock.Guard.llm_call`; use it with ``with`` or ``async with``."""

    def __init__(
        self,
        guard: ModelGuard,
        model: str,
        *,
        estimate: Usage | object | None,
        context: Context | None,
        arguments: Mapping[str, Any] | None,
        timeout: float | None,
    ) -> None:
        self.guard = guard
        self.model = model
        self.estimate = None if estimate is None else Usage.of(estimate)
        args = dict(arguments or {})
        if self.estimate is not None:
            args.update(self.estimate.as_arguments())
        self.action = Action.llm(model, arguments=args, context=context or Context())
        self.timeout = timeout
        self.decision: Decision | None = None
        self.usage: Usage | None = None
        self._settled = False
        self._began = 0
        self._span: ModelSpan | None = None  # its telemetry span (interlock.otel)

    def record(self, usage: Usage | object) -> Usage:
        """Say what the call really used (a Usage, a provider's usage object, or a
        mapping of token counts); committed when the block ends."""
        self.usage = Usage.of(usage)
        return self.usage

    # -- sync ------------------------------------------------------------------------

    def __enter__(self) -> LLMCall:
        if self.guard.audit is None:
            decision = self.guard.check(self.action, timeout=self.timeout)
            joined = False
        else:  # an allowed decision's commit carries the call's llm_input
            starting = Starting("llm_input", self.model, self.estimate)
            token = STARTING.set(starting)
            try:
                decision = self.guard.check(self.action, timeout=self.timeout)
            finally:
                STARTING.reset(token)
            joined = start_joined(self.guard, decision, starting)
        raise_for(decision, self.action)
        self.decision = decision
        try:
            self._started(record=not joined)
        except BaseException as exc:  # its llm_input could not be recorded: no call
            self._finished(exc, failed=True)
            self._settle(failed=True)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finished(exc, failed=exc_type is not None)
        self._settle(failed=exc_type is not None)

    # -- async -------------------------------------------------------------------------

    async def __aenter__(self) -> LLMCall:
        if self.guard.audit is None:
            decision = await self.guard.acheck(self.action, timeout=self.timeout)
            joined = False
        else:  # an allowed decision's commit carries the call's llm_input
            starting = Starting("llm_input", self.model, self.estimate)
            token = STARTING.set(starting)
            try:
                decision = await self.guard.acheck(self.action, timeout=self.timeout)
            finally:
                STARTING.reset(token)
            joined = start_joined(self.guard, decision, starting)
        raise_for(decision, self.action)
        self.decision = decision
        self._started(record=False)
        if joined:
            pass  # durable with its decision, before the model is called
        elif self.guard.audit is not None and self.guard.audit.waits:
            # its llm_input, durable before the model is called: committed off the loop
            phase = LLMInput(self.model, decision.decision_id, self.estimate or Usage())
            try:
                context = contextvars.copy_context()
                await asyncio.to_thread(context.run, record_phase, self.guard, phase)
            except BaseException as exc:
                self._finished(exc, failed=True)
                await asyncio.shield(self._asettle(failed=True))
                raise
        elif self.guard.audit is not None:
            self._record_started()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finished(exc, failed=exc_type is not None)
        if self.decision is None or self.decision.reservation is None:
            return
        # Shielded: a cancellation arriving now must not leave the reservation open.
        await asyncio.shield(self._asettle(failed=exc_type is not None))

    # -- the llm_input / llm_output events (when the guard has a sink) -----------------

    def _record_started(self) -> None:
        if self.decision is not None:
            estimate = self.estimate or Usage()
            record_phase(self.guard, LLMInput(self.model, self.decision.decision_id, estimate))

    def _started(self, *, record: bool = True) -> None:
        self._began = time.perf_counter_ns()
        telemetry = self.guard.telemetry
        if telemetry is not None and self.decision is not None:
            try:
                self._span = telemetry.model_call(self.decision, self.model).__enter__()
            except Exception:
                log.exception("interlock: telemetry failed before a model call; it runs")
        if self.decision is not None and (
            self.guard.sink is not None or self.guard.audit is not None
        ):
            estimate = self.estimate or Usage()  # none stated: the event says zero
            phase = LLMInput(self.model, self.decision.decision_id, estimate)
            if self.guard.sink is not None:
                emit_phase(self.guard, phase)
            if self.guard.audit is not None and record:  # durable before the model runs
                record_phase(self.guard, phase)

    def _finished(self, error: BaseException | None, *, failed: bool) -> None:
        span = self._span
        if span is not None:
            self._span = None
            span.usage(self.usage)
            span.__exit__(type(error) if error is not None else None, error, None)
        if (self.guard.sink is None and self.guard.audit is None) or self.decision is None:
            return
        phase = LLMOutput(
            self.model,
            self.decision.decision_id,
            ok=not failed,
            usage=self.usage,
            error=None if error is None else describe(error),
            duration_ns=time.perf_counter_ns() - self._began,
        )
        if self.guard.sink is not None:
            emit_phase(self.guard, phase)
        if self.guard.audit is not None:
            error_type = None
            if error is not None:
                error_type, message = failure(error, self.guard.redactor)
                phase = LLMOutput(
                    phase.model, phase.decision_id, False, phase.usage, message, phase.duration_ns
                )
            record_phase(self.guard, phase, error_type=error_type)

    # -- settling ----------------------------------------------------------------------

    def _settle(self, *, failed: bool) -> None:
        decision = self._to_settle()
        if decision is None:
            return
        owner = decision.reservation.owner if decision.reservation else None
        try:  # the guard's own decision: settled as decided
            if failed:
                self.guard.release(decision, by=owner)
            elif self.usage is None:
                self.guard.commit(decision, by=owner)
            else:
                self.guard.commit(decision, self.usage, model=self.model, by=owner)
        except Exception as exc:
            self._not_settled(decision, exc, failed=failed)

    async def _asettle(self, *, failed: bool) -> None:
        """:meth:`_settle` through the guard's async twins (a remote guard's own
        connection; a store's worker thread)."""
        decision = self._to_settle()
        if decision is None:
            return
        owner = decision.reservation.owner if decision.reservation else None
        try:
            if failed:
                await self.guard.arelease(decision, by=owner)
            elif self.usage is None:
                await self.guard.acommit(decision, by=owner)
            else:
                await self.guard.acommit(decision, self.usage, model=self.model, by=owner)
        except Exception as exc:
            self._not_settled(decision, exc, failed=failed)

    def _to_settle(self) -> Decision | None:
        """The decision whose reservation is to be settled now, once; else None."""
        decision = self.decision
        if decision is None or decision.reservation is None or self._settled:
            return None
        self._settled = True
        return decision

    def _not_settled(self, decision: Decision, exc: Exception, *, failed: bool) -> None:
        # The reaper settles the reservation after its TTL; say so loudly.
        log.error(
            "interlock: could not %s reservation %s for %s: %s",
            "release" if failed else "commit",
            decision.reservation.id if decision.reservation else "?",
            self.model,
            describe(exc),
        )
