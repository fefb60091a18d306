"""Cutting a database connection whose deadline passed.

A hung database server (stopped, partitioned, swapping) keeps its sockets open and
answers nothing: a client blocked in ``recv`` waits for ever, and no server-side timeout
can fire. :class:`Watchdog` is the client-side bound: a connection is *watched* for
the length of a transaction, and if the deadline passes first, one shared thread shuts
its socket down. The blocked call then fails at once ("server closed the connection")
and the connection is discarded.

One thread serves every watch of the process; arming and disarming a watch is a heap
push and a flag under a lock (a few µs), so every transaction can afford one.

Example::

    watch = WATCHDOG.watch(deadline, cut)   # cut() runs at the deadline unless...
    try:
        run_the_transaction()
    finally:
        fired = not watch.disarm()           # ...disarmed first
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["WATCHDOG", "Watch", "Watchdog", "socket_cutter"]

log = logging.getLogger("interlock.store")


class Watch:
    """One armed deadline. :meth:`disarm` returns False when it already fired."""

    __slots__ = ("_cut", "_dog", "fired", "when")

    def __init__(self, dog: Watchdog, when: float, cut: Callable[[], object]) -> None:
        self._dog = dog
        self._cut: Callable[[], object] | None = cut
        self.when = when
        self.fired = False

    def disarm(self) -> bool:
        """Stop the watch; True if it had not fired (its action never ran)."""
        return self._dog._disarm(self)


class Watchdog:
    """Runs each watch's action at its deadline unless it was disarmed first. The
    action runs under the watchdog's lock, so once :meth:`Watch.disarm` returns, it is
    either done or will never run (a connection can then be closed safely)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, when: float, cut: Callable[[], object]) -> Watch:
        """Arm a watch: ``cut()`` runs at ``when`` (a ``time.monotonic()`` instant)."""
        armed = Watch(self, when, cut)
        with self._lock:
            heapq.heappush(self._heap, (when, next(self._order), armed))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="interlock-store-watchdog", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is armed:  # the earliest now: the thread sleeps too long
                self._wake.notify()
        return armed

    def _disarm(self, armed: Watch) -> bool:
        with self._lock:
            if armed.fired:
                return False
            armed._cut = None  # left in the heap; dropped when its time comes
            return True

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, due = heapq.heappop(self._heap)
                    cut = due._cut
                    if cut is None:  # disarmed
                        continue
                    due._cut = None
                    due.fired = True
                    try:
                        cut()
                    except Exception:  # a cut that fails must not stop the others
                        log.exception("interlock: could not cut a connection at its deadline")
                if self._heap:
                    self._wake.wait(self._heap[0][0] - now)
                else:
                    self._wake.wait()


#: The process's watchdog (one thread, started on first use).
WATCHDOG = Watchdog()


def socket_cutter(fd: int) -> tuple[Callable[[], object], Callable[[], None]]:
    """An action that shuts down the socket behind ``fd`` — both directions, so a
    thread blocked reading it wakes with end-of-file — and a ``release`` to call once
    the watch is disarmed. The socket is reached through a duplicate descriptor taken
    now: whatever happens to ``fd`` meanwhile, the cut can only hit this socket."""
    own = os.dup(fd)

    def cut() -> None:
        sock = socket.socket(fileno=os.dup(own))  # closing it closes only that duplicate
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer
        finally:
            sock.close()

    def release() -> None:
        os.close(own)

    return cut, release
