"""Reloading a policy file into a running guard: on change, or on SIGHUP.

A policy that does not load never replaces the one serving: the error (file, line,
rule, field) is logged and kept in :attr:`PolicyWatcher.last_error`, and the guard goes
on deciding by the last good policy. A file is reloaded only when its bytes change, so
saving it unchanged, touching it, or a bad version sitting there is not reported again
on every poll.

Example::

    guard = Guard.from_file("interlock.yaml", store="sqlite:///.interlock/interlock.db")
    watcher = PolicyWatcher(guard, "interlock.yaml").start()   # polls every second
    watcher.install_sighup()                                   # `kill -HUP <pid>` reloads now
    ...
    watcher.stop()

Polling the file's status rather than subscribing to file-system events works the same
on every platform and through the symlink swaps that configuration mounts use; one
``stat`` a second costs nothing measurable.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

from interlock.errors import PolicyError
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.loader import load_policy_text

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = ["PolicyWatcher", "ReloadStatus"]

log = logging.getLogger("interlock")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """What the watcher last did: the digest serving, and the last failure if any."""

    serving_sha256: str | None
    loaded_at: float | None
    reloads: int
    failures: int
    last_error: str | None


class PolicyWatcher:
    """Keeps ``guard`` on the current contents of the policy file at ``path``.

    ``interval`` is the polling period in seconds. ``on_reload(policy)`` and
    ``on_error(message)`` are told about each outcome (a raising callback is logged,
    never propagated).
    """

    def __init__(
        self,
        guard: Guard,
        path: str | os.PathLike[str],
        *,
        interval: float = 1.0,
        on_reload: Callable[[CompiledPolicy], object] | None = None,
        on_error: Callable[[str], object] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        self.guard = guard
        self.path = Path(path)
        self.interval = interval
        self.on_reload = on_reload
        self.on_error = on_error
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stat: tuple[int, int, int] | None = None
        self._seen_sha256: str | None = None
        self._serving_sha256: str | None = None
        self._loaded_at: float | None = None
        self._reloads = 0
        self._failures = 0
        self._last_error: str | None = None
        self._remember_current()

    # -- status ----------------------------------------------------------------------

    @property
    def status(self) -> ReloadStatus:
        with self._lock:
            return ReloadStatus(
                self._serving_sha256,
                self._loaded_at,
                self._reloads,
                self._failures,
                self._last_error,
            )

    @property
    def last_error(self) -> str | None:
        """The message of the last failed load, cleared by the next good one."""
        return self.status.last_error

    # -- reloading ---------------------------------------------------------------------

    def reload(self, *, force: bool = False) -> bool:
        """Load the file now if its bytes changed (or ``force``). True when the guard
        now decides by a new policy; False when nothing changed or the load failed."""
        with self._lock:
            return self._reload(force=force)

    def _reload(self, *, force: bool) -> bool:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            return self._failed(f"{self.path}: cannot read the policy file: {exc}", None)
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._seen_sha256 and not force:
            return False
        self._seen_sha256 = digest
        try:
            policy = load_policy_text(data.decode("utf-8"), file=str(self.path))
        except PolicyError as exc:
            return self._failed(str(exc), digest)
        except UnicodeDecodeError as exc:
            return self._failed(f"{self.path}: the policy file is not UTF-8: {exc}", digest)
        try:
            self.guard.replace_policy(policy)
        except Exception as exc:  # a guard that cannot take it keeps what it has
            return self._failed(f"{self.path}: the guard refused the policy: {exc}", digest)
        self._serving_sha256 = digest
        self._loaded_at = time.time()
        self._reloads += 1
        self._last_error = None
        log.info(
            "interlock: policy %s reloaded (%d rules, sha256 %s)",
            self.path,
            len(policy.rules),
            digest[:12],
        )
        self._tell(self.on_reload, policy)
        return True

    def _failed(self, message: str, digest: str | None) -> bool:
        self._failures += 1
        self._last_error = message
        log.error(
            "interlock: policy %s NOT reloaded; still serving sha256 %s: %s",
            self.path,
            (self._serving_sha256 or "?")[:12],
            message,
        )
        self._tell(self.on_error, message)
        return False

    def _tell(self, callback: Callable[[T], object] | None, value: T) -> None:
        if callback is None:
            return
        try:
            callback(value)
        except Exception:
            log.exception("interlock: a policy reload callback raised")

    def _remember_current(self) -> None:
        """Take the file as it is now as the one serving (the guard was built from
        it), so the first poll does not reload it again."""
        try:
            data = self.path.read_bytes()
            self._stat = self._stat_of()
        except OSError:
            return
        self._seen_sha256 = self._serving_sha256 = hashlib.sha256(data).hexdigest()

    def _stat_of(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)  # follows symlinks: a swapped target is a change
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino)

    # -- the polling thread and SIGHUP -----------------------------------------------

    def start(self) -> PolicyWatcher:
        """Poll in a daemon thread; returns ``self``."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="interlock-policy-watcher", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def request_reload(self) -> None:
        """Ask the polling thread to reload now (safe from a signal handler)."""
        self._wake.set()

    def install_sighup(self) -> None:
        """Reload on SIGHUP (call from the main thread). Without a running polling
        thread, the reload happens in the handler itself."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._thread is not None:
                self.request_reload()
            else:
                self.reload(force=True)

        signal.signal(signal.SIGHUP, handler)

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            stat = self._stat_of()
            if not woken and stat == self._stat:
                continue
            self._stat = stat
            try:
                self.reload(force=woken)
            except Exception:  # never let the thread die: the next poll tries again
                log.exception("interlock: policy reload failed unexpectedly")
