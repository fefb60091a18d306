"""The TypeScript adapter fixtures (conformance/adapters/*.json) are what
conformance/generate_adapters.py writes from the verdict table: a row changed here and
not exported fails this test, so the TypeScript tests always drive the current table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from .conformance import ROWS

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "conformance" / "adapters"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_adapters", ROOT / "conformance" / "generate_adapters.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    _generator().main(tmp_path)
    written = {p.name: p.read_bytes() for p in sorted(tmp_path.glob("*.json"))}
    checked_in = {p.name: p.read_bytes() for p in sorted(FIXTURES.glob("*.json"))}
    assert sorted(written) == sorted(checked_in)
    stale = [name for name in written if written[name] != checked_in[name]]
    assert stale == [], "run: python conformance/generate_adapters.py"


def test_every_row_a_server_can_express_is_exported() -> None:
    exported = json.loads((FIXTURES / "tool-calls.json").read_text(encoding="utf-8"))["rows"]
    behaviours = [row["behaviour"] for row in exported]
    assert behaviours == [row.behaviour for row in ROWS if not row.store_gone]
    assert {row["verdict"] for row in exported} == {
        None,
        "allow",
        "deny",
        "require_approval",
        "undetermined",
    }


def test_a_refusal_message_is_exactly_what_python_raises() -> None:
    exported = json.loads((FIXTURES / "tool-calls.json").read_text(encoding="utf-8"))["rows"]
    deny = next(row for row in exported if row["behaviour"] == "deny never runs the body")
    assert deny["message"].startswith("Interlock denied tool 'shell': no recursive deletes")
    assert all(row["message"] is None for row in exported if row["drive"]["kind"] == "mapper")
    assert all(row["says"] in (row["message"] or row["says"]) for row in exported)
