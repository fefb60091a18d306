"""Session conditions, as the engine tests them: what a session already did and read.

A rule's ``session:`` (``labels``, ``after``, ``flows_from``, ``provenance``) and the
session functions of CEL (``session.labels``, ``session.ran``, ``session.count``,
``flows_from``, ``flows_from_label``, ``provenance``) read the :class:`SessionFacts` of
the check: the session's view, taken before the check by the guard (or by
``interlock policy test``), set in :data:`CURRENT` for the time of one evaluation.
The engine stays pure: the facts are an input of the check, like its arguments.

- A check with no ``session_id`` in its trusted context has an empty history.
- A check of a session whose history could not be read (:class:`SessionFacts` with no
  view), or made with no facts at all, cannot test a session condition: the rule is
  unevaluable (an :class:`~interlock.errors.EvaluationError` naming the session), and
  the verdict undetermined unless a stricter match already decides it — never allow.

Example::

    from interlock.policy.sessionrules import SessionFacts, session_scope
    from interlock.session.history import SessionView

    with session_scope(SessionFacts.of(SessionView("acme", "s-1"))):
        ...  # evaluate(action, policy) reads the session here
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import KINDS
from interlock.core.decision import Decision, Verdict
from interlock.errors import EvaluationError
from interlock.policy.engine import facts_for
from interlock.policy.matchers import GlobSet
from interlock.session import current as _current
from interlock.session.fingerprints import carries, packed_probe, packed_seams, texts_of
from interlock.session.history import (
    NewStep,
    SessionView,
    Step,
    StepKind,
    StepPrints,
    slot_maker,
    untracked,
)

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.policy.compiled import CompiledPolicy, CompiledRule
    from interlock.policy.extract import Facts
    from interlock.session.fingerprints import Probe

__all__ = [
    "CURRENT",
    "NOT_READ",
    "SESSION_FIELDS",
    "SESSION_FUNCTIONS",
    "SESSION_METHODS",
    "STEP_KINDS",
    "VERDICT_TEXT",
    "AfterTest",
    "FlowTest",
    "ProvenanceTest",
    "SessionFacts",
    "SessionSpec",
    "SessionTest",
    "StepSelector",
    "cannot_tell",
    "cel_value",
    "dropped_steps",
    "error_data",
    "facts_for_check",
    "joined_to_tails",
    "judgeable_data",
    "new_facts",
    "new_step",
    "provenance_labels",
    "reads_session",
    "session_scope",
    "step_kind",
    "step_labels",
]

#: The session facts of the check being evaluated (None: no session check runs): the
#: variable of :mod:`interlock.session.current`, with its type.
CURRENT: Final[ContextVar[SessionFacts | None]] = _current.CURRENT


@dataclass(slots=True)
class SessionFacts:
    """What one check knows of its session: the view (``None``: unreadable, with the
    ``problem``), the time of the check, and the probes of its arguments (made once
    per check, whatever number of rules read them).

    It is also the guard's session check in progress (:data:`CURRENT`, set once a
    check): the guard that runs it (a check inside it by that guard is that check;
    another guard's check — an in-process server's — is a check of its own; None
    outside a guard, as in ``interlock policy test``), the guard's recorder, and the
    check's step once it rides the decision's record (``JoinedStep``)."""

    view: SessionView | None
    now: float
    problem: str | None = None
    #: made by the first probe (a check no flow or provenance test reads makes none)
    _probes: dict[Any, Any] | None = None
    guard: object = None
    recorder: Any = None
    join: Any = None
    #: False: the view was not read, for no rule reading sessions could concern the
    #: call (``SessionRecorder.reads``); ``view`` is None, and a rule that reads it
    #: anyway is unevaluable (never allowed), but the history is not down
    read: bool = True
    #: the call the engine judged in this check, the policy, and the facts it read of
    #: it (the step's label rules read the same facts: not extracted twice)
    evaluated: tuple[Any, Any, Facts] | None = None

    @classmethod
    def of(cls, view: SessionView, now: float | None = None) -> SessionFacts:
        return cls(view, time.time() if now is None else now)

    @classmethod
    def unavailable(cls, session_id: str, problem: str) -> SessionFacts:
        return cls(None, time.time(), f"session {session_id!r}: {problem}")

    @classmethod
    def unread(cls, session_id: str) -> SessionFacts:
        """The facts of a check that no rule reading sessions can concern: no view."""
        return cls(None, 0.0, NOT_READ, read=False)

    def probe_of(self, key: Any, value: Any, how: Callable[[Any], Probe] | None = None) -> Probe:
        probes = self._probes
        if probes is None:
            probes = self._probes = {}
        found = probes.get(key)
        if found is None:
            found = probes[key] = (how or probed)(value)
        return found


#: The fields of :class:`SessionFacts`, in order.
_FACTS_FIELDS: Final = tuple(f.name for f in fields(SessionFacts))
#: ``SessionFacts(...)`` with every field given, in order: one C call where the
#: extension is built (the constructor is the reference it is tested against).
new_facts: Final[Callable[..., SessionFacts]] = slot_maker(
    SessionFacts, _FACTS_FIELDS, SessionFacts
)

#: Why a check's facts hold no view when no rule reading sessions could concern it.
NOT_READ: Final = "the session was not read for this call: no rule that reads sessions names it"


def reads_session(rule: CompiledRule) -> bool:
    """Whether ``rule`` reads the session's view: a ``session:`` condition, or a
    ``when:`` calling a session function of CEL."""
    return rule.session is not None or bool(getattr(rule.when, "session", ()))


def reads_labels_only(rule: CompiledRule) -> bool:
    """Whether all ``rule`` reads of the session's view is its labels: a ``session:``
    with ``labels`` alone, and a ``when:`` whose only session function is
    ``session.labels`` (such a rule can be judged on
    :meth:`~interlock.session.history.MemoryHistory.labels_view`)."""
    test = rule.session
    if test is not None and (
        test.after is not None or test.flows_from is not None or test.provenance is not None
    ):
        return False
    return all(function in SESSION_FIELDS for _, function, _ in getattr(rule.when, "session", ()))


#: Probes of short argument texts already seen, by value (an agent sends the same
#: recipient, URL, path or command again and again): bounded (1024 texts of at most
#: 256 characters: a few MiB at worst), emptied whole when full. Packed where the
#: extensions are built (:func:`~interlock.session.fingerprints.packed_probe`): a value
#: seen once costs its probe's making and freeing, and as ints that was much of a
#: new value's check.
_PROBED: dict[str, Probe] = {}
_PROBED_KEPT: Final = 1024
_PROBED_LONGEST: Final = 256  # characters: a longer text is probed each time


def probed(value: Any) -> Probe:
    """``packed_probe(value)``, from the cache for a string seen before — or a number
    or a bool, whose probe is its text's (``texts_of`` gives ``str(value)``)."""
    kind = type(value)
    if kind is not str:
        if kind is not int and kind is not float and kind is not bool:
            return packed_probe(value)
        value = str(value)
    if len(value) > _PROBED_LONGEST:
        return packed_probe(value)
    found = _PROBED.get(value)
    if found is None:
        found = packed_probe(value)
        if len(_PROBED) >= _PROBED_KEPT:
            _PROBED.clear()
        _PROBED[value] = untracked(found)  # kept: out of the collector's walk
    return found


