"""``interlock check``: one action decided in one process, with or without typer.

A hook that runs ``interlock check`` once per tool call pays the whole start-up every
time, and typer builds a pydantic adapter for each option it parses and imports rich
(ADR 0014). So :func:`interlock.cli.main` hands a plain ``check`` command line to
:func:`fast_check`: every option spelled as ``--help`` documents it, each value given
once (``--arg`` any number of times), nothing else. Anything else (``--help``, an
unknown option, a value that starts with ``-``, ``--opt=`` with no value, a repeat)
returns ``None``, and typer parses it exactly as before, with its own messages.

Both paths run :func:`run_check`. Its output is plain text when rich would print it
unchanged — stdout is not a terminal, no ``FORCE_COLOR``/``TTY_COMPATIBLE`` asks for
colour, and no line holds a ``[`` (markup), a ``:name:`` (emoji) or a character that
is not printable — and goes through rich's console otherwise, so the bytes are the
same either way (tested against rich)::

    interlock check -p interlock.yaml --name shell --arg command='ls -la'
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.decision import Decision, Verdict
from interlock.errors import PolicyError, describe

if TYPE_CHECKING:
    from interlock.core.redaction import Redactor
    from interlock.policy.compiled import CompiledPolicy

__all__ = [
    "EXIT_CODES",
    "CheckRequest",
    "Line",
    "decision_json",
    "fast_check",
    "parse_check_argv",
    "plain_is_exact",
    "policy_path",
    "print_lines",
    "run_check",
    "verdict_line",
]

EXIT_CODES: dict[Verdict, int] = {
    Verdict.ALLOW: 0,
    Verdict.DENY: 3,
    Verdict.REQUIRE_APPROVAL: 4,
    Verdict.UNDETERMINED: 5,
}

_STYLE = {
    Verdict.ALLOW: "green",
    Verdict.DENY: "red",
    Verdict.REQUIRE_APPROVAL: "yellow",
    Verdict.UNDETERMINED: "magenta",
}


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """The options of ``interlock check``, as typer would pass them."""

    policy: Path | None = None
    action_json: str | None = None
    name: str | None = None
    kind: str = "tool"
    arg: tuple[str, ...] = ()
    scope: str | None = None
    description: str | None = None
    tenant: str = "default"
    agent: str | None = None
    session: str | None = None
    events: Path | None = None
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class Line:
    """One line of output: ``markup`` is what rich prints (``json`` pretty-printed by
    ``print_json``); ``plain`` is the same text with the markup's own tags removed."""

    markup: str
    plain: str
    json: bool = False


@dataclass(slots=True)
class _Outcome:
    code: int
    lines: list[Line] = field(default_factory=list)


# Each option of `interlock check` by every spelling typer accepts, and the field it fills.
_VALUED = {
    "--policy": "policy",
    "-p": "policy",
    "--json": "action_json",
    "--name": "name",
    "-n": "name",
    "--kind": "kind",
    "--arg": "arg",
    "-a": "arg",
    "--scope": "scope",
    "--description": "description",
    "--tenant": "tenant",
    "--agent": "agent",
    "--session": "session",
    "--events": "events",
}
_FLAGS = {"--output-json": "as_json"}
_PATHS = ("policy", "events")


def parse_check_argv(argv: Sequence[str]) -> CheckRequest | None:
    """The request that ``argv`` (the words after ``check``) spells, or ``None`` when
    it is anything but the plain form, for typer to parse and word the error."""
    values: dict[str, Any] = {}
    args: list[str] = []
    words = iter(argv)
    for word in words:
        if word in _FLAGS:
            if _FLAGS[word] in values:
                return None
            values[_FLAGS[word]] = True
            continue
        option, equals, inline = word.partition("=")
        if option not in _VALUED or (equals and not option.startswith("--")):
            return None
        key = _VALUED[option]
        value = inline if equals else next(words, None)
        if not value or (value.startswith("-") and value != "-"):
            return None
        if key == "arg":
            args.append(value)
        elif key in values:
            return None
        else:
            values[key] = Path(value) if key in _PATHS else value
    return CheckRequest(arg=tuple(args), **values)


