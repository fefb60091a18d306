"""The ``interlock audit`` commands about the log's integrity: verifying it, and its
keys (shown by id, never by secret).

    interlock audit verify                           # the chains, and the checkpoint file
    interlock audit verify --checkpoints shipped.jsonl --public-key ed25519:...
    interlock audit verify --require-keyed           # any unkeyed record is a break
    interlock audit seal                             # vouch for records older than the key
    interlock audit key                              # where the HMAC key is, and its id
    interlock audit key --rotate                     # a new key; older ones kept to verify
    interlock audit checkpoint-key                   # the public key to pin off-host

``verify`` checks the checkpoint file the store writes by default (a SQLite store's
``<database>.checkpoints.jsonl``, or a file named by ``INTERLOCK_CHECKPOINTS``) when it
exists, trusting the store's own signing key unless ``--public-key`` pins one. Exit
codes: 0 intact; 1 a finding (a broken chain, a checkpoint problem, a key that does
not exist yet); 2 a usage error or a store or key that cannot be used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from interlock.cli_console import EXIT_FAILED, err, fail, out
from interlock.cli_store import DatabaseOption, TenantOption, _count, _opened, audit_app
from interlock.errors import AuditKeyError, StoreError, message_of
from interlock.store import SqlStore, VerifyReport, open_store
from interlock.store.audit_keys import (
    AuditKey,
    AuditKeyring,
    create_key_file,
    read_key_file,
    rotate_key_file,
)
from interlock.store.checkpoints import (
    CheckpointLog,
    PublicKey,
    create_signing_key,
    load_public_key,
    load_signing_key,
    read_checkpoints,
    settings_for,
)
from interlock.store.url import default_database_url

__all__ = ["audit_app"]

CheckpointsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--checkpoints",
        help="Check the chains against the signed checkpoints in this file (repeat for "
        "copies: a shipped copy shows lines removed from the local file). Default: the "
        "store's own checkpoint file, if there is one.",
        show_default=False,
    ),
]
PublicKeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--public-key",
        help="Trust checkpoints signed by this key: ed25519:... or a file holding it "
        "(repeatable). Default: the store's own signing key.",
        show_default=False,
    ),
]
KeyFileOption = Annotated[
    Path | None,
    typer.Option("--key-file", help="This key file instead of the store's.", show_default=False),
]
CreateOption = Annotated[bool, typer.Option("--create", help="Create the key if it is missing.")]


# -- verify ---------------------------------------------------------------------------


@audit_app.command("verify")
def audit_verify(
    database: DatabaseOption = None,
    tenant: TenantOption = None,
    checkpoints: CheckpointsOption = None,
    public_key: PublicKeyOption = None,
    no_checkpoints: Annotated[
        bool, typer.Option("--no-checkpoints", help="Check the chains alone.")
    ] = False,
    require_keyed: Annotated[
        bool,
        typer.Option("--require-keyed", help="Any unkeyed (plain SHA-256) record is a break."),
    ] = False,
) -> None:
    """Walk every tenant's hash chain, and check it against the signed checkpoints;
    exit 1 naming the first broken link of each chain and each checkpoint problem."""
    with _opened(database) as store:
        files = [] if no_checkpoints else _checkpoint_files(store, checkpoints)
        log: CheckpointLog | None = None
        trusted: list[PublicKey] = []
        if files:
            trusted = _trusted_keys(store, public_key)
            log = read_checkpoints(files, trusted=trusted)
        try:
            keys = store.audit_keys.for_verifying()
        except AuditKeyError as exc:
            raise fail(message_of(exc)) from None
        report = store.verify_audit(tenant, checkpoints=log, require_keyed=require_keyed)
        source = store.audit_keys.source
    links = _links(keys, source)
    _print_report(report, links, log, trusted, keyed=keys is not None)


def _links(keys: AuditKeyring | None, source: str) -> str:
    if keys is None:
        return "SHA-256 links (no audit key)"
    return f"HMAC-SHA256 links (key id {keys.current.key_id}, {source})"


def _checkpoint_files(store: SqlStore, given: list[Path] | None) -> list[Path]:
    """The files named, or the store's own checkpoint file if it exists."""
    if given:
        for path in given:
            if not path.is_file():
                raise fail(f"--checkpoints {path}: no such file")
        return list(given)
    try:
        settings = settings_for(store)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if settings is None:
        return []
    return [
        Path(dest)
        for dest in settings.destinations
        if dest not in ("stdout", "stderr", "log")
        and not dest.startswith(("http://", "https://"))
        and Path(dest).is_file()
    ]