_SEAMED: dict[tuple[str, ...], Probe] = {}


def seamed(texts: tuple[str, ...]) -> Probe:
    """``packed_seams(texts)``, from a cache like :func:`probed`'s for short texts."""
    if sum(map(len, texts)) > _PROBED_LONGEST:
        return packed_seams(texts)
    found = _SEAMED.get(texts)
    if found is None:
        found = packed_seams(texts)
        if len(_SEAMED) >= _PROBED_KEPT:
            _SEAMED.clear()
        _SEAMED[texts] = untracked(found)
    return found


_EMPTY: Final = SessionView("", "")


@contextmanager
def session_scope(facts: SessionFacts | None) -> Iterator[None]:
    """Evaluate with ``facts`` as the session of the check."""
    token = CURRENT.set(facts)
    try:
        yield
    finally:
        CURRENT.reset(token)


def facts_for_check(session_id: Any, rule_id: str) -> tuple[SessionView, SessionFacts | None]:
    """The view a rule reads for a check of ``session_id``; raises EvaluationError
    when it has none."""
    state = CURRENT.get()
    if state is None:
        if session_id is None:
            return _EMPTY, None  # no session: an empty history (documented)
        raise EvaluationError(
            f"rule {rule_id!r} reads session {session_id!r}, and no session history was "
            "given to this check",
            rule_id=rule_id,
        )
    if state.view is None:
        raise EvaluationError(
            f"rule {rule_id!r} reads the session history, which is unavailable ({state.problem})",
            rule_id=rule_id,
        )
    return state.view, state


def judgeable_data(view: SessionView, rule_id: str) -> None:
    """Raise EvaluationError when the session's earlier data was dropped (a demoted
    in-memory session): a data flow or provenance on it cannot be told, and a miss
    would allow."""
    if view.lost:
        raise EvaluationError(
            f"rule {rule_id!r} reads the data session {view.session_id!r} brought in, which "
            "the in-memory history dropped to stay within its bounds (max_sessions, "
            "max_fingerprints): cannot tell",
            rule_id=rule_id,
        )


