"""A record's redaction walk on one of its two paths, for the tests that compare them:
the Python reference (``Redactor._plain``) and the C fast path (ADR 0036)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from interlock.core import redaction


@contextmanager
def on_path(accelerated: bool) -> Iterator[None]:
    """Run the block on one path (``True``: the C walk), then put it back."""
    was = redaction.ACCELERATED
    assert redaction._accelerate(accelerated) is accelerated
    try:
        yield
    finally:
        redaction._accelerate(was)
