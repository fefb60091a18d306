"""``interlock llm-proxy``: the OpenAI / Anthropic-compatible model proxy.

    OPENAI_API_KEY=sk-... interlock llm-proxy --policy interlock.yaml \\
        --openai-upstream https://api.openai.com/v1
    interlock keys create --tenant acme --role agent --name support-bot   # the client's key
    OPENAI_API_KEY=sk-... interlock llm-proxy --server http://127.0.0.1:8750 \\
        --openai-upstream https://api.openai.com/v1

Standalone, clients authenticate with Interlock agent keys from the same store
(``--store``, default ``$INTERLOCK_DATABASE_URL``, else
``sqlite:///.interlock/interlock.db``); with ``--server``, with keys of the shared
server, which judges every call with the client's own key (the proxy holds none).
The upstream keys are the proxy's own ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``.
With no agent key in the store every request is refused (401). Exit codes: 0
stopped; 2 a usage error, an invalid policy or a store that cannot be used.
"""

from __future__ import annotations

import os
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from interlock.cli_console import err, fail
from interlock.errors import PolicyError, StoreError, message_of

if TYPE_CHECKING:
    from interlock.gateways.llm_proxy import SharedServer
    from interlock.guard import Guard

__all__ = ["DEFAULT_PORT", "DEFAULT_RELOAD_INTERVAL", "DEFAULT_RESERVATION_TTL", "llm_proxy"]

DEFAULT_PORT = 8760
#: a long stream (a reasoning model) can outlast the guard's default 300 s
DEFAULT_RESERVATION_TTL = 1800.0
#: as :data:`interlock.gateways.llm_proxy.DEFAULT_MAX_HELD` (not imported: it needs the extra)
DEFAULT_MAX_HELD = 32 * 1024 * 1024
DEFAULT_RELOAD_INTERVAL = 2.0


def llm_proxy(
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policy file (default: $INTERLOCK_POLICY or ./interlock.yaml).",
            show_default=False,
        ),
    ] = None,
    openai_upstream: Annotated[
        str | None,
        typer.Option(
            help="The OpenAI-compatible API to relay to, as OPENAI_BASE_URL takes it "
            "(…/v1); its key is $OPENAI_API_KEY.",
            show_default=False,
        ),
    ] = None,
    anthropic_upstream: Annotated[
        str | None,
        typer.Option(
            help="The Anthropic API to relay to, as ANTHROPIC_BASE_URL takes it (no /v1); "
            "its key is $ANTHROPIC_API_KEY.",
            show_default=False,
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            "--database",
            "-d",
            help="sqlite:///path or postgresql://... holding the API keys, budgets and "
            "audit log (default: $INTERLOCK_DATABASE_URL, else "
            "sqlite:///.interlock/interlock.db).",
            show_default=False,
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Judge through the Interlock server at this URL (http(s)://host:port or "
            "unix:/path) instead of a local policy and store: each client's own agent "
            "key is checked, reserved and committed there. The proxy holds no key.",
            show_default=False,
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = DEFAULT_PORT,
    max_held_bytes: Annotated[
        int,
        typer.Option(
            min=1,
            help="The most one stream holds back of the tool calls it has not judged yet "
            "(their names and arguments, bytes); a call that would pass it is refused.",
        ),
    ] = DEFAULT_MAX_HELD,
    allow_unjudged_streamed_tools: Annotated[
        bool,
        typer.Option(
            "--allow-unjudged-streamed-tools",
            help="Deprecated, does nothing: streamed tool calls are judged.",
            hidden=True,
        ),
    ] = False,
    reload_interval: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds between looks at the policy file for changes (0: only on SIGHUP; "
            "default 2). A policy that does not load never replaces the one in force; one "
            "that removes more than half of the rules is held until a restart.",
            show_default=False,
        ),
    ] = None,
    reservation_ttl: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Seconds a model call's budget reservation stays open (default 1800); a "
            "call (a stream) still running then is charged in full by the reaper.",
            show_default=False,
        ),
    ] = None,
    session_header: Annotated[
        bool,
        typer.Option(
            "--session-header/--no-session-header",
            help="Whether a request may name its session (x-interlock-session, scoped to "
            "its key) when the policy reads sessions; with --no-session-header every "
            "session is its conversation's own (its system prompt and first user message).",
        ),
    ] = True,
    log_level: Annotated[
        str, typer.Option(help="critical, error, warning, info, debug or trace.")
    ] = "info",
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log",
            help="Log a line per request (uvicorn's access log, at --log-level info).",
        ),
    ] = False,
) -> None:
    """Relay OpenAI /v1/chat/completions and /v1/responses and Anthropic /v1/messages to
    the upstreams, every model call judged and budgeted by the policy first
    (docs/llm-proxy.md)."""
    try:
        import uvicorn

        from interlock.gateways.llm_proxy import ProxyConfig, create_app
    except ImportError as exc:
        raise fail(
            f"the LLM proxy needs its extra ({exc.name} is missing): "
            "pip install 'interlock[llm-proxy]'"
        ) from None
    from interlock.accelerators import accelerators_warning
    from interlock.cli_server import stop_on_sigterm

    if allow_unjudged_streamed_tools:
        err.print(
            Text(
                "interlock: --allow-unjudged-streamed-tools is deprecated and does nothing: "
                "streamed tool calls are held and judged"
            ),
            style="yellow",
        )
    if openai_upstream is None and anthropic_upstream is None:
        raise fail("name at least one upstream: --openai-upstream URL, --anthropic-upstream URL")
    try:
        config = ProxyConfig.from_urls(
            openai_url=openai_upstream,
            anthropic_url=anthropic_upstream,
            max_held_bytes=max_held_bytes,
            session_header=session_header,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    with ExitStack() as stack:
        if server is not None:
            local = {
                "--policy": policy,
                "--store": store,
                "--reload-interval": reload_interval,
                "--reservation-ttl": reservation_ttl,
            }
            given = [name for name, value in local.items() if value is not None]
            if given:
                raise fail(
                    f"--server judges on the server: no {', '.join(given)} with it (the "
                    "server's policy, store and reservation TTL apply)"
                )
            judge: Guard | SharedServer = _shared_server(server)
            what = f"judging through the server at {server}"
            stack.callback(lambda: err.print(Text("interlock: llm-proxy stopped")))
        else:
            guard, path = _local_guard(
                stack, policy, store, reload_interval, reservation_ttl or DEFAULT_RESERVATION_TTL
            )
            judge, what = guard, f"policy {path}"
        for name, upstream in (("openai", config.openai), ("anthropic", config.anthropic)):
            if upstream is not None and not upstream.api_key:
                err.print(
                    Text(f"interlock: no ${name.upper()}_API_KEY: {name} calls go without one"),
                    style="yellow",
                )
        app = create_app(judge, config)
        if (unaccelerated := accelerators_warning()) is not None:
            err.print(Text(f"interlock: {unaccelerated}"), style="yellow")
        err.print(Text(f"interlock: llm-proxy on http://{host}:{port}/v1 — {what}"))
        # httptools and uvloop (the extra's) are uvicorn's own picks when installed; no
        # access log (a line per call costs more than the proxy's own parsing) and no
        # forwarded-address rewriting (the proxy never reads the client's address)
        config_ = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            server_header=False,
            access_log=access_log,
            proxy_headers=False,
        )
        server_ = uvicorn.Server(config_)
        try:
            with stop_on_sigterm():  # exit 0 after a graceful stop, store closed
                server_.run()
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def _shared_server(url: str) -> SharedServer:
    """The shared server at ``url``; a warning (not a failure) when it does not answer
    now: the proxy fails closed (503) until it does."""
    import httpx

    from interlock.gateways.llm_proxy import SharedServer

    try:
        shared = SharedServer(url)
    except ValueError as exc:
        raise fail(str(exc)) from None
    health = f"{shared.url}/v1/health"
    transport = None
    if url.startswith("unix:"):
        transport = httpx.HTTPTransport(uds=url[len("unix:") :])
    try:
        with httpx.Client(transport=transport, timeout=5.0) as probe:
            probe.get(health).raise_for_status()
    except httpx.HTTPError as exc:
        err.print(
            Text(
                f"interlock: the server at {url} does not answer ({type(exc).__name__}): "
                "every call is refused (503) until it does"
            ),
            style="yellow",
        )
    return shared


