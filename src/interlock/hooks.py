"""Observer hooks, called so that they can never change what happens.

A hook is called inside try/except and never awaited. If it returns an awaitable, the
awaitable runs on its own (on the running event loop, or on a background loop when
the check ran in a thread without one), and a failure is reported to the optional
logger and otherwise swallowed.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from interlock.core.action import Action
    from interlock.core.decision import Decision

__all__ = ["Hook", "HookCaller"]

Hook = Callable[["Decision", "Action | None"], object]


class HookCaller:
    """Calls observer hooks safely. One per guard."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger
        self._pending: set[Any] = set()  # strong refs until done
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    def call(self, hook: Hook, decision: Decision, action: Action | None) -> None:
        try:
            result = hook(decision, action)
        except Exception as exc:
            self._report(hook, exc)
            return
        if inspect.isawaitable(result):
            self._detach(hook, result)

    def _detach(self, hook: Hook, awaitable: Awaitable[Any]) -> None:
        # Imported here, not at import (ADR 0014): a hook that returns an awaitable
        # needs a loop, and a loop that runs has already loaded asyncio.
        import asyncio

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        future: Any
        try:
            if running is not None:
                future = asyncio.ensure_future(awaitable)
            else:
                loop = self._background_loop()
                future = _ThreadFuture(asyncio.run_coroutine_threadsafe(_await(awaitable), loop))
        except Exception as exc:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            self._report(hook, exc)
            return
        self._pending.add(future)
        future.add_done_callback(lambda done: self._finished(hook, done))

    def _finished(self, hook: Hook, future: Any) -> None:
        self._pending.discard(future)
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._report(hook, exc)

    def _report(self, hook: Hook, exc: BaseException) -> None:
        if self._logger is not None:
            name = getattr(hook, "__qualname__", repr(hook))
            # A broken logger must not break the guard either.
            with contextlib.suppress(Exception):
                self._logger.warning(
                    "interlock: observer hook %s failed: %s: %s (the verdict is unchanged)",
                    name,
                    type(exc).__name__,
                    exc,
                )

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        import asyncio

        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="interlock-hooks", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop


class _ThreadFuture:
    """Adapts a concurrent future to the small interface ``_finished`` uses."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self._inner.add_done_callback(lambda _: fn(self))

    def cancelled(self) -> bool:
        return bool(self._inner.cancelled())

    def exception(self) -> BaseException | None:
        result: BaseException | None = self._inner.exception()
        return result

    def __hash__(self) -> int:
        return id(self)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
