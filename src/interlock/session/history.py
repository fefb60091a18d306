"""What a session has done so far: the facts session-aware rules read.

A **session** is the trusted ``Context.session_id`` within its tenant. Its history is
a bounded list of :class:`Step` — every call the guard decided in it, and every piece
of outside data recorded into it (the user's request, a system prompt, an inbound
message) — plus the session's **labels** (``secret``, ``untrusted``, ``pii`` or the
user's own), which outlive the steps that attached them.

A step's life:

1. the guard decides a call: :meth:`SessionHistory.append` records it (its verdict,
   and for an allowed call the labels the policy attaches; labels attach when a call
   is *allowed*, for the guard cannot know a body that later failed read nothing);
2. the body returns or raises: :meth:`SessionHistory.settle` marks it executed (or
   not) and adds the fingerprints of what it returned and any labels its result
   carries.

A rule reads a :class:`SessionView`: a snapshot taken before the check. A history that
cannot be read raises :class:`~interlock.errors.SessionUnavailable`, and a check that
needs it is undetermined — never allowed.

Implementations: :class:`MemoryHistory` here (one process), and the SQL store's
(``interlock.store``) for SQLite and PostgreSQL, shared by replicas.

Example::

    from interlock.session.history import MemoryHistory, NewStep

    history = MemoryHistory(max_steps=100)
    history.append("acme", "s-1", NewStep(kind="tool", name="read_file", verdict="allow",
                                          decision_id="d-1", labels=frozenset({"secret"})))
    history.settle("acme", "s-1", "d-1", executed=True, fingerprints=frozenset({42}))
    view = history.view("acme", "s-1")
    assert view.labels == {"secret"} and view.steps[0].executed
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Literal,
    NamedTuple,
    Protocol,
    TypeAlias,
    TypeVar,
    cast,
)

from interlock._extension import switched_off
from interlock.errors import SessionUnavailable
from interlock.session.forgotten import ForgottenSessions
from interlock.session.labels import check_labels

if TYPE_CHECKING:
    from interlock.session._history import FrozenPrints

#: :data:`interlock.session.fingerprints.FORMAT_MARK` (not imported: that module is
#: the heavy one, and a history is made without it)
_FORMAT_MARK: Final = 0x1F9E_7A11_0000_0002
T = TypeVar("T")

try:
    from interlock.session import _history
except ImportError:  # not built (no compiler where installed): the Python makers, sets
    _history = None  # type: ignore[assignment]


class Prints(Protocol):
    """A set of fingerprints as an index keeps it: a ``set[int]``, or the C extension's
    packed ``PrintSet`` (the same semantics, 8 bytes a slot; ``_history.c``). Test an
    argument's probe with ``prints.isdisjoint(probe)``, never ``probe.isdisjoint(prints)``:
    a frozenset reads an argument that is not a set whole (the session's every print)."""

    def __contains__(self, value: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    def isdisjoint(self, other: Iterable[Any], /) -> bool: ...
    def update(self, *others: Iterable[int]) -> None: ...


def _py_prints() -> Prints:
    return set()


#: A new, empty :class:`Prints`: a ``PrintSet`` when the extension is built and
#: ``INTERLOCK_NO_SPEEDUPS`` is not set, else a ``set`` (the reference, tested against).
new_prints: Final[Callable[[], Prints]] = (
    _py_prints if _history is None or switched_off() else _history.PrintSet
)
#: Whether the indexes' fingerprints are packed (``PrintSet``).
PACKED_PRINTS: Final = new_prints is not _py_prints


def _py_untracked(prints: T) -> T:
    return prints


class _Untrack(Protocol):
    def __call__(self, prints: T, /) -> T: ...


#: ``untracked(prints)``: the same frozenset, out of the garbage collector's lists when
#: it holds only ints (C: ``_history.untracked``; as it is without the extension; any
#: other object as it is). A step's fingerprints can be in no reference cycle, yet
#: every full collection walked each of them (~100 ms a million held): a history
#: passes what it keeps through this.
untracked: Final[_Untrack] = (
    _py_untracked if _history is None or switched_off() else _history.untracked
)

#: A step's fingerprints as a history keeps them: the frozenset it was given, or the
#: C extension's packed ``FrozenPrints`` of the same ints (a sorted uint64 array, 8
#: bytes a fingerprint where a frozenset of ints costs ~72): equal to the frozenset,
#: hashed as it, and the same answers to ``in`` (of an int: a fingerprint is one; a
#: float or other number equal to one of its ints is not found, where a frozenset
#: would find it), ``len``, iteration, ``isdisjoint``, ``&``, ``|``, ``-`` (which give
#: frozensets) and the subset orders.
StepPrints: TypeAlias = "frozenset[int] | FrozenPrints"


class _Freeze(Protocol):
    def __call__(self, prints: StepPrints, /) -> StepPrints: ...


def _py_frozen(prints: StepPrints) -> StepPrints:
    return prints


#: ``frozen_prints(prints)``: a step's fingerprints as a history keeps them — a set or
#: frozenset of exact ints in [0, 2**64) packed in a ``FrozenPrints`` (empty: the
#: shared :data:`EMPTY_FINGERPRINTS`), anything else as :data:`untracked` gives it
#: (C: ``_history.frozen``). As it is without the extension or with
#: ``INTERLOCK_NO_SPEEDUPS`` set. A history passes every step's fingerprints it takes in
#: through this (what it keeps is the bulk of its memory).
frozen_prints: Final[_Freeze] = (
    _py_frozen if _history is None or switched_off() else _history.frozen
)

__all__ = [
    "BLIND_DATA",
    "EMPTY_FINGERPRINTS",
    "MAX_PAST",
    "MAX_PAST_PRINTS",
    "NO_DATA",
    "NO_PAST",
    "OVERFLOWED_PAST",
    "PACKED_PRINTS",
    "UNFOLLOWED_PAST",
    "DroppedData",
    "FingerprintIndex",
    "MemoryHistory",
    "NewStep",
    "PastCount",
    "Prints",
    "SessionHistory",
    "SessionPast",
    "SessionView",
    "Step",
    "StepKind",
    "StepPrints",
    "check_labels",
    "frozen_prints",
    "new_prints",
    "slot_maker",
    "untracked",
]

#: ``input`` is outside data recorded into the session (not a call): the user's
#: request, a system prompt (``trusted``), or an inbound message (not trusted).
StepKind = Literal["tool", "llm", "mcp", "browser", "effect", "input"]
#: The empty fingerprints every step without data shares (the C extension's own, which
#: :data:`frozen_prints` gives for an empty set).
EMPTY_FINGERPRINTS: Final[frozenset[int]] = (
    frozenset() if _history is None else _history.EMPTY_PRINTS
)

#: Defaults: steps kept per session, and how long an idle session is kept (seconds).
MAX_STEPS: Final = 200
EXPIRE_AFTER: Final = 24 * 3600.0
#: Default bound of :class:`MemoryHistory` on the fingerprints it keeps, all sessions
#: together: each step's set counted whole, plus each session's index. Measured with
#: tracemalloc (CPython 3.11, sessions of 200 steps with 2 KB results: ~510
#: fingerprints a result, each held once in its step's set and once in its session's
#: index): ~11-13 bytes a counted fingerprint with the C extension (8 bytes in the
#: step's packed ``FrozenPrints``, then 8-byte slots in the packed index: ADR 0041),
#: ~71 without (a frozenset of 36-byte ints, the index a set), so 4,000,000 is ~50 MB
#: (~285 MB without): ~20 such sessions at ~1.8-3.1 MB each (~7-13 MB without), or
#: ~200 sessions of 20 such steps.
MAX_FINGERPRINTS: Final = 4_000_000
#: Kinds of executed call steps (a kind, name and labels each) a session's past counts;
#: past it the past is overflowed: its counts cannot be told.
MAX_PAST: Final = 256
#: Fingerprints of the data a session's dropped steps brought in that its past keeps
#: (each dropped step's set counted whole, in the order they left): once the count
#: reaches this, the dropped data is no longer kept, and a flow or provenance that
#: only it could decide cannot be told. ~7 MB in memory, 800 KB in the SQL store: the
#: results of ~200 dropped steps of 2 KB each, or of thousands of short ones. The SQL
#: store's schema 16 writes the same bound (in bytes, 8 a fingerprint).
MAX_PAST_PRINTS: Final = 100_000


@dataclass(frozen=True, slots=True)
class NewStep:
    """A step as the guard hands it over; the history gives it its ``seq`` and time."""

    kind: StepKind
    name: str
    verdict: str  # allow / deny / require_approval / undetermined; "input" for inputs
    decision_id: str | None = None
    labels: frozenset[str] = frozenset()  # attached to the step and to the session
    clears: frozenset[str] = frozenset()  # removed from the session (declared clears only)
    fingerprints: frozenset[int] = EMPTY_FINGERPRINTS  # of the data it brought in
    trusted: bool = False  # an input step from the user or the operator
    executed: bool | None = None  # inputs are True; calls are settled later


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a session, oldest first in :attr:`SessionView.steps`."""

    seq: int  # 1, 2, 3 ... within the session; never reused
    at: float  # unix time it was appended
    kind: StepKind
    name: str
    verdict: str
    decision_id: str | None
    labels: frozenset[str]
    fingerprints: StepPrints  # packed (FrozenPrints) as a history keeps them
    trusted: bool
    executed: bool | None  # None: no outcome yet (or lost); True: ran; False: raised


class PastCount(NamedTuple):
    """The executed call steps of one kind, name and labels that left a session's
    history past ``max_steps``: how many, and when the first and last were appended.
    (A named tuple: one is made each time a step leaves, cheaply.)"""

    kind: str
    name: str
    labels: frozenset[str]
    n: int
    first_at: float
    last_at: float


class DroppedData:
    """What the data a session's dropped steps brought in still tells: the union of
    their fingerprints (every step with fingerprints but trusted inputs: the steps
    ``flows_from`` and ``provenance`` look for), the (kind, name) and labels of those
    steps, the union of the dropped **trusted inputs'** fingerprints (the user's
    request and the system prompt: provenance's "the user's words win" still holds
    past the window), and whether it is **blind** (cannot tell: past
    :data:`MAX_PAST_PRINTS`, an older fingerprint format, a session whose dropped
    steps were not followed).

    A **filter**, never an answer, like :class:`FingerprintIndex`: an argument whose
    probe is disjoint from it carries nothing the dropped steps brought in, so a flow
    or provenance the kept steps do not find is a sure miss; a hit cannot be told
    (the dropped step is gone) and is undetermined. It only grows (in place, under its
    history's lock, one C call a change: readers see it before or after), and is
    shared by the successive views of a session: an older view may see more than its
    own past, which can only make a miss "cannot tell", never a hit a miss."""

    __slots__ = (
        "anonymous",
        "blind",
        "counted",
        "labels",
        "names",
        "prints",
        "seqs",
        "trusted",
        "upto",
    )

    def __init__(self, blind: bool = False) -> None:
        self.prints = new_prints()
        self.trusted = new_prints()  # of the dropped trusted inputs
        #: the seqs of the steps taken in: a step is taken in once, whether a history
        #: folds it as it leaves or reads it back from its store
        self.seqs: set[int] = set()
        #: the last row of the SQL store's dropped data read into it (0: none)
        self.upto = 0
        self.names: set[tuple[str, str]] = set()
        self.labels: set[str] = set()
        #: data of a step not known (a call settled after its step was dropped): any
        #: selector may match it
        self.anonymous = False
        self.blind = blind
        #: each added set counted whole (the bound's count, the SQL store's too)
        self.counted = 0

    def add(
        self,
        kind: str,
        name: str,
        labels: frozenset[str],
        prints: StepPrints,
        seq: int | None = None,
        trusted: bool = False,
    ) -> int:
        """Take in a dropped step's data (``kind`` empty: a step not known, ``seq``
        None: one without a seq, a settle's; ``trusted``: a trusted input's); returns
        how many fingerprints the unions grew by (negative when it went blind)."""
        if self.blind or not prints:
            return 0
        if seq is not None:
            if seq in self.seqs:
                return 0  # taken in already
            self.seqs.add(seq)
        if _FORMAT_MARK not in prints:  # an older format: every argument may carry it
            return self.go_blind()
        self.counted += len(prints)
        if self.counted >= MAX_PAST_PRINTS:
            return self.go_blind()
        if trusted:
            before = len(self.trusted)
            self.trusted.update(prints)
            return len(self.trusted) - before
        before = len(self.prints)
        self.prints.update(prints)
        if kind:
            self.names.add((kind, name))
        else:
            self.anonymous = True
        if labels:
            self.labels |= labels
        return len(self.prints) - before

    def add_step(self, step: Step) -> int:
        """:meth:`add` of a dropped step (one without data: nothing)."""
        prints = step.fingerprints
        if not prints:
            return 0
        trusted = step.kind == "input" and step.trusted
        return self.add(step.kind, step.name, step.labels, prints, step.seq, trusted)

    def go_blind(self) -> int:
        """Give up the fingerprints: from now on nothing can be told of the dropped
        data. Returns minus how many were held."""
        held = len(self.prints) + len(self.trusted)
        self.blind = True
        self.prints = new_prints()  # a new set: a reader testing the old one finishes on it
        self.trusted = new_prints()
        self.names.clear()
        self.labels.clear()
        self.seqs.clear()
        return -held

    def may_hold(self, probed: Iterable[int]) -> bool:
        """False when no dropped step's data shares a fingerprint with ``probed``."""
        return self.blind or not self.prints.isdisjoint(probed)

    def __eq__(self, other: object) -> bool:
        """The same dropped data, whoever took it in (as the views holding it compare)."""
        if not isinstance(other, DroppedData):
            return NotImplemented
        return self._state() == other._state()

    def _state(self) -> tuple[object, ...]:
        return (
            self.blind,
            self.anonymous,
            self.counted,
            self.prints,
            self.trusted,
            self.names,
            self.labels,
        )

    def __hash__(self) -> int:
        """One value for all (it grows: what it holds cannot make its hash), so that
        a view holding it hashes, as a frozen dataclass does."""
        return 0x5E55_DA7A

    def __repr__(self) -> str:
        state = "blind" if self.blind else f"{len(self.prints)} fingerprints"
        return f"DroppedData({state}, {len(self.names)} names, counted {self.counted})"


#: The dropped data of a past that cannot tell it (shared: blind never changes back).
BLIND_DATA: Final = DroppedData(blind=True)
#: Dropped data followed, and none yet (shared, never written: a session's first drop
#: of data takes a :class:`DroppedData` of its own, :meth:`SessionPast.following_data`).
NO_DATA: Final = DroppedData()


class SessionPast(NamedTuple):
    """What a session's dropped steps still tell: the counts of its executed call steps
    (what ``after:`` and ``session.count`` count), so a whole-session count stays exact
    past ``max_steps``, and the data they brought in (:class:`DroppedData`), so a flow
    or provenance the kept steps do not find is a sure miss unless the dropped data may
    hold it. ``overflowed``: the counts cannot be told (more than :data:`MAX_PAST`
    kinds of them, a call settled as run after its step was dropped, a demoted
    session) — a count that reaches them is undetermined, as without a past.
    ``data``: None when the history did not follow the dropped steps' data (a view
    made without it): with steps dropped, flows and provenance cannot tell a miss;
    :data:`NO_DATA` when it did and none was dropped."""

    counts: tuple[PastCount, ...] = ()
    overflowed: bool = False
    data: DroppedData | None = None

    def folded(self, steps: Iterable[Step]) -> SessionPast:
        """This past with ``steps`` (leaving the history) counted: the executed call
        steps among them; the rest leave nothing. The same as :meth:`counted` of each in
        turn (a test compares them), in one pass: a demoted session folds all its
        steps at once."""
        if self.overflowed:
            return self
        data = self.data
        tally: dict[tuple[str, str, frozenset[str]], list[Any]] | None = None
        for step in steps:
            if not step.executed or step.kind == "input":
                continue
            if tally is None:
                tally = {(c[0], c[1], c[2]): [c[3], c[4], c[5]] for c in self.counts}
            key = (step.kind, step.name, step.labels)
            at = step.at
            entry = tally.get(key)
            if entry is None:
                if len(tally) >= MAX_PAST:
                    return _new_tuple(SessionPast, ((), True, data))
                tally[key] = [1, at, at]
            else:
                entry[0] += 1
                entry[1] = min(entry[1], at)
                entry[2] = max(entry[2], at)
        if tally is None:
            return self
        counts = tuple(
            _new_tuple(PastCount, (key[0], key[1], key[2], entry[0], entry[1], entry[2]))
            for key, entry in tally.items()
        )
        return _new_tuple(SessionPast, (counts, False, data))

    def counted(self, step: Step) -> SessionPast:
        """This past with ``step`` (leaving the history) counted, when it is an executed
        call step and the past can still count."""
        if step.executed and step.kind != "input" and not self.overflowed:
            return self._with(step)
        return self

    def _with(self, step: Step) -> SessionPast:
        """This past with one more executed call step (one leaves at a time, usually)."""
        counts = self.counts
        kind, name, labels, at = step.kind, step.name, step.labels, step.at
        for i, entry in enumerate(counts):
            if entry[0] == kind and entry[1] == name and entry[2] == labels:
                n, first, last = entry[3] + 1, entry[4], entry[5]
                grown = _new_tuple(
                    PastCount,
                    (
                        kind,
                        name,
                        labels,
                        n,
                        first if first <= at else at,
                        last if last >= at else at,
                    ),
                )
                return _new_tuple(
                    SessionPast, ((*counts[:i], grown, *counts[i + 1 :]), False, self.data)
                )
        if len(counts) >= MAX_PAST:
            return _new_tuple(SessionPast, ((), True, self.data))
        added = _new_tuple(PastCount, (kind, name, labels, 1, at, at))
        return _new_tuple(SessionPast, ((*counts, added), False, self.data))

    def uncountable(self) -> SessionPast:
        """This past with its counts overflowed (its dropped data kept)."""
        if self.overflowed:
            return self
        return _new_tuple(SessionPast, ((), True, self.data))

    def following_data(self) -> SessionPast:
        """This past with a :class:`DroppedData` of its own to take in dropped data,
        when it had followed none yet (:data:`NO_DATA`); as it is otherwise (one of its
        own already, blind, or not followed: None)."""
        if self.data is not NO_DATA:
            return self
        return _new_tuple(SessionPast, (self.counts, self.overflowed, DroppedData()))


#: A named tuple made from its fields without its generated ``__new__`` (a Python call
#: with defaults): the same object, made once a dropped step.
_new_tuple: Final = tuple.__new__


#: A session with nothing dropped (or nothing executed and no data among what was
#: dropped).
NO_PAST: Final = SessionPast(data=NO_DATA)
#: A view's past when it was given none: its dropped data (if any) was not followed.
UNFOLLOWED_PAST: Final = SessionPast()
#: A past that can tell nothing: neither its counts nor its data.
OVERFLOWED_PAST: Final = SessionPast(overflowed=True, data=BLIND_DATA)


class FingerprintIndex:
    """What the steps that bring data in to flows and provenance hold, all at once: the
    union of the fingerprints of every step with fingerprints but trusted inputs (the
    steps ``flows_from`` and ``provenance`` look for), the labels and the (kind, name)
    of those steps, and whether one of them has fingerprints of an older format.

    A **filter**, never an answer: it may hold more than a view's steps (it is shared
    by the successive views of a session and only grows until it is rebuilt: steps
    since dropped, steps settled after the view was taken), never less. So an argument
    whose probe is disjoint from it carries nothing of the view's steps — one
    ``isdisjoint`` for a benign call — and only a hit reads the view's own steps,
    which decide (a view never sees later steps). It is written only under its
    history's lock, and grows in place (one C call: readers see it before or after)."""

    __slots__ = ("added", "labels", "legacy", "names", "prints")

    def __init__(self, steps: tuple[Step, ...] = ()) -> None:
        self.prints = new_prints()
        self.labels: set[str] = set()
        self.names: set[tuple[str, str]] = set()
        self.legacy = False
        self.added = 0  # steps added since it was built (to know when to rebuild it)
        for step in steps:
            self.add(step)

    def add(self, step: Step) -> None:
        """Take in a step's fingerprints, labels and name (a trusted input: nothing)."""
        prints = step.fingerprints
        if not prints or (step.kind == "input" and step.trusted):
            return
        self.added += 1
        self.prints.update(prints)
        if step.labels:
            self.labels |= step.labels
        self.names.add((step.kind, step.name))
        if _FORMAT_MARK not in prints:
            self.legacy = True

    def may_hold(self, probed: Iterable[int]) -> bool:
        """False when no step in it shares a fingerprint with ``probed`` (nor is of an
        older format, which every argument is taken to carry)."""
        return self.legacy or not self.prints.isdisjoint(probed)


@dataclass(frozen=True, slots=True)
class SessionView:
    """A snapshot of one session: its last steps (at most the history's bound, oldest
    first) and its labels. An unknown session is empty: no steps, no labels."""

    tenant: str
    session_id: str
    steps: tuple[Step, ...] = ()
    labels: frozenset[str] = frozenset()
    next_seq: int = 1  # the seq the next step will get
    #: The steps that brought data in: those with fingerprints (a result's, or a failed
    #: call's error's), oldest first — what ``flows_from`` and ``provenance`` read.
    #: Derived from ``steps`` unless given (a history that extends a view by a step
    #: extends this too, without a scan).
    sources: tuple[Step, ...] = field(default=None, compare=False, repr=False)  # type: ignore[arg-type]
    #: A filter over ``sources`` (:class:`FingerprintIndex`), kept by a history that
    #: extends it as steps come and settle; None: none kept (every source is read).
    #: Whoever gives one must have put every source but trusted inputs in it first
    #: (``followed_by`` does; ``dataclasses.replace`` with other steps does not: a
    #: missing fingerprint would hide a flow).
    index: FingerprintIndex | None = field(default=None, compare=False, repr=False)
    #: The session's earlier data was dropped whole (the in-memory history demoted it
    #: to its labels to stay within ``max_sessions`` / ``max_fingerprints``): what its
    #: steps returned is unknown, so ``flows_from`` and ``provenance`` cannot be judged
    #: on it (undetermined, never a miss). Kept until the session expires.
    lost: bool = False
    #: What the steps that left the history (past ``max_steps``) still tell: the
    #: counts of the executed calls (what a whole-session count adds to the kept
    #: steps'), and their data (:class:`DroppedData`). A view given none with steps
    #: dropped can tell no flow or provenance miss.
    past: SessionPast = UNFOLLOWED_PAST

    def __post_init__(self) -> None:
        if self.sources is None:
            object.__setattr__(self, "sources", _sources_of(self.steps))

    def may_hold(self, probed: Iterable[int]) -> bool:
        """Whether a step of this view but a trusted input may share a fingerprint with
        ``probed`` (an argument's probe): False is sure, True is to be checked step by
        step (``sources``)."""
        if not self.sources:
            return False
        index = self.index
        return index is None or index.may_hold(probed)

    def followed_by(self, step: Step, labels: frozenset[str], bound: int) -> SessionView:
        """This view with ``step`` appended (the oldest past ``bound`` steps dropped)
        and the session's labels now ``labels``. Its index, if it keeps one, takes the
        step in (and is rebuilt from the kept steps once it holds many dropped ones)."""
        steps = self.steps
        cut = len(steps) + 1 - bound
        index = self.index
        past = self.past
        if cut > 0:
            leaving = steps[:cut]
            past = _past_with(past.folded(leaving), leaving, steps[0].seq == 1)
            steps = steps[cut:]
            oldest = steps[0].seq if steps else step.seq
            sources = self.sources
            gone = 0  # sources are oldest first: the dropped ones lead
            while gone < len(sources) and sources[gone].seq < oldest:
                gone += 1
            if gone:
                sources = sources[gone:]
        else:
            sources = self.sources
        if step.fingerprints:
            sources = (*sources, step)
        if index is not None:
            if index.added > 2 * bound + 16:  # mostly dropped steps: start afresh
                index = FingerprintIndex(sources)
            else:
                index.add(step)
        return SessionView(
            self.tenant,
            self.session_id,
            (*steps, step),
            labels,
            step.seq + 1,
            sources,
            index,
            self.lost,
            past,
        )

    def ran(self, name_matches: Callable[[Step], bool]) -> bool:
        """Whether an executed call step matches."""
        return any(s.executed and s.kind != "input" and name_matches(s) for s in self.steps)


def _sources_of(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    return tuple(s for s in steps if s.fingerprints)


def _past_with(past: SessionPast, leaving: Iterable[Step], from_first: bool) -> SessionPast:
    """``past`` with the data of the steps ``leaving`` taken in, when it follows
    dropped data (``from_first``: the steps leaving begin with the session's first,
    so nothing was dropped before them and a past given none can start following)."""
    data = past.data
    if data is None and not from_first:
        return past  # dropped data not followed: it stays unknown
    if data is NO_DATA or data is None:
        if not any(old.fingerprints for old in leaving):  # no data left with them
            return (
                past
                if data is NO_DATA
                else _new_tuple(SessionPast, (past.counts, past.overflowed, NO_DATA))
            )
        data = DroppedData()
        past = _new_tuple(SessionPast, (past.counts, past.overflowed, data))
    for old in leaving:
        data.add_step(old)
    return past


_STEP_FIELDS: Final = (
    "seq",
    "at",
    "kind",
    "name",
    "verdict",
    "decision_id",
    "labels",
    "fingerprints",
    "trusted",
    "executed",
)
_VIEW_FIELDS: Final = (
    "tenant",
    "session_id",
    "steps",
    "labels",
    "next_seq",
    "sources",
    "index",
    "lost",
    "past",
)


def _step_maker() -> Callable[..., Step]:
    """``Step(...)`` (every field, in order) without the frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` per field: ~1 µs a step on a slow core):
    each slot set through its own descriptor — the same object, field for field. The
    plain constructor when Step's fields are not these."""
    if tuple(f.name for f in fields(Step)) != _STEP_FIELDS or hasattr(Step, "__post_init__"):
        return Step  # pragma: no cover - guards a change of Step
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = (Step.__dict__[n].__set__ for n in _STEP_FIELDS)
    new = object.__new__

    def made(
        seq: int,
        at: float,
        kind: StepKind,
        name: str,
        verdict: str,
        decision_id: str | None,
        labels: frozenset[str],
        fingerprints: frozenset[int],
        trusted: bool,
        executed: bool | None,
    ) -> Step:
        step: Step = new(Step)
        s0(step, seq)
        s1(step, at)
        s2(step, kind)
        s3(step, name)
        s4(step, verdict)
        s5(step, decision_id)
        s6(step, labels)
        s7(step, fingerprints)
        s8(step, trusted)
        s9(step, executed)
        return step

    return made


def _view_maker() -> Callable[..., SessionView]:
    """``SessionView(...)`` with every field given (``sources`` too: no scan), made as
    :func:`_step_maker` makes a step."""
    if tuple(f.name for f in fields(SessionView)) != _VIEW_FIELDS:
        return SessionView  # pragma: no cover - guards a change of SessionView
    s0, s1, s2, s3, s4, s5, s6, s7, s8 = (SessionView.__dict__[n].__set__ for n in _VIEW_FIELDS)
    new = object.__new__

    def made(
        tenant: str,
        session_id: str,
        steps: tuple[Step, ...],
        labels: frozenset[str],
        next_seq: int,
        sources: tuple[Step, ...],
        index: FingerprintIndex | None,
        lost: bool,
        past: SessionPast = UNFOLLOWED_PAST,
    ) -> SessionView:
        view: SessionView = new(SessionView)
        s0(view, tenant)
        s1(view, session_id)
        s2(view, steps)
        s3(view, labels)
        s4(view, next_seq)
        s5(view, sources)
        s6(view, index)
        s7(view, lost)
        s8(view, past)
        return view

    return made


#: The pure-Python makers: the reference the C ones are tested against.
_py_new_step: Final = _step_maker()
_py_new_view: Final = _view_maker()


def slot_maker(cls: type, names: tuple[str, ...], reference: Callable[..., T]) -> Callable[..., T]:
    """``cls(*values)`` (every field given, in order) made in one C call
    (``interlock.session._history.maker``: each slot of ``names`` set from its
    position, no ``__init__``) when the extension is built and ``INTERLOCK_NO_SPEEDUPS``
    is not set, and ``reference`` is a Python maker that sets each slot (no
    ``__init__`` either) or the constructor of a dataclass whose fields are ``names``
    with no ``__post_init__`` (its ``__init__`` only sets them); else ``reference``,
    which the tests compare it with."""
    if _history is None or switched_off():
        return reference
    if reference is cls and (
        hasattr(cls, "__post_init__") or tuple(f.name for f in fields(cls)) != names
    ):
        return reference
    return cast("Callable[..., T]", _history.maker(cls, names))


#: ``Step(...)`` / ``SessionView(...)`` with every field given, in order (C when built).
_new_step: Final = slot_maker(Step, _STEP_FIELDS, _py_new_step)
_new_view: Final = slot_maker(SessionView, _VIEW_FIELDS, _py_new_view)
#: Whether a step's records are made in C (see :func:`slot_maker`).
ACCELERATED: Final = _new_step is not _py_new_step


class SessionHistory(Protocol):
    """Where session history lives. Every method is atomic per session: two replicas
    appending to one session at once both land, with distinct ``seq``."""

    def view(self, tenant: str, session_id: str) -> SessionView:
        """The session as it stands; raises ``SessionUnavailable`` when unreadable."""
        ...

    def append(self, tenant: str, session_id: str, step: NewStep) -> Step:
        """Record a step: attach its labels to the session, remove its ``clears``,
        drop the oldest steps past the bound. Raises ``SessionUnavailable``."""
        ...

    def settle(
        self,
        tenant: str,
        session_id: str,
        decision_id: str,
        *,
        executed: bool,
        fingerprints: frozenset[int] = EMPTY_FINGERPRINTS,
        labels: frozenset[str] = frozenset(),
    ) -> None:
        """The outcome of the call step ``decision_id``: whether it ran, what its
        result's fingerprints are, labels its result carries (added to the step and
        the session). Unknown decision ids (expired, or never a session step) and
        steps of refused calls (they never ran) are ignored; a step once settled as
        run stays run (a later report cannot take it back)."""
        ...

    def expire(self, idle_for: float) -> int:
        """Forget sessions idle for longer than ``idle_for`` seconds; returns how many."""
        ...


class _Session:
    """One session's steps as they stand, written in place under the history's lock;
    readers get :attr:`view`, an immutable snapshot made from them when first read."""

    __slots__ = (
        "forgotten",
        "held",
        "in_steps",
        "index",
        "labels",
        "lost",
        "next_seq",
        "past",
        "sources",
        "steps",
        "touched",
        "view",
    )

    def __init__(
        self,
        labels: frozenset[str] = frozenset(),
        next_seq: int = 1,
        lost: bool = False,
        past: SessionPast | None = None,
    ) -> None:
        self.steps: list[Step] = []  # the kept steps, oldest first
        self.sources: list[Step] = []  # those of them with fingerprints, oldest first
        self.labels = labels
        self.next_seq = next_seq
        self.index = FingerprintIndex()  # over ``sources`` (and dropped ones: a filter)
        self.lost = lost
        # a session begun again without its past lost its steps uncounted
        if past is None:
            past = NO_PAST if next_seq == 1 else OVERFLOWED_PAST
        self.past = past
        self.touched = 0.0
        #: fingerprints of ``steps`` (each step's set counted whole) and of the past's
        #: dropped data (its union)
        self.in_steps = 0
        self.held = 0  # what it counts toward the history's total: ``in_steps`` + index
        self.view: SessionView | None = None  # None: written since last read
        #: the history forgot this session before it expired (ForgottenSessions): what
        #: it did cannot be told, so it is never read
        self.forgotten = False

    def snapshot(self, tenant: str, session_id: str) -> SessionView:
        """The view of the steps as they stand (made once a write)."""
        view = self.view
        if view is None:
            view = self.view = _new_view(
                tenant,
                session_id,
                tuple(self.steps),
                self.labels,
                self.next_seq,
                tuple(self.sources),
                self.index,
                self.lost,
                self.past,
            )
        return view

    def add(self, step: Step, bound: int) -> int:
        """Append ``step``, dropping the oldest steps past ``bound``; returns how many
        fewer fingerprints ``in_steps`` counts: those the dropped steps held, less
        what the past's dropped data grew by (it takes in theirs)."""
        steps = self.steps
        sources = self.sources
        steps.append(step)
        dropped = 0
        while len(steps) > bound:
            old = steps.pop(0)
            past = self.past = self.past.counted(old)
            if old.fingerprints:
                dropped += len(old.fingerprints)
                if sources and sources[0] is old:  # sources are oldest first
                    del sources[0]
                data = past.data
                if data is NO_DATA:  # the session's first data dropped
                    past = self.past = past.following_data()
                    data = past.data
                if data is not None:
                    dropped -= data.add_step(old)
        if step.fingerprints:
            sources.append(step)
        index = self.index
        if index.added > 2 * bound + 16:  # mostly dropped steps: start afresh
            self.index = FingerprintIndex(tuple(sources))
        elif step.fingerprints:
            index.add(step)
        self.view = None
        return dropped

    def replace(self, at: int, old: Step, new: Step) -> None:
        """Put ``new`` in the place of ``old`` (``steps[at]``), in ``sources`` too."""
        self.steps[at] = new
        sources = self.sources
        if new.fingerprints:
            i = len(sources)
            while i and sources[i - 1].seq > new.seq:  # usually the last: a step or none
                i -= 1
            if i and sources[i - 1] is old:
                sources[i - 1] = new
            else:
                sources.insert(i, new)
            self.index.add(new)  # before a view that holds it is handed out
        self.view = None


class _Remnant:
    """What a demoted session keeps: its labels, next seq, when it was last written,
    whether data it brought in was lost, its past (the counts of every executed call it
    gave up: whole-session counts stay exact), and its allowed calls not known to have
    run by decision id: the step (a settle that says it ran counts it into the past),
    then None (counted: a settle again counts nothing). A call it ran before it was
    demoted is counted already; a settle of it again is one the remnant cannot place,
    and makes its counts "cannot tell" (the guard settles each call once)."""

    __slots__ = ("calls", "labels", "lost", "next_seq", "past", "touched")

    def __init__(
        self,
        labels: frozenset[str],
        next_seq: int,
        touched: float,
        lost: bool,
        past: SessionPast,
        calls: dict[str, Step | None],
    ) -> None:
        self.labels = labels
        self.next_seq = next_seq
        self.touched = touched
        self.lost = lost
        self.past = past
        self.calls = calls


class MemoryHistory:
    """Session history in this process: per session, lists of its steps written in
    place, and the :class:`SessionView` of them made on the first read after a write
    (and handed to every later reader until the next write, without a copy), under
    one lock. A write costs no snapshot: a session read once per check and written
    once makes one view a check, and a write with no read between makes none.

    Two bounds on what keeps its steps: at most ``max_sessions`` sessions, and at most
    ``max_fingerprints`` fingerprints across all sessions (:data:`MAX_FINGERPRINTS`, ~50
    MB with the C extension, ~285 without; ``None``: no such bound) — each step's set
    counted whole, plus each session's :class:`FingerprintIndex`, kept as a running
    total (O(1) a write). After a write
    past either, the least recently written sessions (appended to or settled) are
    **demoted** until within both: a demoted session gives up its steps but **keeps its
    labels**, its next seq and its **past** — the counts of the calls it ran, as past
    ``max_steps`` (a few hundred bytes; one that ran nothing and carries no labels leaves
    nothing) — for up to ``max_sessions * 100`` such sessions; past that the least
    recently written is forgotten and **refused** from then on (every read of it raises
    ``SessionUnavailable``: :mod:`interlock.session.forgotten`), never begun again
    clean. The session just written
    is never demoted by its own write (alone, it may exceed ``max_fingerprints``: its
    steps are bounded by ``max_steps``). A demoted session loses what its older steps
    did as a session past ``max_steps`` does: its whole-session counts (``after:``
    without ``within``, ``session.count``) stay exact, a ``secret`` it carries stays,
    and what only the given-up steps could tell (``flows_from``, provenance, a
    ``within``) cannot be told — undetermined, never a miss. Views handed out
    before a demotion stay as they were (immutable). Size ``max_fingerprints`` at ~12
    bytes each (~71 without the C extension; ~510 a 2 KB result, counted twice: the
    step and the index; a session past ``max_steps`` up to ~3x its kept steps, its
    index holding dropped ones until rebuilt). The bound is shared by every session
    and tenant: others' results can demote a quiet session. A fleet with many or long
    sessions keeps them in the SQL store."""

    def __init__(
        self,
        *,
        max_steps: int = MAX_STEPS,
        max_sessions: int = 1_000,
        max_fingerprints: int | None = MAX_FINGERPRINTS,
        expire_after: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_steps < 1 or max_sessions < 1:
            raise ValueError("max_steps and max_sessions must be at least 1")
        if max_fingerprints is not None and max_fingerprints < 0:
            raise ValueError("max_fingerprints must be at least 0 (or None)")
        if expire_after is not None and not 0 < expire_after < float("inf"):
            raise ValueError(
                f"expire_after must be a positive number of seconds (or None), not {expire_after!r}"
            )
        self._max_steps = max_steps
        self._max_sessions = max_sessions
        self._max_fingerprints = max_fingerprints
        self._held = 0  # fingerprints kept by every session (their ``held``)
        #: the last eviction stopped past a bound (the session written alone is past it)
        self._over = False
        self._max_remnants = max_sessions * 100
        self._clock = clock
        #: sessions idle this long are forgotten (as :meth:`expire` does) by the first
        #: append at or after ``_sweep_at``; every ``expire_after / 16`` seconds at most
        self._expire_after = expire_after
        self._sweep_at = float("inf") if expire_after is None else clock() + expire_after / 16
        self._lock = threading.Lock()
        self._sessions: OrderedDict[tuple[str, str], _Session] = OrderedDict()
        # sessions that gave up their steps (demoted), least recently written first
        self._remnants: OrderedDict[tuple[str, str], _Remnant] = OrderedDict()
        # sessions forgotten past ``_max_remnants`` before they expired (made on the first)
        self._forgotten: ForgottenSessions | None = None

    def view(self, tenant: str, session_id: str) -> SessionView:
        lock = self._lock
        lock.acquire()
        try:
            found = self._sessions.get((tenant, session_id))
            if found is not None:
                if found.forgotten:
                    raise self._unreadable(tenant, session_id)
                # found.snapshot, inlined (a Python call fewer on every read)
                view = found.view
                if view is None:
                    view = found.view = _new_view(
                        tenant,
                        session_id,
                        tuple(found.steps),
                        found.labels,
                        found.next_seq,
                        tuple(found.sources),
                        found.index,
                        found.lost,
                        found.past,
                    )
                return view
            remnant = self._remnants.get((tenant, session_id))
            if self._was_forgotten((tenant, session_id)):
                raise self._unreadable(tenant, session_id)
        finally:
            lock.release()
        if remnant is None:
            return SessionView(tenant, session_id)
        # its steps were given up, what they ran counted in its past
        return SessionView(
            tenant,
            session_id,
            (),
            remnant.labels,
            remnant.next_seq,
            lost=remnant.lost,
            past=remnant.past,
        )

    def labels_view(self, tenant: str, session_id: str) -> SessionView:
        """The session's labels, as :meth:`view` has them, in a view that holds nothing
        else — for a check whose every rule reads labels only, without the snapshot of
        the steps :meth:`view` makes after each write. It fails closed for any other
        reader: no steps, no sources, its data ``lost`` and its past uncountable, so a
        flow, provenance, ``after`` or count read from it cannot be told (undetermined,
        never a miss). The full view when one is kept (read since the last write); an
        unknown session's empty view, which is exact.

        Example::

            history.labels_view("acme", "s-1").labels  # frozenset({'secret'})
        """
        lock = self._lock
        lock.acquire()
        try:
            found = self._sessions.get((tenant, session_id))
            if found is not None:
                if found.forgotten:
                    raise self._unreadable(tenant, session_id)
                kept = found.view
                if kept is not None:
                    return kept
                labels, next_seq = found.labels, found.next_seq
            else:
                if self._was_forgotten((tenant, session_id)):
                    raise self._unreadable(tenant, session_id)
                remnant = self._remnants.get((tenant, session_id))
                if remnant is None:
                    return SessionView(tenant, session_id)
                labels, next_seq = remnant.labels, remnant.next_seq
        finally:
            lock.release()
        return _new_view(tenant, session_id, (), labels, next_seq, (), None, True, OVERFLOWED_PAST)

    @property
    def fingerprints_held(self) -> int:
        """The fingerprints kept now, as counted against ``max_fingerprints``."""
        return self._held

    @property
    def sessions_forgotten(self) -> int:
        """Sessions forgotten before they expired (past ``max_sessions × 100`` demoted
        ones): each is refused from then on (:mod:`interlock.session.forgotten`)."""
        forgotten = self._forgotten
        return 0 if forgotten is None else forgotten.count

    def _unreadable(self, tenant: str, session_id: str) -> SessionUnavailable:
        return SessionUnavailable(
            f"session {session_id!r} of tenant {tenant!r} was forgotten by the in-memory "
            f"history before it expired (more than {self._max_remnants} demoted sessions: "
            "max_sessions x 100), so what it did cannot be told; raise max_sessions or "
            "keep sessions in the SQL store"
        )

    def _was_forgotten(self, key: tuple[str, str]) -> bool:
        """Whether ``key`` was forgotten before it expired (none yet: never)."""
        forgotten = self._forgotten
        return forgotten is not None and key in forgotten

    def _forget(self, key: tuple[str, str]) -> None:
        """``key``'s remnant is given up before it expired: never read it again."""
        forgotten = self._forgotten
        if forgotten is None:
            forgotten = self._forgotten = ForgottenSessions()
        forgotten.add(key)
        count = forgotten.count
        if count & (count - 1) == 0:  # the first, then at each power of two
            logging.getLogger("interlock").warning(
                "interlock: the in-memory session history has forgotten %d session(s) "
                "before they expired (more than %d demoted sessions): each is refused from "
                "now on; raise max_sessions or keep sessions in the SQL store",
                count,
                self._max_remnants,
            )

    def _recount(self, found: _Session, in_steps: int) -> None:
        held = in_steps + len(found.index.prints)
        self._held += held - found.held
        found.in_steps = in_steps
        found.held = held

    def _evict(self, written: tuple[str, str]) -> None:
        """Demote the least recently written sessions until within both bounds; never
        ``written`` (the last one: it was just moved to the end)."""
        sessions = self._sessions
        most = self._max_fingerprints
        self._over = False
        while len(sessions) > self._max_sessions or (most is not None and self._held > most):
            key = next(iter(sessions))
            if key == written:
                self._over = True  # still past a bound: the next write tests it again
                return
            gone = sessions.pop(key)
            self._held -= gone.held
            # data it brought in is lost with its steps; a call of it not yet settled may
            # still bring some (its settle then marks the remnant lost)
            data = gone.past.data
            lost = (
                gone.lost
                or any(not (s.kind == "input" and s.trusted) for s in gone.sources)
                or (data is not NO_DATA and (data is None or data.blind or bool(data.prints)))
            )
            # its allowed calls not known to have run (usually the last few, or none)
            calls: dict[str, Step | None] = {
                s.decision_id: s
                for s in gone.steps
                if s.executed is not True and s.verdict == "allow" and s.decision_id is not None
            }
            pending = any(s.executed is None for s in calls.values() if s is not None)
            # what it ran stays counted: a whole-session cap must not start again
            past = gone.past.folded(gone.steps)
            # the data it dropped goes with the rest (lost says so); none: none
            past = _new_tuple(
                SessionPast, (past.counts, past.overflowed, BLIND_DATA if lost else NO_DATA)
            )
            if gone.labels or lost or pending or past.counts or past.overflowed:
                self._remnants[key] = _Remnant(
                    gone.labels, gone.next_seq, gone.touched, lost, past, calls
                )
                while len(self._remnants) > self._max_remnants:
                    self._forget(self._remnants.popitem(last=False)[0])

    def append(self, tenant: str, session_id: str, step: NewStep) -> Step:
        return self.append_call(
            tenant,
            session_id,
            step.kind,
            step.name,
            step.verdict,
            step.decision_id,
            step.labels,
            step.clears,
            step.fingerprints,
            step.trusted,
            True if step.kind == "input" else step.executed,
        )

    def append_call(
        self,
        tenant: str,
        session_id: str,
        kind: StepKind,
        name: str,
        verdict: str,
        decision_id: str | None,
        labels: frozenset[str],
        clears: frozenset[str],
        fingerprints: frozenset[int] = EMPTY_FINGERPRINTS,
        trusted: bool = False,
        executed: bool | None = None,
    ) -> Step:
        """:meth:`append` of a step given field by field (no :class:`NewStep` made: the
        guard's in-process check calls this); an ``input`` step is executed."""
        now = self._clock()
        key = (tenant, session_id)
        sessions = self._sessions
        bound = self._max_steps
        lock = self._lock
        lock.acquire()
        try:
            if now >= self._sweep_at:
                self._sweep(now)
            found = sessions.get(key)
            grown = found is None  # a session more: the bounds are tested
            if found is None:
                remnant = self._remnants.pop(key, None)
                found = sessions[key] = (
                    _Session()
                    if remnant is None
                    else _Session(
                        remnant.labels,
                        remnant.next_seq,
                        remnant.lost,
                        # a call it left unsettled is no longer known: its settle as run
                        # makes the counts "cannot tell" (as a step dropped before it ran)
                        remnant.past,
                    )
                )
                found.forgotten = self._was_forgotten(key)
            else:
                sessions.move_to_end(key)
            seq = found.next_seq
            found.next_seq = seq + 1
            kept = _new_step(
                seq,
                now,
                kind,
                name,
                verdict,
                decision_id,
                labels,
                frozen_prints(fingerprints) if fingerprints else fingerprints,
                trusted,
                True if kind == "input" else executed,
            )
            if labels or clears:
                found.labels = (found.labels | labels) - clears
            found.touched = now
            steps = found.steps
            if fingerprints or len(steps) >= bound or found.index.added > 2 * bound + 16:
                dropped = found.add(kept, bound)
                # _recount, inlined
                in_steps = found.in_steps - dropped + len(fingerprints)
                held = in_steps + len(found.index.prints)
                self._held += held - found.held
                found.in_steps = in_steps
                found.held = held
                grown = True  # the fingerprints held changed
            else:
                # the usual call step (no data yet, within the bound): _Session.add's
                # own case, inlined — nothing dropped, the index and the counts as they
                # were (neither bound can be newly passed: tested only when the last
                # eviction left the history past one)
                steps.append(kept)
                found.view = None
            if grown or self._over:  # _evict only past a bound (a call fewer each)
                most = self._max_fingerprints
                if len(sessions) > self._max_sessions or (most is not None and self._held > most):
                    self._evict(key)
            return kept
        finally:
            lock.release()

    def settle(
        self,
        tenant: str,
        session_id: str,
        decision_id: str,
        *,
        executed: bool,
        fingerprints: frozenset[int] = EMPTY_FINGERPRINTS,
        labels: frozenset[str] = frozenset(),
    ) -> None:
        with self._lock:
            key = (tenant, session_id)
            found = self._sessions.get(key)
            if found is None:
                remnant = self._remnants.get(key)
                if remnant is not None:
                    self._settle_remnant(remnant, decision_id, executed, fingerprints, labels)
                return
            steps = found.steps
            for i in range(len(steps) - 1, -1, -1):
                old = steps[i]
                if old.decision_id == decision_id and old.kind != "input":
                    if old.verdict != "allow":  # a refused call never ran
                        return
                    new = _new_step(
                        old.seq,
                        old.at,
                        old.kind,
                        old.name,
                        old.verdict,
                        old.decision_id,
                        old.labels | labels,
                        # no copy when the step had none (the usual case): a result's
                        # set is kept as it came
                        frozen_prints(
                            old.fingerprints | fingerprints if old.fingerprints else fingerprints
                        ),
                        old.trusted,
                        executed or old.executed is True,  # ran stays ran
                    )
                    found.replace(i, old, new)
                    if labels:
                        found.labels = found.labels | labels
                    found.touched = self._clock()
                    self._sessions.move_to_end(key)
                    in_steps = found.in_steps - len(old.fingerprints) + len(new.fingerprints)
                    self._recount(found, in_steps)
                    self._evict(key)
                    return
            if not steps or steps[0].seq == 1:
                return  # nothing dropped: an unknown decision
            # the call's step may have left the history before it ran: uncounted, so
            # the session's counts of what ran cannot be told any longer; what it
            # returned is dropped data of a step not known
            past = found.past
            if executed and not past.overflowed:
                past = found.past = past.uncountable()
                found.view = None
            if fingerprints:
                if past.data is NO_DATA:
                    past = found.past = past.following_data()
                data = past.data
                if data is not None:
                    grown = data.add("", "", labels, fingerprints)
                    if grown:
                        self._recount(found, found.in_steps + grown)
                found.view = None

    def _settle_remnant(
        self,
        remnant: _Remnant,
        decision_id: str,
        executed: bool,
        fingerprints: frozenset[int],
        labels: frozenset[str],
    ) -> None:
        """A call of a demoted session settled: data it brought in is lost with the
        steps (its labels are kept, as the session's); a call it ran is counted."""
        if fingerprints or labels:
            remnant.labels = remnant.labels | labels
            if fingerprints and not remnant.lost:
                remnant.lost = True
                remnant.past = remnant.past._replace(data=BLIND_DATA)
            remnant.touched = self._clock()
        calls = remnant.calls
        if not executed:
            return
        if decision_id in calls:
            step = calls[decision_id]
            if step is None:  # counted already
                return
            calls[decision_id] = None
            ran = _new_step(
                step.seq,
                step.at,
                step.kind,
                step.name,
                step.verdict,
                step.decision_id,
                step.labels | labels,
                step.fingerprints,
                step.trusted,
                True,
            )
            remnant.past = remnant.past.counted(ran)
        elif remnant.next_seq > 1:
            # not a call it kept: one dropped before it ran, uncounted
            remnant.past = remnant.past.uncountable()

    def expire(self, idle_for: float) -> int:
        cutoff = self._clock() - idle_for
        with self._lock:
            return self._expire_idle(cutoff)

    def _sweep(self, now: float) -> None:
        """Forget the sessions idle for ``expire_after`` (under the lock)."""
        after = cast(float, self._expire_after)
        self._sweep_at = now + after / 16
        self._expire_idle(now - after)

    def _expire_idle(self, cutoff: float) -> int:
        """Forget sessions and remnants last written before ``cutoff`` (under the lock)."""
        stale = [k for k, s in self._sessions.items() if s.touched < cutoff]
        for key in stale:
            self._held -= self._sessions.pop(key).held
        gone = [k for k, r in self._remnants.items() if r.touched < cutoff]
        for key in gone:
            del self._remnants[key]
        return len(stale) + len(gone)
