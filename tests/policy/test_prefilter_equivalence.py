"""The set matcher decides exactly what rule-by-rule evaluation decides.

For a candidate set of many rules the engine matches each parameter once against
one RE2 set (and a dict of literals) and tests in full only the rules the sets leave
in (``interlock.policy.prefilter``). These tests evaluate random policies of 20-200
rules — literals, ``in`` lists, globs, regexes (anchored or not, case-insensitive,
alternations, classes, Unicode), numbers, presence, CEL ``when``, agents, tenants,
scopes, every decision, shadow rules — against random calls built to hit and just
miss those patterns (case variants, shared prefixes, Unicode, empty and very long
text, newlines, wrong types, missing arguments), once with the prefilter forced on
for every candidate set and once with it off, and require the same verdict, the
same rule ids (as reported, and so as a set), the same reason, the same cause and
the same shadow verdict.

A second property checks the prefilter itself, below the verdict: a rule it leaves
out must be one that, tested in full, does not match and raises nothing — so a
skipped rule can never hide behind a stricter tier's verdict.

``INTERLOCK_PROPERTY_EXAMPLES`` scales the example counts (CI can raise it).
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from interlock import Action, Context, Decision, Verdict
from interlock.errors import PolicyError
from interlock.policy import CompiledPolicy, compile_policy, evaluate
from interlock.policy import compiled as compiled_module
from interlock.policy import prefilter as prefilter_module
from interlock.policy.engine import facts_for
from interlock.policy.extract import Facts
from interlock.policy.facets import needs_facets
from interlock.policy.matchers import GlobSet, RegexError, RegexSet, compile_re2_set, glob_to_re2

#: Hypothesis examples for the main property (each example is a policy of 20-200
#: rules judged on several calls, twice).
EXAMPLES = int(os.environ.get("INTERLOCK_PROPERTY_EXAMPLES", "60"))

SETTINGS = settings(
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- forcing the prefilter on and off ---------------------------------------------------

#: A candidate set is prefiltered when it has at least this many rules (the seam:
#: ``TierFilter.of`` reads it when a candidate set is first built, at a check).
ON, OFF = 1, 10**9


@contextmanager
def prefilter_threshold(minimum: int) -> Iterator[None]:
    """Within the block, candidate sets of ``minimum`` rules or more are prefiltered.
    Candidate sets are built lazily at a check, so policies must be compiled and
    judged inside the block."""
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(compiled_module, "PREFILTER_MIN_RULES", minimum)
        yield
    finally:
        patch.undo()


def essence(decision: Decision) -> tuple[Any, ...]:
    """Everything a decision says but its id (and the cause as text: a fresh object)."""
    shadow = decision.shadow
    cause = decision.cause
    return (
        decision.verdict,
        decision.rule_ids,
        decision.reason,
        None
        if cause is None
        else (type(cause).__name__, str(cause), getattr(cause, "rule_id", None)),
        None if shadow is None else (shadow.verdict, shadow.rule_ids, shadow.reason),
        None if decision.approval is None else decision.approval.url,
    )


def judge_both(data: dict[str, Any], actions: list[Action]) -> list[tuple[Decision, Decision]]:
    """Each action judged by the policy with the prefilter on, and with it off. A
    policy that does not load must fail the same way both ways."""
    decisions: list[list[Decision]] = []
    errors: list[str | None] = []
    for minimum in (ON, OFF):
        with prefilter_threshold(minimum):
            try:
                policy = compile_policy(data)
            except PolicyError as exc:
                errors.append(str(exc))
                decisions.append([])
                continue
            errors.append(None)
            decisions.append([evaluate(action, policy) for action in actions])
    assert errors[0] == errors[1]
    return list(zip(decisions[0], decisions[1], strict=True))


def assert_same(filtered: Decision, plain: Decision) -> None:
    assert set(filtered.rule_ids) == set(plain.rule_ids)
    assert essence(filtered) == essence(plain)


# -- the vocabulary: text built to hit and to just miss ---------------------------------

#: Words with case variants, shared prefixes, Unicode that folds or normalises
#: differently (ß/ss, the Kelvin sign, dotted/dotless i, a combining accent), the
#: empty string, newlines and the characters globs and regexes treat specially.
WORDS = (
    "alpha",
    "Alpha",
    "ALPHA",
    "alp",
    "alphabet",
    "beta",
    "b",
    "a.b",
    "a-b",
    "a/b",
    "é",
    "É",
    "e\u0301",
    "ß",
    "ss",
    "SS",
    "\u0130",  # İ
    "\u0131",  # ı
    "i",
    "\u212a",  # the Kelvin sign, which folds to k
    "k",
    "K",
    "日本",
    "😀",
    "",
    " ",
    "\n",
    "x\ny",
    "\t",
    "[x]",
    "*",
    "?",
    "\\",
    "$",
    "^",
    "42",
    "0042",
    "-1",
)

_WORD = st.sampled_from(WORDS)


def _re_escape(text: str) -> str:
    """``text`` as an RE2 literal (every non-word character as ``\\x{...}``)."""
    return "".join(ch if ch.isalnum() and ch.isascii() else f"\\x{{{ord(ch):x}}}" for ch in text)


@st.composite
def words(draw: st.DrawFn) -> str:
    """One or two words, perhaps joined by a separator."""
    first = draw(_WORD)
    if draw(st.booleans()):
        return first
    return first + draw(st.sampled_from(["", ".", "/", "-", " ", "\n"])) + draw(_WORD)


@st.composite
def globs(draw: st.DrawFn) -> str:
    word = draw(words())
    shape = draw(st.integers(0, 13))
    if shape == 0:
        return word  # a literal glob
    if shape == 1:
        return word + "*"
    if shape == 2:
        return "*" + word
    if shape == 3:
        return "*" + word + "*"
    if shape == 4:
        return word[:1] + "?" + word[2:]
    if shape == 5:
        return draw(st.sampled_from(["[a-c]*", "[A-Z]lpha", "[!a]*", "[]]*", "[!]]*", "a[b"]))
    if shape == 6:
        return draw(st.sampled_from(["*", "", "**", "?", "??*", "[-a]*", "[z-a]*"]))
    if shape == 7:
        return word + "*" + draw(_WORD)
    if shape == 8:
        return word.upper() + "*"
    if shape == 9:
        return word[:1] + "[" + (word[1:2] or "x") + "]*"
    if shape == 10:
        return "*." + word
    if shape == 11:
        return word + "?"
    if shape == 12:
        return draw(st.sampled_from(["[\u00e9e]*", "*\u212a*", "[[]*", "*\\*", "[\\]x"]))
    return draw(st.text(st.sampled_from(list("ab*?[]!-é\n")), max_size=6))


@st.composite
def regexes(draw: st.DrawFn) -> str:
    raw = draw(words())
    word = _re_escape(raw)
    other = _re_escape(draw(words()))
    shape = draw(st.integers(0, 11))
    if shape == 0:
        return word or "x"
    if shape == 1:
        return "^" + word
    if shape == 2:
        return word + "$"
    if shape == 3:
        return "^" + word + "$"
    if shape == 4:
        return "(?i)" + (word or "a")
    if shape == 5:
        return f"{word}|{other}"
    if shape == 6:
        return f"^(?:{word}|{other})$"
    if shape == 7:
        return draw(
            st.sampled_from(
                [
                    "[a-c]+",
                    "^[^a]",
                    r"\d+",
                    r"^\d+$",
                    "^$",
                    "(?s)a.b",
                    "a.b",
                    r"\bbeta\b",
                    "(?m)^beta$",
                    r"\Aalp",
                    r"alpha\z",
                    r"\pL+",
                    r"^\PL*$",
                    "(?i)ß",
                    "(?i)k",
                    r"\x{212a}",
                    ".{3,}",
                    "^.{0,2}$",
                    "(?i)[α-ω]",
                    r"[\n]",
                    r"\s",
                    r"^\S+$",
                    "(?U)a+b",
                    "é|e\u0301",
                    "(?i)alpha|BETA",
                    r"\x{0}",
                ]
            )
        )
    if shape == 8:
        return f"(?i)^{word}"
    if shape == 9:
        return f"{word}.*{other}"
    if shape == 10:
        return f"[{_re_escape(raw[:4]) or 'a'}]"
    return f"^{word}(?:/.*)?$"


def _one_or_list(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str | list[str]]:
    return st.one_of(strategy, st.lists(strategy, min_size=1, max_size=3))


_LITERAL = st.one_of(words(), st.sampled_from([0, 1, 42, -1, 2.5, True, False]))
_NUMBER = st.sampled_from([-1, 0, 1, 2, 10, 41.5, 42, 1e9])

#: One test of a condition, as the policy file spells it.
_TESTS: dict[str, st.SearchStrategy[Any]] = {
    "glob": _one_or_list(globs()),
    "not_glob": _one_or_list(globs()),
    "regex": _one_or_list(regexes()),
    "not_regex": _one_or_list(regexes()),
    "eq": _LITERAL,
    "ne": _LITERAL,
    "in": st.lists(_LITERAL, min_size=1, max_size=4),
    "not_in": st.lists(_LITERAL, min_size=1, max_size=3),
    "gt": _NUMBER,
    "gte": _NUMBER,
    "lt": _NUMBER,
    "lte": _NUMBER,
    "exists": st.booleans(),
}

#: Most conditions are the indexable kinds (a literal, an ``in``, globs, regexes).
_INDEXABLE = ("eq", "in", "glob", "regex")


@st.composite
def conditions(draw: st.DrawFn) -> Any:
    shape = draw(st.integers(0, 9))
    if shape <= 1:
        return draw(words())  # a bare string: one glob (or the literal itself)
    if shape == 2:
        return draw(st.lists(globs(), min_size=1, max_size=3))  # any of these globs
    if shape == 3:
        return draw(st.sampled_from([0, 1, 42, True, False]))  # equality
    if shape <= 6:
        name = draw(st.sampled_from(_INDEXABLE))
        return {name: draw(_TESTS[name])}
    names = draw(st.lists(st.sampled_from(sorted(_TESTS)), min_size=1, max_size=3, unique=True))
    if shape == 7 and not any(name in names for name in _INDEXABLE):
        names.append(draw(st.sampled_from(_INDEXABLE)))  # an indexed test with others
    return {name: draw(_TESTS[name]) for name in names}


#: The parameters rules test: arguments (flat, nested, an index) and extracted ones.
KEYS = (
    "args.q",
    "args.q",
    "args.q",
    "args.mode",
    "args.mode",
    "args.to",
    "args.n",
    "args.meta.level",
    "args.items.0",
    "domain",
    "domain",
    "path",
    "path",
    "url",
    "site",
    "port",
    "ip_class",
    "command",
    "verb",
    "scheme",
)

SHELLS = (
    {"programs": ["ls", "cat", "echo"]},
    {"commands": [{"program": "rm", "flags": ["-r"]}]},
    {"commands": [{"program": "curl", "args": ["*alpha*"]}]},
    {"writes": False},
)

TOOLS = ("search", "send_email", "read_file", "delete_row", "shell", "fetch")
SCOPES = ("shell", "filesystem", "network", "data", "cost")

WHENS = (
    "has(args.q) && args.q.startsWith('al')",
    "args.q.startsWith('al')",  # errors when q is missing or not text
    "args.n > 10",  # errors when n is missing or not a number
    "size(args) > 1",
    "context.tenant == 'acme'",
    "action.name.startsWith('se')",
    "args.q",  # not a boolean
    "params.path.startsWith('/tmp')",  # errors without a path, or on a path pattern
    "has(args.mode) && args.mode == 'alpha'",
)


@st.composite
def rule_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "decision": draw(st.sampled_from(["allow", "allow", "deny", "require_approval"]))
    }
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=0, max_size=3, unique=True))
    if keys:
        body["params"] = {key: draw(conditions()) for key in keys}
    extra = draw(st.integers(0, 15))
    if extra == 0:
        body["when"] = draw(st.sampled_from(WHENS))
    elif extra == 1:
        body["tenant"] = draw(st.sampled_from(["acme", "ac*", ["acme", "other"]]))
    elif extra == 2:
        body["agent"] = draw(st.sampled_from(["bot", "b*", "Bot"]))
    elif extra == 3:
        body["mode"] = "shadow"
    elif extra == 4:
        body["shell"] = draw(st.sampled_from(SHELLS))
    if draw(st.integers(0, 3)) == 0:
        body["name"] = draw(st.sampled_from([*TOOLS, "se*", ["search", "fetch"], "*_row"]))
    if draw(st.integers(0, 5)) == 0:
        body["scope"] = draw(st.sampled_from([*SCOPES, ["data", "network"]]))
    if draw(st.integers(0, 7)) == 0:
        body["kind"] = draw(st.sampled_from(["tool", "mcp", ["tool", "mcp"]]))
    return body


@st.composite
def policies(draw: st.DrawFn, min_rules: int = 20, max_rules: int = 200) -> dict[str, Any]:
    """A policy of ``min_rules``-``max_rules`` rules over a few tools and parameters.
    Rules are drawn from a smaller stock and repeated under new ids, so that tiers
    hold rules that match, fail and cannot be judged together."""
    stock = draw(st.lists(rule_bodies(), min_size=4, max_size=40))
    count = draw(st.integers(min_rules, max_rules))
    picks = draw(st.lists(st.integers(0, len(stock) - 1), min_size=count, max_size=count))
    rules = [
        {"id": f"r{i:03d}", "reason": f"because r{i:03d}", **stock[pick]}
        for i, pick in enumerate(picks)
    ]
    data: dict[str, Any] = {
        "version": 1,
        "default": draw(st.sampled_from(["allow", "deny", "require_approval"])),
        "rules": rules,
    }
    if draw(st.integers(0, 11)) == 0:
        data["mode"] = "shadow"
    if draw(st.booleans()):
        data["scopes"] = {"tools": {"search": "data", "send_email": "network", "se*": "data"}}
    return data


# -- calls ----------------------------------------------------------------------------------


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Text that hits or just misses the patterns above."""
    shape = draw(st.integers(0, 9))
    if shape <= 3:
        return draw(words())
    if shape == 4:
        word = draw(words())
        return draw(st.sampled_from([word.upper(), word.lower(), word.swapcase(), word.casefold()]))
    if shape == 5:
        return draw(words()) + draw(st.sampled_from(["", "\n", " ", "x", "/", "é"]))
    if shape == 6:
        return draw(st.sampled_from(["", "\n", "x" * 10_000, "alpha" * 2_000 + "beta"]))
    if shape == 7:
        return draw(st.text(max_size=6))  # any Unicode, lone surrogates included
    if shape == 8:
        return draw(st.sampled_from(["", "x", "\n"])) + draw(words())
    return draw(st.from_regex(r"[a-cA-C0-9 .\n/é-]{0,6}", fullmatch=True))


