"""The ``interlock`` commands of the shared server.

    interlock serve --policy interlock.yaml                 # http://127.0.0.1:8750/v1
    interlock serve --uds /run/interlock.sock -d postgresql://interlock@db/interlock
    interlock keys create --tenant acme --role agent --name ops-bot
    interlock keys list --tenant acme
    interlock keys revoke 3f2a9c0d1e4b5a67
    interlock keys check                    # look-alike key names made before they were refused
    interlock keys rotate                   # a new grant signing key (see cli_grant_keys)

``keys`` commands take the same ``--database/-d URL`` as the server (default:
``$INTERLOCK_DATABASE_URL``, else ``sqlite:///.interlock/interlock.db``). Exit codes:
0 done; 1 a key that does not exist, or look-alike key names found by ``keys check``;
2 a usage error (a look-alike name included), an invalid policy or a store that
cannot be used.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from interlock.approvals.webhook import WebhookDispatcher, webhook_secret
from interlock.cli_console import EXIT_FAILED, err, fail, out
from interlock.cli_grant_keys import keys_rotate, keys_signing
from interlock.cli_store import DatabaseOption
from interlock.errors import PolicyError, StoreError, message_of
from interlock.policy.reload import (
    DEFAULT_MAX_REMOVED,
    DEFAULT_SETTLE,
    HeldReload,
    PolicyWatcher,
    sidecar_problem,
)
from interlock.server.errors import ApiKeyError, ApiKeyNotFound
from interlock.server.keys import ApiKey, KeyStore, Role
from interlock.server.limits import DEFAULT_MAX_JSON_DEPTH, MAX_JSON_DEPTH_LIMIT
from interlock.server.workers import WORKER_WEBHOOK_ENV, watch_parent
from interlock.store import default_database_url, open_store
from interlock.store.sql import SqlStore
from interlock.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = ["DEFAULT_PORT", "keys_app", "serve"]

DEFAULT_PORT = 8750
#: the most ``--workers`` (each process holds its own store connections)
MAX_WORKERS = 64

keys_app = typer.Typer(
    help="Create, list and revoke the server's API keys; rotate and list the grant "
    "signing keys (rotate, signing).",
    no_args_is_help=True,
)


@contextmanager
def _keys(database: str | None, *, create: bool = False) -> Iterator[KeyStore]:
    """The key store in the database the URL names; a store error is exit 2. Only
    ``create`` makes a new SQLite file (listing a mistyped path must not say "no
    keys")."""
    url = database or default_database_url()
    try:
        store = open_store(url, migrate=False)
    except (StoreError, ImportError) as exc:  # ImportError: the postgres extra is missing
        raise fail(message_of(exc)) from None
    try:
        if isinstance(store, SQLiteStore) and not create and not store.path.exists():
            raise fail(f"no database at {store.path}: create a key, or run `interlock db migrate`")
        store.migrate()
        yield KeyStore(store, cache_ttl=0)
    except StoreError as exc:
        raise fail(message_of(exc)) from None
    finally:
        store.close()


def _iso(us: int | None) -> str:
    if us is None:
        return ""
    moment = datetime.fromtimestamp(us / 1e6, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _key_json(key: ApiKey) -> dict[str, Any]:
    return {**key.as_dict(), "created": _iso(key.created_us), "revoked": _iso(key.revoked_us)}


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts in.")],
    role: Annotated[Role, typer.Option(help="agent, approver or admin.")],
    name: Annotated[
        str,
        typer.Option(
            help="Who the key speaks for: the agent of its checks, the approver of its "
            "decisions. A name never decides a request it made."
        ),
    ],
    database: DatabaseOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the key as JSON.")] = False,
) -> None:
    """Create an API key and print it — once: only its hash is stored."""
    with _keys(database, create=True) as keys:
        try:
            created = keys.create(tenant=tenant, role=role, name=name)
        except ApiKeyError as exc:
            raise fail(message_of(exc)) from None
    key = created.key
    if as_json:
        sys.stdout.write(json.dumps({**_key_json(key), "key": created.token}) + "\n")
    else:
        sys.stdout.write(created.token + "\n")
    err.print(
        Text(
            f"created API key {key.id} ({key.role.value} {key.name!r} in tenant "
            f"{key.tenant!r}). Store it now: it cannot be shown again."
        )
    )


@keys_app.command("list")
def keys_list(
    database: DatabaseOption = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON, one object per line.")] = False,
) -> None:
    """List API keys (never their secrets), oldest first."""
    with _keys(database) as keys:
        found = keys.list_keys(tenant=tenant)
    if as_json:
        for key in found:
            sys.stdout.write(json.dumps(_key_json(key)) + "\n")
        return
    if not found:
        out.print(Text("no API keys" + (f" in tenant {tenant!r}" if tenant else "")))
        return
    table = Table()
    for column in ("id", "tenant", "role", "name", "created", "revoked"):
        table.add_column(column, overflow="fold", no_wrap=column == "id")
    for key in found:
        data = _key_json(key)
        table.add_row(
            *(Text(str(data[c])) for c in ("id", "tenant", "role", "name", "created", "revoked"))
        )
    out.print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (from `keys list`).")],
    database: DatabaseOption = None,
) -> None:
    """Revoke an API key. A server stops accepting it within its key cache TTL (5 s)."""
    with _keys(database) as keys:
        try:
            key = keys.revoke(key_id)
        except ApiKeyNotFound as exc:
            raise fail(message_of(exc), code=EXIT_FAILED) from None
    out.print(Text(f"revoked API key {key.id} ({key.role.value} {key.name!r}, {key.tenant!r})"))


