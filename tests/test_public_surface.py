"""The public surface is pinned, and `import interlock` imports no framework."""

from __future__ import annotations

import subprocess
import sys

import interlock


def test_public_surface_is_pinned() -> None:
    assert sorted(interlock.__all__) == [
        "Action",
        "ActionDenied",
        "ActionUndetermined",
        "ApprovalRef",
        "ApprovalRequired",
        "Blocked",
        "CancelToken",
        "CompiledPolicy",
        "Context",
        "Decider",
        "Decision",
        "Downstream",
        "Guard",
        "InterlockError",
        "PolicyError",
        "ReservationRef",
        "ShadowVerdict",
        "StoreError",
        "Usage",
        "Verdict",
        "__version__",
        "evaluate",
        "load_policy",
        "load_policy_text",
        "raise_for",
    ]
    for name in interlock.__all__:
        assert hasattr(interlock, name), name


def test_error_tree() -> None:
    assert issubclass(interlock.ActionDenied, PermissionError)
    assert issubclass(interlock.ApprovalRequired, PermissionError)
    assert issubclass(interlock.PolicyError, ValueError)
    for error in (interlock.ActionDenied, interlock.ApprovalRequired, interlock.ActionUndetermined):
        assert issubclass(error, interlock.Blocked)
        assert issubclass(error, interlock.InterlockError)


def test_import_interlock_imports_no_framework_or_server_stack() -> None:
    code = (
        "import sys, interlock\n"
        "banned = ['langchain', 'langchain_core', 'langgraph', 'agents', 'crewai',"
        " 'autogen_agentchat', 'pydantic_ai', 'llama_index',"
        " 'smolagents', 'google.adk', 'browser_use', 'mcp',"
        " 'starlette', 'uvicorn', 'httpx', 'psycopg', 'typer', 'rich', 'cedarpy']\n"
        "loaded = [m for m in banned if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_every_source_folder_is_a_package() -> None:
    """A folder of modules without __init__.py imports from a checkout (a namespace
    package) but is left out of a built wheel: every one must be a package."""
    from pathlib import Path

    import interlock

    root = Path(interlock.__file__).parent
    folders = {p.parent for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    assert (
        sorted(str(f.relative_to(root)) for f in folders if not (f / "__init__.py").exists()) == []
    )
