"""Sub-commands imported only when they are run (or listed by ``--help``).

``interlock check`` should not pay for the store, the server or the audit keys: the
root command group names its sub-commands here as ``"module:attribute"`` — a
``typer.Typer`` (a group) or a function (one command) — and imports one when the
command line asks for it::

    app = typer.Typer(cls=lazy_group({"db": "interlock.cli_store:db_app"}, order=...))

The order is the one ``--help`` lists, eager commands and lazy ones together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module

import typer
from typer.core import TyperGroup

__all__ = ["lazy_group"]


def _load(name: str, target: str) -> typer.core.TyperCommand | TyperGroup:
    module_name, _, attribute = target.partition(":")
    value = getattr(import_module(module_name), attribute)
    command: typer.core.TyperCommand | TyperGroup
    if isinstance(value, typer.Typer):
        command = typer.main.get_group(value)
    else:  # a function: one command of that name
        single = typer.Typer(add_completion=False)
        single.command(name)(value)
        command = typer.main.get_command(single)  # type: ignore[assignment]
    command.name = name
    return command


def lazy_group(lazy: Mapping[str, str], *, order: Sequence[str]) -> type[TyperGroup]:
    """A command group class that imports the sub-commands in ``lazy`` on first use and
    lists all of its commands in ``order`` (any not named there come last)."""
    targets = dict(lazy)
    ranked = {name: i for i, name in enumerate(order)}

    class LazyGroup(TyperGroup):
        def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
            names = set(self.commands) | set(targets)
            return sorted(names, key=lambda n: (ranked.get(n, len(ranked)), n))

        def get_command(  # type: ignore[override]
            self, ctx: typer.Context, cmd_name: str
        ) -> typer.core.TyperCommand | TyperGroup | None:
            if cmd_name not in self.commands and cmd_name in targets:
                self.commands[cmd_name] = _load(cmd_name, targets[cmd_name])
            command = self.commands.get(cmd_name)
            return command  # type: ignore[return-value]

    return LazyGroup
