"""Where signed checkpoint lines go: a file (appended to), stdout or stderr (for a log
shipper), the ``interlock.audit.checkpoints`` logger, or an HTTP URL (POSTed as
``application/x-ndjson``, one request per round).

A sink's ``write`` raises when the lines did not get there; the checkpointer keeps
them and sends them again with the next round.

Example::

    from interlock.store.checkpoint_sinks import open_sink

    sink = open_sink("/var/log/interlock/checkpoints.jsonl")
    sink.write(['{"type": "interlock.audit.checkpoint", ...}'])
    sink.close()
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol

__all__ = ["CheckpointSink", "FileSink", "HttpSink", "LogSink", "StreamSink", "open_sink"]

LOGGER: Final = "interlock.audit.checkpoints"
HTTP_TIMEOUT: Final = 5.0


class CheckpointSink(Protocol):
    """One destination of checkpoint lines."""

    name: str

    def write(self, lines: Sequence[str]) -> None:
        """Deliver the lines (JSON, no newline), or raise."""

    def close(self) -> None: ...


class FileSink:
    """Appends to a JSON-lines file: each round in one ``write`` on a file opened with
    ``O_APPEND``, so that several processes appending to one file never interleave
    within a line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        self._fd: int | None = None
        self._lock = threading.Lock()

    def write(self, lines: Sequence[str]) -> None:
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        with self._lock:
            if self._fd is None:
                if not self.path.parent.exists():
                    self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class StreamSink:
    """Writes to ``sys.stdout`` or ``sys.stderr`` (looked up at each write, so a
    redirected stream is followed)."""

    def __init__(self, which: str) -> None:
        self.name = which
        self._which = which

    def write(self, lines: Sequence[str]) -> None:
        stream = sys.stdout if self._which == "stdout" else sys.stderr
        stream.write("".join(line + "\n" for line in lines))
        stream.flush()

    def close(self) -> None:
        pass


class LogSink:
    """One INFO record per line on the ``interlock.audit.checkpoints`` logger."""

    name = "log"

    def write(self, lines: Sequence[str]) -> None:
        logger = logging.getLogger(LOGGER)
        for line in lines:
            logger.info("%s", line)

    def close(self) -> None:
        pass


class HttpSink:
    """POSTs each round's lines to a URL; any status but 2xx is a failure."""

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT) -> None:
        self.url = url
        self.name = url
        self.timeout = timeout

    def write(self, lines: Sequence[str]) -> None:
        body = "".join(line + "\n" for line in lines).encode("utf-8")
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/x-ndjson"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if not 200 <= response.status < 300:
                raise urllib.error.HTTPError(
                    self.url, response.status, response.reason, response.headers, None
                )

    def close(self) -> None:
        pass


def open_sink(destination: str) -> CheckpointSink:
    """The sink a destination names: ``stdout``, ``stderr``, ``log``, an ``http://``
    or ``https://`` URL, or else a file path."""
    if destination in ("stdout", "stderr"):
        return StreamSink(destination)
    if destination == "log":
        return LogSink()
    if destination.startswith(("http://", "https://")):
        return HttpSink(destination)
    return FileSink(Path(destination))