#: Values of the wrong type for a text test (and of the right one for a number test).
_OTHER_VALUES = st.one_of(
    st.integers(-2, 50),
    st.sampled_from([42, 0, 1.5, math.nan, math.inf, -0.0, True, False, None]),
    st.lists(words(), max_size=2),
    st.fixed_dictionaries({"level": texts()}),
)


def _value() -> st.SearchStrategy[Any]:
    return st.one_of(texts(), texts(), texts(), _OTHER_VALUES)


ARGUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "q": _value(),
        "mode": _value(),
        "to": _value(),
        "n": st.one_of(st.integers(-2, 50), _value()),
        "meta": st.one_of(st.fixed_dictionaries({"level": _value()}), _value()),
        "items": st.one_of(st.lists(_value(), max_size=2), _value()),
        "path": st.one_of(
            st.sampled_from(
                ["/tmp/alpha", "/TMP/Alpha", "/etc/passwd", "../../etc/x", "a/b", "alpha", ""]
            ),
            texts(),
        ),
        "domain": st.sampled_from(
            ["alpha.example", "ALPHA.example.", "beta", "b", "xn--e-ssa", "é.example", "127.0.0.1"]
        ),
        "url": st.sampled_from(
            [
                "https://alpha.example/a",
                "http://ALPHA.example:8080/x?q=1",
                "https://beta/",
                "http://10.0.0.1/",
                "https://é.example/",
                "file:///etc/passwd",
                "not a url",
                "",
            ]
        ),
        "paths": st.lists(
            st.sampled_from(["/tmp/alpha", "/etc/passwd", "alpha", "/TMP/x", "../x"]),
            min_size=1,
            max_size=3,
        ),
    },
)