def _trusted_keys(store: SqlStore, given: list[str] | None) -> list[PublicKey]:
    """The keys given, or the public half of the store's own signing key."""
    if given:
        try:
            return [load_public_key(text) for text in given]
        except ValueError as exc:
            raise fail(f"--public-key: {exc}") from None
    settings = settings_for(store)
    key_file = settings.key_file if settings is not None else None
    if key_file is None or not key_file.exists():
        raise fail(
            "checking checkpoints needs the public key that signed them: --public-key "
            "ed25519:... (`interlock audit checkpoint-key` prints it where the signing key is)"
        )
    try:
        return [PublicKey.of(load_signing_key(key_file).public_key())]
    except AuditKeyError as exc:
        raise fail(message_of(exc)) from None


def _print_report(
    report: VerifyReport,
    links: str,
    log: CheckpointLog | None,
    trusted: list[PublicKey],
    *,
    keyed: bool,
) -> None:
    lines = {}
    for name, count in report.checked.items():
        unkeyed = report.unkeyed.get(name, 0)
        note = ""
        if unkeyed and keyed:
            note = f" ({unkeyed} of them unkeyed, sealed by a keyed record)"
        elif unkeyed:
            note = " (unkeyed: plain SHA-256, which anyone can recompute)"
        lines[name] = f"tenant {name!r}: {_count(count, 'record')}, intact{note}"
    lines.update((broken.tenant, str(broken)) for broken in report.breaks)
    for name in sorted(lines):
        out.print(Text(lines[name]), style=None if name in report.checked else "red")
    for problem in report.checkpoint_problems:
        out.print(Text(f"checkpoints: {problem}"), style="red")
    for note in report.notes:
        out.print(Text(f"note: {note}"))
    tenants = _count(len(lines), "tenant")
    against = ""
    if log is not None:
        signers = ", ".join(key.key_id for key in trusted)
        against = f", against {log.lines} signed checkpoint lines (key {signers})"
    if not report.ok:
        if report.breaks:
            out.print(
                Text(f"chain BROKEN in {len(report.breaks)} of {tenants}, checked as {links}")
            )
        if report.checkpoint_problems:
            out.print(
                Text(f"checkpoints BROKEN: {_count(len(report.checkpoint_problems), 'problem')}")
            )
        if report.breaks and all(
            "which this verifier does not have" in b.problem for b in report.breaks
        ):
            out.print(
                Text(
                    "no chain could be verified: was the log written with another audit key? "
                    "Point INTERLOCK_AUDIT_KEY_FILE (or INTERLOCK_AUDIT_KEY) at the one it "
                    "was written with"
                )
            )
        raise typer.Exit(EXIT_FAILED)
    if not lines:
        out.print(Text("no audit records yet" + against))
        return
    records = _count(sum(report.checked.values()), "record")
    out.print(Text(f"chain intact: {records} in {tenants}, {links}{against}"))


@audit_app.command("seal")
def audit_seal(database: DatabaseOption = None) -> None:
    """Vouch for the unkeyed records of a log that has just been given a key: append
    a keyed record to every chain that ends unkeyed. Verify the log first (without
    the key): a verifier with the key trusts what this seals."""
    with _opened(database) as store:
        try:
            if store.audit_keys.for_writing() is None:
                raise fail(
                    f"the audit log of {store.url} has no key ({store.audit_keys.source}): "
                    "give it one first (INTERLOCK_AUDIT_KEY_FILE)"
                )
            sealed = store.seal_unkeyed_chains()
        except AuditKeyError as exc:
            raise fail(message_of(exc)) from None
    if not sealed:
        out.print(Text("no chain ends unkeyed: nothing to seal"))
        return
    out.print(Text(f"sealed {_count(len(sealed), 'chain')}: {', '.join(map(repr, sealed))}"))


