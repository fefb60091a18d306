"""``interlock mcp-gateway``: MCP servers behind Interlock, every ``tools/call`` judged,
on stdio (the client launches the gateway) or on streamable HTTP (``--http``).

    interlock mcp-gateway --policy interlock.yaml -- python my_server.py
    interlock mcp-gateway --policy interlock.yaml \\
        --upstream "files=python files.py" --upstream "mail=https://mail.example.com/mcp"
    interlock mcp-gateway --policy interlock.yaml --config gateway.yaml
    interlock mcp-gateway --policy interlock.yaml -d sqlite:///.interlock/interlock.db \\
        --env API_TOKEN=... -- npx -y @modelcontextprotocol/server-memory
    INTERLOCK_API_KEY=... interlock mcp-gateway --server http://127.0.0.1:8750 -- python s.py
    interlock mcp-gateway --http --port 8770 -d sqlite:///.interlock/interlock.db -- python s.py

With a local policy, the policy file is watched while the gateway serves (every
``--reload-interval`` seconds, and on SIGHUP), as ``interlock serve`` watches it: a new
policy decides from the next call on, sessions and upstreams untouched; one that does
not load leaves the old one in force and says why on stderr.

On stdio the exit code is the upstream's (128 + N when signal N ended it); with
``--http``, 0 once stopped. 2 for a usage error, an invalid policy or a store that
cannot be opened.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from interlock.cli_check import policy_path
from interlock.cli_console import fail
from interlock.errors import ConfigError, PolicyError, StoreError, message_of

if TYPE_CHECKING:
    from interlock import Guard
    from interlock.gateways.mcp.config import GatewayConfig
    from interlock.policy.reload import PolicyWatcher

__all__ = ["API_KEY_ENV", "DEFAULT_RELOAD_INTERVAL", "mcp_gateway", "watch_policy"]

#: Where ``--server`` reads its API key (never from the command line, which other
#: users of the machine can read).
API_KEY_ENV: Final = "INTERLOCK_API_KEY"
#: Seconds between looks at the policy file (as ``interlock serve`` and ``llm-proxy``).
DEFAULT_RELOAD_INTERVAL: Final = 2.0


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise fail(f"--env takes NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def _guard(policy: Path | None, database: str | None, server: str | None) -> Guard:
    """A local guard on the policy (and store), or a remote one on the server."""
    from interlock import Guard

    if server is not None:
        if policy is not None or database is not None:
            raise fail("--server decides on the server: no --policy or --database with it")
        api_key = os.environ.get(API_KEY_ENV)
        if not api_key:
            raise fail(f"--server needs an API key in ${API_KEY_ENV}")
        try:
            return Guard.remote(server, api_key)
        except (ImportError, ValueError) as exc:
            raise fail(message_of(exc)) from exc
    from interlock.cli_server import require_sidecar_match

    try:
        guard = Guard.from_file(policy_path(policy), store=database)
    except (PolicyError, StoreError, OSError) as exc:
        raise fail(message_of(exc)) from exc
    try:  # a policy with a digest sidecar must match it, as `interlock serve` has it
        require_sidecar_match(policy_path(policy))
    except BaseException:
        guard.close()
        raise
    return guard


def watch_policy(guard: Guard, policy: Path | None, reload_interval: float | None) -> PolicyWatcher:
    """Keep ``guard`` on its policy file while the gateway serves: a look every
    ``reload_interval`` seconds (default 2; 0: only on SIGHUP) and on SIGHUP, each
    reload, refused reload and held one told on stderr — as ``interlock serve`` and
    ``interlock llm-proxy`` do (:class:`~interlock.policy.reload.PolicyWatcher`: a
    policy that does not load, or a file half-written, never replaces the one in
    force). Stop it with :meth:`~interlock.policy.reload.PolicyWatcher.stop`."""
    from interlock.cli_server import reporting_watcher

    interval = DEFAULT_RELOAD_INTERVAL if reload_interval is None else reload_interval
    path = policy_path(policy)
    watcher = reporting_watcher(guard, path, interval, held=lambda _held: "restart to take it")
    if interval > 0:
        watcher.start()
    if threading.current_thread() is threading.main_thread():
        watcher.install_sighup()
    return watcher


def mcp_gateway(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="One upstream MCP server's command and its arguments (after --), relayed "
            "byte for byte, its tool names unchanged.",
            show_default=False,
        ),
    ] = None,
    upstream: Annotated[
        list[str] | None,
        typer.Option(
            "--upstream",
            "-u",
            help="NAME=COMMAND (split as a shell would) of an upstream server, or NAME=URL "
            "of a streamable-HTTP one; repeatable: its tools are offered as NAME__tool, "
            "and the policy sees NAME as the tool's server.",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="A YAML file naming the upstreams (see docs/mcp-gateway.md).",
            show_default=False,
        ),
    ] = None,
    hide_denied_tools: Annotated[
        bool,
        typer.Option(
            "--hide-denied-tools",
            help="Leave out of tools/list the tools the policy refuses every call of "
            "(each call is still judged).",
        ),
    ] = False,
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
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Decide through the Interlock server at this URL (http(s)://host:port or "
            "unix:/path) instead of a local policy; the API key is read from "
            "$INTERLOCK_API_KEY, and the key's tenant and agent are the caller.",
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
    approve_by_elicitation: Annotated[
        bool,
        typer.Option(
            "--approve-by-elicitation",
            help="Put a tools/call that needs approval to the MCP client's user (form "
            "elicitation) when the client supports it: their answer decides the "
            "approval. Makes whoever answers the client's prompts an approver; needs "
            "a store (--database; with --http, the default one), not --server (see "
            "docs/mcp-gateway.md).",
        ),
    ] = False,
    elicitation_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds to wait for the client's user to answer an approval "
            "(then the refusal with the approval URL; 0: no limit).",
        ),
    ] = 600.0,
    sampling_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds an allowed sampling request waits for the client's answer "
            "before it is abandoned (its reservation released; 0: no limit).",
        ),
    ] = 120.0,
    reload_interval: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds between looks at the policy file for changes (0: only on SIGHUP; "
            "default 2). A new policy decides from the next call on; one that does not "
            "load never replaces the one in force; one that removes more than half of the "
            "rules is held until a restart.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="Log level on stderr: warning, info or debug.")
    ] = "info",
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Listen on streamable HTTP (path /mcp) instead of stdio: clients "
            "authenticate with Interlock agent keys, from the store (--database; by default "
            "that of interlock keys create) or the server (--server).",
        ),
    ] = False,
    host: Annotated[str, typer.Option(help="With --http: the interface to listen on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="With --http: the TCP port.")] = 8770,
    max_sessions: Annotated[
        int,
        typer.Option(
            min=1, help="With --http: client sessions open at once (each has its own upstreams)."
        ),
    ] = 64,
    idle_timeout: Annotated[
        float,
        typer.Option(
            min=0.01,
            help="With --http: seconds a session may sit idle (no request, no open "
            "stream) before it ends and its upstreams are stopped.",
        ),
    ] = 1800.0,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="With --http: the largest request body.")
    ] = 4 * 1024 * 1024,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="With --http: a Host header value to accept (NAME or NAME:PORT, NAME:* for "
            "any port; repeatable). A loopback bind accepts the loopback names already.",
            show_default=False,
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            help="With --http: a browser Origin to accept (http://NAME:PORT, :* for any "
            "port; repeatable). Requests without an Origin header always pass.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run MCP servers behind Interlock: every tools/call is judged first."""
    from interlock.gateways.mcp import AggregateGateway, StdioGateway, upstream_environment

    logging.basicConfig(
        stream=sys.stderr, level=log_level.upper(), format="%(message)s", force=True
    )
    extra = _env_pairs(env or [])
    gateway_config = _gateway_config(command, upstream or [], config, hide_denied_tools)
    environment = upstream_environment(extra, inherit_all=inherit_env)
    session_options: dict[str, Any] = {
        "sampling_timeout": sampling_timeout or None,
        "approve_by_elicitation": approve_by_elicitation,
        "elicitation_timeout": elicitation_timeout or None,
    }
    if server is not None and reload_interval is not None:
        raise fail("--server decides on the server: no --reload-interval with it")
    if http:
        from interlock.cli_gateways_mcp_http import HttpSettings, serve_http

        settings = HttpSettings(
            host=host,
            port=port,
            max_sessions=max_sessions,
            idle_timeout=idle_timeout,
            max_body_bytes=max_body_bytes,
            allowed_hosts=tuple(allowed_host or ()),
            allowed_origins=tuple(allowed_origin or ()),
            grace=grace,
            log_level=log_level,
            reload_interval=reload_interval,
        )
        if approve_by_elicitation and server is not None:
            raise fail(
                "--approve-by-elicitation needs a local store, and is refused with "
                "--server: approvals asked of the client's user are recorded there"
            )
        serve_http(gateway_config, environment, settings, policy, database, server, session_options)
        return
    if allowed_host or allowed_origin:
        raise fail("--allowed-host and --allowed-origin are for --http")
    guard = _guard(policy, database, server)
    if approve_by_elicitation:
        from interlock.adapters.mcp_approvals import check_can_approve

        try:
            check_can_approve(guard)
        except ValueError as exc:
            guard.close()
            raise fail(f"--approve-by-elicitation: {exc}") from exc
    gateway: AggregateGateway | StdioGateway
    if gateway_config.transparent:
        assert command is not None
        gateway = StdioGateway(
            guard,
            command,
            env=environment,
            grace=grace,
            hide_denied_tools=gateway_config.hide_denied_tools,
            sampling_timeout=sampling_timeout or None,
            approve_by_elicitation=approve_by_elicitation,
            elicitation_timeout=elicitation_timeout or None,
        )
    else:
        gateway = AggregateGateway(
            guard,
            gateway_config,
            env=environment,
            grace=grace,
            sampling_timeout=sampling_timeout or None,
            approve_by_elicitation=approve_by_elicitation,
            elicitation_timeout=elicitation_timeout or None,
        )
    watcher = watch_policy(guard, policy, reload_interval) if server is None else None
    try:
        code = asyncio.run(gateway.run())
    except OSError as exc:  # an upstream could not be started
        raise fail(f"could not start the upstream: {exc}") from exc
    finally:
        if watcher is not None:
            watcher.stop()
        guard.close()
    raise typer.Exit(code)


def _gateway_config(
    command: list[str] | None, upstreams: list[str], path: Path | None, hide: bool
) -> GatewayConfig:
    """The upstreams from ``-- COMMAND``, or from ``--upstream`` and ``--config``."""
    from interlock.gateways.mcp.config import (
        GatewayConfig,
        UpstreamSpec,
        load_config,
        parse_upstream,
    )

    try:
        if command:
            if upstreams or path is not None:
                raise fail(
                    "give the upstream as -- COMMAND, or by --upstream or --config: not both"
                )
            return GatewayConfig((UpstreamSpec(None, command=tuple(command)),), hide)
        loaded = load_config(path) if path is not None else None
        specs = list(loaded.upstreams) if loaded is not None else []
        specs += [parse_upstream(text) for text in upstreams]
        file_hide = loaded is not None and loaded.hide_denied_tools
        gateway_config = GatewayConfig(tuple(specs), hide or file_hide)
    except ConfigError as exc:
        raise fail(str(exc)) from exc
    return gateway_config