def _local_guard(
    stack: ExitStack,
    policy: Path | None,
    store: str | None,
    reload_interval: float | None,
    reservation_ttl: float,
) -> tuple[Guard, Path]:
    """The guard on the policy and the store (closed, and its watcher stopped, when
    ``stack`` closes)."""
    from interlock.cli_server import reporting_watcher, require_sidecar_match
    from interlock.guard import Guard
    from interlock.policy.loader import load_policy
    from interlock.server.keys import KeyStore, Role
    from interlock.store import default_database_url

    path = policy or Path(os.environ.get("INTERLOCK_POLICY", "interlock.yaml"))
    try:
        compiled = load_policy(path)
    except PolicyError as exc:
        raise fail(str(exc)) from None
    require_sidecar_match(path)
    url = store or default_database_url()
    try:
        guard = Guard(compiled, store=url, reap_interval=10.0, reservation_ttl=reservation_ttl)
    except (StoreError, ImportError) as exc:
        raise fail(message_of(exc)) from None

    def closed() -> None:
        guard.close()
        err.print(Text("interlock: llm-proxy stopped; the store is closed"))

    stack.callback(closed)
    interval = DEFAULT_RELOAD_INTERVAL if reload_interval is None else reload_interval
    watcher = reporting_watcher(guard, path, interval, held=lambda _held: "restart to take it")
    stack.callback(watcher.stop)
    if interval > 0:
        watcher.start()
    if threading.current_thread() is threading.main_thread():
        watcher.install_sighup()
    keys = KeyStore(guard.store)  # type: ignore[arg-type]  # Guard(store=url) opened one
    if not any(k.role is Role.AGENT and not k.revoked for k in keys.list_keys()):
        err.print(
            Text(
                f"interlock: no agent API key in {url}: every request will be refused; "
                f"create one: interlock keys create -d {url} --tenant T --role agent "
                "--name N"
            ),
            style="yellow",
        )
    return guard, path
