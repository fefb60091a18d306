"""An upstream MCP server the gateway talks to (:class:`Upstream`): here, a process
spawned with private pipes (stdio), newline-delimited JSON-RPC both ways; its stderr
is the gateway's. The streamable-HTTP one is
:class:`~interlock.gateways.mcp.http_upstream.HttpUpstream`.

:meth:`StdioUpstream.lines` yields what the server writes, line by line (a line over
the limit is dropped and logged); :meth:`send` writes one line; :meth:`stop` closes
its input and waits for it to exit, terminating it after ``grace`` seconds and
killing it after as long again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

__all__ = ["StdioUpstream", "Upstream", "exit_code"]

log = logging.getLogger("interlock.gateways.mcp")


def exit_code(returncode: int) -> int:
    """A process's exit code as a shell reports it: 128 + N for signal N."""
    return returncode if returncode >= 0 else 128 - returncode


class Upstream(Protocol):
    """What a gateway session needs of an upstream, whatever carries its messages:
    one JSON-RPC message per line both ways."""

    name: str | None

    async def start(self) -> None:
        """Connect (an ``OSError`` when it cannot be reached or started)."""

    def lines(self) -> AsyncIterator[bytes]:
        """What the server sends, one message per line, until it is gone."""

    async def send(self, line: bytes) -> bool:
        """Send one message; False when the server is gone."""

    async def stop(self) -> int:
        """Disconnect, let it finish, then insist; its exit code (0: a clean end)."""

    async def wait(self) -> int:
        """Until it is gone; its exit code."""


class StdioUpstream:
    """One spawned server. ``name`` is what the gateway calls it (``None`` for the
    single unnamed upstream)."""

    def __init__(
        self,
        name: str | None,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        max_message_bytes: int,
        grace: float,
    ) -> None:
        if not command:
            raise ValueError("the upstream command is empty")
        self.name = name
        self.command = list(command)
        self.env = dict(env)
        self._limit = max_message_bytes
        self._grace = grace
        self._process: asyncio.subprocess.Process | None = None

    @property
    def label(self) -> str:
        return f"upstream {self.name!r}" if self.name is not None else "the upstream"

    async def start(self) -> None:
        """Spawn it (an ``OSError`` when the command cannot be started)."""
        self._process = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=self.env,
            limit=self._limit,
        )

    async def lines(self) -> AsyncIterator[bytes]:
        process = self._process
        assert process is not None and process.stdout is not None, "start() first"
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError:  # over the limit: asyncio has dropped the line's bytes
                log.warning("interlock mcp-gateway: dropped a message over the limit from %s", self)
                continue
            if not line:
                return
            yield line

    async def send(self, line: bytes) -> bool:
        """Write one line; False when the server's input is closed."""
        process = self._process
        assert process is not None and process.stdin is not None, "start() first"
        try:
            process.stdin.write(line)
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            log.warning("interlock mcp-gateway: the input of %s closed", self)
            return False
        return True

    async def stop(self) -> int:
        """Close its input, let it exit on its own, then insist. Its exit code."""
        process = self._process
        assert process is not None, "start() first"
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        for stop in (process.terminate, process.kill):
            try:
                await asyncio.wait_for(process.wait(), self._grace)
                break
            except TimeoutError:
                log.warning("interlock mcp-gateway: %s did not exit; stopping it", self)
                with contextlib.suppress(ProcessLookupError):
                    stop()
        return exit_code(await process.wait())

    async def wait(self) -> int:
        process = self._process
        assert process is not None, "start() first"
        return exit_code(await process.wait())

    def __str__(self) -> str:
        return self.label
