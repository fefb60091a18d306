"""Files that hold secrets: the audit key and the checkpoint signing key.

A key file is readable and writable by its owner only (mode 0600) in a directory
nobody else can write to (else someone could swap the key); one that group or others
can read is refused with an error that says which ``chmod`` fixes it. A new key file
is created whole or not at all: written to a private temporary file, then linked into
place, which fails if another process got there first — both then use the first one.

Example::

    from pathlib import Path
    from interlock.store.keyfiles import create_private_file, read_private_file

    if create_private_file(Path("keys/audit-key"), b"...\\n", what="audit key"):
        print("created")
    secret = read_private_file(Path("keys/audit-key"), what="audit key")
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from interlock.errors import AuditKeyError

__all__ = ["create_private_file", "read_private_file", "replace_private_file"]


def read_private_file(path: Path, *, what: str) -> bytes:
    """The file's bytes, once its permissions are tight. Raises
    :class:`~interlock.errors.AuditKeyError` (or ``FileNotFoundError`` when it does not
    exist)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise AuditKeyError(f"cannot read the {what} {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)  # of the file opened, not of whatever the path names later
        if not stat.S_ISREG(info.st_mode):
            raise AuditKeyError(f"the {what} {path} is not a regular file")
        if info.st_mode & 0o077:
            raise AuditKeyError(
                f"the {what} {path} can be read by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): run `chmod 600 {path}`, and "
                "replace the key if someone else may have read it"
            )
        _check_directory(path.parent, what)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_directory(directory: Path, what: str) -> None:
    """Refuse a directory others may write to (without the sticky bit): they could
    replace the key with their own."""
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise AuditKeyError(f"cannot inspect {directory}, which holds the {what}: {exc}") from exc
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise AuditKeyError(
            f"the directory {directory}, which holds the {what}, can be written by group "
            f"or others (mode {stat.S_IMODE(info.st_mode):04o}), who could replace the key: "
            f"run `chmod go-w {directory}`"
        )


def create_private_file(path: Path, data: bytes, *, what: str) -> bool:
    """Create ``path`` holding ``data`` (mode 0600; its directory, if made, 0700)
    unless it exists. True if this call created it, False if it was there already."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = _write_temporary(path, data)
    except OSError as exc:
        raise AuditKeyError(f"cannot create the {what} {path}: {exc}") from exc
    try:
        os.link(temporary, path)  # atomic, and fails if the name is taken
    except FileExistsError:
        return False
    except OSError as exc:
        raise AuditKeyError(f"cannot create the {what} {path}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    _sync_directory(path.parent)
    return True


def replace_private_file(path: Path, data: bytes, *, what: str) -> None:
    """Replace ``path`` with ``data`` atomically (mode 0600): a reader sees the old
    file or the new one, never a part."""
    try:
        temporary = _write_temporary(path, data)
        os.replace(temporary, path)
    except OSError as exc:
        raise AuditKeyError(f"cannot write the {what} {path}: {exc}") from exc
    _sync_directory(path.parent)


def _write_temporary(path: Path, data: bytes) -> Path:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    os.close(fd)
    return temporary


def _sync_directory(directory: Path) -> None:
    """Make the new name survive a power loss (best effort: not every system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
