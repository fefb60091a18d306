"""Re-decide recorded calls under a draft policy, with the pure engine.

Reads the audit log's ``decision`` records in pages (a log of any size streams),
rebuilds each call (:mod:`.recorded`), judges it with
:func:`~interlock.policy.engine.evaluate` — no store writes, no approvals, no budget or
rate-limit state — and tallies how the draft's verdict compares with what the rules
had decided (:mod:`.compare`). Budgets and rate limits are state, not rules: a
recorded refusal by one is counted as *stateful, not replayed* (the rules' verdict
behind it, an allow, is what is compared), and the calls the draft allows that a draft
budget or rate limit covers are counted likewise, never guessed as allowed or refused.

Example::

    from interlock.policy import load_policy
    from interlock.replay import ReplayFilter, replay_store
    from interlock.store import open_store

    store = open_store("sqlite:///.interlock/interlock.db")
    report = replay_store(store, load_policy("draft.yaml"), ReplayFilter(tenant="acme"))
    print(report.tally.loosened, "calls would be loosened")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from interlock.core.action import Action
from interlock.core.decision import Decision, Verdict
from interlock.errors import describe
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.engine import evaluate, facts_for
from interlock.policy.matchers import GlobSet
from interlock.policy.specs import BudgetSpec, RateLimitSpec
from interlock.replay.compare import ReplayTally, change_of
from interlock.replay.lossy import (
    LossyCall,
    RuleReads,
    lossy_call,
    unknown_rules,
    verdict_unknown,
)
from interlock.replay.recorded import Recorded, Skipped, read_recorded
from interlock.replay.report import ReplayFilter, ReplayReport
from interlock.store.records import AuditRow

__all__ = ["Replayer", "replay_rows", "replay_store"]

#: Rows read from the store per query.
PAGE: Final = 5000
#: Distinct calls whose outcome is kept (the memo starts afresh when it is full).
MEMO_LIMIT: Final = 100_000
_PREVIEW: Final = 400
_BUILT_IN: Final = "interlock:"
_RUNS: Final = (Verdict.ALLOW, Verdict.REQUIRE_APPROVAL)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """The draft's judgement of one distinct call: its decision, why it cannot be told
    from the record (``None``: it can), and the draft's budgets and rate limits that
    cover it when it is allowed."""

    decision: Decision
    why: str | None
    state: tuple[str, ...]


class Replayer:
    """Judges recorded calls under one draft policy and tallies the comparison.
    ``examples``: how many example calls to keep per change; ``max_records``: stop
    after this many decision records (the report says it was cut short).

    The engine is pure, so a call recorded many times — the same tenant, agent, tool
    and arguments (and session and call id, when the draft's ``when:`` reads the
    context) — is judged once and its outcome reused (``memo=False`` judges each)."""

    def __init__(
        self,
        policy: CompiledPolicy,
        *,
        tool: str | None = None,
        examples: int = 5,
        max_records: int | None = None,
        memo: bool = True,
    ) -> None:
        if examples < 0:
            raise ValueError(f"examples must be 0 or more, not {examples}")
        self.policy = policy
        self.tally = ReplayTally(examples_per_change=examples)
        self.max_records = max_records
        self._tool = GlobSet.of(tool).match if tool is not None else None
        self._reads = [RuleReads.of(rule) for rule in policy.rules if not rule.shadow]
        self._unrecorded = [reads for reads in self._reads if reads.unrecorded]
        self._state_specs: tuple[BudgetSpec | RateLimitSpec, ...] = (
            *policy.budgets,
            *policy.rate_limits,
        )
        # A policy that reads sessions judges a call by the calls before it: each is
        # judged in order, on a history rebuilt from the records (no memo).
        self._sessions = _ReplayedSessions(policy) if policy.sessions is not None else None
        self._memo: dict[tuple[Any, ...], _Outcome] | None = (
            {} if memo and self._sessions is None else None
        )
        self._whole_context = _reads_context(policy)

    def feed(self, rows: Iterable[AuditRow]) -> bool:
        """Replay ``rows``; False once ``max_records`` stopped it."""
        tally = self.tally
        limit = self.max_records
        tool = self._tool
        for row in rows:
            if row.kind != "decision":
                continue
            if limit is not None and tally.read >= limit:
                tally.truncated = True
                return False
            try:
                recorded = read_recorded(row)
            except Skipped as skipped:
                tally.read += 1
                tally.skipped[skipped.why] += 1
                continue
            if tool is not None and tool(recorded.summary["name"]) is None:
                continue  # not asked for: not counted at all
            tally.read += 1
            try:
                self.one(recorded)
            except Skipped as skipped:
                tally.skipped[skipped.why] += 1
        return True

    def one(self, recorded: Recorded) -> None:
        """Re-decide one recorded call and count it."""
        outcome = self._judged(recorded)
        tally = self.tally
        tally.replayed += 1
        if recorded.stateful is not None:
            tally.stateful_recorded[recorded.stateful] += 1
        old_ids = recorded.pure_rule_ids
        for rule_id in old_ids:
            tally.rule(rule_id).old += 1
        new = outcome.decision
        if outcome.why is not None:
            tally.cannot_tell += 1
            tally.example("cannot_tell", lambda: _example(recorded, new, outcome.why))
            return
        new_ids = new.rule_ids
        for rule_id in new_ids:
            tally.rule(rule_id).new += 1
        tally.fired.update(new_ids)
        if new.shadow is not None:
            tally.fired.update(new.shadow.rule_ids)
        for spec_id in outcome.state:
            tally.stateful_draft[spec_id] += 1
        old, verdict = recorded.pure, new.verdict
        if verdict is not old:
            change, direction = change_of(old, verdict)
            tally.changes[change] += 1
            if direction == "loosened":
                tally.loosened += 1
            elif direction == "tightened":
                tally.tightened += 1
            for rule_id in {*old_ids, *new_ids}:
                tally.rule(rule_id).changes[change] += 1
            tally.example(change, lambda: _example(recorded, new, None))
        elif recorded.stateful is None and set(old_ids) != set(new_ids):
            tally.rules_changed += 1
            tally.example("rules_changed", lambda: _example(recorded, new, None))
        else:
            tally.unchanged += 1

    def _judged(self, recorded: Recorded) -> _Outcome:
        """The draft's outcome for the call ``recorded`` holds (memoised)."""
        memo = self._memo
        if memo is None:
            return self._judge(recorded)
        record = recorded.record
        key: tuple[Any, ...] = (recorded.tenant, record.get("agent"), _dumps(recorded.summary))
        if self._whole_context:
            key = (*key, record.get("session_id"), record.get("call_id"))
        found = memo.get(key)
        if found is None:
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            found = memo[key] = self._judge(recorded)
        return found

    def _judge(self, recorded: Recorded) -> _Outcome:
        action = recorded.action()
        policy = self.policy
        if self._sessions is not None:
            new = self._sessions.judge(recorded, action)
        else:
            new = evaluate(action, policy)
        why: str | None = None
        lost = lossy_call(action.arguments, recorded.body)
        if lost or self._unrecorded:
            why = self._cannot_tell(action, new, lost)
        state: tuple[str, ...] = ()
        if self._state_specs and new.verdict in _RUNS:
            state = tuple(
                spec.id for spec in self._state_specs if spec.selector.matches(action, new.rule_ids)
            )
        return _Outcome(new, why, state)

    def _cannot_tell(self, action: Action, new: Decision, lost: LossyCall) -> str | None:
        """Why the draft's verdict on this call cannot be told from its record."""
        try:
            facts = facts_for(action, self.policy)
        except Exception as exc:  # the engine said why (undetermined or a built-in deny)
            if lost:
                return f"its redacted arguments cannot be read back ({describe(exc)})"
            return None
        reads = self._reads if lost else self._unrecorded
        why = verdict_unknown(new, unknown_rules(reads, facts, lost))
        # A check before the rules (aliases, a URL two parsers read apart) read the
        # arguments, redacted ones included.
        if (
            why is None
            and lost
            and new.rule_ids
            and all(rule_id.startswith(_BUILT_IN) for rule_id in new.rule_ids)
        ):
            return f"{new.rule_ids[0]} read arguments that were redacted"
        return why

    def report(self, filters: ReplayFilter | None = None) -> ReplayReport:
        return ReplayReport(self.policy, self.tally, filters or ReplayFilter())


