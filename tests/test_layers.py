"""The package's arrows point one way (DESIGN §3): a module imports only from its own
layer or the layers below it. Read from the source with ``ast``, so every import counts —
module-level, function-local and under ``TYPE_CHECKING`` alike.

The layers, bottom first. A module belongs to the layer of the longest prefix that names
it; a module no prefix names fails the test (new code must be placed, not slip through).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: Bottom first: (layer, module prefixes). An import may point down or sideways, never up.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "interlock.core",
            "interlock.errors",
            "interlock._lazy",
            "interlock._extension",
        ),
    ),
    ("facts", ("interlock.facts",)),
    # Session history, labels and fingerprints: the facts session-aware rules read.
    ("session", ("interlock.session",)),
    # Provider-side verification: a library of its own (tokens, keys, receipts) that the
    # issuing side signs with; it needs only the error tree.
    ("verify", ("interlock.verify",)),
    (
        "policy",
        (
            "interlock.policy",
            # Pricing and token tables, and the usage record: data the policy compiles in.
            "interlock.ledger.pricing",
            "interlock.ledger.estimate",
            "interlock.ledger.usage",
        ),
    ),
    ("deciders", ("interlock.deciders", "interlock.hooks")),
    (
        "ledger/store",
        ("interlock.ledger", "interlock.store", "interlock.approvals"),
    ),
    (
        # Deciders that hold state: budgets, approvals, the audit join, a remote server.
        "stateful deciders",
        (
            "interlock.deciders.stateful",
            "interlock.deciders.joined",
            "interlock.remote",
            "interlock.remote_grants",
            "interlock.remote_sessions",  # a remote guard's session outcomes and inputs
        ),
    ),
    (
        "guard",
        (
            "interlock",  # the package's front door re-exports the guard
            "interlock.guard",
            "interlock.guard_sessions",  # the guard's session reads and steps
            "interlock.otel",  # the guard's spans and metrics
            "interlock.policy.reload",  # swaps a running guard's policy
        ),
    ),
    (
        "adapters/gateways/server/cli",
        (
            "interlock.adapters",
            "interlock.gateways",
            "interlock.server",
            "interlock.replay",
            "interlock.demo",
            "interlock.cli",  # and every interlock.cli_* module, matched below
            "interlock.__main__",
        ),
    ),
)

_RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    """The layer of ``module``: the one whose longest prefix names it."""
    best: tuple[int, str] | None = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            hit = module == prefix or module.startswith(prefix + ".")
            if not hit and prefix == "interlock.cli":
                hit = module.startswith("interlock.cli_")
            if hit and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return None if best is None else best[1]


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  # the importing module
    target: str  # the imported interlock module


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, text: str | None = None) -> list[Import]:
    """Every ``interlock`` import in ``path`` (or in ``text``, read as if it were that
    file), wherever it stands: module level, in a function or class, under a guard."""
    text = path.read_text(encoding="utf-8") if text is None else text
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[tuple[int, str], Import] = {}
    for node in ast.walk(ast.parse(text, str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from interlock.core import registry`` imports interlock.core.registry.
            targets = [f"{base}.{alias.name}" for alias in node.names] if base else []
            targets = [t if _is_module(t) else base for t in targets]
        for target in targets:
            if target == "interlock" or target.startswith("interlock."):
                found[node.lineno, target] = Import(path, node.lineno, module, target)
    return list(found.values())


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (SRC / relative).is_dir() or (SRC / relative).with_suffix(".py").is_file()


def violations(files: list[Path], text: str | None = None) -> list[str]:
    """One line per upward import: file, line, the import and both layers."""
    out = []
    for path in files:
        for imp in imports_of(path, text):
            mine, theirs = layer_of(imp.module), layer_of(imp.target)
            if mine is None or theirs is None:
                continue  # reported by test_every_module_has_a_layer
            if _RANK[theirs] > _RANK[mine]:
                where = path.relative_to(SRC.parent)
                out.append(
                    f"{where}:{imp.line}: {imp.module} ({mine}) imports {imp.target} "
                    f"({theirs}), a layer above it"
                )
    return out


def source_files() -> list[Path]:
    return sorted((SRC / "interlock").rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = [module_name(p) for p in source_files() if layer_of(module_name(p)) is None]
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_imports_point_down() -> None:
    found = violations(source_files())
    assert not found, "imports against the layers (DESIGN §3):\n" + "\n".join(found)


def test_core_and_ledger_never_name_the_guard_or_adapters() -> None:
    """The circle issue 17 §5 removed, stated directly."""
    for path in source_files():
        module = module_name(path)
        for imp in imports_of(path):
            if module.startswith("interlock.core"):
                assert layer_of(imp.target) == "core", f"{path}:{imp.line}: {imp.target}"
            if module.startswith(("interlock.ledger", "interlock.core", "interlock.guard")):
                assert not imp.target.startswith("interlock.adapters"), f"{path}:{imp.line}"
            if module.startswith("interlock.ledger"):
                assert imp.target != "interlock.guard", f"{path}:{imp.line}"


# -- the checker itself: it must catch each way of importing upward ----------------------

UPWARD = {
    "module level": "from interlock.guard import Guard\n",
    "type checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    "    from interlock.guard import Guard\n",
    "function local": "def f():\n    from interlock.adapters.base import adapter_for\n",
    "plain import": "import interlock.server.app\n",
    "package root": "def f():\n    from interlock import Guard\n",
    "submodule by name": "from interlock import guard\n",
    "relative": "from ..guard import Guard\n",
    "class body": "class C:\n    import interlock.ledger.budgets\n",
}

#: Look-alikes that must pass: down, sideways, strings and comments naming the guard.
DOWNWARD = {
    "down": "from interlock.errors import describe\n",
    "sideways": "from interlock.core.events import Event\n",
    "docstring": '"""from interlock.guard import Guard"""\n',
    "comment": "# from interlock.guard import Guard\n",
    "string name": "MODULE = 'interlock.adapters.langchain'\n",
    "stdlib": "import importlib\nimportlib.import_module('json')\n",
    "relative down": "from .events import Event\n",
}


#: Read as if it were this file, which does not exist.
PLANTED = SRC / "interlock" / "core" / "planted.py"


@pytest.mark.parametrize("text", UPWARD.values(), ids=UPWARD.keys())
def test_checker_catches_upward_imports(text: str) -> None:
    found = violations([PLANTED], text)
    assert len(found) == 1, found
    assert found[0].startswith("src/interlock/core/planted.py:")
    assert "(core) imports interlock" in found[0]


@pytest.mark.parametrize("text", DOWNWARD.values(), ids=DOWNWARD.keys())
def test_checker_passes_look_alikes(text: str) -> None:
    assert violations([PLANTED], text) == []


def test_layer_of_uses_the_longest_prefix() -> None:
    assert layer_of("interlock.ledger.budgets") == "ledger/store"
    assert layer_of("interlock.ledger.pricing") == "policy"
    assert layer_of("interlock.deciders.local") == "deciders"
    assert layer_of("interlock.deciders.stateful") == "stateful deciders"
    assert layer_of("interlock.cli_audit") == "adapters/gateways/server/cli"
    assert layer_of("interlock") == "guard"
    assert layer_of("json") is None
