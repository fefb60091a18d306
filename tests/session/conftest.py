"""The fingerprint tests (``test_fingerprints*.py``) run twice: on the C accelerator
(``interlock.session._speedups``; skipped where it is not built) and on the pure-Python
reference, which must find the same flows (docs/adr/0031-a-c-accelerator-for-fingerprints.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interlock.session import fingerprints

PATHS = ("c", "python")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rpartition(".")[2].startswith("test_fingerprints"):
        metafunc.parametrize("fingerprint_path", PATHS, indirect=True, scope="module")


@pytest.fixture(autouse=True, scope="module")
def fingerprint_path(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The path a fingerprint test runs on (None: the module's own choice, untouched)."""
    path: str | None = getattr(request, "param", None)
    if path is None:
        yield None
        return
    was = fingerprints.ACCELERATED
    if fingerprints._accelerate(path == "c") != (path == "c"):
        fingerprints._accelerate(was)
        pytest.skip("the C accelerator is not built (the Python path is a legitimate install)")
    try:
        yield path
    finally:
        fingerprints._accelerate(was)
