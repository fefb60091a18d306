"""The adapter template: a framework, a version range, patch targets declared once.

An adapter subclass states *data* — the framework's distribution, the supported version
range, the extra that installs it, and the :class:`PatchTarget` list — and one method,
:meth:`Adapter.wrap`, that builds the guarded replacement for one target. The base
class checks the installed version, installs the replacements, and removes them again:
both directions are derived from the same target list, so they cannot drift apart.

Example::

    adapter = adapter_for(tool)          # finds the adapter by the object's type
    adapter.attach(tool, guard)          # idempotent
    adapter.detach(tool)                 # restores exactly what was there
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar, cast, final

from interlock.core import registry
from interlock.core.action import normalise_arguments
from interlock.core.decision import Decision, Verdict
from interlock.core.phases import start_joined, tool_finished, tool_started
from interlock.core.registry import Coverage, LLMBinding, ToolBinding
from interlock.core.starting import STARTING, Starting
from interlock.errors import Blocked

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.guard import Guard

__all__ = [
    "Adapter",
    "CallKey",
    "Coverage",
    "LLMBinding",
    "Outcome",
    "PatchTarget",
    "ToolBinding",
    "adapter_for",
    "adecide_starting",
    "already_judged",
    "arun_settled",
    "call_key",
    "decide_starting",
    "inside_a_call",
    "judged_by",
    "pending_approval",
    "register_adapter",
    "run_settled",
    "verdict_outcome",
]

log = logging.getLogger("interlock")

T = TypeVar("T")

_MISSING: Final = object()


@final
@dataclass(frozen=True, slots=True)
class PatchTarget:
    """One attribute an adapter replaces: ``attr`` as defined by class ``owner``.

    The replacement is installed on the *instance* handed to ``attach`` (its
    ``__dict__``), so only that object is guarded, never every instance of ``owner``.
    """

    owner: type
    attr: str


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """What an adapter does with a decision: run the body, or refuse with ``error``
    (raise style) / ``message`` (message style, the text the model reads)."""

    run: bool
    error: Blocked | None = None
    message: str | None = None


def verdict_outcome(decision: Decision, action: Action | None = None) -> Outcome:
    """Map a decision to the framework idiom (DESIGN §2): allow runs; anything else
    carries the Blocked error and its message (reason, approval URL, cause)."""
    if decision.verdict is Verdict.ALLOW:
        return Outcome(run=True)
    from interlock.guard import raise_for

    try:
        raise_for(decision, action)
    except Blocked as exc:
        return Outcome(run=False, error=exc, message=str(exc))
    raise AssertionError("raise_for returned on a non-allow decision")  # pragma: no cover


# -- re-entrancy: a call judged by a guard is not judged again inside its body ----------

#: What identifies one call across layers: the tool's name and its arguments,
#: canonically serialised. The middleware that judged a call and the guarded tool it
#: then invokes see the same key; any other call made inside the body does not.
CallKey = tuple[str, str]

_JUDGED: contextvars.ContextVar[frozenset[tuple[int, CallKey]]] = contextvars.ContextVar(
    "interlock_judged", default=frozenset()
)


def pending_approval(decision: Decision) -> str | None:
    """The id of the approval a ``require_approval`` decision opened (or found) still
    pending — the one a human is to decide — else ``None``."""
    approval = decision.approval
    if (
        decision.verdict is Verdict.REQUIRE_APPROVAL
        and approval is not None
        and approval.id is not None
        and approval.status == "pending"
    ):
        return approval.id
    return None


def call_key(name: str, arguments: Any) -> CallKey:
    """The key of a call to ``name`` with ``arguments`` (a dict, or the JSON string a
    model emitted: both give the same key)."""
    try:
        text = json.dumps(
            dict(normalise_arguments(arguments)),
            sort_keys=True,
            separators=(",", ":"),
            default=repr,
        )
    except Exception:  # arguments nothing can serialise: they match only themselves
        text = f"<{id(arguments)}>"
    return (name, text)


def already_judged(guard: Guard, call: CallKey) -> bool:
    """True inside the body of this very call, which ``guard`` already allowed (the
    guarded tool under the middleware that judged it). Any other call — another tool,
    other arguments — made inside an allowed body is judged."""
    return (id(guard), call) in _JUDGED.get()


def inside_a_call(guard: Guard) -> bool:
    """True inside the body of any call ``guard`` allowed (an agent run as a tool: its
    "user message" is what the calling model wrote, not the user's words)."""
    key = id(guard)
    return any(owner == key for owner, _ in _JUDGED.get())


@contextlib.contextmanager
def judged_by(guard: Guard, call: CallKey | None) -> Iterator[None]:
    """Mark ``call`` as judged by ``guard`` for the enclosed body (per task and thread,
    via contextvars). ``None`` marks nothing."""
    if call is None:
        yield
        return
    token = _JUDGED.set(_JUDGED.get() | {(id(guard), call)})
    try:
        yield
    finally:
        _JUDGED.reset(token)


# -- settling budget reservations around a body ----------------------------------------


def _settle(guard: Guard, decision: Decision, *, spent: bool) -> None:
    """Commit (the body ran) or release (it raised) what an allowed decision holds; a
    failure is logged, never raised over the body's own result or error."""
    try:
        if spent:
            guard.commit(decision)
        else:
            guard.release(decision)
    except Exception:
        log.exception("interlock: could not settle the reservation of %s", decision.decision_id)


D = TypeVar("D", bound="Decision | None")


def decide_starting(guard: Guard, name: str, check: Callable[[], D]) -> tuple[D, bool]:
    """Run an adapter's ``check`` of a call to tool ``name`` whose body runs next, with
    :func:`run_settled`, if it is allowed: the allowed decision's commit then carries
    the body's ``tool_invoke`` (:mod:`interlock.core.starting`) — one durable write
    before the body, not two. The second value says it did: pass it on as
    ``run_settled(..., started=...)``. Only for a check whose allow always reaches
    ``run_settled`` (a start record whose body never runs would be left open); any
    other outcome (a refusal, a decision that does not stand) claims nothing or is
    closed here."""
    if guard.audit is None:
        return check(), False
    starting = Starting("tool_invoke", name)
    token = STARTING.set(starting)
    try:
        decision = check()
    finally:
        STARTING.reset(token)
    if starting.decision_id is None:
        return decision, False
    return decision, start_joined(guard, decision, starting)


async def adecide_starting(
    guard: Guard, name: str, check: Callable[[], Awaitable[D]]
) -> tuple[D, bool]:
    """The async twin of :func:`decide_starting` (for :func:`arun_settled`)."""
    if guard.audit is None:
        return await check(), False
    starting = Starting("tool_invoke", name)
    token = STARTING.set(starting)
    try:
        decision = await check()
    finally:
        STARTING.reset(token)
    if starting.decision_id is None:
        return decision, False
    return decision, start_joined(guard, decision, starting)


def run_settled(
    guard: Guard,
    decision: Decision,
    body: Callable[[], T],
    call: CallKey | None = None,
    *,
    started: bool = False,
) -> T:
    """Run an allowed body, then commit its reservation (release it on an error).
    ``call`` marks the body as inside that call (see :func:`already_judged`) and, when
    the guard has an event sink, names the ``tool_invoke`` / ``tool_result`` events.
    With telemetry, the body runs inside its ``execute_tool`` span. When the policy
    reads sessions, the call's session step is settled with what the body returns
    (its fingerprints) or raises. ``started``: the decision's commit carried the
    body's ``tool_invoke`` already (:func:`decide_starting`); else it is made durable
    here, before the body."""
    sessions = guard._sessions
    if sessions is not None:
        body = sessions.settling(decision, body)
    if guard.telemetry is not None:
        with guard._executing(decision, call[0] if call is not None else None):
            return _run_settled(guard, decision, body, call, started)
    return _run_settled(guard, decision, body, call, started)


def _run_settled(
    guard: Guard,
    decision: Decision,
    body: Callable[[], T],
    call: CallKey | None,
    recorded: bool = False,
) -> T:
    observed = call is not None and (guard.sink is not None or guard.audit is not None)
    with judged_by(guard, call):
        if decision.reservation is None and not observed:
            return body()
        started = 0
        try:
            if observed and call:
                started = tool_started(guard, decision, *call, recorded=recorded)
            result = body()
        except BaseException as exc:
            if decision.reservation is not None:
                _settle(guard, decision, spent=False)
            if observed and call:
                tool_finished(guard, decision, call[0], started, error=exc)
            raise
        if decision.reservation is not None:
            _settle(guard, decision, spent=True)
        if observed and call:
            tool_finished(guard, decision, call[0], started, result=result)
        return result


async def arun_settled(
    guard: Guard,
    decision: Decision,
    body: Callable[[], Awaitable[T]],
    call: CallKey | None = None,
    *,
    started: bool = False,
) -> T:
    """The async twin of :func:`run_settled` (settling runs off the event loop)."""
    sessions = guard._sessions
    if sessions is not None:
        body = sessions.asettling(decision, body)
    if guard.telemetry is not None:
        with guard._executing(decision, call[0] if call is not None else None):
            return await _arun_settled(guard, decision, body, call, started)
    return await _arun_settled(guard, decision, body, call, started)


async def _arun_settled(
    guard: Guard,
    decision: Decision,
    body: Callable[[], Awaitable[T]],
    call: CallKey | None,
    recorded: bool = False,
) -> T:
    observed = call is not None and (guard.sink is not None or guard.audit is not None)
    with judged_by(guard, call):
        if decision.reservation is None and not observed:
            return await body()
        started = 0
        try:  # (a durable tool_invoke: a commit, off the loop)
            if observed and call and recorded:  # durable with its decision already
                started = tool_started(guard, decision, *call, recorded=True)
            elif observed and call:
                started = await _started_off_loop(guard, decision, call)
            result = await body()
        except BaseException as exc:
            if decision.reservation is not None:
                await asyncio.to_thread(_settle, guard, decision, spent=False)
            if observed and call:
                tool_finished(guard, decision, call[0], started, error=exc)
            raise
        if decision.reservation is not None:
            await asyncio.to_thread(_settle, guard, decision, spent=True)
        if observed and call:
            tool_finished(guard, decision, call[0], started, result=result)
        return result


async def _started_off_loop(guard: Guard, decision: Decision, call: CallKey) -> int:
    """:func:`tool_started` for a coroutine: with an audit log, its durable record is
    committed on a worker thread, so the loop does not wait on the database."""
    if guard.audit is None or not guard.audit.waits:
        return tool_started(guard, decision, *call)
    name, arguments = call
    context = contextvars.copy_context()
    return await asyncio.to_thread(context.run, tool_started, guard, decision, name, arguments)


# -- the template ------------------------------------------------------------------------


@dataclass(slots=True)
class _Attached:
    obj: object  # held strongly until detach: pydantic models do not take weakrefs
    guard: Guard
    originals: dict[str, object] = field(default_factory=dict)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def _in_range(version: str, low: str, high: str) -> bool:
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover - packaging ships with pip's environments
        return _version_tuple(low) <= _version_tuple(version) < _version_tuple(high)
    return Version(low) <= Version(version) < Version(high)


class Adapter:
    """The template every framework adapter fills in.

    Subclasses set ``framework`` (a display name), ``distribution`` (the package whose
    version is checked), ``supported`` (``(lowest, below)``: inclusive, exclusive),
    ``extra`` and ``targets``, and implement :meth:`wrap`.
    """

    framework: ClassVar[str]
    distribution: ClassVar[str]
    supported: ClassVar[tuple[str, str]]
    extra: ClassVar[str]
    targets: ClassVar[tuple[PatchTarget, ...]]

    def __init__(self) -> None:
        self.check_version()
        self._attached: dict[int, _Attached] = {}

    @classmethod
    def check_version(cls) -> str:
        """The installed version; ImportError when missing or outside ``supported``."""
        low, high = cls.supported
        hint = f"pip install 'interlock[{cls.extra}]'"
        try:
            version = metadata.version(cls.distribution)
        except metadata.PackageNotFoundError:
            raise ImportError(
                f"the {cls.framework} adapter needs {cls.distribution}>={low},<{high}: {hint}"
            ) from None
        if not _in_range(version, low, high):
            raise ImportError(
                f"the {cls.framework} adapter supports {cls.distribution}>={low},<{high}, "
                f"not {version}: {hint}"
            )
        return version

    def can_wrap(self, obj: object) -> bool:
        return all(isinstance(obj, target.owner) for target in self.targets)

    def targets_for(self, obj: object) -> tuple[PatchTarget, ...]:
        """What :meth:`attach` patches on ``obj``: ``targets``, plus any an adapter
        finds only on some instances (detach restores exactly what was patched)."""
        return self.targets

    #: whether :meth:`llm_bindings` reports the object's model calls
    inspects_models: ClassVar[bool] = False

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """The tools of ``obj`` this adapter can guard, each marked ``guarded`` when its
        calls pass ``guard`` (``None``: any guard)."""
        return []

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        """The models ``obj`` calls, as :meth:`tool_bindings` (when
        ``inspects_models``)."""
        return []

    def coverage(self, obj: Any, guard: Guard | None = None) -> Coverage:
        return Coverage(
            self.framework,
            tuple(self.tool_bindings(obj, guard)),
            tuple(self.llm_bindings(obj, guard)),
            self.inspects_models,
        )

    def guarded_by(self, obj: object, guard: Guard | None) -> bool:
        """Whether ``obj`` is attached here (to ``guard``, or to any guard if ``None``)."""
        record = self._attached.get(id(obj))
        return record is not None and (guard is None or record.guard is guard)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        """The guarded replacement for ``target`` on ``obj``."""
        raise NotImplementedError

    def is_attached(self, obj: object) -> bool:
        return id(obj) in self._attached

    def attach(self, obj: Any, guard: Guard) -> Any:
        """Guard ``obj`` in place and return it. Attaching again with the same guard
        changes nothing; attaching with another guard is refused (detach first)."""
        if not self.can_wrap(obj):
            raise TypeError(f"the {self.framework} adapter cannot guard a {type(obj).__name__}")
        record = self._attached.get(id(obj))
        if record is not None:
            if record.guard is not guard:
                raise ValueError("this object is attached to another guard; detach it first")
            return obj
        record = _Attached(obj, guard)
        instance_dict = vars(obj)
        for target in self.targets_for(obj):
            record.originals[target.attr] = instance_dict.get(target.attr, _MISSING)
            original = getattr(obj, target.attr)
            object.__setattr__(obj, target.attr, self.wrap(target, obj, original, guard))
        self._attached[id(obj)] = record
        return obj

    def detach(self, obj: Any) -> Any:
        """Remove what :meth:`attach` installed, restoring exactly the originals.
        Detaching an object that is not attached changes nothing."""
        record = self._attached.pop(id(obj), None)
        if record is None:
            return obj
        self.restore(obj, record.originals)
        return obj

    def originals(self, obj: object) -> dict[str, object] | None:
        """What :meth:`attach` replaced on ``obj`` (for :meth:`restore`), or ``None``
        when it is not attached."""
        record = self._attached.get(id(obj))
        return None if record is None else dict(record.originals)

    @staticmethod
    def restore(obj: object, originals: dict[str, object]) -> None:
        """Put ``originals`` (from :meth:`originals`) back on ``obj`` — the attached
        object itself, or a copy of it that carried its replacements along."""
        instance_dict = vars(obj)
        for attr, original in originals.items():
            if original is _MISSING:
                instance_dict.pop(attr, None)
            else:
                object.__setattr__(obj, attr, original)


# -- finding the adapter for an object, importing frameworks only on demand -------------

A = TypeVar("A", bound=Adapter)


def register_adapter(adapter: A) -> A:
    """Make ``adapter`` the one :func:`adapter_for` returns for its framework (in the
    registry, :mod:`interlock.core.registry`)."""
    return registry.register_adapter(adapter)


def adapter_for(obj: object) -> Adapter:
    """The adapter that can guard ``obj``, importing its module on first use."""
    return cast("Adapter", registry.adapter_for(obj))
