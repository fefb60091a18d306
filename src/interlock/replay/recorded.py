"""A decision as the audit log holds it, read back into what the engine judges.

A ``decision`` record keeps the redacted call (kind, name, arguments, target, scope
when the caller pinned one, capabilities), the trusted context fields that identify
the caller (tenant, agent, session, the framework's call id) and the verdict with its
rule ids. :func:`read_recorded` rebuilds an :class:`~interlock.core.action.Action`
from it and works out what the *pure* engine had said: a recorded verdict may come
from a later, stateful step — a budget or a rate limit refused a call the rules
allowed (rule ids ``budget:...`` / ``rate:...``), an approval was claimed (an allow
that carries an approval) or denied by a human (a deny that carries one).

Example::

    from interlock.replay.recorded import read_recorded

    recorded = read_recorded(row)        # an AuditRow of kind "decision"
    print(recorded.action().name, recorded.pure.value, recorded.stateful)
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import orjson

from interlock.core.action import Action, Context, normalise_arguments
from interlock.core.decision import Verdict
from interlock.store.records import AuditRow

__all__ = ["STATEFUL_PREFIXES", "Recorded", "Skipped", "read_recorded"]

#: Rule-id prefixes of the verdicts a budget or a rate limit gave (not the rules).
STATEFUL_PREFIXES: Final = ("budget:", "rate:")

_VERDICTS: Final = {verdict.value: verdict for verdict in Verdict}
# Contexts are immutable: the records of one caller and session share one.
_CONTEXTS: dict[tuple[str, str | None, str | None, str | None], Context] = {}
_CONTEXTS_KEPT: Final = 4096


class Skipped(Exception):
    """A record that is not one decision to re-decide; ``why`` is the count it goes to:
    ``superseded`` (a second record of a decision, written when its caller stopped
    waiting), ``unreadable`` (no action, or not JSON)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Recorded(NamedTuple):
    """One recorded decision, ready to be judged again.

    ``verdict`` and ``rule_ids`` are what the log says the caller was told; ``pure`` is
    what the rules alone had decided (see the module docstring); ``stateful`` names the
    budget or rate limit that turned the rules' verdict into the recorded one (``None``:
    the rules decided). ``pure_rule_ids`` are the rules' ids when the log still has
    them (a budget's refusal replaced them: empty then). A named tuple: one is made
    per record replayed. ``summary`` is the recorded
    call (kind, name, arguments...), ``record`` the whole stored record."""

    seq: int
    ts_us: int
    tenant: str
    decision_id: str | None
    verdict: Verdict
    rule_ids: tuple[str, ...]
    pure: Verdict
    pure_rule_ids: tuple[str, ...]
    stateful: str | None
    body: str
    summary: dict[str, Any]
    record: dict[str, Any]

    def action(self) -> Action:
        """The call rebuilt, with the context the record keeps (raises
        :class:`Skipped` when the summary is not a call)."""
        action = _action(self.summary, self.tenant, self.record)
        if action is None:
            raise Skipped("unreadable")
        return action

    @property
    def arguments(self) -> Any:
        return self.summary.get("arguments")

    @property
    def agent(self) -> str | None:
        return _text(self.record.get("agent"))


def read_recorded(row: AuditRow) -> Recorded:
    """The decision ``row`` records; raises :class:`Skipped` for a record that is not
    one (the caller counts it)."""
    try:
        record = orjson.loads(row.body)
    except orjson.JSONDecodeError:
        raise Skipped("unreadable") from None
    if not isinstance(record, dict):
        raise Skipped("unreadable")
    if "supersedes" in record:
        raise Skipped("superseded")
    summary = record.get("action")
    verdict = _VERDICTS.get(record.get("decision"))  # type: ignore[arg-type]
    if not isinstance(summary, dict) or verdict is None:
        raise Skipped("unreadable")
    if type(summary.get("kind")) is not str or type(summary.get("name")) is not str:
        raise Skipped("unreadable")
    listed = record.get("rule_ids") or ()
    rule_ids = tuple(map(str, listed)) if type(listed) is list else ()
    pure, pure_ids, stateful = _pure(verdict, rule_ids, record)
    return Recorded(
        row.seq,
        row.ts_us,
        row.tenant,
        row.decision_id,
        verdict,
        rule_ids,
        pure,
        pure_ids,
        stateful,
        row.body,
        summary,
        record,
    )


def _action(summary: dict[str, Any], tenant: str, record: dict[str, Any]) -> Action | None:
    kind, name = summary.get("kind"), summary.get("name")
    if not isinstance(kind, str) or not isinstance(name, str):
        return None
    arguments = summary.get("arguments")
    try:
        args = arguments if type(arguments) is dict else normalise_arguments(arguments)
    except TypeError:
        return None
    target, scope = summary.get("target"), summary.get("scope")
    capabilities = summary.get("capabilities") or ()
    who = (
        tenant,
        _text(record.get("agent")),
        _text(record.get("session_id")),
        _text(record.get("call_id")),
    )
    context = _CONTEXTS.get(who)
    if context is None:  # one per caller and session, not one per record
        if len(_CONTEXTS) >= _CONTEXTS_KEPT:
            _CONTEXTS.clear()
        context = _CONTEXTS[who] = Context(
            tenant=who[0], agent=who[1], session_id=who[2], call_id=who[3]
        )
    return Action(
        kind,
        name,
        args,
        target if isinstance(target, str) else None,
        scope if isinstance(scope, str) else None,
        None,
        None,
        tuple(map(str, capabilities)) if type(capabilities) is list else (),
        context,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _pure(
    verdict: Verdict, rule_ids: tuple[str, ...], record: dict[str, Any]
) -> tuple[Verdict, tuple[str, ...], str | None]:
    """What the rules alone decided: (verdict, rule ids, the stateful step's rule id)."""
    if record.get("fail_open"):  # undetermined, let through by fail_mode="open"
        return Verdict.UNDETERMINED, rule_ids, None
    for stateful in rule_ids:
        if not stateful.startswith(STATEFUL_PREFIXES):
            continue
        # A budget or rate limit is consulted only once the rules allow (an approved
        # approval included): the rules' own ids were replaced by the budget's.
        return Verdict.ALLOW, (), stateful
    # A claimed grant (allow) or a human's standing denial (deny): the rules asked.
    if record.get("approval") is not None and verdict in (Verdict.ALLOW, Verdict.DENY):
        return Verdict.REQUIRE_APPROVAL, rule_ids, None
    return verdict, rule_ids, None
