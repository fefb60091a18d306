"""``interlock mcp-gateway``: an MCP server's stdio, with every ``tools/call`` judged.

    interlock mcp-gateway --policy interlock.yaml -- python my_server.py
    interlock mcp-gateway --policy interlock.yaml -d sqlite:///.interlock/interlock.db \\
        --env API_TOKEN=... -- npx -y @modelcontextprotocol/server-memory

The MCP client launches this command instead of the server. Exit code: the
upstream's (128 + N when signal N ended it); 2 for a usage error, an invalid policy
or a store that cannot be opened.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from interlock.cli_check import policy_path
from interlock.cli_console import fail
from interlock.errors import PolicyError, StoreError, message_of

__all__ = ["mcp_gateway"]


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise fail(f"--env takes NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def mcp_gateway(
    upstream: Annotated[
        list[str],
        typer.Argument(
            help="The upstream MCP server's command and its arguments (after --).",
            show_default=False,
        ),
    ],
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policy file (default: $INTERLOCK_POLICY, else ./interlock.yaml).",
            show_default=False,
        ),
    ] = None,
    database: Annotated[
        str | None,
        typer.Option(
            "--database",
            "-d",
            help="A store URL (sqlite:///..., postgresql://...): audit log, approvals, "
            "budgets shared with other guards. Default: none (in-memory budgets).",
            show_default=False,
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            "-e",
            help="NAME=VALUE for the upstream's environment (repeatable).",
            show_default=False,
        ),
    ] = None,
    inherit_env: Annotated[
        bool,
        typer.Option(
            "--inherit-env",
            help="Pass the whole environment to the upstream "
            "(default: PATH, HOME, the locale and --env only).",
        ),
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds the upstream has to exit once the client is gone, before it is "
            "terminated (and as long again before it is killed).",
        ),
    ] = 5.0,
    log_level: Annotated[
        str, typer.Option(help="Log level on stderr: warning, info or debug.")
    ] = "info",
) -> None:
    """Run an MCP server over stdio behind Interlock: every tools/call is judged first."""
    from interlock import Guard
    from interlock.gateways.mcp import StdioGateway, upstream_environment

    logging.basicConfig(
        stream=sys.stderr, level=log_level.upper(), format="%(message)s", force=True
    )
    extra = _env_pairs(env or [])
    try:
        guard = Guard.from_file(policy_path(policy), store=database)
    except (PolicyError, StoreError, OSError) as exc:
        raise fail(message_of(exc)) from exc
    gateway = StdioGateway(
        guard, upstream, env=upstream_environment(extra, inherit_all=inherit_env), grace=grace
    )
    try:
        code = asyncio.run(gateway.run())
    except OSError as exc:  # the upstream could not be started
        raise fail(f"could not start the upstream {upstream[0]!r}: {exc}") from exc
    finally:
        guard.close()
    raise typer.Exit(code)