def dropped_steps(view: SessionView) -> bool:
    """Whether steps of the session left its history (past ``max_steps``, or a demoted
    in-memory session): seqs are gapless from 1, so the oldest kept one tells."""
    steps = view.steps
    return (steps[0].seq if steps else view.next_seq) > 1


def dropped_may_carry(
    view: SessionView,
    probes: Iterable[Probe],
    names: Callable[[str, str], bool] | None = None,
    labels: frozenset[str] = frozenset(),
) -> bool:
    """Whether data the session's dropped steps brought in may be in a value (its
    ``probes``): False only when the dropped data is followed (the view's past keeps
    it, :class:`~interlock.session.history.DroppedData`) and no probe meets it — or
    no dropped step with data is of a kind and name ``names`` accepts or carries
    every one of ``labels`` (a step not known may be any). A caller asks only when
    steps were dropped (:func:`dropped_steps`)."""
    data = view.past.data
    if data is None or data.blind:
        return True
    if not data.prints:
        return False  # the dropped steps brought nothing in (NO_DATA too)
    if not data.anonymous:
        if labels and not labels <= data.labels:
            return False
        if names is not None and not any(names(kind, name) for kind, name in tuple(data.names)):
            return False
    prints = data.prints
    return any(not prints.isdisjoint(probe) for probe in probes)


def cannot_tell(view: SessionView, rule_id: str, what: str) -> EvaluationError:
    """The error of a session condition that only the dropped steps could decide: a
    miss there would allow (an agent's cheap calls push a secret read, or the deletes
    a cap counts, out of the bounded history)."""
    return EvaluationError(
        f"rule {rule_id!r}: {what} in session {view.session_id!r} cannot be told: its "
        "oldest steps left the bounded history (session.max_steps)",
        rule_id=rule_id,
    )


def error_data(error: object) -> object:
    """What a failed body let out: the text of its error and, when it carries one, the
    result it failed with (MCP's ``isError`` result); nothing for no error."""
    if not isinstance(error, BaseException):
        return None
    return [str(error), getattr(error, "result", None)]


def _executed_calls(view: SessionView) -> Iterator[Step]:
    for step in view.steps:
        if step.executed and step.kind != "input":
            yield step


@dataclass(frozen=True, slots=True)
class StepSelector:
    """Which steps: name globs, kinds, and labels the step carries (all of)."""

    names: GlobSet | None = None
    kinds: frozenset[str] | None = None
    labels: frozenset[str] = frozenset()

    def matches(self, step: Step) -> bool:
        if self.kinds is not None and step.kind not in self.kinds:
            return False
        if self.labels and not self.labels <= step.labels:
            return False
        return self.names is None or self.names.matches(step.name)

    def matches_name(self, kind: str, name: str) -> bool:
        """Whether a step of this kind and name may match (its labels aside)."""
        if self.kinds is not None and kind not in self.kinds:
            return False
        return self.names is None or self.names.matches(name)


@dataclass(frozen=True, slots=True)
class AfterTest:
    """At least ``at_least`` executed call steps match, among the last ``within``
    steps and the last ``within_time`` seconds."""

    selector: StepSelector
    within: int | None = None
    within_time: float | None = None
    at_least: int = 1

    def count(self, view: SessionView, now: float) -> int:
        """The matching executed call steps in the window: the kept ones, and those the
        session's past counts when the window takes them all in."""
        return self.tally(view, now)[0]

    def tally(self, view: SessionView, now: float) -> tuple[int, bool]:
        """:meth:`count`, and whether it is exact: False when the window reaches back
        to dropped steps the past cannot count (overflowed, a ``within`` longer than
        the kept steps, or a ``within_time`` that takes a past entry in part)."""
        found = self._kept_count(view, now)
        if not self.reaches_dropped(view, now):
            return found, True
        past = view.past
        if self.within is not None or past.overflowed:  # the past has no positions
            return found, False
        since = None if self.within_time is None else now - self.within_time
        selector = self.selector
        exact = True
        for entry in past.counts:
            if not selector.matches_name(entry.kind, entry.name):
                continue
            if selector.labels and not selector.labels <= entry.labels:
                continue
            if since is None or entry.first_at >= since:
                found += entry.n
            elif entry.last_at >= since:
                exact = False  # some of them in the window, some not
        return found, exact

    def _kept_count(self, view: SessionView, now: float) -> int:
        steps = view.steps
        if self.within is not None:
            steps = steps[-self.within :]
        since = None if self.within_time is None else now - self.within_time
        found = 0
        for step in steps:
            if not step.executed or step.kind == "input":
                continue
            if since is not None and step.at < since:
                continue
            if self.selector.matches(step):
                found += 1
        return found

    def holds(self, view: SessionView, now: float, rule_id: str = "") -> bool:
        """Whether enough steps match; raises EvaluationError when too few are counted
        and the window reaches back to dropped steps the session's past cannot count."""
        found, exact = self.tally(view, now)
        if found >= self.at_least:
            return True
        if not exact:
            raise cannot_tell(view, rule_id, "whether enough steps ran")
        return False

    def reaches_dropped(self, view: SessionView, now: float) -> bool:
        """Whether the window (``within`` steps, ``within_time`` seconds) reaches back
        past the kept steps to dropped ones."""
        if not dropped_steps(view):
            return False
        steps = view.steps
        if self.within is not None and self.within <= len(steps):
            return False
        # dropped steps are older than the oldest kept one
        return self.within_time is None or not steps or steps[0].at >= now - self.within_time


