"""Reloading a policy file into a running guard: on change, or on SIGHUP — but never a
file half-written, and never, unasked, one that drops most of the rules.

A policy that does not load never replaces the one serving: the error (file, line,
rule, field) is logged and kept in :attr:`PolicyWatcher.last_error`, and the guard goes
on deciding by the last good policy. A file is reloaded only when its bytes change, so
saving it unchanged, touching it, or a bad version sitting there is not reported again
on every poll.

What is read, and when:

- a file **replaced by a rename** (a new inode: ``mv``, ``os.replace``, a config-map
  symlink swap) is taken at once when it parses — else once it has settled, as below;
- a file **changed in place** (``cp``, an editor writing over it) is read once it has
  been unchanged — size, modification time, inode — for ``settle`` seconds (1 by
  default), and only if it did not change while it was read;
- a file with a **digest sidecar** ``<file>.sha256`` (``sha256sum`` output) is taken
  only when its SHA-256 is the sidecar's; a sidecar renamed into place is looked at
  at once.

A file written in place is seen part-written by any reader; a prefix of YAML cut at
a line often parses, and a prefix of a policy is a different policy (the ``deny`` rule
not written yet). So deploy a policy by writing a new file and renaming it over the
old one (atomic), and, to be sure, write its digest beside it.

A reload whose policy would **remove more than** ``max_removed`` **of the serving
policy's rules** (by id; half by default) is **held**: the old policy stays in force,
the log says why, :attr:`PolicyWatcher.status` (and the server's ``/v1/ready``) shows
it, and :meth:`PolicyWatcher.confirm` — the server's ``POST /v1/policy/reload/confirm``
— applies it; so does a restart. A truncated file that still parses is held there.

Example::

    guard = Guard.from_file("interlock.yaml", store="sqlite:///.interlock/interlock.db")
    watcher = PolicyWatcher(guard, "interlock.yaml").start()   # polls every second
    watcher.install_sighup()                                   # `kill -HUP <pid>` looks now
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
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final, TypeVar

from interlock.errors import HeldDigestMismatch, NothingHeld, PolicyError, ReloadNotConfirmed
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.loader import load_policy_text

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = [
    "DEFAULT_MAX_REMOVED",
    "DEFAULT_SETTLE",
    "HeldDigestMismatch",
    "HeldReload",
    "NothingHeld",
    "PolicyWatcher",
    "ReloadNotConfirmed",
    "ReloadStatus",
    "sidecar_problem",
]

log = logging.getLogger("interlock")

T = TypeVar("T")

#: Seconds a file changed in place must stay unchanged before it is read.
DEFAULT_SETTLE: Final = 1.0
#: The share of the serving policy's rules a reload may remove without confirmation.
DEFAULT_MAX_REMOVED: Final = 0.5

_DIGEST = re.compile(r"^([0-9a-fA-F]{64})(?:\s|$)")
_SHOWN_IDS = 20  # rule ids named in the log, at most

# (modification time ns, size, inode) of a file; None when it cannot be seen.
_Stat = tuple[int, int, int] | None


@dataclass(frozen=True, slots=True)
class HeldReload:
    """A reload waiting for confirmation: the file's digest, the rule ids it would
    remove, how many rules serve and how many the file has, and why it is held."""

    sha256: str
    removed: tuple[str, ...]
    serving_rules: int
    new_rules: int
    reason: str
    held_at: float


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """What the watcher last did: the digest serving, the last failure if any, and a
    reload held for confirmation if any."""

    serving_sha256: str | None
    loaded_at: float | None
    reloads: int
    failures: int
    last_error: str | None
    held: HeldReload | None = None


@dataclass(frozen=True, slots=True)
class _State:
    """What a look at the file and its sidecar sees."""

    policy: _Stat
    sidecar: _Stat

    def replaced_since(self, other: _State | None) -> bool:
        """The file on a new inode (renamed into place whole), or a digest sidecar on
        a new one (which only a complete file can match)."""
        if other is None:
            return False
        policy_moved = (
            self.policy is not None
            and other.policy is not None
            and self.policy[2] != other.policy[2]
        )
        sidecar_moved = self.sidecar is not None and (
            other.sidecar is None or self.sidecar[2] != other.sidecar[2]
        )
        return policy_moved or sidecar_moved


@dataclass(frozen=True, slots=True)
class _Held:
    view: HeldReload
    policy: CompiledPolicy


def sidecar_problem(path: Path, data: bytes) -> str | None:
    """Why ``data`` (the bytes of the policy file at ``path``) must not be loaded
    given its digest sidecar ``<path>.sha256``, or ``None`` (no sidecar, or it
    matches). An unreadable or malformed sidecar is a problem: fail closed."""
    return _sidecar_problem(path, data, *_read_sidecar(path))


def _read_sidecar(path: Path) -> tuple[str | None, str | None]:
    """The sidecar's text (``None`` when there is none), or why it cannot be read."""
    sidecar = _sidecar_of(path)
    try:
        return sidecar.read_text(encoding="utf-8", errors="replace"), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{sidecar}: cannot read the digest sidecar: {exc}"


