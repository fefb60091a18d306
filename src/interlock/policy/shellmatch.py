"""The ``shell:`` condition of a rule, compiled: programs, command patterns, writes.

Each part answers yes, no or *cannot tell* (a command whose program is hidden, a flag
that is only known when it runs). The parts are AND-ed: a certain "no" anywhere is a
no; otherwise a "cannot tell" makes the rule unevaluable (:class:`EvaluationError`),
which the engine turns into an undetermined verdict unless a stricter rule decided —
so an allow-list never passes a command it cannot see, and a deny never misses one.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from interlock.errors import EvaluationError
from interlock.facts.globs import could_match
from interlock.facts.programs import GIT_SUBCOMMANDS, Program, program_spec
from interlock.facts.shell import Command, ShellFacts, shell_facts
from interlock.policy.matchers import GlobSet

__all__ = ["CommandMatcher", "ShellMatcher", "facts_of_command"]

_Answer = bool | None  # None: cannot tell


def facts_of_command(facts: Any) -> ShellFacts | None:
    """The shell facts of a check's ``command`` parameter (None: the call has none).
    Raises EvaluationError when the command is not text."""
    command = facts.params.get("command")
    if command is None:
        return None
    if not isinstance(command, str):
        raise EvaluationError("parameter 'command' is not text; cannot read it as shell")
    return shell_facts(command)


@dataclass(frozen=True, slots=True)
class CommandMatcher:
    """One command pattern: program globs, and optionally flags, subcommand, args."""

    programs: GlobSet
    flags: tuple[str, ...] = ()
    subcommand: GlobSet | None = None
    args: tuple[GlobSet, ...] = ()

    def answer(self, command: Command) -> _Answer:
        if not self._program(command):
            return False
        answers: list[_Answer] = []
        if self.subcommand is not None:
            if command.subcommand is None:
                return False
            if command.subcommand == "*":
                answers.append(None)
            elif not self.subcommand.matches(command.subcommand):
                return False
        if self.flags:
            wanted = _canonical_flags(command.name, command.subcommand, self.flags)
            if not wanted <= command.flags:
                if not command.dynamic_flags:
                    return False
                answers.append(None)
        for globs in self.args:
            found: _Answer = False
            for operand in command.operands:
                if globs.matches(operand):
                    found = True
                    break
                if command.dynamic and any(could_match(g, operand) for g in globs.patterns):
                    found = None
            if found is False:
                return False
            answers.append(found)
        return None if None in answers else True

    def _program(self, command: Command) -> bool:
        match = self.programs.matches
        return match(command.program) or match(command.name) or match(_folded(command.name))


@dataclass(frozen=True, slots=True)
class ShellMatcher:
    """A rule's ``shell:`` condition."""

    programs: GlobSet | None = None
    commands: tuple[CommandMatcher, ...] = ()
    writes: bool | None = None

    def test(self, facts: Any) -> bool:
        shell = facts_of_command(facts)
        if shell is None:
            return False  # not a shell call: the condition cannot hold
        if shell.error is not None:
            raise EvaluationError(f"cannot judge the shell command: {shell.error}")
        answers: list[_Answer] = []
        if self.programs is not None:
            match = self.programs.match
            if any(match(command.program) is None for command in shell.commands):
                return False
            answers.append(True if not shell.opaque else None)
        if self.commands:
            found: _Answer = False
            for command in shell.commands:
                for pattern in self.commands:
                    answer = pattern.answer(command)
                    if answer:
                        found = True
                        break
                    if answer is None:
                        found = None
                if found:
                    break
            if found is False and (shell.opaque or any(c.runs_code for c in shell.commands)):
                # hidden commands, or inline code (python -c): what they run is not seen
                found = None
            if found is False:
                return False
            answers.append(found)
        if self.writes is not None:
            if shell.writes:  # a write seen is certain, whatever else is hidden
                if not self.writes:
                    return False
                answers.append(True)
            elif shell.opaque or any(c.runs_code for c in shell.commands):
                answers.append(None)
            elif self.writes:
                return False
            else:
                answers.append(True)
        if None in answers:
            why = shell.unknown or "it runs inline code Interlock cannot read (python -c, node -e)"
            raise EvaluationError(f"cannot judge the shell command: {why}")
        return True


@lru_cache(maxsize=1024)
def _canonical_flags(name: str, subcommand: str | None, flags: tuple[str, ...]) -> frozenset[str]:
    """The rule's flags in the command's canonical spelling (``-rf`` for rm is
    ``--recursive`` and ``--force``)."""
    spec: Program = program_spec(name)
    if name == "git" and subcommand is not None and subcommand in GIT_SUBCOMMANDS:
        spec = GIT_SUBCOMMANDS[subcommand]
    out: set[str] = set()
    for flag in flags:
        if flag.startswith("--") or spec.single_dash_long:
            out.add(spec.canonical(flag.partition("=")[0]))
        elif flag.startswith("-") and len(flag) > 2:
            out.update(spec.canonical(f"-{letter}") for letter in flag[1:])
        else:
            out.add(spec.canonical(flag))
    return frozenset(out)


@lru_cache(maxsize=4096)
def _folded(name: str) -> str:
    """A program name as a case-insensitive file system may find it: NFKC (full-width
    letters), case folded, default-ignorable characters removed."""
    text = unicodedata.normalize("NFKC", name).casefold()
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
