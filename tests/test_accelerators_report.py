"""`interlock.accelerators` says which C accelerators a process uses and why not: in a
new process as installed, with ``INTERLOCK_NO_SPEEDUPS``, and where a module was never
built (its import blocked, as on a machine without a compiler); and `interlock serve`
says it at start-up."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

MODULES = (
    "interlock.session._speedups",
    "interlock.session._history",
    "interlock.core._redaction",
    "interlock.store._chain",
)

#: run in a new process: the accelerators as JSON, and the start-up line; argv[1] names
#: modules whose import fails as an unbuilt extension's does
REPORT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    blocked = set(sys.argv[1].split(",")) - {""}

    class NotBuilt(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in blocked:
                raise ImportError(f"No module named {name!r}")  # as a missing .so
            return None

    sys.meta_path.insert(0, NotBuilt())
    from interlock.accelerators import accelerators, describe_accelerators
    print(json.dumps([[a.module, a.in_use, a.why_not] for a in accelerators()]))
    print(describe_accelerators())
    """
)

built = pytest.mark.skipif(
    any(importlib.util.find_spec(module) is None for module in MODULES),
    reason="the accelerators were not built here (no C compiler at install)",
)


def _report(*blocked: str, **env: str) -> tuple[dict[str, tuple[bool, str | None]], str]:
    environ = {k: v for k, v in os.environ.items() if k != "INTERLOCK_NO_SPEEDUPS"}
    done = subprocess.run(
        [sys.executable, "-c", REPORT, ",".join(blocked)],
        env=environ | env,
        capture_output=True,
        text=True,
        check=True,
    )
    table, line = done.stdout.strip().split("\n")
    return {module: (in_use, why) for module, in_use, why in json.loads(table)}, line


@built
def test_as_installed_all_four_are_used() -> None:
    found, line = _report()
    assert found == {module: (True, None) for module in MODULES}
    assert line == "accelerators: fingerprints, session records, redaction, chain links in C"


@built
def test_the_switch_turns_all_four_off_and_is_named() -> None:
    found, line = _report(INTERLOCK_NO_SPEEDUPS="1")
    assert found == {module: (False, "INTERLOCK_NO_SPEEDUPS is set") for module in MODULES}
    assert line.startswith("WARNING: accelerators: 4 of 4 in Python (")
    assert line.endswith("unset INTERLOCK_NO_SPEEDUPS")
    found, _ = _report(INTERLOCK_NO_SPEEDUPS="0")  # "0" is off, as the modules read it
    assert all(in_use for in_use, _ in found.values())


@built
@pytest.mark.parametrize("module", MODULES)
def test_one_not_built_is_named_with_the_remedy(module: str) -> None:
    found, line = _report(module)
    assert found[module] == (False, "not built (no C compiler when Interlock was installed)")
    assert all(in_use for other, (in_use, _) in found.items() if other != module)
    assert line.startswith("WARNING: accelerators: 1 of 4 in Python (")
    assert "reinstall Interlock where a C compiler is available" in line


def test_none_built_and_switched_off_gives_both_reasons_and_both_remedies() -> None:
    found, line = _report(*MODULES[:2], INTERLOCK_NO_SPEEDUPS="1")
    assert {why for _, why in found.values()} <= {
        "not built (no C compiler when Interlock was installed)",
        "INTERLOCK_NO_SPEEDUPS is set",
    }
    assert found[MODULES[0]][1] == "not built (no C compiler when Interlock was installed)"
    assert not any(in_use for in_use, _ in found.values())
    assert "reinstall Interlock" in line and "unset INTERLOCK_NO_SPEEDUPS" in line


def test_import_interlock_imports_none_of_them() -> None:
    code = f"import sys, interlock; print(sorted(m for m in sys.modules if m in {MODULES!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _llm_proxy_startup(tmp_path: Path, **env: str) -> str:
    """What `interlock llm-proxy` says on stderr up to its "llm-proxy on" line (its
    warnings come before it)."""
    (tmp_path / "interlock.yaml").write_text("version: 1\ndefault: allow\nrules: []\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    exe = Path(sys.executable).parent / "interlock"
    argv = [str(exe), "llm-proxy", "--policy", "interlock.yaml", "--port", str(port)]
    argv += ["-d", f"sqlite:///{tmp_path / 'i.db'}", "--openai-upstream", "http://127.0.0.1:9/v1"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=environ | env, stderr=subprocess.PIPE, text=True
    )
    said: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            said.append(line)
            if "llm-proxy on http" in line:  # said last, once the warnings are
                break
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return "".join(said)


@built
@pytest.mark.slow
def test_a_gateway_warns_only_when_an_accelerator_runs_in_python(tmp_path: Path) -> None:
    quiet = _llm_proxy_startup(tmp_path)
    assert "llm-proxy on http" in quiet
    assert "accelerators" not in quiet
    warned = _llm_proxy_startup(tmp_path, INTERLOCK_NO_SPEEDUPS="1")
    assert "interlock: WARNING: accelerators: 4 of 4 in Python" in warned