def _parse_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--arg expects key=value, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw  # a bare string
    return key, value


def decision_json(decision: Decision, redactor: Redactor) -> dict[str, Any]:
    data: dict[str, Any] = {
        "decision": decision.verdict.value,
        "reason": redactor.redact(decision.reason),
        "rule_ids": list(decision.rule_ids),
        "decision_id": decision.decision_id,
    }
    if decision.cause is not None:
        data["cause"] = redactor.redact(describe(decision.cause))
    if decision.approval is not None:
        data["approval"] = {"id": decision.approval.id, "url": decision.approval.url}
    if decision.shadow is not None:
        data["shadow"] = {
            "decision": decision.shadow.verdict.value,
            "reason": redactor.redact(decision.shadow.reason),
            "rule_ids": list(decision.shadow.rule_ids),
        }
    return data


def verdict_line(decision: Decision) -> tuple[str, str]:
    """The verdict as rich markup and as the plain text that markup renders to."""
    verdict = decision.verdict.value
    markup, plain = f"[{_STYLE[decision.verdict]}]{verdict}[/]", verdict
    if decision.shadow is not None:
        note = f"(shadow: would {decision.shadow.verdict.value})"
        markup, plain = f"{markup} [dim]{note}[/dim]", f"{plain} {note}"
    if decision.fail_open:
        markup, plain = f"{markup} [dim](fail-open)[/dim]", f"{plain} (fail-open)"
    return markup, plain


def _decision_lines(decision: Decision, redactor: Redactor, as_json: bool) -> list[Line]:
    if as_json:
        text = json.dumps(decision_json(decision, redactor))
        return [Line(text, json.dumps(json.loads(text), indent=2, ensure_ascii=False), True)]
    markup, plain = verdict_line(decision)
    reason = redactor.redact(decision.reason)
    lines = [Line(f"{markup}  {reason}", f"{plain}  {reason}")]
    texts: list[str] = []
    if decision.rule_ids:
        texts.append(f"rules: {', '.join(decision.rule_ids)}")
    if decision.shadow is not None:
        shadow = decision.shadow
        rules = ", ".join(shadow.rule_ids) or "default"
        texts.append(
            f"shadow: would {shadow.verdict.value} ({rules}): {redactor.redact(shadow.reason)}"
        )
    if decision.approval is not None and decision.approval.url:
        texts.append(f"approve at: {decision.approval.url}")
    return lines + [Line(text, text) for text in texts]


def policy_path(policy: Path | None) -> Path:
    """The policy file: the one given, else ``$INTERLOCK_POLICY``, else ./interlock.yaml."""
    if policy is not None:
        return policy
    return Path(os.environ.get("INTERLOCK_POLICY", "interlock.yaml"))


def _load(policy: Path | None) -> CompiledPolicy:
    from interlock.policy.cache import default_cache
    from interlock.policy.loader import load_policy

    # A hook runs `check` once per call on the same file: parse it once (the cache is
    # per user and checked whole; ADR 0014).
    return load_policy(policy_path(policy), cache=default_cache())


