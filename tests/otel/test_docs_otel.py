"""docs/otel.md's examples run (here too, beside tests/test_docs.py, so this directory
covers the page whenever the SDK is installed)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")


def test_the_otel_page_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_docs import ROOT, run_python_examples

    run_python_examples(ROOT / "docs" / "otel.md", tmp_path, monkeypatch)