@keys_app.command("check")
def keys_check(
    database: DatabaseOption = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
) -> None:
    """Report key names that are one identity written differently (case, width,
    invisible characters, look-alike letters), made before such names were refused.
    Exit 1 when there are any."""
    with _keys(database) as keys:
        found = keys.collisions(tenant=tenant)
    for collision in found:
        out.print(Text(collision.describe()))
    if found:
        out.print(
            Text(
                f"{len(found)} identit{'y has' if len(found) == 1 else 'ies have'} more than "
                "one name: keep one name per identity (revoke the keys of the others)"
            )
        )
        raise typer.Exit(EXIT_FAILED)
    where = f" in tenant {tenant!r}" if tenant else ""
    out.print(Text(f"every identity has one key name{where}"))


keys_app.command("rotate")(keys_rotate)
keys_app.command("signing")(keys_signing)


def serve(
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policy file (default: $INTERLOCK_POLICY or ./interlock.yaml).",
            show_default=False,
        ),
    ] = None,
    database: DatabaseOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = DEFAULT_PORT,
    uds: Annotated[
        Path | None,
        typer.Option(help="Listen on this Unix socket instead of TCP.", show_default=False),
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="critical, error, warning, info, debug or trace.")
    ] = "info",
    reload_interval: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds between looks at the policy file for changes (0: only on SIGHUP). "
            "A policy that does not load never replaces the one serving.",
        ),
    ] = 2.0,
    reload_settle: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds a policy file changed in place must stay unchanged before it is "
            "read (a file renamed into place is read at once).",
        ),
    ] = DEFAULT_SETTLE,
    reload_max_removed: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="The share of the rules a reload may remove (0.5: half); one that removes "
            "more is held until confirmed (POST /v1/policy/reload/confirm) or a restart.",
        ),
    ] = DEFAULT_MAX_REMOVED,
    webhook_url: Annotated[
        str | None,
        typer.Option(
            help="POST each new approval here, and then its decision, signed with "
            "$INTERLOCK_WEBHOOK_SECRET (see docs/webhooks.md).",
            show_default=False,
        ),
    ] = None,
    max_json_depth: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_JSON_DEPTH_LIMIT,
            help="How deep a request's JSON may nest (arrays and objects); deeper is a "
            "400 too_deep.",
        ),
    ] = DEFAULT_MAX_JSON_DEPTH,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_WORKERS,
            help="Server processes sharing the socket and the store (SQLite WAL or "
            "PostgreSQL); one per core. See docs/server.md.",
        ),
    ] = 1,
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log/--no-access-log",
            help="Log requests as JSON lines (logger interlock.access, on stderr).",
        ),
    ] = False,
    access_log_sample: Annotated[
        float,
        typer.Option(
            min=0.0001,
            max=1,
            help="With --access-log, the share of requests logged (0.01: one in 100).",
        ),
    ] = 1.0,
    approval_reason: Annotated[
        bool,
        typer.Option(
            "--approval-reason-required/--approval-reason-optional",
            help="Whether approving or denying needs a reason: required refuses a blank "
            "one (422), in the API and on the approvals page alike.",
        ),
    ] = True,
    worker_fd: Annotated[int | None, typer.Option(hidden=True)] = None,
    worker_index: Annotated[int, typer.Option(hidden=True)] = 0,
) -> None:
    """Serve the decision point over HTTP: the /v1 API, API keys and /metrics.

    Checks, approvals, budgets and the audit log of every tenant, for API keys made
    with `interlock keys create`. OpenAPI at /v1/openapi.json."""
    try:
        import uvicorn

        from interlock.server.app import create_app
    except ImportError as exc:
        raise fail(
            f"the server needs its extra ({exc.name} is missing): pip install 'interlock[server]'"
        ) from None
    from interlock.accelerators import describe_accelerators
    from interlock.guard import Guard
    from interlock.policy.loader import load_policy

    if worker_fd is not None and webhook_url is None:  # out of sight of `ps`: it holds tokens
        webhook_url = os.environ.get(WORKER_WEBHOOK_ENV) or None
    try:  # before anything opens: never serve with a webhook that cannot be signed
        secret = webhook_secret(webhook_url) if webhook_url is not None else ""
    except ValueError as exc:
        raise fail(str(exc)) from None
    path = policy or Path(os.environ.get("INTERLOCK_POLICY", "interlock.yaml"))
    try:
        compiled = load_policy(path)
    except PolicyError as exc:
        raise fail(str(exc)) from None
    require_sidecar_match(path)
    url = database or default_database_url()
    if workers > 1 and worker_fd is None:
        options = [
            "--policy", str(path), "--log-level", log_level,
            "--reload-interval", repr(reload_interval), "--reload-settle", repr(reload_settle),
            "--reload-max-removed", repr(reload_max_removed),
            "--max-json-depth", str(max_json_depth),
            "--access-log-sample", repr(access_log_sample),
            "--access-log" if access_log else "--no-access-log",
            "--approval-reason-required" if approval_reason else "--approval-reason-optional",
        ]  # fmt: skip
        raise typer.Exit(_supervise(url, host, port, uds, workers, options, webhook_url))
    worker = worker_fd is not None
    try:
        guard = Guard(compiled, store=url, reap_interval=None if worker_index else 10.0)
    except (StoreError, ImportError) as exc:
        raise fail(message_of(exc)) from None
    webhook: WebhookDispatcher | None = None
    watcher = reporting_watcher(
        guard,
        path,
        reload_interval,
        held=lambda held: f"sha256 {held.sha256}",
        settle=reload_settle,
        max_removed=reload_max_removed,
    )
    try:
        if reload_interval > 0:
            watcher.start()
        if threading.current_thread() is threading.main_thread():
            watcher.install_sighup()
        if worker:
            watch_parent()
        if not worker_index:  # said once, by the only process or by worker 0
            _warn_of_look_alike_names(guard.store)
        app = create_app(
            guard,
            watcher=watcher,
            max_json_depth=max_json_depth,
            worker=f"{worker_index}:{os.getpid()}" if worker else None,
            access_log=access_log_sample if access_log else 0.0,
            approval_reason_required=approval_reason,
        )
        assert guard.store is not None and guard.audit is not None
        if worker:
            err.print(Text(f"interlock: worker {worker_index} (pid {os.getpid()}) serving"))
        else:
            where = f"unix:{uds}" if uds is not None else f"http://{host}:{port}"
            store_url = guard.store.url
            err.print(Text(f"interlock: serving {where}/v1 — policy {path}, store {store_url}"))
        report = () if worker_index else (*guard.audit.integrity_report(), describe_accelerators())
        for line in report:
            err.print(  # keyed? checkpointed? accelerated? said at startup
                Text(f"interlock: {line}"), style="yellow" if line.startswith("WARNING:") else None
            )
        if webhook_url is not None:
            webhook = WebhookDispatcher(
                guard.store, webhook_url, secret, policy_url_template=compiled.approval_url
            )
            webhook.start()
            err.print(
                Text(f"interlock: new approvals are posted to {webhook.origin}, and decisions")
            )
        config = uvicorn.Config(
            app,
            http=_http_protocol(),
            host=host,
            port=port,
            uds=str(uds) if uds is not None else None,
            log_level=log_level,
            lifespan="off",
            server_header=False,
            access_log=False,  # ours is structured and sampled (--access-log)
        )
        sockets = [socket.socket(fileno=worker_fd)] if worker_fd is not None else None
        _freeze_startup_objects()
        with stop_on_sigterm():
            uvicorn.Server(config).run(sockets=sockets)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        watcher.stop()
        if webhook is not None:
            webhook.stop()
        guard.close()
        if uds is not None and uds.is_socket() and not worker:
            uds.unlink(missing_ok=True)  # a stale socket file would look like a server
        err.print(Text("interlock: stopped; the audit log and the store are closed"))