def _action_data(request: CheckRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """The action's data and its trusted context; ``ValueError`` words a usage error."""
    if request.action_json is not None:
        raw = sys.stdin.read() if request.action_json == "-" else request.action_json
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"--json is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("--json must be a JSON object")
        context = data.pop("context", None) or {}
        context.setdefault("tenant", request.tenant)
        if request.agent is not None:
            context.setdefault("agent", request.agent)
        if request.session is not None:
            context.setdefault("session_id", request.session)
        return data, context
    if request.name is None:
        raise ValueError("give the action with --json, or at least --name")
    data = {
        "kind": request.kind,
        "name": request.name,
        "arguments": dict(_parse_arg(a) for a in request.arg),
    }
    if request.scope is not None:
        data["scope"] = request.scope
    if request.description is not None:
        data["description"] = request.description
    return data, {"tenant": request.tenant, "agent": request.agent, "session_id": request.session}


def run_check(request: CheckRequest, fail: Callable[[str], BaseException]) -> _Outcome:
    """Decide the request's action: the exit code and the lines to print. A usage
    error, an invalid policy or an invalid action raises ``fail(message)``."""
    from interlock.core.events import JsonlSink
    from interlock.guard import Guard
    from interlock.policy.actiondata import action_from_data

    try:
        compiled = _load(request.policy)
    except PolicyError as exc:
        raise fail(str(exc)) from None
    try:
        data, context = _action_data(request)
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        action = action_from_data(data, context)
    except Exception as exc:
        from pydantic import ValidationError  # imported already: the models raised it

        if not isinstance(exc, ValidationError):
            raise
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise fail(f"invalid action: {problems}") from None
    sink = JsonlSink(request.events) if request.events is not None else None
    # One call in one process: budgets kept in its memory are all a check can have, so
    # the guard's warning that they are would only be noise here.
    interlock_log = logging.getLogger("interlock")
    level = interlock_log.level
    interlock_log.setLevel(logging.ERROR)
    try:
        guard = Guard(compiled, sink=sink)
    finally:
        interlock_log.setLevel(level)
    decision = guard.check(action)
    if sink is not None:
        sink.close()
    lines = _decision_lines(decision, guard.redactor, request.as_json)
    return _Outcome(EXIT_CODES[decision.verdict], lines)


# What rich's console would change in a line: markup opens with "[", and it strips or
# expands control characters and tabs (none of which is printable). An emoji code is
# rich's own pattern, replaced only when the name is an emoji's: every emoji name is
# made of these characters (tested), so a name with any other (the "//host" between
# the colons of a URL with a port) is printed as it is.
_EMOJI_CODE = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")
_EMOJI_NAME = re.compile(r"[\w!#&()*+\-.\u2019]*")


def _rich_would_keep(text: str) -> bool:
    if "[" in text or not text.isprintable():
        return False
    if text.count(":") < 2:  # an emoji code is `:name:`
        return True
    return not any(_EMOJI_NAME.fullmatch(m.group(2)) for m in _EMOJI_CODE.finditer(text))


def plain_is_exact(lines: Sequence[Line], environ: Any = os.environ) -> bool:
    """Whether printing each line's ``plain`` text gives the bytes rich would print."""
    if environ.get("FORCE_COLOR") is not None or environ.get("TTY_COMPATIBLE") is not None:
        return False
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        if isatty is not None and isatty():
            return False
    except ValueError:
        return False
    # Text the stream cannot encode fails either way, but rich words the error its own
    # way: leave anything but ASCII to rich unless the stream is UTF-8.
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    utf8 = encoding in ("utf8", "utf_8")
    for line in lines:
        if not utf8 and not line.plain.isascii():
            return False
        if line.json:  # not markup, and never emoji: only unprintable text would change
            if not all(part.isprintable() for part in line.plain.split("\n")):
                return False
        elif not _rich_would_keep(line.plain):
            return False
    return True


def print_lines(lines: Sequence[Line]) -> None:
    """Print through rich's console (what the typer command always does)."""
    from interlock.cli_console import out

    for line in lines:
        if line.json:
            out.print_json(line.markup)
        else:
            out.print(line.markup, markup=True)


def _fail_fast(message: str) -> BaseException:
    from interlock.cli_console import fail

    return SystemExit(fail(message).exit_code)


def fast_check(argv: Sequence[str]) -> int | None:
    """Run ``interlock check`` without typer when ``argv`` (after ``check``) is in the
    plain form: the exit code, or ``None`` for typer to run it."""
    request = parse_check_argv(argv)
    if request is None:
        return None
    outcome = run_check(request, _fail_fast)
    if plain_is_exact(outcome.lines):
        sys.stdout.write("".join(f"{line.plain}\n" for line in outcome.lines))
        sys.stdout.flush()
    else:
        print_lines(outcome.lines)
    return outcome.code
