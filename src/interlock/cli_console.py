"""Where the ``interlock`` commands print, and how they fail.

Shared by :mod:`interlock.cli` and :mod:`interlock.cli_store`, so that neither
imports the other's commands. Errors go to stderr as ``error: ...``::

    raise fail("give the action with --json, or at least --name")   # exit 2
    raise fail("no approval 'apr_1'", code=EXIT_FAILED)              # exit 1
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.text import Text

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "err", "fail", "out"]

#: A check that ran and found something wrong: a broken chain, a pending migration,
#: an approval that cannot be decided.
EXIT_FAILED = 1
#: A usage error, an invalid policy or input, or a store that cannot be used.
EXIT_USAGE = 2

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, *, code: int = EXIT_USAGE) -> typer.Exit:
    """Print ``error: message`` to stderr; return the exit to raise."""
    err.print(Text.assemble(("error:", "red"), " ", message))
    return typer.Exit(code)
