"""CEL ``when:`` conditions: compiled once at load, fed as little data as possible.

Handing a nested map to the CEL binding costs about 2 µs per entry, a scalar about
0.1 µs. So at load an expression is rewritten, token by token, so that each
``args.amount`` becomes a flat variable holding just that value, and each
``has(args.amount)`` a flat boolean. The rewrite is only done where it is exact:

- string literals are skipped, so text inside quotes is never touched;
- a root (``args``, ``params``, ``action``, ``context``) used any other way — bare,
  indexed (``args["x"]``), with a method (``args.size()``), an optional field
  (``args.?x``) — is passed whole, and none of its fields is rewritten;
- an expression where a macro binds a variable named like a root is not rewritten.

A field that is absent is simply not bound, so the rewritten program fails exactly
where the original would have (no such key) and the verdict is undetermined either
way. Error texts name the original ``args.amount``, not the flat variable.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from interlock._extension import load_extension
from interlock.errors import EvaluationError, message_of
from interlock.policy.celtokens import MACRO_BINDING, ROOTS, Token, roots_shadowed
from interlock.policy.celtokens import tokens as tokenize
from interlock.policy.extract import SAFE_ROOTS

if TYPE_CHECKING:
    from interlock.policy.celpartial import Node

__all__ = [
    "MACRO_BINDING",
    "ROOTS",
    "CelCondition",
    "compile_condition",
    "required_arguments",
    "rewrite",
    "session_rewrite",
]

_PREFIX: Final = "__il_"


@dataclass(frozen=True, slots=True)
class Rewrite:
    source: str
    fields: tuple[tuple[str, str, str], ...]  # (variable, root, key)
    presence: tuple[tuple[str, str, str], ...]  # (variable, root, key)
    whole: tuple[str, ...]  # roots passed as whole maps


def rewrite(source: str) -> Rewrite:
    """The flattened form of ``source`` (or ``source`` itself where it cannot be)."""
    tokens = tokenize(source)
    if roots_shadowed(source):
        return _unchanged(source, tokens)
    whole: set[str] = set()
    edits: list[tuple[int, int, str]] = []
    fields: dict[str, tuple[str, str]] = {}
    presence: dict[str, tuple[str, str]] = {}
    for i, token in enumerate(tokens):
        if token.kind != "ident" or token.text not in ROOTS:
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue  # a field that happens to be called `args`, not the root
        field = _field_after(tokens, i)
        if field is None:
            whole.add(token.text)
            continue
        key = tokens[i + 2].text
        if _inside_has(tokens, i):
            name = f"{_PREFIX}h_{token.text}_{key}"
            presence[name] = (token.text, key)
            edits.append((tokens[i - 2].start, tokens[i + 3].end, name))
        else:
            name = f"{_PREFIX}f_{token.text}_{key}"
            fields[name] = (token.text, key)
            edits.append((token.start, tokens[i + 2].end, name))
    edits = [e for e in edits if _root_of(e[2]) not in whole]
    text = source
    for start, end, name in sorted(edits, reverse=True):
        text = text[:start] + name + text[end:]
    kept = {name for _, _, name in edits}
    return Rewrite(
        source=text,
        fields=tuple((n, r, k) for n, (r, k) in sorted(fields.items()) if n in kept),
        presence=tuple((n, r, k) for n, (r, k) in sorted(presence.items()) if n in kept),
        whole=tuple(sorted(whole)),
    )


def _unchanged(source: str, tokens: list[Token]) -> Rewrite:
    used = {t.text for t in tokens if t.kind == "ident" and t.text in ROOTS}
    return Rewrite(source=source, fields=(), presence=(), whole=tuple(sorted(used)))


def _root_of(name: str) -> str:
    return name[len(_PREFIX) + 2 :].split("_", 1)[0]


def _field_after(tokens: list[Token], i: int) -> str | None:
    """``root . ident`` not followed by ``(`` (a method call)."""
    if i + 2 >= len(tokens) or tokens[i + 1].text != "." or tokens[i + 2].kind != "ident":
        return None
    if i + 3 < len(tokens) and tokens[i + 3].text == "(":
        return None
    return tokens[i + 2].text


def _inside_has(tokens: list[Token], i: int) -> bool:
    """``has ( root . ident )`` with nothing else inside the parentheses."""
    return (
        i >= 2
        and tokens[i - 1].text == "("
        and tokens[i - 2].text == "has"
        and (i < 3 or tokens[i - 3].text != ".")
        and i + 3 < len(tokens)
        and tokens[i + 3].text == ")"
    )


RootGetter = Callable[[str], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class CelCondition:
    """A compiled ``when:`` and the plan for feeding it."""

    source: str
    variables: tuple[str, ...]  # what the original expression references
    program: Any  # cel.Program
    fields: tuple[tuple[str, str, str], ...]
    presence: tuple[tuple[str, str, str], ...]
    whole: tuple[str, ...]
    partial: Node | None = None  # decides the simple cases in Python (celpartial)
    #: the session functions it calls, each bound as a flat variable:
    #: (variable, function, its string argument) — see :func:`session_rewrite`
    session: tuple[tuple[str, str, str], ...] = ()

    def evaluate(self, roots: RootGetter, rule_id: str) -> bool:
        if self.partial is not None:
            decided = self.partial.value(roots)
            if decided is not None:
                return decided
        return self.run(roots, rule_id)

    def run(self, roots: RootGetter, rule_id: str) -> bool:
        """Run the CEL program itself, whatever the Python tree could decide."""
        activation: dict[str, Any] = {}
        for root in self.whole:
            activation[root] = roots(root)
        for name, root, key in self.fields:
            mapping = roots(root)
            if key in mapping:
                activation[name] = mapping[key]
        for name, root, key in self.presence:
            activation[name] = key in roots(root)
        if self.session:
            self._bind_session(activation, roots, rule_id)
        try:
            result = self.program.execute(activation)
        except Exception as exc:
            raise EvaluationError(
                f"rule {rule_id!r}: `when` failed: {type(exc).__name__}: {self._explain(exc)}",
                rule_id=rule_id,
            ) from exc
        if not isinstance(result, bool):
            raise EvaluationError(
                f"rule {rule_id!r}: `when` gave {type(result).__name__} {result!r}, not a boolean",
                rule_id=rule_id,
            )
        return result

    def _bind_session(self, activation: dict[str, Any], roots: RootGetter, rule_id: str) -> None:
        from interlock.policy.sessionrules import cel_value

        session_id = roots("context").get("session_id")
        args = roots("args")
        for name, function, argument in self.session:
            activation[name] = cel_value(function, argument, session_id, args, rule_id)

    def _explain(self, exc: Exception) -> str:
        text = message_of(exc)
        for name, root, key in self.fields:
            if name in text:
                text = (
                    f"no such key: {root}.{key}"
                    if "Undefined" in text
                    else text.replace(name, f"{root}.{key}")
                )
        return text


def _binding() -> ModuleType:
    """The CEL binding's compiled extension (``cel.cel``), without its package: ``import
    cel`` runs an ``__init__`` that imports the binding's own command line (typer,
    prompt_toolkit, pygments), most of the cost of loading a policy with ``when:`` from
    a cold process (:mod:`interlock._extension`, ADR 0014)."""
    return load_extension("cel", "cel")


def required_arguments(when: CelCondition) -> tuple[str, ...]:
    """The arguments ``when`` is false without, whatever else the check holds — for a
    check whose CEL roots cannot fail to build (``extract.plain_roots``): the keys of
    its top-level ``has(args.x)`` conjuncts, when every root its Python tree reads is
    one of ``extract.SAFE_ROOTS`` (so no conjunct before can fail instead). Empty
    when there is none, or no Python tree."""
    partial = when.partial
    if partial is None:
        return ()
    from interlock.policy.celpartial import required_keys, roots_read

    if not roots_read(partial) <= SAFE_ROOTS:
        return ()
    return required_keys(partial, "args")


# A large policy repeats its conditions (the same `when:` on a rule per tool or per
# tenant): each distinct text is compiled once. A CelCondition holds no rule of its
# own (the rule id is passed to ``evaluate``) and is immutable, so rules share it as
# safely as threads already share one rule's. A text that does not compile raises
# and is not cached.
@functools.lru_cache(maxsize=4096)
def compile_condition(source: str) -> CelCondition:
    """Compile ``source``; raises ValueError (from the binding) when it does not parse."""
    from interlock.policy.celpartial import parse  # a policy with `when:` only

    cel = _binding()
    flat, session = session_rewrite(source)
    # parse errors point at the user's text, not the rewrite
    original = cel.compile(source) if not session else _compile_flat(cel, source, flat)
    variables = tuple(v for v in original.variables() if not v.startswith(_SESSION_PREFIX))
    plan = rewrite(flat)
    return CelCondition(
        source=source,
        variables=variables,
        program=cel.compile(plan.source),
        fields=plan.fields,
        presence=plan.presence,
        whole=plan.whole,
        partial=parse(source) if not session else None,
        session=session,
    )


def _compile_flat(cel: ModuleType, source: str, flat: str) -> Any:
    """The program of the session rewrite ``flat`` of ``source``; when it does not
    parse, the error of ``source`` itself (it names the user's text)."""
    try:
        return cel.compile(flat)
    except Exception:
        cel.compile(source)
        raise


_SESSION_PREFIX: Final = f"{_PREFIX}s"
#: The identifiers :func:`session_rewrite` rewrites: ``session`` and
#: ``sessionrules.SESSION_FUNCTIONS`` (a test holds them equal).
SESSION_WORDS: Final = frozenset({"session", "flows_from", "flows_from_label", "provenance"})
#: Any of them standing alone (not part of a longer ASCII name such as
#: ``context.session_id``): an expression where none does has nothing to rewrite. A
#: superset of the tokenizer's identifiers (a character outside ``[A-Za-z0-9_]`` next
#: to one still counts it), so a session function is never missed.
_SESSION_WORD: Final = re.compile(
    r"(?<![A-Za-z0-9_])(?:" + "|".join(sorted(SESSION_WORDS)) + r")(?![A-Za-z0-9_])"
)


def session_rewrite(source: str) -> tuple[str, tuple[tuple[str, str, str], ...]]:
    """``source`` with each session function (``session.labels``,
    ``session.ran("glob")``, ``session.count("glob")``, ``flows_from("glob")``,
    ``flows_from_label("label")``, ``provenance("arg")``) replaced by a flat variable,
    and those variables. Raises ValueError for a session function called with anything
    but one string literal, or ``session`` used any other way."""
    if _SESSION_WORD.search(source) is None:  # nothing to rewrite: the session rules (and
        return source, ()  # the history and fingerprints they read) stay unloaded
    from interlock.policy.sessionrules import SESSION_FIELDS, SESSION_FUNCTIONS, SESSION_METHODS

    tokens = tokenize(source)
    edits: list[tuple[int, int, str]] = []
    calls: dict[tuple[str, str], str] = {}

    def variable(function: str, argument: str) -> str:
        key = (function, argument)
        if key not in calls:
            calls[key] = f"{_SESSION_PREFIX}{len(calls)}"
        return calls[key]

    for i, token in enumerate(tokens):
        if token.kind != "ident" or (i > 0 and tokens[i - 1].text == "."):
            continue
        if token.text == "session":
            member = tokens[i + 2] if i + 2 < len(tokens) and tokens[i + 1].text == "." else None
            called = i + 3 < len(tokens) and tokens[i + 3].text == "("
            if member is not None and member.text in SESSION_FIELDS and not called:
                edits.append((token.start, member.end, variable(member.text, "")))
                continue
            if member is not None and member.text in SESSION_METHODS and called:
                argument, end = _one_literal(tokens, i + 3, f"session.{member.text}")
                edits.append((token.start, end, variable(member.text, argument)))
                continue
            raise ValueError(
                '`session` is read as session.labels, session.ran("glob") or session.count("glob")'
            )
        if token.text in SESSION_FUNCTIONS:
            if not (i + 1 < len(tokens) and tokens[i + 1].text == "("):
                raise ValueError(f'{token.text} is a function: {token.text}("...")')
            argument, end = _one_literal(tokens, i + 1, token.text)
            edits.append((token.start, end, variable(token.text, argument)))
    text = source
    for start, end, name in sorted(edits, reverse=True):
        text = text[:start] + name + text[end:]
    return text, tuple((name, function, argument) for (function, argument), name in calls.items())


def _one_literal(tokens: list[Token], open_at: int, function: str) -> tuple[str, int]:
    """The string literal of ``function("...")`` whose ``(`` is ``tokens[open_at]``,
    and where its ``)`` ends."""
    literal = tokens[open_at + 1] if open_at + 1 < len(tokens) else None
    closing = tokens[open_at + 2] if open_at + 2 < len(tokens) else None
    if literal is None or literal.kind != "string" or closing is None or closing.text != ")":
        raise ValueError(f'{function} takes exactly one string literal, e.g. {function}("x")')
    text = literal.text
    prefix = text[: len(text) - len(text.lstrip("rRbB"))]
    if "b" in prefix.lower():
        raise ValueError(f"{function} takes a string, not bytes")
    body = text[len(prefix) :]
    quote = 3 if body[:3] in ("'''", '"""') else 1
    inner = body[quote:-quote]
    if "r" not in prefix.lower() and "\\" in inner:
        import ast

        inner = str(ast.literal_eval(body))
    if not inner:
        raise ValueError(f"{function} takes a non-empty string")
    return inner, closing.end
