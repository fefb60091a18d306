"""The fingerprints' two paths, for the tests that compare them: the pure-Python
reference and the C accelerator (ADR 0031)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from interlock.session import fingerprints

T = TypeVar("T")


@contextmanager
def path(accelerated: bool) -> Iterator[None]:
    """Run the block on one path (``True``: the C accelerator), then put it back."""
    was = fingerprints.ACCELERATED
    assert fingerprints._accelerate(accelerated) is accelerated
    try:
        yield
    finally:
        fingerprints._accelerate(was)


def both(fn: Callable[..., T], *args: Any) -> tuple[T, T]:
    """``fn(*args)`` on the pure-Python path, then on the C path."""
    with path(False):
        python = fn(*args)
    with path(True):
        c = fn(*args)
    return python, c