COMMANDS = st.sampled_from(
    ["ls", "cat /tmp/alpha", "rm -rf /etc/passwd", "curl https://alpha.example/x", "echo é"]
)


@st.composite
def actions(draw: st.DrawFn) -> Action:
    name = draw(st.sampled_from(TOOLS))
    arguments = dict(draw(ARGUMENTS))
    if "url" in arguments and "domain" in arguments and draw(st.booleans()):
        del arguments["domain"]  # (else often a conflict of aliases, refused before rules)
    if name == "shell" and draw(st.booleans()):
        arguments["command"] = draw(COMMANDS)
    return Action(
        kind=draw(st.sampled_from(["tool", "tool", "tool", "mcp"])),
        name=name,
        arguments=arguments,
        scope=draw(st.one_of(st.none(), st.none(), st.sampled_from(SCOPES))),
        context=draw(
            st.sampled_from([Context(), Context(tenant="acme", agent="bot"), Context(agent="Bot")])
        ),
    )


def _texts_of(condition: Any) -> list[str]:
    """The text a condition names: its literals, and its globs with their wildcards
    filled in (a value each glob matches, or nearly)."""
    if isinstance(condition, dict):
        found = []
        for name in ("eq", "in", "glob", "not_glob"):
            found += _texts_of(condition.get(name))
        return found
    if isinstance(condition, list):
        return [text for item in condition for text in _texts_of(item)]
    if isinstance(condition, str):
        return [condition.replace("*", "al").replace("?", "x")]
    return []


