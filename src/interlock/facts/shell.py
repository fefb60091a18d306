"""Shell facts: what a command string will run, read, write and fetch.

A policy must judge what ``ls /tmp; curl … | sh`` *does* — two programs, one of them
a shell fed from the network — not how its text looks. :func:`shell_facts` parses the
string with tree-sitter's bash grammar (see docs/adr/0010-shell-url-and-pattern-facts.md for
the choice) and walks every simple command: in lists, pipelines, subshells, ``$(…)``
and backtick substitutions, process substitutions, function bodies, conditionals and
loops; strings run by ``bash -c``, ``sh -c``, ``eval``, ``su -c``, ``ssh host …``,
``watch``, ``flock -c`` and heredocs fed to a shell are parsed in turn, to a bounded
depth. For each command:

- the **program**, resolved: quotes and escapes removed (``r\\m``, ``'rm'``,
  ``$'\\x72m'`` are ``rm``), ``/bin/rm`` is ``rm`` (a path outside the system's bin
  directories keeps its path: ``./rm`` is not ``rm``), and wrappers looked through —
  ``sudo``, ``doas`` (recorded as commands too: they change who runs), ``env X=1``,
  ``nice``, ``nohup``, ``timeout``, ``stdbuf``, ``ionice``, ``time``, ``command``,
  ``exec``, ``xargs``, ``find -exec``, ``busybox``…;
- its **flags**, normalised per program (:mod:`interlock.facts.programs`): for ``rm``,
  ``-rf`` ≡ ``-r -f`` ≡ ``-Rf`` ≡ ``--recursive --force`` ≡ ``--rec --force``;
- the **files** it reads, writes and deletes (operands of known programs, option
  values such as ``curl -o``, redirections) and the **URLs** it fetches;
- whether any of it is **unknown until it runs** (a variable, a substitution, a glob).

What cannot be known is never guessed: a string that does not parse is an
``error``; a command whose program is hidden (``$RM -rf /``, ``$(echo rm)``,
``{rm,-rf,/}``), a shell fed from a pipe, ``awk '{system(…)}'`` — each is listed in
``opaque``. Policy conditions treat both as "cannot judge" (undetermined), never as
a pass.

Results are cached by the exact string (the facts are immutable).
"""

from __future__ import annotations

from functools import lru_cache

from interlock.facts.commands import Command, PathUse, ShellFacts, UrlUse
from interlock.facts.shellwalk import MAX_CHARS, MAX_COMMANDS, MAX_DEPTH, Unjudgeable, Walker
from interlock.facts.shellwords import WordError

__all__ = [
    "MAX_CHARS",
    "MAX_COMMANDS",
    "MAX_DEPTH",
    "Command",
    "PathUse",
    "ShellFacts",
    "UrlUse",
    "shell_facts",
]


@lru_cache(maxsize=4096)
def shell_facts(text: str) -> ShellFacts:
    """The facts of the command string ``text`` (cached; never raises)."""
    if len(text) > MAX_CHARS:
        return ShellFacts(
            text=text,
            error=f"the command is {len(text)} characters long, over the {MAX_CHARS} read as shell",
        )
    try:
        walker = Walker()
        walker.script(text, depth=0)
    except (Unjudgeable, WordError) as exc:
        return ShellFacts(text=text, error=str(exc))
    except RecursionError:
        return ShellFacts(text=text, error="the command is nested too deeply to judge")
    return ShellFacts(
        text=text,
        commands=tuple(walker.commands),
        paths=tuple(dict.fromkeys(walker.paths)),
        urls=tuple(dict.fromkeys(walker.urls)),
        opaque=tuple(dict.fromkeys(walker.opaque)),
    )
