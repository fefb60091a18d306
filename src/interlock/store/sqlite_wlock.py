"""The queue for one SQLite database's write lock, in front of SQLite's own.

A writer that finds SQLite's write lock taken waits in SQLite's busy handler, which
sleeps 1, 2, 5, 10 … 100 ms between tries — far longer than a commit takes (tens of
µs), so writers in two processes spend most of their time asleep. Before ``BEGIN
IMMEDIATE`` each Interlock writer therefore takes, in turn, an in-process lock (the
threads of one process queue there and are woken at once) and an advisory lock on a
sidecar file, ``<db>-wlock`` (``fcntl.flock``), polled with sleeps growing from 50 µs
to 1 ms; both are let go right after ``COMMIT`` or the rollback. SQLite's busy timeout
stays as the backstop for writers that do not take the sidecar (an older Interlock,
the ``sqlite3`` shell). Where ``fcntl`` is missing (Windows), or the sidecar cannot be
opened, only the in-process lock is taken and SQLite's busy handler does the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Final

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["WriteLock"]

log = logging.getLogger("interlock.store")

#: the first and the longest sleep between two tries of a held sidecar lock (seconds)
_FIRST_SLEEP: Final = 50e-6
_MAX_SLEEP: Final = 1e-3


def sidecar_path(db: Path) -> Path:
    """The file whose advisory lock queues the writers of the database ``db``."""
    return db.with_name(db.name + "-wlock")


class WriteLock:
    """Who may ``BEGIN IMMEDIATE`` next on one database, across threads and processes.

    Example::

        lock = WriteLock(Path("/tmp/x.db"))
        if lock.acquire(timeout=2.0):
            try:
                ...  # BEGIN IMMEDIATE … COMMIT
            finally:
                lock.release()
    """

    __slots__ = ("_closed", "_fd", "_owner", "_path", "_pid", "_threads")

    def __init__(self, db: Path) -> None:
        self._path = sidecar_path(db)
        self._threads = threading.Lock()
        self._fd: int | None = None
        self._pid = os.getpid()
        self._closed = False
        self._owner: int | None = None  # the thread holding it
        self._fd = self._open()

    def _open(self) -> int | None:
        if fcntl is None:
            return None
        try:
            return os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # a read-only directory: SQLite's busy handler alone
            log.debug("interlock: no write-lock sidecar %s: %s", self._path, exc)
            return None

    def _forked(self) -> None:
        # A child must not share its parent's open file description (nor its lock, if
        # the parent held it at the fork): a lock and a descriptor of its own.
        self._pid = os.getpid()
        self._threads = threading.Lock()
        self._fd = None if self._closed else self._open()

    def held_here(self) -> bool:
        """Whether the calling thread holds the lock (it is not re-entrant)."""
        return self._owner == threading.get_ident()

    def acquire(self, timeout: float) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds: False if it did not come."""
        if self._pid != os.getpid():
            self._forked()
        deadline = time.monotonic() + timeout
        if not self._threads.acquire(timeout=max(0.0, timeout)):
            return False
        if self._take_sidecar(deadline):
            self._owner = threading.get_ident()
            return True
        self._threads.release()
        return False

    def _take_sidecar(self, deadline: float) -> bool:
        fd = self._fd
        if fd is None:
            return True
        sleep = _FIRST_SLEEP
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except OSError as exc:  # not a contention: do without the sidecar
                log.debug("interlock: write-lock sidecar %s: %s", self._path, exc)
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(sleep, remaining))
            sleep = min(sleep * 2, _MAX_SLEEP)

    def try_acquire(self) -> bool:
        """Take the lock only if no one holds it."""
        return self.acquire(0.0)

    def release(self) -> None:
        """Let the next writer in (the caller holds the lock)."""
        self._owner = None
        fd = self._fd
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                except OSError as exc:  # the descriptor's close releases it anyway
                    log.debug("interlock: write-lock sidecar %s: %s", self._path, exc)
                if self._closed:
                    self._fd = None
                    os.close(fd)
        finally:
            self._threads.release()

    def close(self) -> None:
        """Close the sidecar; a writer inside its transaction closes it on release."""
        self._closed = True
        if self._threads.acquire(timeout=1.0):
            try:
                fd, self._fd = self._fd, None
                if fd is not None:
                    os.close(fd)
            finally:
                self._threads.release()
