"""The ``interlock`` command (the console script runs :func:`main`).

    interlock check --name shell --arg command="rm -rf /"     # exit code by verdict
    interlock policy lint interlock.yaml
    interlock policy test tests/policy_cases.yaml
    interlock policy schema > interlock.schema.json
    interlock demo

The commands are a typer application, :mod:`interlock.cli_app` (``interlock.cli.app``
reads it from there on first use). A plain ``interlock check`` runs without it: typer
and rich cost more than the check itself, and a hook runs one check per process
(:mod:`interlock.cli_check`, ADR 0014).

Exit codes of ``check``: 0 allow, 3 deny, 4 require_approval, 5 undetermined; 2 for a
usage error or an invalid policy or input.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes

if TYPE_CHECKING:
    from interlock.cli_app import EXIT_CODES, app

__all__ = ["EXIT_CODES", "app", "main"]

_FROM_APP = ("EXIT_CODES", "_HELP_ORDER", "_LAZY_COMMANDS", "app")
__getattr__, __dir__ = lazy_attributes(
    __name__, globals(), {name: "interlock.cli_app" for name in _FROM_APP}
)


def main() -> None:
    if sys.argv[1:2] == ["check"]:
        from interlock.cli_check import fast_check

        code = fast_check(sys.argv[2:])
        if code is not None:
            sys.exit(code)
    from interlock.cli_app import app

    app()


if __name__ == "__main__":
    main()
