"""``python -m interlock``: the ``interlock`` command, for where its script is not on
PATH (an MCP client config naming the interpreter, for instance)."""

from __future__ import annotations

from interlock.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