def _argument_probes(
    args: Any, names: tuple[str, ...] | None, state: SessionFacts | None, seams: bool = False
) -> list[Probe]:
    """The probes of the named top-level arguments (all, when ``names`` is None), and
    of their texts joined in order (a value split across two arguments). With
    ``seams`` (a test of whether any probe meets the data), the joined texts' probe is
    only what the texts' own probes lack (:func:`probe_seams`).

    A short text's probe comes from the cache of values seen before (:func:`probed`)
    when it is there — the same probe, without the check's own cache (a key and a
    lookup more); anything else from the check's cache (made once, whatever number of
    rules read it)."""
    probe_of = state.probe_of if state is not None else None
    if type(args) is not dict and not isinstance(args, Mapping):
        return [probe_of(("*", None), args) if probe_of is not None else probed(args)]
    chosen = list(args) if names is None else [n for n in names if n in args]
    values = [args[name] for name in chosen]
    out: list[Probe] = []
    seen = _PROBED.get
    for name, value in zip(chosen, values, strict=True):
        found = seen(value) if type(value) is str else None
        if found is None:
            found = probe_of(("arg", name), value) if probe_of is not None else probed(value)
        out.append(found)
    if len(chosen) > 1:
        # the texts of str values are the values themselves (texts_of's first case)
        plain = all(type(value) is str for value in values)
        if seams:
            texts = (
                tuple(values)
                if plain
                else tuple(text for value in values for text in texts_of(value))
            )
            found = _SEAMED.get(texts)
            if found is None:
                found = (
                    probe_of(("seams", tuple(chosen)), texts, seamed)
                    if probe_of is not None
                    else seamed(texts)
                )
        else:
            joined = "".join(
                values if plain else [text for value in values for text in texts_of(value)]
            )
            found = seen(joined)
            if found is None:
                found = (
                    probe_of(("joined", tuple(chosen)), joined)
                    if probe_of is not None
                    else probed(joined)
                )
        out.append(found)
    return out


#: The union of every probe :func:`_argument_probes` makes of short texts, by the
#: texts (in order), with ``seams`` and without: bounded as :data:`_PROBED`.
_UNIONS: dict[Any, Probe] = {}
_SCALARS: Final = object()  # the marker of the keys of :func:`_scalar_texts`' unions
_JOINED_UNIONS: dict[Any, Probe] = {}


def _union_of(args: dict[str, Any], names: tuple[str, ...] | None, seams: bool) -> Probe | None:
    """Every fingerprint of the probes ``_argument_probes(args, names, ..., seams)``
    makes, when the chosen values are short strings, numbers, bools or None (None
    otherwise): an argument list disjoint from the session's index carries nothing of
    it."""
    if names is None:
        values = tuple(args.values())  # every argument, in order
    else:
        values = tuple([args[name] for name in names if name in args])
    kept = _UNIONS if seams else _JOINED_UNIONS
    try:
        found = kept.get(values)
    except TypeError:  # an unhashable value
        return None
    if found is not None:
        return found
    key: Any = values
    texts: tuple[str, ...] = values
    if any(type(value) is not str for value in values):
        scalar_texts = _scalar_texts(values)
        if scalar_texts is None:
            return None
        texts = scalar_texts
        key = (_SCALARS, len(values), texts)
        found = kept.get(key)
        if found is not None:
            return found
    if sum(map(len, texts)) > _PROBED_LONGEST:
        return None
    probes = [probed(text) for text in texts]
    if len(values) > 1:
        probes.append(seamed(texts) if seams else probed("".join(texts)))
    found = _union(probes)
    if len(kept) >= _PROBED_KEPT:
        kept.clear()
    kept[key] = untracked(found)
    return found


def _union(probes: list[Probe]) -> Probe:
    """The union of probes, of their kind: packed (``PrintSet.update`` reads a packed
    one without making its ints), or a frozenset (none given: empty). The one given
    alone is returned as it is — a probe is never changed."""
    if len(probes) < 2:
        return probes[0] if probes else frozenset()
    first = probes[0]
    if isinstance(first, frozenset):
        return first.union(*probes[1:])
    out = first.copy()
    out.update(*probes[1:])
    return out