def _freeze_startup_objects() -> None:
    """Leave what startup made — the libraries, the app, the policy — out of the
    collector's full passes: each walked them all, a pause of up to ≈ 90 ms under load
    (6 in 8 s of a benchmark, ≈ 5 % of the time, and the p99); frozen, ≈ 35 ms at most
    and a third of the total. What startup left as garbage is collected first."""
    import gc

    gc.collect()
    gc.freeze()


def _http_protocol() -> Any:
    """uvicorn's httptools protocol writing a small response in one write
    (:mod:`interlock.server.http_protocol`); uvicorn's own choice without httptools."""
    try:
        from interlock.server.http_protocol import CoalescingProtocol
    except ImportError:  # httptools is not installed: h11
        return "auto"
    return CoalescingProtocol


def _supervise(
    url: str,
    host: str,
    port: int,
    uds: Path | None,
    workers: int,
    options: list[str],
    webhook_url: str | None,
) -> int:
    """``--workers N``: migrate the store once, bind the socket, run N workers on it
    (worker 0 with the webhook), and wait; the exit code."""
    from interlock.server.workers import Supervisor, bind, worker_command

    try:
        open_store(url).close()  # migrated once, before the workers race to it
    except (StoreError, ImportError) as exc:
        raise fail(message_of(exc)) from None
    try:
        sock = bind(host, port, uds)
    except OSError as exc:
        raise fail(f"cannot listen on {uds or f'{host}:{port}'}: {exc}") from None
    fd = sock.fileno()
    argvs = [worker_command(i, fd, options) for i in range(workers)]
    # The database URL (it may hold a password) and the webhook URL (it may hold a
    # token) go through the environment, never a command line `ps` shows.
    env = {**os.environ, "INTERLOCK_DATABASE_URL": url}
    env.pop(WORKER_WEBHOOK_ENV, None)
    envs = [env] * workers
    if webhook_url is not None:
        envs[0] = {**env, WORKER_WEBHOOK_ENV: webhook_url}  # worker 0 only
    where = f"unix:{uds}" if uds is not None else f"http://{host}:{sock.getsockname()[1]}"
    err.print(Text(f"interlock: serving {where}/v1 with {workers} worker processes"))
    try:
        return Supervisor(sock, argvs, envs).run()
    finally:
        if uds is not None and uds.is_socket():
            uds.unlink(missing_ok=True)
        err.print(Text("interlock: every worker stopped"))