class _ReplayedSessions:
    """The sessions of the replayed records, rebuilt from them in order: each call is
    judged on its session as the earlier records left it, then recorded into it as it
    really went (the recorded verdict; an allowed call counted as executed). The audit
    holds no fingerprints of results: ``flows_from``, ``provenance`` and their CEL
    functions never hold in a replay (the report says so)."""

    def __init__(self, policy: CompiledPolicy) -> None:
        from interlock.session.history import MemoryHistory

        assert policy.sessions is not None
        self.policy = policy
        self.now = 0.0
        self.history = MemoryHistory(
            max_steps=policy.sessions.max_steps, max_sessions=100_000, clock=lambda: self.now
        )

    def judge(self, recorded: Recorded, action: Action) -> Decision:
        from interlock.policy.sessionrules import SessionFacts, new_step, session_scope

        self.now = recorded.ts_us / 1_000_000
        context = action.context
        session_id = context.session_id
        if session_id is None:
            return evaluate(action, self.policy)
        facts = SessionFacts.of(self.history.view(context.tenant, session_id), now=self.now)
        with session_scope(facts):
            new = evaluate(action, self.policy)
        decision_id = recorded.decision_id or f"replayed-{recorded.seq}"
        happened = Decision(verdict=recorded.verdict, reason="recorded", decision_id=decision_id)
        self.history.append(
            context.tenant, session_id, new_step(action, happened, facts, self.policy)
        )
        if recorded.verdict is Verdict.ALLOW:
            self.history.settle(context.tenant, session_id, decision_id, executed=True)
        return new