def _scalar_texts(values: tuple[Any, ...]) -> tuple[str, ...] | None:
    """The texts of short values some of which are numbers, bools or None (an amount,
    an id, a flag: None for anything else). A number's or a bool's probe is its
    text's, None's is empty, and the joined texts leave None out (``texts_of``), so
    the union is a function of the texts and of how many values there are: its key in
    :func:`_union_of`, behind a marker no argument value can be (never equal to the
    values of a call — ``1`` and ``True`` are equal as keys, their texts are not; a
    tuple argument could spell the same texts)."""
    texts: list[str] = []
    for value in values:
        kind = type(value)
        if kind is str:
            texts.append(value)
        elif kind is int or kind is float or kind is bool:
            texts.append(str(value))
        elif value is not None:
            return None
    return tuple(texts)


#: The key of a check's probes of its arguments joined to the session's tails, in
#: :attr:`SessionFacts._probes` (made, and the tails advanced, once a check).
_TAILS_KEY: Final = ("tails",)


def joined_to_tails(facts: SessionFacts) -> bool:
    """Whether the check of ``facts`` joined its arguments to the session's tails (a
    flow test read them): its pieces are the ones :mod:`interlock.session.pieces` placed
    last, to keep when the call is allowed."""
    probes = facts._probes
    return probes is not None and _TAILS_KEY in probes


def _joined_to_tails(
    view: SessionView, args: Any, names: tuple[str, ...] | None, state: SessionFacts | None
) -> list[Probe]:
    """The probes of the named arguments (all, when ``names`` is None) joined to what
    the same arguments of the session's earlier calls sent
    (:mod:`interlock.session.tails`): empty outside a guard's check."""
    recorder = state.recorder if state is not None else None
    tails = getattr(recorder, "tails", None)
    if tails is None or state is None:
        return []
    probes = state._probes
    if probes is None:
        probes = state._probes = {}
    found = probes.get(_TAILS_KEY)
    if found is None:
        found = probes[_TAILS_KEY] = tails.advance(view.tenant, view.session_id, args)
    if not found:
        return []
    if names is None:
        return [joined for _, joined in found]
    return [joined for name, joined in found if name in names]


@dataclass(frozen=True, slots=True)
class FlowTest:
    """This call's arguments carry data an earlier executed step matching the selector
    returned."""

    selector: StepSelector
    args: tuple[str, ...] | None = None

    def _may_match(self, view: SessionView) -> bool:
        """Whether a step of the view may match the selector, from its index (when it
        keeps one): no step with the labels, or of the kind and name, matches none."""
        index = view.index
        if index is None:
            return True
        selector = self.selector
        if selector.labels and not selector.labels <= index.labels:
            return False
        if selector.names is None and selector.kinds is None:
            return bool(index.names)  # any (kind, name) matches
        # a copy (one C call): the index may grow in another thread meanwhile
        return any(selector.matches_name(kind, name) for kind, name in tuple(index.names))

    def holds(self, view: SessionView, args: Any, state: SessionFacts | None) -> bool:
        if not view.sources:
            return False
        index = view.index
        if index is not None:
            # self._may_match, its usual case inlined (a selector of labels only)
            selector = self.selector
            if selector.labels and not selector.labels <= index.labels:
                return False
            if selector.names is not None or selector.kinds is not None:
                if not self._may_match(view):
                    return False
            elif not index.names:
                return False
        # view.may_hold, inlined: a view's sources were in its index before it was
        # handed out, so an index not legacy then has every fingerprint they hold
        prints = None if index is None or index.legacy else index.prints
        joined = _joined_to_tails(view, args, self.args, state)
        if prints is not None and type(args) is dict:
            union = _union_of(args, self.args, True)
            if (
                union is not None
                and prints.isdisjoint(union)
                and (not joined or all(map(prints.isdisjoint, joined)))
            ):
                return False  # the usual benign call: one lookup, one isdisjoint
        sources: list[StepPrints] | None = None
        probes = _argument_probes(args, self.args, state, seams=True)
        for probed in probes + joined if joined else probes:
            if prints is not None and prints.isdisjoint(probed):
                continue  # one isdisjoint against the whole session
            if sources is None:
                sources = [  # a failed call's fingerprints are of the error it raised
                    step.fingerprints
                    for step in view.sources  # the steps with fingerprints
                    if step.kind != "input" and self.selector.matches(step)
                ]
            if any(carries(probed, data) for data in sources):
                return True
        return False

    def dropped_may_carry(self, view: SessionView, args: Any, state: SessionFacts | None) -> bool:
        """Whether data a dropped step matching the selector brought in may be in the
        arguments (:func:`dropped_may_carry` with this test's probes)."""
        selector = self.selector
        if view.past.data is None or view.past.data.blind:
            return True
        names = None
        if selector.names is not None or selector.kinds is not None:
            names = selector.matches_name
        joined = _joined_to_tails(view, args, self.args, state)
        if type(args) is dict:
            union = _union_of(args, self.args, True)
            if union is not None:
                return dropped_may_carry(view, (union, *joined), names, selector.labels)
        probes = _argument_probes(args, self.args, state, seams=True) + joined
        return dropped_may_carry(view, probes, names, selector.labels)