def _warn_of_look_alike_names(store: SqlStore | None) -> None:
    """Say at startup which key names are one identity written differently: their
    keys cannot decide each other's approvals, and the names should be one."""
    if store is None:
        return
    for collision in KeyStore(store, cache_ttl=0).collisions():
        err.print(
            Text(
                f"interlock: WARNING: look-alike key names, {collision.describe()}; "
                "they cannot decide each other's approvals (see `interlock keys check`)"
            )
        )


def require_sidecar_match(path: Path) -> None:
    """A policy with a digest sidecar (``<file>.sha256``) must match it at startup, as
    on a reload: else the command stops (exit 2) naming the file — for ``interlock
    serve``, ``mcp-gateway`` and ``llm-proxy`` alike."""
    try:
        problem = sidecar_problem(path, path.read_bytes())
    except OSError as exc:
        problem = f"{path}: cannot read the policy file: {exc}"
    if problem is not None:
        raise fail(problem)


def reporting_watcher(
    guard: Guard,
    path: Path,
    reload_interval: float,
    *,
    held: Callable[[HeldReload], str],
    **options: Any,
) -> PolicyWatcher:
    """The policy watcher of a serving command (``serve``, ``llm-proxy``), telling
    stderr of each reload, each refused one and each held one (``held`` words what
    the operator can do about it). ``options`` go to :class:`PolicyWatcher`."""
    return PolicyWatcher(
        guard,
        path,
        interval=reload_interval or 3600.0,
        on_reload=lambda p: err.print(
            Text(f"interlock: policy {path} reloaded ({len(p.rules)} rules)")
        ),
        on_error=lambda m: err.print(
            Text(f"interlock: policy NOT reloaded, still serving the last good one: {m}")
        ),
        on_held=lambda h: err.print(
            Text(f"interlock: policy {path} reload HELD ({held(h)}): {h.reason}")
        ),
        **options,
    )


class _Terminated(Exception):
    """SIGTERM arrived: leave the server loop and close the guard."""


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the server cleanly with exit 0. (The server re-raises the signal
    after its graceful shutdown; met by the default action the process would die
    before the guard flushed its audit writer and closed its store.)"""

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    except _Terminated:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
