"""``interlock mcp-gateway --http``: the gateway listening on streamable HTTP.

    interlock keys create -d sqlite:///.interlock/interlock.db --tenant acme \\
        --role agent --name support-bot                      # the client's key
    interlock mcp-gateway --http -d sqlite:///.interlock/interlock.db -- python server.py
    interlock mcp-gateway --http --server http://127.0.0.1:8750 --config gateway.yaml

Clients authenticate with Interlock agent keys: from the store (``--database``; by
default ``$INTERLOCK_DATABASE_URL``, else ``sqlite:///.interlock/interlock.db``, where
``interlock keys create`` puts them), whose guard judges every call; or, with
``--server``, keys the shared server knows, each client's calls judged there under
its own key. Exit code 0 once stopped (Ctrl-C,
SIGTERM); 2 for a usage error, an invalid policy or a store that cannot be used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from interlock.cli_check import policy_path
from interlock.cli_console import err, fail
from interlock.errors import PolicyError, StoreError, message_of

if TYPE_CHECKING:
    from interlock.gateways.mcp.config import GatewayConfig
    from interlock.gateways.mcp.http_auth import Deciders
    from interlock.guard import Guard

__all__ = ["HttpSettings", "serve_http"]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The command line's ``--http`` options."""

    host: str
    port: int
    max_sessions: int
    idle_timeout: float
    max_body_bytes: int
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    grace: float
    log_level: str
    reload_interval: float | None = None


def _deciders(
    policy: Path | None, database: str | None, server: str | None
) -> tuple[Deciders, Guard | None]:
    """Whose keys, and which guard judges: the store's, or the server's."""
    from interlock.gateways.mcp.http_auth import ServerKeys, StoreKeys

    if server is not None:
        if policy is not None or database is not None:
            raise fail("--server decides on the server: no --policy or --database with it")
        if not server.startswith(("http://", "https://", "unix:")):
            raise fail(f"--server takes http(s)://host:port or unix:/path, not {server!r}")
        try:
            import httpx  # noqa: F401  (ServerKeys and the remote guards need it)
        except ImportError:
            raise fail("--server needs httpx: pip install 'interlock[remote]'") from None
        return ServerKeys(server), None
    if database is None:  # the store `interlock keys create` writes to by default
        from interlock.store import default_database_url

        database = default_database_url()
    from interlock import Guard
    from interlock.cli_server import require_sidecar_match
    from interlock.server.keys import KeyStore, Role
    from interlock.store.sql import SqlStore

    try:
        guard = Guard.from_file(policy_path(policy), store=database)
    except (PolicyError, StoreError, OSError, ImportError) as exc:
        raise fail(message_of(exc)) from exc
    try:  # a policy with a digest sidecar must match it, as `interlock serve` has it
        require_sidecar_match(policy_path(policy))
    except BaseException:
        guard.close()
        raise
    if not isinstance(guard.store, SqlStore):  # pragma: no cover - a URL opens a SqlStore
        guard.close()
        raise fail("--http needs a SQL store (it holds the API keys)")
    keys = KeyStore(guard.store)
    if not any(key.role is Role.AGENT and not key.revoked for key in keys.list_keys()):
        err.print(
            Text(
                f"interlock: no agent API key in {database}: every request will be refused; "
                f"create one: interlock keys create -d {database} --tenant T --role agent "
                "--name N"
            ),
            style="yellow",
        )
    return StoreKeys(guard, keys), guard


def serve_http(
    config: GatewayConfig,
    environment: Mapping[str, str],
    settings: HttpSettings,
    policy: Path | None,
    database: str | None,
    server: str | None,
    session_options: Mapping[str, Any] | None = None,
) -> None:
    """Listen until stopped (Ctrl-C: exit 130; SIGTERM: 0). ``session_options``: each
    session's own (sampling and approval settings)."""
    try:
        import uvicorn

        from interlock.gateways.mcp.http_server import HttpGateway, HttpOptions, relays_for
    except ImportError as exc:
        raise fail(
            f"the HTTP gateway needs its extra ({exc.name} is missing): "
            "pip install 'interlock[mcp]'"
        ) from None
    from interlock.accelerators import accelerators_warning
    from interlock.cli_server import stop_on_sigterm

    if "INTERLOCK_API_KEY" in os.environ and server is not None:
        err.print(
            Text(
                "interlock: with --http each client's own key goes to the server; "
                "$INTERLOCK_API_KEY is not used"
            ),
            style="yellow",
        )
    deciders, guard = _deciders(policy, database, server)
    options = HttpOptions.for_bind(
        settings.host,
        allowed_hosts=settings.allowed_hosts,
        allowed_origins=settings.allowed_origins,
        max_sessions=settings.max_sessions,
        idle_timeout=settings.idle_timeout,
        max_body_bytes=settings.max_body_bytes,
    )
    if options.allowed_hosts is None:
        err.print(
            Text(
                f"interlock: listening on {settings.host}, not loopback: any Host header is "
                "accepted (name this gateway's with --allowed-host to refuse the others)"
            ),
            style="yellow",
        )
    relays = relays_for(config, environment, grace=settings.grace, **(session_options or {}))
    gateway = HttpGateway(deciders, relays, options)
    where = f"http://{settings.host}:{settings.port}{options.path}"
    decided = f"the server {server}" if server else f"policy {policy_path(policy)}"
    if (unaccelerated := accelerators_warning()) is not None:
        err.print(Text(f"interlock: {unaccelerated}"), style="yellow")
    err.print(Text(f"interlock: mcp-gateway on {where} — {decided}"))
    uvicorn_server = uvicorn.Server(
        uvicorn.Config(
            gateway.app(),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=2,
        )
    )
    watcher = None
    if guard is not None:  # a local policy: watched as the stdio gateway's is
        from interlock.cli_gateways_mcp import watch_policy

        watcher = watch_policy(guard, policy, settings.reload_interval)
    try:
        with stop_on_sigterm():
            uvicorn_server.run()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        if watcher is not None:
            watcher.stop()
        if guard is not None:
            guard.close()
        err.print(Text("interlock: mcp-gateway stopped"))
