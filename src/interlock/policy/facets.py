"""A call judged as everything it is: every scope, every listed value, every file and
URL its shell command uses.

Most calls are one *facet*: one scope, one value per parameter. Some are several:

- **Scopes**: ``shell(command=..., url=...)`` is a shell call *and* a network call
  (an argument can add a scope, never take one away); each scope's rules judge it,
  with the policy's default.
- **Lists**: ``read_files(paths=["/workspace/a", "/etc/passwd"])`` is one facet per
  path (and per combination of paths and URLs): an allow must hold for every one.
- **Uses**: ``shell(command="cat /etc/shadow")`` reads ``/etc/shadow``; each file a
  command reads, writes or deletes, and each URL it fetches, is judged by the
  filesystem (network) rules that could refuse it — deny and approval rules only,
  and no default: a shell command's allow-list decides whether it may run, the
  filesystem rules whether what it touches is off limits. A ``file://`` URL is a
  file read the same way.

The verdicts combine strictest first: deny, then undetermined (a facet that cannot
be judged might be a deny), then require_approval, then allow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from interlock.core.decision import Verdict
from interlock.errors import EvaluationError
from interlock.facts.paths import PathPattern
from interlock.facts.shell import PathUse, UrlUse, shell_facts
from interlock.facts.url import UrlError, url_facts
from interlock.policy.extract import Facts

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy, CompiledRule, Tier

__all__ = ["Outcome", "evaluate_facets", "needs_facets"]

#: (verdict, the rules that decided it, the errors that left it open)
Outcome = tuple[Verdict, tuple["CompiledRule", ...], tuple[EvaluationError, ...]]
Judge = Callable[[Facts, "tuple[Tier, ...]", Verdict], Outcome]

_RANK: Final = {
    Verdict.DENY: 3,
    Verdict.UNDETERMINED: 2,
    Verdict.REQUIRE_APPROVAL: 1,
    Verdict.ALLOW: 0,
}
# Enum members read as module globals: an Enum's class attribute costs about ten times
# as much to read on Python 3.11.
_ALLOW: Final = Verdict.ALLOW
_DENY: Final = Verdict.DENY
_UNDETERMINED: Final = Verdict.UNDETERMINED
_USE_WORDS: Final = {"read": "reads", "write": "writes", "delete": "deletes", "touched": "uses"}


def needs_facets(facts: Facts, policy: CompiledPolicy) -> bool:
    """Whether the call is more than one facet (cheap: checked on every call)."""
    if facts.scopes is not None or facts.variants is not None:
        return True
    params = facts.params
    if "@file" in params:
        return True
    if "command" in params and facts.scope == "shell":
        return bool(policy.refusers(facts.kind, facts.name))
    return False


def evaluate_facets(
    facts: Facts, policy: CompiledPolicy, judge: Judge
) -> tuple[Outcome, Outcome | None, str | None]:
    """The enforced outcome, the outcome with shadow rules (None when none apply),
    and a note naming the part of the call that decided, when it is not the call
    itself."""
    main = _main_facets(facts)
    derived, unknown = _derived_facets(facts, main, policy)
    enforced: list[tuple[Outcome, str | None]] = []
    with_shadow: list[tuple[Outcome, str | None]] = []
    any_shadow = policy.shadow_mode
    for facet in main:
        candidates = policy.candidates(facet.kind, facet.name, facet.scope)
        tiers, shadow_tiers = candidates.enforced, candidates.with_shadow
        narrowed = candidates.narrowed_for(facet)  # (None with a prefilter)
        if narrowed is not None:
            tiers, shadow_tiers = narrowed
        elif candidates.enforced_filter is not None:
            tiers = candidates.enforced_filter.tiers(facet)
        outcome = judge(facet, tiers, policy.default)
        enforced.append((outcome, None))
        if shadow_tiers is not None:
            any_shadow = True
            if candidates.shadow_filter is not None:
                tiers = candidates.shadow_filter.tiers(facet)
            else:
                tiers = shadow_tiers
            outcome = judge(facet, tiers, policy.default)
        with_shadow.append((outcome, None))  # the same outcome when no shadow rule applies
    # Once a main facet is denied, a derived one can only add deny rules to report:
    # its approval rules, and rules it cannot evaluate, would not change the verdict.
    deny_only = any(o[0] is _DENY for o, _ in enforced)
    shadow_deny_only = any(o[0] is _DENY for o, _ in with_shadow)
    for facet in derived:
        candidates = policy.candidates(facet.kind, facet.name, facet.scope)
        tiers, shadow_tiers = candidates.enforced, candidates.with_shadow
        narrowed = candidates.narrowed_for(facet)
        if narrowed is not None:
            tiers, shadow_tiers = narrowed
        found = _judge_refusals(facet, tiers, judge, deny_only)
        if found is not None:
            enforced.append((found, facet.derived))
        if shadow_tiers is not None:
            any_shadow = True
            found = _judge_refusals(facet, shadow_tiers, judge, shadow_deny_only)
        elif shadow_deny_only != deny_only:
            found = _judge_refusals(facet, tiers, judge, shadow_deny_only)
        if found is not None:
            with_shadow.append((found, facet.derived))
    if unknown is not None:
        open_ = (_UNDETERMINED, (), (EvaluationError(unknown),))
        enforced.append((open_, None))
        with_shadow.append((open_, None))
    outcome, note = _combine(enforced)
    would: Outcome | None = None
    if any_shadow:
        would, _ = _combine(with_shadow)
    return outcome, would, note


def _main_facets(facts: Facts) -> list[Facts]:
    scopes = facts.scopes or (facts.scope,)
    variants = facts.variants or ({},)
    out: list[Facts] = []
    for scope in scopes:
        for overlay in variants:
            if scope == facts.scope and not overlay:
                out.append(facts)
            else:
                params = {**facts.params, **overlay} if overlay else facts.params
                facet = facts.with_params(scope, params)
                out.append(facet)
    return out


def _derived_facets(
    facts: Facts, main: list[Facts], policy: CompiledPolicy
) -> tuple[list[Facts], str | None]:
    """The facets for what the call uses (files, URLs), and why they cannot all be
    known when they cannot (None when they can, or when no rule could refuse them)."""
    refusers = policy.refusers(facts.kind, facts.name)
    out: list[Facts] = []
    unknown: str | None = None
    if "filesystem" in refusers:
        for facet in main:
            file = facet.params.get("@file")
            if file is not None:
                out.append(_file_facet(facts, PathUse(file, "read", "the URL"), "file URL"))
    command = facts.params.get("command")
    scopes = facts.scopes or (facts.scope,)
    if command is None or "shell" not in scopes or not refusers:
        return out, None
    if not isinstance(command, str):
        return out, None
    shell = shell_facts(command)
    if shell.error is not None:
        return out, f"cannot tell what the shell command touches: {shell.error}"
    if shell.opaque:
        unknown = f"cannot tell what the shell command touches: {shell.unknown}"
    if "filesystem" in refusers:
        out.extend(_file_facet(facts, use, None) for use in shell.paths)
    if "network" in refusers:
        for url_use in shell.urls:
            url_facet = _url_facet(facts, url_use)
            if isinstance(url_facet, str):
                unknown = unknown or url_facet
            else:
                out.append(url_facet)
    return out, unknown


def _file_facet(facts: Facts, use: PathUse, what: str | None) -> Facts:
    params: dict[str, object] = {"path": use.path}
    if use.use != "touched":
        params["verb"] = use.use
    else:
        params["verb"] = PathPattern("*")  # a program Interlock does not know: any use
    note = what or f"`{use.program}` {_USE_WORDS[use.use]} {use.path}"
    if use.program == "redirect":
        note = f"a redirection {_USE_WORDS[use.use]} {use.path}"
    return facts.with_params("filesystem", dict(params), derived=note)


def _url_facet(facts: Facts, use: UrlUse) -> Facts | str:
    note = f"`{use.program}` fetches {use.url}"
    if not use.exact:
        # Only known when the command runs: every fact of it is "could be anything",
        # so a deny rule on any of them leaves the verdict open.
        unknown = PathPattern("*")
        params: dict[str, object] = {
            "url": PathPattern(use.url),
            "domain": unknown,
            "site": unknown,
            "scheme": unknown,
            "ip_class": unknown,
        }
        return facts.with_params("network", params, derived=note)
    try:
        found = url_facts(use.url)
    except UrlError as exc:
        return f"cannot judge the URL the command fetches: {exc}"
    if found.ambiguous is not None:
        return (
            f"the command fetches {use.url!r}, whose host depends on the client: {found.ambiguous}"
        )
    params = {"url": use.url, "domain": found.host, "scheme": found.scheme}
    if found.port is not None:
        params["port"] = found.port
    if found.site is not None:
        params["site"] = found.site
    if found.ip_class is not None:
        params["ip_class"] = found.ip_class
    return facts.with_params("network", params, derived=note)


def _judge_refusals(
    facet: Facts, tiers: tuple[Tier, ...], judge: Judge, deny_only: bool = False
) -> Outcome | None:
    """A derived facet's outcome from its deny and approval rules only; None when
    none of them applies (no opinion: the default is not applied). ``deny_only``: the
    matching deny rules alone (the verdict is a deny already)."""
    if deny_only:
        for verdict, rules in tiers:
            if verdict is _DENY:
                matched = tuple(rule for rule in rules if _matches(rule, facet))
                return (_DENY, matched, ()) if matched else None
        return None
    refusing = tuple(tier for tier in tiers if tier[0] is not _ALLOW)
    if not refusing:
        return None
    outcome = judge(facet, refusing, _ALLOW)
    if outcome[0] is _ALLOW:
        return None
    return outcome


def _matches(rule: CompiledRule, facet: Facts) -> bool:
    try:
        return rule.test(facet)
    except Exception:
        return False  # cannot be evaluated: no deny to add (the verdict is one already)


def _combine(outcomes: list[tuple[Outcome, str | None]]) -> tuple[Outcome, str | None]:
    """The strictest outcome; the rules (or errors) of every facet that reached it."""
    verdict = max((o[0][0] for o in outcomes), key=_RANK.__getitem__)
    rules: dict[str, CompiledRule] = {}
    errors: list[EvaluationError] = []
    notes: list[str] = []
    for (found, rule_list, error_list), note in outcomes:
        if found is not verdict:
            continue
        for rule in rule_list:
            rules.setdefault(rule.id, rule)
        errors.extend(e for e in error_list if e not in errors)
        if note is not None and note not in notes:
            notes.append(note)
    ordered = tuple(rules[key] for key in sorted(rules))
    note = "; ".join(notes[:3]) + ("; …" if len(notes) > 3 else "") if notes else None
    return (verdict, ordered, tuple(errors)), note