def provenance_labels(view: SessionView, probed: Probe) -> frozenset[str]:
    """The labels of the untrusted sources a value (its probe) came from: empty when
    nothing holds it, or when the trusted inputs hold it (the user's own words win).

    The user's words win only where they hold the value at least as much as the
    untrusted source does: of the fingerprints of the value a source holds, more
    must not be missing from the trusted inputs than are found in them. A page's
    ``ops@corp.example.evil.io`` holds a run of the system prompt
    (``ops@corp.example``) but is the page's; a recipient the user typed that a page
    also names (or extends) is the user's — also once the user's request has left the
    window (the session's past keeps the dropped trusted inputs' fingerprints)."""
    if not view.may_hold(probed):  # no step but the trusted inputs holds any of it
        return frozenset()
    if type(probed) is not frozenset:  # packed: its ints made here, where it was found
        probed = frozenset(probed)
    trusted: set[int] = set()
    sources: list[tuple[frozenset[int], frozenset[str]]] = []
    for step in view.sources:  # the steps with fingerprints
        prints = step.fingerprints
        # the step's isdisjoint: a packed one (FrozenPrints) looks the smaller side up,
        # where the probe's would make an int of each of its values
        if prints.isdisjoint(probed):
            continue
        held = probed & prints  # a frozenset (FrozenPrints gives one too)
        if step.kind == "input" and step.trusted:
            trusted |= held
        else:
            sources.append((held, step.labels))
    if not sources:
        return frozenset()
    data = view.past.data
    if data is not None and data.trusted:  # the user's words that left the window
        trusted.update(filter(data.trusted.__contains__, probed))
    found: set[str] = set()
    for held, labels in sources:
        if len(held - trusted) > len(held & trusted):
            found |= labels
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class ProvenanceTest:
    """One of ``args`` carries data a step labelled with one of ``sources`` brought in,
    and no trusted input holds it."""

    args: tuple[str, ...]
    sources: frozenset[str]

    def holds(self, view: SessionView, args: Any, state: SessionFacts | None) -> bool:
        if not view.sources or (type(args) is not dict and not isinstance(args, Mapping)):
            return False
        index = view.index
        if index is not None:
            if index.labels.isdisjoint(self.sources):
                return False  # no step carries one of those labels
            if not index.legacy and type(args) is dict:
                # every probe disjoint from the index: provenance_labels finds none
                union = _union_of(args, self.args, False)
                if union is not None and index.prints.isdisjoint(union):
                    return False
        for probed in _argument_probes(args, self.args, state):
            if provenance_labels(view, probed) & self.sources:
                return True
        return False

    def dropped_may_carry(self, view: SessionView, args: Any, state: SessionFacts | None) -> bool:
        """Whether data a dropped step with one of ``sources`` brought in may be in one
        of ``args`` (:func:`dropped_may_carry` with this test's probes)."""
        data = view.past.data
        if data is None or data.blind:
            return True
        if not data.prints or (type(args) is not dict and not isinstance(args, Mapping)):
            return False
        if not data.anonymous and data.labels.isdisjoint(self.sources):
            return False  # no dropped step carried one of those labels
        if type(args) is dict:
            union = _union_of(args, self.args, False)
            if union is not None:
                return dropped_may_carry(view, (union,))
        return dropped_may_carry(view, _argument_probes(args, self.args, state))


@dataclass(frozen=True, slots=True)
class SessionTest:
    """A rule's ``session:``: every part given must hold."""

    rule_id: str
    labels: frozenset[str] = frozenset()
    after: AfterTest | None = None
    flows_from: FlowTest | None = None
    provenance: ProvenanceTest | None = None

    def test(self, facts: Facts) -> bool:
        state = CURRENT.get()
        view = state.view if state is not None else None
        if view is None:  # facts_for_check's usual case is the one above
            view, state = facts_for_check(getattr(facts.context, "session_id", None), self.rule_id)
        labels = self.labels
        if labels and not labels <= view.labels:
            return False
        after = self.after
        if after is not None:
            now = state.now if state is not None else time.time()
            if not after.holds(view, now, self.rule_id):
                return False
        flows = self.flows_from
        provenance = self.provenance
        if flows is None and provenance is None:
            return True
        if view.lost:
            judgeable_data(view, self.rule_id)  # raises
        if flows is not None and not flows.holds(view, facts.args, state):
            steps = view.steps
            if (steps[0].seq if steps else view.next_seq) > 1 and flows.dropped_may_carry(
                view, facts.args, state
            ):  # dropped_steps, inlined
                raise cannot_tell(view, self.rule_id, "whether the arguments carry earlier data")
            return False
        if provenance is None or provenance.holds(view, facts.args, state):
            return True
        if dropped_steps(view) and provenance.dropped_may_carry(view, facts.args, state):
            raise cannot_tell(view, self.rule_id, "where the arguments came from")
        return False


