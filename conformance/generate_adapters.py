"""Writes the adapter conformance fixtures, conformance/adapters/*.json, from the verdict
table every Python adapter is driven through (tests/adapters/conformance.py).

The TypeScript client's tests (clients/typescript) start ``interlock serve`` on the
fixtures' policy and drive each row through the client and every TypeScript adapter: the
same verdict, the body run or not, the same refusal text. A row is exported when a
server and a client can express it: the policy decides it, or the client's side does
(a mapper, an observer, a timeout against a slow server). The store-gone row is not:
over HTTP it is the server unreachable, which the TypeScript tests cover as their own
fail-closed rows.

Each row carries ``message``, the exact refusal text Python raises for it (computed
here, by running the row through a Python guard), unless the text names a Python
exception (the mapper rows), where ``says`` (a fragment) is what must match.

Deterministic: running it again writes the same bytes (tests/adapters/test_ts_fixtures.py
checks that the files in the repository are what this script writes). Run it after
changing the table:

    python conformance/generate_adapters.py
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from interlock import Action, Blocked
from interlock.core.refusal import raise_for

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "adapters"


def table() -> ModuleType:
    """tests/adapters/conformance.py (it imports ``support`` from tests/)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    spec = importlib.util.spec_from_file_location(
        "interlock_adapter_conformance", ROOT / "tests" / "adapters" / "conformance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def drive(row: Any) -> dict[str, Any] | None:
    """How a client expresses ``row``; None when it cannot."""
    if row.store_gone:
        return None
    if row.mapper is not None:
        return {"kind": "mapper", "mapper": row.mapper.__name__.strip("_")}
    options = row.guard_options
    if "decider" in options:
        return {
            "kind": "slow_server",
            "delay_ms": round(options["decider"].seconds * 1000),
            "timeout_ms": round(options["timeout"] * 1000),
        }
    observers = sorted(name for name in ("on_decision", "on_blocked") if name in options)
    if observers:
        return {"kind": "throwing_observers", "observers": observers}
    if options:
        return None
    return {"kind": "server"}


def message(module: ModuleType, row: Any) -> str | None:
    """The refusal Python raises for ``row`` (None for allow and for the mapper rows)."""
    if row.mapper is not None or row.verdict is None:
        return None
    guard = module.make_guard(row)
    try:
        action = Action.tool(row.tool, row.args)
        decision = guard.check(action)
        assert decision.verdict is row.verdict, (row.behaviour, decision)
        try:
            raise_for(decision, action)
        except Blocked as exc:
            return str(exc)
        return None
    finally:
        guard.close()


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def documents() -> dict[str, dict[str, Any]]:
    module = table()
    rows = []
    for row in module.ROWS:
        how = drive(row)
        if how is None:
            continue
        rows.append(
            {
                "behaviour": row.behaviour,
                "tool": row.tool,
                "args": row.args,
                "verdict": None if row.verdict is None else row.verdict.value,
                "runs": row.runs,
                "says": row.says,
                "message": message(module, row),
                "drive": how,
            }
        )
    return {
        "tool-calls": {
            "about": "The adapter verdict table (tests/adapters/conformance.py ROWS); "
            "written by conformance/generate_adapters.py: do not edit.",
            "policy": module.POLICY_YAML.lstrip("\n"),
            "rows": rows,
        },
        "stateful": {
            "about": "The stateful policy (tests/adapters/conformance.py STATEFUL_POLICY): "
            "budgets on tools and model calls, an approval. Written by "
            "conformance/generate_adapters.py: do not edit.",
            "policy": module.STATEFUL_POLICY.lstrip("\n"),
        },
    }


def main(directory: Path = HERE) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, document in documents().items():
        (directory / f"{name}.json").write_text(render(document), encoding="utf-8")


if __name__ == "__main__":
    main()