def _near(text: str, how: int) -> str:
    """``text``, or a near miss of it."""
    return [text, text, text.upper(), text[:-1], text + "\n", "x" + text, text.casefold()][how]


@st.composite
def policies_and_calls(draw: st.DrawFn) -> tuple[dict[str, Any], list[Action]]:
    """A policy, and calls whose arguments are the text its rules name, or near it:
    many more rules match (and many more just miss) than by chance."""
    data = draw(policies())
    named: dict[str, list[str]] = {}
    for rule in data["rules"]:
        for key, condition in rule.get("params", {}).items():
            if key.startswith("args.") and "." not in key[5:]:
                named.setdefault(key[5:], []).extend(_texts_of(condition))
    calls = draw(st.lists(actions(), min_size=1, max_size=8))
    out = []
    for call in calls:
        arguments = dict(call.arguments)
        for name, known in named.items():
            aimed: bool = draw(st.booleans())
            if aimed and known:
                text = draw(st.sampled_from(known))
                arguments[name] = _near(text, draw(st.integers(0, 6)))
        out.append(
            Action(
                kind=call.kind,
                name=call.name,
                arguments=arguments,
                scope=call.scope,
                context=call.context,
            )
        )
    return data, out


# -- 1. the same decision, either way ------------------------------------------------------


@SETTINGS
@given(data=policies(), calls=st.lists(actions(), min_size=1, max_size=8))
def test_the_set_matcher_decides_as_every_rule_tested_one_by_one(
    data: dict[str, Any], calls: list[Action]
) -> None:
    for filtered, plain in judge_both(data, calls):
        count = len(plain.rule_ids)
        event(f"verdict: {plain.verdict.value}, {count if count < 3 else '3+'} rule id(s)")
        assert_same(filtered, plain)


@SETTINGS
@given(case=policies_and_calls())
def test_the_set_matcher_decides_as_every_rule_on_calls_aimed_at_the_rules(
    case: tuple[dict[str, Any], list[Action]],
) -> None:
    data, calls = case
    for filtered, plain in judge_both(data, calls):
        count = len(plain.rule_ids)
        event(f"verdict: {plain.verdict.value}, {count if count < 3 else '3+'} rule id(s)")
        assert_same(filtered, plain)


# -- 2. the prefilter leaves out only rules that neither match nor raise ---------------------


def _tested(rule: Any, facts: Facts) -> str:
    try:
        return "match" if rule.test(facts) else "no match"
    except Exception:
        return "error"


def _skipped_rules(policy: CompiledPolicy, action: Action) -> list[tuple[str, str]]:
    """The rules the prefilter leaves out that, tested in full, match or raise."""
    try:
        facts = facts_for(action, policy)
    except Exception:
        return []  # refused before any rule is judged (the same either way)
    if needs_facets(facts, policy):
        return []  # judged facet by facet: covered by the decision property
    candidates = policy.candidates(facts.kind, facts.name, facts.scope)
    wrong: list[tuple[str, str]] = []
    for every, prefilter in (
        (candidates.enforced, candidates.enforced_filter),
        (candidates.with_shadow, candidates.shadow_filter),
    ):
        if every is None or prefilter is None:
            continue  # no rule to skip, or none with a condition to index: all tested
        kept = {rule.id for _, rules in prefilter.tiers(facts) for rule in rules}
        for _, rules in every:
            for rule in rules:
                if rule.id not in kept and (outcome := _tested(rule, facts)) != "no match":
                    wrong.append((rule.id, outcome))
    return wrong