# -- the session functions of CEL -------------------------------------------------------

#: ``session.<field>`` with no argument, ``session.<method>("...")`` and the free
#: functions, each taking one string literal.
SESSION_FIELDS: Final = frozenset({"labels"})
SESSION_METHODS: Final = frozenset({"ran", "count"})
SESSION_FUNCTIONS: Final = frozenset({"flows_from", "flows_from_label", "provenance"})


def cel_value(
    function: str,
    argument: str,
    session_id: Any,
    args: Any,
    rule_id: str,
) -> Any:
    """The value of one session function of CEL for the current check."""
    view, state = facts_for_check(session_id, rule_id)
    if function == "labels":
        return sorted(view.labels)
    dropped = dropped_steps(view)
    if function in ("ran", "count"):
        test = AfterTest(StepSelector(names=GlobSet.of(argument)))
        found, exact = test.tally(view, 0.0)
        if function == "ran" and found:
            return True
        if not exact:  # a lower bound only: the past cannot count what was dropped
            raise cannot_tell(view, rule_id, f"session.{function}({argument!r})")
        return found > 0 if function == "ran" else found
    judgeable_data(view, rule_id)  # the rest read the data the session brought in
    if function in ("flows_from", "flows_from_label"):
        if function == "flows_from":
            selector = StepSelector(names=GlobSet.of(argument))
        else:
            selector = StepSelector(labels=frozenset([argument]))
        flow = FlowTest(selector)
        if flow.holds(view, args, state):
            return True
        if dropped and flow.dropped_may_carry(view, args, state):
            raise cannot_tell(view, rule_id, f"{function}({argument!r})")
        return False
    # provenance("arg")
    if not isinstance(args, Mapping) or argument not in args:
        return []
    value = args[argument]
    value_probe = state.probe_of(("arg", argument), value) if state is not None else probed(value)
    if dropped and dropped_may_carry(view, (value_probe,)):
        # the labels found may lack those of dropped sources
        raise cannot_tell(view, rule_id, f"provenance({argument!r})")
    return sorted(provenance_labels(view, value_probe))


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a policy keeps of sessions: the bounds of its history, its label rules
    (compiled as rules, each with what it attaches and clears) and its tools' labels."""

    max_steps: int = 200
    expire_after: float = 24 * 3600.0
    #: flows_from joins an argument to the same argument's earlier values
    #: (:mod:`interlock.session.tails`)
    join_calls: bool = True
    label_rules: tuple[CompiledRule, ...] = ()
    tool_labels: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: (kind, name) -> whether a label rule may apply to such a call (cached: a call no
    #: label rule names needs no facts built for its labels)
    _named: dict[tuple[str, str], bool] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )
    #: whether a label rule reads the session's view (its facts are set while the
    #: label rules are tested only then)
    label_rules_read_sessions: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        reads = any(reads_session(rule) for rule in self.label_rules)
        object.__setattr__(self, "label_rules_read_sessions", reads)

    def may_label(self, kind: str, name: str) -> bool:
        """Whether a label rule may apply to a call of this kind and name (any scope)."""
        key = (kind, name)
        found = self._named.get(key)
        if found is None:
            found = any(
                (rule.kinds is None or kind in rule.kinds)
                and (rule.names is None or rule.names.matches(name))
                for rule in self.label_rules
            )
            if len(self._named) >= 4096:
                self._named.clear()
            self._named[key] = found
        return found

    def labels_for(self, facts: Facts) -> tuple[frozenset[str], frozenset[str]]:
        """The labels an allowed call (its facts) attaches and clears. A label rule
        that cannot be evaluated attaches its labels and clears nothing (the stricter
        reading). (Frozen sets grown only by a rule that applies: the tool's own labels
        as they are when none does.)"""
        attach = frozenset(self.tool_labels.get(facts.name, _NO_LABELS))
        clear = _NO_LABELS
        kind, name, scope = facts.kind, facts.name, facts.scope
        for rule in self.label_rules:
            if not rule.applies_to(kind, name, scope):
                continue
            try:
                hit = rule.test(facts)
            except Exception:
                attach |= rule.attach
                continue
            if hit:
                attach |= rule.attach
                clear |= rule.clear
        return attach, clear