def _reads_context(policy: CompiledPolicy) -> bool:
    """Whether some rule's ``when:`` reads the context beyond its tenant and agent."""
    for rule in policy.rules:
        when = rule.when
        if when is None:
            continue
        if "context" in when.whole:
            return True
        for _, root, key in (*when.fields, *when.presence):
            if root == "context" and key not in ("tenant", "agent"):
                return True
    return False


def replay_rows(
    rows: Iterable[AuditRow],
    policy: CompiledPolicy,
    *,
    filters: ReplayFilter | None = None,
    examples: int = 5,
    max_records: int | None = None,
    memo: bool = True,
) -> ReplayReport:
    """Replay audit rows already read (the tool filter applies; the others are the
    caller's). See :func:`replay_store`."""
    filters = filters or ReplayFilter()
    replayer = Replayer(
        policy, tool=filters.tool, examples=examples, max_records=max_records, memo=memo
    )
    replayer.feed(rows)
    return replayer.report(filters)


def replay_store(
    store: Any,
    policy: CompiledPolicy,
    filters: ReplayFilter | None = None,
    *,
    examples: int = 5,
    max_records: int | None = None,
) -> ReplayReport:
    """Replay the ``decision`` records of ``store`` (a
    :class:`~interlock.store.sql.SqlStore`) matching ``filters`` under ``policy``,
    oldest first, read :data:`PAGE` rows at a time. Writes nothing."""
    filters = filters or ReplayFilter()
    rows = store.audit_rows(
        tenant=filters.tenant,
        since_us=filters.since_us,
        until_us=filters.until_us,
        agent=filters.agent,
        kind="decision",
        page=PAGE,
    )
    return replay_rows(rows, policy, filters=filters, examples=examples, max_records=max_records)


def _example(recorded: Recorded, new: Decision, why: str | None) -> dict[str, Any]:
    """One example call, as the report shows it (arguments as recorded: redacted)."""
    text = orjson.dumps(recorded.arguments, default=str).decode()
    example: dict[str, Any] = {
        "decision_id": recorded.decision_id,
        "seq": recorded.seq,
        "time": _iso(recorded.ts_us),
        "tenant": recorded.tenant,
        "agent": recorded.agent,
        "kind": recorded.summary["kind"],
        "tool": recorded.summary["name"],
        "arguments": text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…",
        "recorded": {
            "verdict": recorded.verdict.value,
            "rule_ids": list(recorded.rule_ids),
            "rules_verdict": recorded.pure.value,
        },
        "draft": {
            "verdict": new.verdict.value,
            "rule_ids": list(new.rule_ids),
            "reason": new.reason,
        },
    }
    if why is not None:
        example["why"] = why
    return example


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=repr)


def _iso(ts_us: int) -> str:
    try:
        moment = datetime.fromtimestamp(ts_us / 1_000_000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ts_us)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