@settings(SETTINGS, max_examples=max(EXAMPLES // 2, 10))
@given(data=policies(), calls=st.lists(actions(), min_size=1, max_size=8))
def test_a_rule_the_prefilter_skips_neither_matches_nor_raises(
    data: dict[str, Any], calls: list[Action]
) -> None:
    with prefilter_threshold(ON):
        policy = compile_policy(data)
        for action in calls:
            assert _skipped_rules(policy, action) == []


# -- 2b. the sets themselves: one pass finds what each pattern finds alone ------------------

_ODD_REGEXES = st.sampled_from(
    [r"\Qa.b\E", "(?i:x)y", r"\Q)\E", "(?s).", "x{2}", "(?P<n>a)", r"\C", "(?m)$", "^"]
)


@settings(SETTINGS, max_examples=EXAMPLES * 10)
@given(
    patterns=st.lists(st.one_of(regexes(), _ODD_REGEXES), min_size=1, max_size=12),
    values=st.lists(texts(), min_size=1, max_size=4),
)
def test_a_set_of_regexes_finds_what_each_finds_alone(
    patterns: list[str], values: list[str]
) -> None:
    """The prefilter's regex set against each rule's own ``RegexSet`` (one pattern,
    and a rule's whole list as it is compiled: one alternation)."""
    try:
        alone = [RegexSet.of(pattern) for pattern in patterns]
    except RegexError:
        return  # refused at load, rule by rule
    together = compile_re2_set(patterns, anchored=False)
    as_one_rule = RegexSet.of(patterns)
    for value in values:
        found = {i for i, regex in enumerate(alone) if regex.matches(value)}
        assert set(together.match(value)) == found
        assert as_one_rule.matches(value) is bool(found)


@settings(SETTINGS, max_examples=EXAMPLES * 10)
@given(
    patterns=st.lists(globs(), min_size=1, max_size=12),
    values=st.lists(texts(), min_size=1, max_size=4),
)
def test_a_set_of_globs_finds_what_each_finds_alone(patterns: list[str], values: list[str]) -> None:
    """The prefilter's glob set (RE2, on UTF-8) against each rule's ``GlobSet``
    (Python's fnmatch): Unicode, lone surrogates, newlines, classes, case."""
    together = compile_re2_set([glob_to_re2(glob) for glob in patterns], anchored=True)
    alone = [GlobSet.of(glob) for glob in patterns]
    for value in values:
        found = {i for i, glob in enumerate(alone) if glob.matches(value)}
        assert set(together.match(value)) == found


# -- 3. the seam is real: the prefilter is on, and skips, when forced on ---------------------


def _many(rule: dict[str, Any], count: int = 30) -> dict[str, Any]:
    return {
        "version": 1,
        "default": "deny",
        "rules": [
            {**rule, "id": f"r{i:03d}", "reason": f"because r{i:03d}", "name": "search"}
            for i in range(count)
        ],
    }


@pytest.mark.parametrize(("minimum", "on"), [(ON, True), (OFF, False), (None, True)])
def test_the_threshold_turns_the_prefilter_on_and_off(minimum: int | None, on: bool) -> None:
    data = _many({"decision": "allow", "params": {"args.q": {"regex": "^alpha"}}})
    action = Action.tool("search", {"q": "beta"})
    if minimum is None:  # the default threshold: 30 rules are enough
        policy = compile_policy(data)
        candidates = policy.candidates("tool", "search", facts_for(action, policy).scope)
    else:
        with prefilter_threshold(minimum):
            policy = compile_policy(data)
            candidates = policy.candidates("tool", "search", facts_for(action, policy).scope)
    assert (candidates.enforced_filter is not None) is on
    if on:
        assert candidates.enforced_filter is not None
        assert candidates.enforced_filter.tiers(facts_for(action, policy)) == ()


# -- 4. tricky cases, found or feared -------------------------------------------------------


def _policy(*rules: dict[str, Any], default: str = "allow") -> dict[str, Any]:
    """The rules, each repeated so that every tier is large, plus filler rules that
    never match (nor raise) in the deny and the allow tiers."""
    out = [
        {"reason": f"because {rule['id']}", **rule, "id": f"{rule['id']}-{copy}"}
        for rule in rules
        for copy in range(2)
    ]
    out += [
        {
            "id": f"filler-{i:02d}",
            "reason": "filler",
            "decision": "deny" if i % 2 else "allow",
            "params": {"args.q": {"in": [f"no such value {i}"]}},
        }
        for i in range(24)
    ]
    return {"version": 1, "default": default, "rules": out}


class _Text(str):
    """Text that is not exactly a ``str``."""


TRICKY: list[tuple[str, dict[str, Any], Action]] = [
    (
        # a false indexed test beats an unevaluable CEL condition of the same rule
        "literal-false-when-errors",
        _policy(
            {"id": "a", "decision": "deny", "params": {"args.q": "alpha"}, "when": "args.n > 1"}
        ),
        Action.tool("search", {"q": "beta", "n": "x"}),
    ),
    (
        # the same, with the indexed test true: the rule cannot be evaluated
        "literal-true-when-errors",
        _policy(
            {"id": "a", "decision": "deny", "params": {"args.q": "alpha"}, "when": "args.n > 1"}
        ),
        Action.tool("search", {"q": "alpha", "n": "x"}),
    ),
    (
        # a number test on text raises; the regex the rule is indexed by is false
        "regex-false-bounds-raise",
        _policy({"id": "a", "decision": "deny", "params": {"args.q": {"regex": "^z", "gt": 1}}}),
        Action.tool("search", {"q": "alpha"}),
    ),
    (
        # a regex on a list raises: a value that is not text keeps every rule
        "regex-on-a-list",
        _policy({"id": "a", "decision": "deny", "params": {"args.q": {"regex": "^a"}}}),
        Action.tool("search", {"q": ["alpha"]}),
    ),
    (
        # equality is typed: 42 is not "42", True is not 1
        "typed-literals",
        _policy(
            {"id": "s", "decision": "deny", "params": {"args.q": {"in": ["42", "x"]}}},
            {"id": "n", "decision": "require_approval", "params": {"args.q": 42}},
            {"id": "b", "decision": "allow", "params": {"args.q": {"in": [True, "y"]}}},
        ),
        Action.tool("search", {"q": 42}),
    ),
    (
        "true-is-not-one",
        _policy({"id": "b", "decision": "deny", "params": {"args.q": {"in": [1, "1"]}}}),
        Action.tool("search", {"q": True}),
    ),
    (
        # case-insensitive regex and Unicode case folding: the Kelvin sign folds to k
        "kelvin-sign",
        _policy({"id": "k", "decision": "deny", "params": {"args.q": {"regex": "(?i)^k$"}}}),
        Action.tool("search", {"q": "\u212a"}),
    ),
    (
        # a glob is case-sensitive, whatever the script
        "glob-case",
        _policy({"id": "g", "decision": "deny", "params": {"args.q": "ÉCOLE*"}}),
        Action.tool("search", {"q": "école"}),
    ),
    (
        # `*` and `?` cross newlines in a glob; `.` does not in a regex
        "newline-glob",
        _policy(
            {"id": "g", "decision": "deny", "params": {"args.q": "a?b*"}},
            {"id": "r", "decision": "deny", "params": {"args.q": {"regex": "^a.b"}}},
        ),
        Action.tool("search", {"q": "a\nb\n"}),
    ),
    (
        # `$` matches only at the very end in RE2 (not before a final newline)
        "dollar-before-newline",
        _policy({"id": "r", "decision": "deny", "params": {"args.q": {"regex": "alpha$"}}}),
        Action.tool("search", {"q": "alpha\n"}),
    ),
    (
        # a lone surrogate (valid in JSON text) is one character to `?`
        "lone-surrogate",
        _policy(
            {"id": "g", "decision": "deny", "params": {"args.q": "a?"}},
            {"id": "r", "decision": "deny", "params": {"args.q": {"regex": "^a.$"}}},
        ),
        Action.tool("search", {"q": "a\ud800"}),
    ),
    (
        # a combining accent is two characters; the precomposed é is one
        "combining-accent",
        _policy({"id": "g", "decision": "deny", "params": {"args.q": "?"}}),
        Action.tool("search", {"q": "e\u0301"}),
    ),
    (
        # the empty string: matched by `*`, by `^$`, and by the literal ""
        "empty-text",
        _policy(
            {"id": "g", "decision": "allow", "params": {"args.q": "*"}},
            {"id": "r", "decision": "allow", "params": {"args.q": {"regex": "^$"}}},
            {"id": "e", "decision": "allow", "params": {"args.q": {"eq": ""}}},
        ),
        Action.tool("search", {"q": ""}),
    ),
    (
        # a missing argument matches only `exists: false`
        "missing-argument",
        _policy(
            {"id": "x", "decision": "deny", "params": {"args.q": {"exists": False}}},
            {"id": "g", "decision": "deny", "params": {"args.q": "*"}},
        ),
        Action.tool("search", {}),
    ),
    (
        # a nested argument, and an index into a list
        "nested-and-indexed",
        _policy(
            {"id": "m", "decision": "deny", "params": {"args.meta.level": "hi*"}},
            {"id": "i", "decision": "require_approval", "params": {"args.items.0": "alpha"}},
        ),
        Action.tool("search", {"meta": {"level": "high"}, "items": ["alpha"]}),
    ),
    (
        # an index into something that is not a list
        "index-into-text",
        _policy({"id": "i", "decision": "deny", "params": {"args.items.0": "a"}}),
        Action.tool("search", {"items": "a"}),
    ),
    (
        # a very long argument against anchored and unanchored sets
        "long-argument",
        _policy(
            {"id": "p", "decision": "deny", "params": {"args.q": "alpha*beta"}},
            {"id": "r", "decision": "deny", "params": {"args.q": {"regex": "beta$"}}},
        ),
        Action.tool("search", {"q": "alpha" * 20_000 + "beta"}),
    ),
    (
        # a deny's path glob ignores case; an allow's does not
        "path-case",
        _policy(
            {"id": "d", "decision": "deny", "params": {"path": "/tmp/*.ENV"}},
            {"id": "a", "decision": "allow", "params": {"path": "/TMP/*"}},
        ),
        Action.tool("read_file", {"path": "/tmp/x.env"}),
    ),
    (
        # a path known only as a pattern is not text: every path rule judges it
        "path-pattern",
        _policy(
            {"id": "d", "decision": "deny", "params": {"path": "*/etc/passwd"}},
            {"id": "a", "decision": "allow", "params": {"path": "/workspace/*"}},
        ),
        Action.tool("read_file", {"path": "../../etc/passwd"}),
    ),
    (
        # shadow rules are prefiltered on their own
        "shadow",
        _policy(
            {"id": "s", "decision": "deny", "mode": "shadow", "params": {"args.q": "al*"}},
            {"id": "a", "decision": "allow", "params": {"args.q": {"regex": "^al"}}},
        ),
        Action.tool("search", {"q": "alpha"}),
    ),
    (
        # a rule with only an agent, a tenant or a `when` has nothing to index: always kept
        "unindexed",
        _policy(
            {"id": "t", "decision": "require_approval", "tenant": "acme"},
            {"id": "w", "decision": "deny", "when": "args.q == 'alpha'"},
        ),
        Action.tool("search", {"q": "alpha"}, context=Context(tenant="acme")),
    ),
    (
        # a shell command's files are judged by the filesystem rules, facet by facet
        "shell-facets",
        _policy(
            {"id": "d", "decision": "deny", "scope": "filesystem", "params": {"path": "/etc/*"}},
            {"id": "a", "decision": "allow", "scope": "shell", "params": {"command": "rm *"}},
        ),
        Action.tool("shell", {"command": "rm -rf /etc/passwd"}),
    ),
    (
        # each path of a list is a facet of its own, each prefiltered
        "path-list",
        _policy(
            {"id": "d", "decision": "deny", "params": {"path": {"regex": "^/etc/"}}},
            {"id": "a", "decision": "allow", "params": {"path": "/tmp/*"}},
        ),
        Action.tool("read_file", {"paths": ["/tmp/a", "/etc/passwd"]}),
    ),
    (
        # a NUL character in text: RE2 and Python agree on it
        "nul-character",
        _policy(
            {"id": "g", "decision": "deny", "params": {"args.q": "a*"}},
            {"id": "r", "decision": "deny", "params": {"args.q": {"regex": r"\x00b$"}}},
            {"id": "e", "decision": "deny", "params": {"args.q": {"eq": "a\x00b"}}},
        ),
        Action.tool("search", {"q": "a\x00b"}),
    ),
    (
        # an `in` of text and numbers is not indexed; one of text only is
        "mixed-in",
        _policy(
            {"id": "m", "decision": "deny", "params": {"args.q": {"in": ["42", 42]}}},
            {"id": "t", "decision": "require_approval", "params": {"args.q": {"in": ["4", "2"]}}},
        ),
        Action.tool("search", {"q": 42}),
    ),
    (
        # `eq: null` matches a null argument, and a null is not text
        "eq-null",
        _policy({"id": "n", "decision": "deny", "params": {"args.q": {"eq": None}}}),
        Action.tool("search", {"q": None}),
    ),
    (
        # the indexed test holds, another test of the same condition cannot judge
        "indexed-true-bounds-raise",
        _policy({"id": "a", "decision": "deny", "params": {"args.q": {"in": ["7"], "gt": 1}}}),
        Action.tool("search", {"q": "7"}),
    ),
    (
        # text of a subclass of str is judged by the rules themselves
        "str-subclass",
        _policy({"id": "a", "decision": "deny", "params": {"args.q": {"eq": "alpha"}}}),
        Action.tool("search", {"q": _Text("alpha")}),
    ),
    (
        # a dotted key through a list, and through text
        "dotted-through-list",
        _policy(
            {"id": "a", "decision": "deny", "params": {"args.meta.level": "x"}},
            {"id": "b", "decision": "deny", "params": {"args.meta.0": "x"}},
        ),
        Action.tool("search", {"meta": ["x"]}),
    ),
    (
        # an `exists: false` is never an index: a missing argument matches it
        "exists-false",
        _policy({"id": "a", "decision": "deny", "params": {"args.q": {"exists": False}}}),
        Action.tool("search", {"mode": "alpha"}),
    ),
]


#: What each tricky case decides (the same either way), so that each tests what it says.
EXPECTED: dict[str, tuple[Verdict, tuple[str, ...]]] = {
    "literal-false-when-errors": (Verdict.ALLOW, ()),
    "literal-true-when-errors": (Verdict.UNDETERMINED, ("a-0", "a-1")),
    "regex-false-bounds-raise": (Verdict.ALLOW, ()),
    "regex-on-a-list": (Verdict.UNDETERMINED, ("a-0", "a-1")),
    "typed-literals": (Verdict.REQUIRE_APPROVAL, ("n-0", "n-1")),
    "true-is-not-one": (Verdict.ALLOW, ()),
    "kelvin-sign": (Verdict.DENY, ("k-0", "k-1")),
    "glob-case": (Verdict.ALLOW, ()),
    "newline-glob": (Verdict.DENY, ("g-0", "g-1")),
    "dollar-before-newline": (Verdict.ALLOW, ()),
    "lone-surrogate": (Verdict.DENY, ("g-0", "g-1", "r-0", "r-1")),
    "combining-accent": (Verdict.ALLOW, ()),
    "empty-text": (Verdict.ALLOW, ("e-0", "e-1", "g-0", "g-1", "r-0", "r-1")),
    "missing-argument": (Verdict.DENY, ("x-0", "x-1")),
    "nested-and-indexed": (Verdict.DENY, ("m-0", "m-1")),
    "index-into-text": (Verdict.ALLOW, ()),
    "long-argument": (Verdict.DENY, ("p-0", "p-1", "r-0", "r-1")),
    "path-case": (Verdict.DENY, ("d-0", "d-1")),
    "path-pattern": (Verdict.DENY, ("d-0", "d-1")),
    "shadow": (Verdict.ALLOW, ("a-0", "a-1")),
    "unindexed": (Verdict.DENY, ("w-0", "w-1")),
    "shell-facets": (Verdict.DENY, ("d-0", "d-1")),
    "path-list": (Verdict.DENY, ("d-0", "d-1")),
    "nul-character": (Verdict.DENY, ("e-0", "e-1", "g-0", "g-1", "r-0", "r-1")),
    "mixed-in": (Verdict.DENY, ("m-0", "m-1")),
    "eq-null": (Verdict.DENY, ("n-0", "n-1")),
    "indexed-true-bounds-raise": (Verdict.UNDETERMINED, ("a-0", "a-1")),
    "str-subclass": (Verdict.DENY, ("a-0", "a-1")),
    "dotted-through-list": (Verdict.DENY, ("b-0", "b-1")),
    "exists-false": (Verdict.DENY, ("a-0", "a-1")),
}


@pytest.mark.parametrize(("name", "data", "action"), TRICKY, ids=[case[0] for case in TRICKY])
def test_tricky_cases_decide_the_same_either_way(
    name: str, data: dict[str, Any], action: Action
) -> None:
    [(filtered, plain)] = judge_both(data, [action])
    assert_same(filtered, plain)
    assert (plain.verdict, plain.rule_ids) == EXPECTED[name]
    with prefilter_threshold(ON):
        assert _skipped_rules(compile_policy(data), action) == []


# -- 5. regressions -------------------------------------------------------------------------


def _bounded_repeats(count: int) -> dict[str, Any]:
    """``count`` deny rules whose regexes each fit RE2's memory budget alone, but
    not all together in one set (RE2 refuses a set of 258 or more of these)."""
    return {
        "version": 1,
        "default": "allow",
        "rules": [
            {
                "id": f"r{i:03d}",
                "decision": "deny",
                "reason": f"because r{i:03d}",
                "params": {"args.q": {"regex": f".{{10,60}}k{i}$"}},
            }
            for i in range(count)
        ],
    }


@pytest.mark.parametrize("minimum", [ON, None])
def test_patterns_too_many_for_one_re2_set_are_split_not_fatal(minimum: int | None) -> None:
    """Found by this file: RE2 refused to compile the set of a parameter's regexes
    (each fits its memory budget alone, 300 together do not), and the error escaped
    ``evaluate`` at every check of the tool, where testing the rules one by one
    denies. The prefilter now halves a set until each part compiles."""
    data = _bounded_repeats(300)
    action = Action.tool("search", {"q": "y" * 20 + "k5"})
    if minimum is None:  # the default threshold: 300 rules
        policy = compile_policy(data)
        decision = evaluate(action, policy)
    else:
        [(decision, plain)] = judge_both(data, [action])
        assert_same(decision, plain)
        with prefilter_threshold(minimum):
            policy = compile_policy(data)
    assert (decision.verdict, decision.rule_ids) == (Verdict.DENY, ("r005",))
    candidates = policy.candidates("tool", "search", facts_for(action, policy).scope)
    assert candidates.enforced_filter is not None
    kept = candidates.enforced_filter.tiers(facts_for(action, policy))
    assert [rule.id for _, rules in kept for rule in rules] == ["r005"]  # still one pass


def test_a_pattern_no_re2_set_can_hold_keeps_its_rule() -> None:
    """The last resort of the split: a pattern RE2 refuses even in a set of its own
    is not indexed, and its rule is always tested in full."""
    unheld: set[int] = set()
    sets = prefilter_module._sets(
        ["alpha", ".{2000}", "beta"], [7, 8, 9], anchored=False, unheld=unheld
    )
    assert unheld == {8}
    assert sorted(owner for _, owners in sets for owner in owners) == [7, 9]


class _Currency(enum.StrEnum):
    XYZ = "XYZ"


class _Liar(str):
    """Text whose own ``__eq__`` says it equals nothing."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


@pytest.mark.parametrize("value", [_Currency.XYZ, _Liar("XYZ"), "XYZ"], ids=["enum", "liar", "str"])
@pytest.mark.parametrize(
    ("condition", "verdict"),
    [
        ({"eq": "XYZ"}, Verdict.DENY),
        ({"in": ["ABC", "XYZ"]}, Verdict.DENY),
        ({"ne": "XYZ"}, Verdict.ALLOW),
        ({"not_in": ["XYZ"]}, Verdict.ALLOW),
        ("XYZ", Verdict.DENY),  # a glob, which always read the text
    ],
)
def test_text_of_a_str_subclass_is_equal_to_the_same_text(
    value: str, condition: Any, verdict: Verdict
) -> None:
    """Found by this file's tricky table: ``eq`` / ``in`` compared types exactly, so a
    deny on ``currency: {in: [XYZ]}`` let a str enum member ``XYZ`` through (while
    a glob on the same text caught it). Text equals text, whatever its class."""
    data = _policy({"id": "a", "decision": "deny", "params": {"args.currency": condition}})
    [(filtered, plain)] = judge_both(data, [Action.tool("pay", {"currency": value})])
    assert_same(filtered, plain)
    assert plain.verdict is verdict
