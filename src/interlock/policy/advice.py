"""Advice on a policy that loads: things that are valid but probably not meant.

``interlock policy lint`` prints these as warnings (the exit status stays 0). Each
names the file and line it is about when the policy came from a file. Today:

- no rule allows model calls under a default that refuses them;
- a pattern on the raw text of a shell ``command`` — an allow glob passes
  ``ls; rm -rf /``, a deny regex misses ``/bin/rm -Rf``: use ``shell:``;
- a pattern on the text of a ``url`` — ``*docs.example.com*`` passes
  ``https://evil.example/?docs.example.com``: match ``domain`` or ``site``;
- a ``domain`` glob that also matches other sites (``*example.com`` matches
  ``evilexample.com``; ``*.co.uk`` every site under a public suffix);
- a CEL ``when:`` reading ``command`` or ``url`` text with ``contains`` /
  ``startsWith`` / ``endsWith`` / ``matches``.

Example::

    from interlock.policy import load_policy_text
    from interlock.policy.advice import policy_advice

    for warning in policy_advice(load_policy_text(text)):
        print(warning)
"""

from __future__ import annotations

import re
from typing import Final

from interlock.core.decision import Verdict
from interlock.policy.compiled import CompiledPolicy, CompiledRule
from interlock.policy.matchers import MISSING

__all__ = ["policy_advice"]

_TEXT_TESTS: Final = re.compile(
    r"\b(?:params|args)\.(command|cmd|url)\s*\.\s*(contains|startsWith|endsWith|matches)\s*\("
)


def _allows_models(policy: CompiledPolicy) -> bool:
    """Whether some enforced rule can allow a model call (``kind: llm``, or a rule for
    every kind and every name)."""
    for rule in policy.rules:
        if rule.verdict is not Verdict.ALLOW or rule.shadow:
            continue
        if rule.kinds is not None and "llm" in rule.kinds:
            return True
        if rule.kinds is None and rule.names is None:
            return True
    return False


def _token_budgets_over_other_calls(policy: CompiledPolicy, where: str) -> list[str]:
    """A ``tokens`` budget that covers calls other than model calls, with no
    ``default_estimate``: those calls state no tokens and will be refused."""
    advice = []
    for budget in policy.budgets:
        kinds = budget.selector.kinds
        if not budget.is_tokens or budget.default_estimate is not None:
            continue
        if kinds is not None and kinds <= {"llm"}:
            continue
        line = f":{budget.line}" if budget.line else ""
        advice.append(
            f"{where}{line}: budget {budget.id!r} counts tokens but also covers calls that "
            "are not model calls, which state no tokens: they will be refused; add "
            "kind: llm, or a default_estimate"
        )
    return advice


def policy_advice(policy: CompiledPolicy) -> list[str]:
    """Warnings for ``policy``, each a line of text (``file:line: …`` when known)."""
    where = policy.source or "<policy>"
    advice: list[str] = _token_budgets_over_other_calls(policy, where)
    if policy.default is not Verdict.ALLOW and not _allows_models(policy):
        counted = [b for b in policy.budgets if b.selector.kinds and "llm" in b.selector.kinds]
        for budget in counted:
            line = f":{budget.line}" if budget.line else ""
            advice.append(
                f"{where}{line}: budget {budget.id!r} counts model calls (kind: llm), but no "
                "rule allows one: every model call will be refused"
            )
        if not counted:
            advice.append(
                f"{where}: no rule allows model calls (kind: llm) and the default is "
                f"{policy.default.value}: a guard with a store checks every model call its "
                "adapters see (LangChain middleware, GuardedModel, guard.llm_call), and "
                "would refuse them all; add a rule such as "
                "{id: models, decision: allow, reason: ..., kind: llm, name: 'gpt-*'}"
            )
    for rule in policy.rules:
        at = f"{where}:{rule.line}" if rule.line else where
        advice.extend(f"{at}: rule {rule.id!r}: {text}" for text in _pattern_advice(rule))
    return advice


def _pattern_advice(rule: CompiledRule) -> list[str]:
    found: list[str] = []
    allow = rule.verdict is Verdict.ALLOW
    for condition in rule.conditions:
        key = condition.key
        texts = condition.glob or condition.regex or condition.eq is not MISSING
        if key in ("command", "args.command", "args.cmd") and (texts or condition.in_):
            if allow:
                found.append(
                    f"an allow on the raw text of {key!r} also passes what follows an "
                    "allowed command (`ls *` passes `ls; rm -rf /` and `ls $(rm -rf /)`): "
                    "use `shell: {programs: [...]}`, which holds only when every command "
                    "of the string is listed"
                )
            else:
                found.append(
                    f"a pattern on the raw text of {key!r} misses the same command written "
                    "another way (`/bin/rm -Rf`, `r\\m -r -f`, `sudo rm`, `bash -c '...'`): "
                    "use `shell: {commands: [{program: rm, flags: [-r]}]}`"
                )
        if key in ("url", "args.url") and (
            condition.glob or condition.regex or condition.not_glob or condition.not_regex
        ):
            found.append(
                f"a pattern on the text of {key!r} is not its host "
                "(`*docs.example.com*` matches `https://evil.example/?docs.example.com`, "
                "`https://docs.example.com\\@evil.example/`): match `domain` (the host a "
                "client connects to) or `site` (its registrable domain)"
            )
        if key == "domain" and condition.glob is not None:
            found.extend(_domain_glob_advice(condition.glob.patterns))
    when = rule.when
    if when is not None:
        for match in _TEXT_TESTS.finditer(when.source):
            name, method = match.groups()
            hint = (
                "use `shell:` or the `shell` CEL variable"
                if name in ("command", "cmd")
                else "use `params.domain` or `params.site`"
            )
            found.append(f"`when` reads the text of {name} with {method}(): {hint}")
    return found


def _domain_glob_advice(patterns: tuple[str, ...]) -> list[str]:
    from interlock.facts.url import registrable_domain

    found: list[str] = []
    for pattern in patterns:
        if pattern.startswith("*") and not pattern.startswith("*."):
            found.append(
                f"the domain glob {pattern!r} also matches other sites "
                f"(`evil{pattern.lstrip('*')}`): write `*.{pattern.lstrip('*.')}` and "
                f"`{pattern.lstrip('*.')}`, or use `site`"
            )
        elif pattern.startswith("*.") and "*" not in pattern[2:]:
            suffix = pattern[2:]
            if registrable_domain(f"x.{suffix}") == f"x.{suffix}":
                found.append(
                    f"the domain glob {pattern!r} matches every site under the public "
                    f"suffix {suffix!r}, not one organisation's hosts"
                )
    return found
