"""The facts of a shell command string, as values: the commands it runs, the files
and URLs they use, and what cannot be known before it runs. Built by
:func:`interlock.facts.shell.shell_facts`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

__all__ = ["Command", "FileUse", "PathUse", "ShellFacts", "UrlUse"]

FileUse = Literal["read", "write", "delete", "touched"]

_HARMLESS_FILES: Final = frozenset(
    {
        "/dev/null",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/stdin",
        "/dev/tty",
        "/dev/zero",
        "/dev/random",
        "/dev/urandom",
    }
)


class PathUse(NamedTuple):
    """A file a command uses. ``path`` is normalised (a ``PathPattern`` when not known
    exactly); ``use`` is read, write, delete, or touched (a file of unknown use)."""

    path: str
    use: FileUse
    program: str


class UrlUse(NamedTuple):
    """A URL a command fetches or sends to. ``exact`` is False when part of it is only
    known when the command runs."""

    url: str
    program: str
    exact: bool = True


class Command(NamedTuple):
    """One simple command, as it will run. (Named tuples: built for every command of
    every new string, where a frozen dataclass costs several times more.)"""

    program: str  # resolved: "rm" (also for /bin/rm); "./rm" for a path outside bin dirs
    name: str  # the basename, always: "rm" for ./rm too
    flags: frozenset[str]  # canonical spellings, e.g. {"--recursive", "--force"}
    operands: tuple[str, ...]  # words that are not flags (a glob where not known exactly)
    subcommand: str | None = None  # git push -> "push"
    via: tuple[str, ...] = ()  # wrappers looked through: ("sudo",), ("xargs",)
    dynamic: bool = False  # some argument is only known when it runs
    dynamic_flags: bool = False  # ... and could be a flag
    runs_code: bool = False  # inline code for an interpreter (python -c, node -e)
    text: str = ""  # the source text of the command

    def as_dict(self) -> dict[str, Any]:
        """The command for CEL (``shell.commands``)."""
        return {
            "program": self.program,
            "name": self.name,
            "flags": sorted(self.flags),
            "args": list(self.operands),
            "subcommand": self.subcommand or "",
            "via": list(self.via),
            "dynamic": self.dynamic,
            "runs_code": self.runs_code,
        }


@dataclass(frozen=True, slots=True)
class ShellFacts:
    """Everything a command string does, as far as it can be known before it runs."""

    text: str
    commands: tuple[Command, ...] = ()
    paths: tuple[PathUse, ...] = ()
    urls: tuple[UrlUse, ...] = ()
    opaque: tuple[str, ...] = ()  # parts that cannot be judged, each said in words
    error: str | None = None  # the whole string cannot be judged
    _cel: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def complete(self) -> bool:
        """Whether every command of the string is known."""
        return self.error is None and not self.opaque

    @property
    def unknown(self) -> str | None:
        """Why the facts are not complete, in words; None when they are."""
        if self.error is not None:
            return self.error
        if self.opaque:
            shown = "; ".join(self.opaque[:3])
            more = len(self.opaque) - 3
            return shown + (f"; and {more} more" if more > 0 else "")
        return None

    @property
    def writes(self) -> tuple[PathUse, ...]:
        """Files written or deleted (not counting /dev/null and the like)."""
        return tuple(
            p for p in self.paths if p.use in ("write", "delete") and p.path not in _HARMLESS_FILES
        )

    def as_cel(self) -> dict[str, Any]:
        """The facts for CEL: ``shell.programs``, ``shell.commands``, ``shell.reads``..."""
        cel = self._cel
        if cel is None:
            cel = {
                "programs": sorted({c.program for c in self.commands}),
                "commands": [c.as_dict() for c in self.commands],
                "reads": [p.path for p in self.paths if p.use == "read"],
                "writes": [p.path for p in self.paths if p.use == "write"],
                "deletes": [p.path for p in self.paths if p.use == "delete"],
                "touches": [p.path for p in self.paths],
                "urls": [u.url for u in self.urls],
                "complete": self.complete,
            }
            object.__setattr__(self, "_cel", cel)
        return cel