def _sidecar_problem(path: Path, data: bytes, text: str | None, error: str | None) -> str | None:
    if error is not None:
        return error
    if text is None:
        return None
    sidecar = _sidecar_of(path)
    found = _DIGEST.match(text.strip())
    if found is None:
        return f"{sidecar}: not a SHA-256 digest (expected 64 hex digits, as sha256sum writes)"
    actual = hashlib.sha256(data).hexdigest()
    if found.group(1).lower() != actual:
        return (
            f"{path}: the file does not match its digest in {sidecar.name} (file sha256 "
            f"{actual[:12]}, sidecar {found.group(1).lower()[:12]}): not all of it written yet?"
        )
    return None


def _sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stat(path: Path) -> _Stat:
    try:
        info = os.stat(path)  # follows symlinks: a swapped target is a change
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


class PolicyWatcher:
    """Keeps ``guard`` on the current contents of the policy file at ``path``.

    ``interval`` is the polling period in seconds; ``settle`` how long (seconds) a
    file changed in place must stay unchanged before it is read; ``max_removed`` the
    share of the serving rules (0 to 1) a reload may remove before it is held for
    :meth:`confirm`. ``on_reload(policy)``, ``on_error(message)`` and
    ``on_held(held)`` are told about each outcome (a raising callback is logged,
    never propagated). ``monotonic`` is the settle window's clock (tests pass a
    fake one).
    """

    def __init__(
        self,
        guard: Guard,
        path: str | os.PathLike[str],
        *,
        interval: float = 1.0,
        settle: float = DEFAULT_SETTLE,
        max_removed: float = DEFAULT_MAX_REMOVED,
        on_reload: Callable[[CompiledPolicy], object] | None = None,
        on_error: Callable[[str], object] | None = None,
        on_held: Callable[[HeldReload], object] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        if not settle >= 0:
            raise ValueError(f"settle must be ≥ 0 seconds, not {settle!r}")
        if not 0 <= max_removed <= 1:
            raise ValueError(f"max_removed must be a share from 0 to 1, not {max_removed!r}")
        self.guard = guard
        self.path = Path(path)
        self.interval = interval
        self.settle = settle
        self.max_removed = max_removed
        self.on_reload = on_reload
        self.on_error = on_error
        self.on_held = on_held
        self._monotonic = monotonic
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._taken: _State | None = None  # the state last read (or judged unreadable)
        self._changing: tuple[_State, float] | None = None  # a change seen, and since when
        self._seen: tuple[str, str | None] | None = None  # (file digest, sidecar) last judged
        self._serving_sha256: str | None = None
        self._loaded_at: float | None = None
        self._reloads = 0
        self._failures = 0
        self._last_error: str | None = None
        self._held: _Held | None = None
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
                None if self._held is None else self._held.view,
            )

    @property
    def last_error(self) -> str | None:
        """The message of the last failed load, cleared by the next good one."""
        return self.status.last_error

    @property
    def held(self) -> HeldReload | None:
        """The reload waiting for :meth:`confirm`, if one is."""
        return self.status.held

    # -- reloading ---------------------------------------------------------------------

    def poll(self, *, requested: bool = False) -> bool:
        """One look at the file, as the polling thread takes each ``interval``: read it
        if it changed and is complete (see the module's table). ``requested`` (SIGHUP)
        reads an unchanged file again. True when the guard now decides by a new
        policy."""
        with self._lock:
            state = self._state()
            if state == self._taken:
                self._changing = None
                return self._reload(force=True, state=state) if requested else False
            if state.replaced_since(self._taken) and self._reload(
                force=requested, state=state, quiet=True
            ):
                return True
            now = self._monotonic()
            if self._changing is None or self._changing[0] != state:
                self._changing = (state, now)
                if self.settle > 0:
                    return False
            elif now - self._changing[1] < self.settle:
                return False
            self._changing = None
            return self._reload(force=requested, state=state)

    def reload(self, *, force: bool = False) -> bool:
        """Load the file now if its bytes changed (or ``force``), without waiting for
        it to settle. True when the guard now decides by a new policy; False when
        nothing changed, the load failed, or the reload is held."""
        with self._lock:
            return self._reload(force=force, state=self._state())

    def confirm(self, sha256: str) -> bool:
        """Apply the held reload of the file whose digest is ``sha256`` (as
        :attr:`held` shows it). Raises :class:`NothingHeld` when none is held and
        :class:`HeldDigestMismatch` when the held one is another version."""
        with self._lock:
            held = self._held
            if held is None:
                raise NothingHeld(f"no reload of {self.path} is held for confirmation")
            if sha256.lower() != held.view.sha256:
                raise HeldDigestMismatch(
                    f"the held reload of {self.path} is sha256 {held.view.sha256}, "
                    f"not {sha256}: look at it again"
                )
            log.warning(
                "interlock: policy %s reload confirmed (sha256 %s): %s",
                self.path,
                held.view.sha256[:12],
                held.view.reason,
            )
            return self._apply(held.policy, held.view.sha256)

    def _reload(self, *, force: bool, state: _State, quiet: bool = False) -> bool:
        """Read, check and load the file seen in ``state``. ``quiet``: a file that
        cannot be read or does not load may still be being written — leave it to
        settle, and report nothing."""
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            if quiet:
                return False
            self._taken, self._seen = state, None
            return self._failed(f"{self.path}: cannot read the policy file: {exc}", None)
        sidecar, sidecar_error = _read_sidecar(self.path)
        if self._state() != state:  # written to while being read: look again later
            return False
        digest = hashlib.sha256(data).hexdigest()
        seen = (digest, sidecar)
        if seen == self._seen and not force:
            self._taken = state
            return False
        if self._held is not None and self._held.view.sha256 != digest:
            self._held = None  # the file moved on: what was held is not in it any more
        problem = _sidecar_problem(self.path, data, sidecar, sidecar_error)
        policy: CompiledPolicy | None = None
        if problem is None:
            try:
                policy = load_policy_text(data.decode("utf-8"), file=str(self.path))
            except PolicyError as exc:
                problem = str(exc)
            except UnicodeDecodeError as exc:
                problem = f"{self.path}: the policy file is not UTF-8: {exc}"
        if policy is None and quiet:
            return False
        self._taken, self._seen = state, seen
        if policy is None:
            return self._failed(problem or "the policy did not load", digest)
        held = self._hold_if_shrinking(policy, digest)
        if held is not None:
            if self._held is None or self._held.view.sha256 != digest:
                self._held = held
                self._report_held(held.view)
            return False
        return self._apply(policy, digest)

    def _hold_if_shrinking(self, policy: CompiledPolicy, digest: str) -> _Held | None:
        serving = self.guard.policy
        if serving is None or not serving.rules:
            return None
        removed = tuple(sorted(set(serving.rule_ids) - set(policy.rule_ids)))
        share = len(removed) / len(serving.rules)
        if share <= self.max_removed:
            return None
        reason = (
            f"the new policy removes {len(removed)} of {len(serving.rules)} rules "
            f"({share:.0%} > {self.max_removed:.0%}); the old policy stays in force until "
            "the reload is confirmed (POST /v1/policy/reload/confirm) or the server restarts"
        )
        view = HeldReload(
            digest, removed, len(serving.rules), len(policy.rules), reason, time.time()
        )
        return _Held(view, policy)

    def _report_held(self, held: HeldReload) -> None:
        shown = ", ".join(held.removed[:_SHOWN_IDS]) + (
            ", ..." if len(held.removed) > _SHOWN_IDS else ""
        )
        log.warning(
            "interlock: policy %s reload HELD (sha256 %s): %s. Rules it removes: %s",
            self.path,
            held.sha256[:12],
            held.reason,
            shown,
        )
        self._tell(self.on_held, held)

    def _apply(self, policy: CompiledPolicy, digest: str) -> bool:
        try:
            self.guard.replace_policy(policy)
        except Exception as exc:  # a guard that cannot take it keeps what it has
            return self._failed(f"{self.path}: the guard refused the policy: {exc}", digest)
        self._serving_sha256 = digest
        self._loaded_at = time.time()
        self._reloads += 1
        self._last_error = None
        self._held = None
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
        state = self._state()
        try:
            data = self.path.read_bytes()
        except OSError:
            return
        self._taken = state
        digest = hashlib.sha256(data).hexdigest()
        self._seen = (digest, _read_sidecar(self.path)[0])
        self._serving_sha256 = digest

    def _state(self) -> _State:
        return _State(_stat(self.path), _stat(_sidecar_of(self.path)))

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
        """Ask the polling thread to look now (safe from a signal handler)."""
        self._wake.set()

    def install_sighup(self) -> None:
        """Look at the file on SIGHUP (call from the main thread): an unchanged file is
        read again, one changing in place once it settled. Without a running polling
        thread, the reload happens in the handler itself, at once."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._thread is not None:
                self.request_reload()
            else:
                self.reload(force=True)

        signal.signal(signal.SIGHUP, handler)

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self._next_look())
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.poll(requested=woken)
            except Exception:  # never let the thread die: the next poll tries again
                log.exception("interlock: policy reload failed unexpectedly")

    def _next_look(self) -> float:
        """Seconds to the next poll: the interval, or sooner when a change is
        settling (so that ``settle`` bounds the delay, not the interval)."""
        with self._lock:
            changing = self._changing
        if changing is None:
            return self.interval
        due = changing[1] + self.settle - self._monotonic()
        return min(self.interval, max(due, 0.005))