# -- keys -----------------------------------------------------------------------------


@audit_app.command("key")
def audit_key(
    database: DatabaseOption = None,
    key_file: KeyFileOption = None,
    create: CreateOption = False,
    rotate: Annotated[
        bool,
        typer.Option(
            "--rotate",
            help="Put a new key first; older keys stay to verify older records. Processes "
            "write with it once restarted.",
        ),
    ] = False,
) -> None:
    """Show where the audit log's HMAC key is and its id (never the key itself);
    create it, or rotate it."""
    path = key_file if key_file is not None else _store_key_file(database)
    try:
        if rotate:
            new_id = rotate_key_file(path)
            older = len(read_key_file(path)) - 1
            out.print(
                Text(
                    f"{path}: new key id {new_id}; {_count(older, 'older key')} kept to verify "
                    "older records. Restart the processes that write the log to use it."
                )
            )
            return
        if create and create_key_file(path):
            err.print(Text(f"created {path}"))
        if not path.exists():
            raise fail(
                f"no audit key at {path} yet: a SQLite store creates it on its first write; "
                "create it now with --create",
                code=EXIT_FAILED,
            )
        keys = [AuditKey(secret) for secret in read_key_file(path)]
    except AuditKeyError as exc:
        raise fail(message_of(exc)) from None
    out.print(Text(f"key id {keys[0].key_id} ({path})"))
    for kept in keys[1:]:
        out.print(Text(f"older key id {kept.key_id}, kept to verify older records"))


def _store_key_file(database: str | None) -> Path:
    """The key file the store's audit key comes from; exit 2 if it is not a file."""
    try:
        store = open_store(database or default_database_url(), migrate=False)
    except (StoreError, ImportError) as exc:
        raise fail(message_of(exc)) from None
    try:
        keys = store.audit_keys
        if keys.file is None:
            raise fail(
                f"the audit key of {store.url} is not in a file (it is {keys.source}): "
                "give --key-file, or manage the key where it comes from"
            )
        return keys.file
    finally:
        store.close()


@audit_app.command("checkpoint-key")
def audit_checkpoint_key(
    database: DatabaseOption = None,
    key_file: KeyFileOption = None,
    create: CreateOption = False,
) -> None:
    """Print the public key that verifies the store's checkpoints — pin it where the
    checkpoints are checked (``audit verify --public-key``)."""
    path = key_file if key_file is not None else _store_signing_key_file(database)
    try:
        if create and create_signing_key(path):
            err.print(Text(f"created {path}"))
        if not path.exists():
            raise fail(
                f"no checkpoint signing key at {path} yet: the first audit writer creates "
                "it (SQLite), or create it now with --create",
                code=EXIT_FAILED,
            )
        public = PublicKey.of(load_signing_key(path).public_key())
    except AuditKeyError as exc:
        raise fail(message_of(exc)) from None
    out.print(Text(public.text))
    err.print(Text(f"key id {public.key_id} ({path})"))


def _store_signing_key_file(database: str | None) -> Path:
    try:
        store = open_store(database or default_database_url(), migrate=False)
    except (StoreError, ImportError) as exc:
        raise fail(message_of(exc)) from None
    try:
        settings = settings_for(store)
    except ValueError as exc:
        raise fail(str(exc)) from None
    finally:
        store.close()
    if settings is None or settings.key_file is None:
        raise fail(
            "no checkpoint signing key is set up for this store: give --key-file, or set "
            "INTERLOCK_CHECKPOINT_KEY_FILE"
        )
    return settings.key_file


# `audit replay` lives in its own module; importing it registers the command.
import interlock.cli_replay  # noqa: E402, F401