#: the kinds a call step keeps, an action's (any other is kept as ``tool``:
#: :func:`step_kind`)
STEP_KINDS: Final = KINDS
#: a verdict's text, without the enum's ``value`` descriptor on every step
_VERDICT_TEXT: Final = {verdict: verdict.value for verdict in Verdict}
_ALLOW: Final = Verdict.ALLOW
_NO_LABELS: Final[frozenset[str]] = frozenset()


#: the fields new_step gives a NewStep, in order (the others keep their defaults)
_GIVEN: Final = ("kind", "name", "verdict", "decision_id", "labels", "clears")


def _step_maker() -> Callable[..., NewStep]:
    """``NewStep(kind, name, verdict, decision_id, labels, clears)``, every other field
    at its default, made without the frozen dataclass's ``__init__`` (an
    ``object.__setattr__`` per field: about 1 µs a step on a slow core): each slot is
    set through its own descriptor — the object is the same, field for field. The
    plain constructor when NewStep is not such a dataclass (a ``__post_init__``, a
    default factory, a field new_step does not give and that has no default)."""
    plain: Callable[..., NewStep] = NewStep
    if hasattr(NewStep, "__post_init__") or not hasattr(NewStep, "__slots__"):
        return plain
    declared = fields(NewStep)
    if tuple(f.name for f in declared[: len(_GIVEN)]) != _GIVEN:
        return plain
    rest = declared[len(_GIVEN) :]
    if any(f.default is MISSING or f.default_factory is not MISSING for f in rest):
        return plain
    slots = NewStep.__dict__
    set_kind, set_name, set_verdict, set_id, set_labels, set_clears = (
        slots[name].__set__ for name in _GIVEN
    )
    rest_set = tuple((slots[f.name].__set__, f.default) for f in rest)
    new = object.__new__

    def made(
        kind: StepKind,
        name: str,
        verdict: str,
        decision_id: str | None,
        labels: frozenset[str],
        clears: frozenset[str],
    ) -> NewStep:
        step: NewStep = new(NewStep)
        set_kind(step, kind)
        set_name(step, name)
        set_verdict(step, verdict)
        set_id(step, decision_id)
        set_labels(step, labels)
        set_clears(step, clears)
        for setter, default in rest_set:
            setter(step, default)
        return step

    return made


_new_step: Final = _step_maker()


def step_labels(
    action: Action, decision: Decision, facts: SessionFacts, policy: CompiledPolicy
) -> tuple[frozenset[str], frozenset[str]]:
    """The labels the step of a decided call attaches and clears: for an allow, what
    its label rules and tool say; nothing for any other verdict. A call that cannot be
    read for its labels attaches every label the policy could attach to it (the
    stricter reading)."""
    spec = policy.sessions
    if spec is None or decision.verdict is not _ALLOW:
        return _NO_LABELS, _NO_LABELS
    name = action.name
    if not spec.label_rules or not spec.may_label(action.kind, str(name)):
        return spec.tool_labels.get(name, _NO_LABELS), _NO_LABELS
    # the facts are set only for label rules that read them (a ContextVar set and
    # reset fewer for the usual ones: a path, a URL)
    token = CURRENT.set(facts) if spec.label_rules_read_sessions else None
    try:
        evaluated = facts.evaluated
        if evaluated is not None and evaluated[0] is action and evaluated[1] is policy:
            return spec.labels_for(evaluated[2])
        return spec.labels_for(facts_for(action, policy))
    except Exception:
        attach = frozenset(
            label for rule in spec.label_rules for label in rule.attach
        ) | spec.tool_labels.get(name, _NO_LABELS)
        return attach, _NO_LABELS
    finally:
        if token is not None:
            CURRENT.reset(token)


def step_kind(action: Action) -> StepKind:
    """The kind of step a call is kept as (a kind sessions do not know: ``tool``)."""
    kind = action.kind
    return kind if kind in STEP_KINDS else "tool"  # type: ignore[return-value]


#: a verdict's text, for a step (the enum's ``value`` descriptor costs more)
VERDICT_TEXT: Final = _VERDICT_TEXT


def new_step(
    action: Action, decision: Decision, facts: SessionFacts, policy: CompiledPolicy
) -> NewStep:
    """The session step of a decided call: its verdict and, for an allow, the labels its
    label rules and tool attach and clear (:func:`step_labels`)."""
    attach, clear = step_labels(action, decision, facts, policy)
    return _new_step(
        step_kind(action),
        str(action.name),
        _VERDICT_TEXT[decision.verdict],
        decision.decision_id,
        attach,
        clear,
    )
