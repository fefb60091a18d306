"""The start-up contract (ADR 0014), checked by what is imported — never by the clock.

`import interlock` loads the error tree and nothing else; every public name still
resolves, to the very object its module defines. The command line imports the store,
the server and the audit keys only for the commands that use them. The caches that make
a large policy load fast share only what is immutable and change no verdict, line or
message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module, resources
from pathlib import Path

import pytest
import yaml

import interlock
from interlock.policy import source
from interlock.policy.loader import load_policy_text
from interlock.policy.matchers import GlobSet

EXAMPLE = Path(str(resources.files("interlock").joinpath("examples"))) / "interlock.yaml"

#: What no program that merely imports Interlock should pay for.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "yaml",
    "cel",
    "re2",
    "tree_sitter",
    "ada_url",
    "typer",
    "rich",
    "prompt_toolkit",
    "fastapi",
    "starlette",
    "uvicorn",
    "psycopg",
    "sqlite3",
    "cryptography",
)


def _loaded_after(code: str, *args: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = (
        "import json, sys\n"
        "try:\n" + "".join(f"    {line}\n" for line in code.splitlines()) + "except SystemExit:\n"
        "    pass\n"
        "print('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout.rstrip().rsplit("\n", 1)[-1]))


def _heavy(modules: set[str], extra: tuple[str, ...] = ()) -> list[str]:
    banned = HEAVY + extra
    return sorted(m for m in modules if m in banned or m.startswith(tuple(f"{b}." for b in banned)))


def test_import_interlock_loads_only_the_error_tree() -> None:
    loaded = _loaded_after("import interlock")
    assert _heavy(loaded) == []
    ours = sorted(m for m in loaded if m.startswith("interlock"))
    assert ours == ["interlock", "interlock._lazy", "interlock.errors"]


def test_every_public_name_resolves_to_its_modules_object() -> None:
    lazy = interlock._LAZY
    assert set(lazy) | {"ActionDenied", "ActionUndetermined", "ApprovalRequired", "Blocked"} | {
        "InterlockError",
        "PolicyError",
        "StoreError",
        "__version__",
    } == set(interlock.__all__)
    for name, module in lazy.items():
        assert getattr(interlock, name) is getattr(import_module(module), name), name
    assert set(interlock.__all__) <= set(dir(interlock))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = interlock.Nope  # type: ignore[attr-defined]


def test_from_interlock_import_the_guard_loads_no_schema_store_cli_or_asyncio() -> None:
    loaded = _loaded_after("from interlock import Action, Guard, evaluate")
    assert (
        _heavy(
            loaded,
            (
                "interlock.store",
                "interlock.server",
                "interlock.policy.schema",
                "interlock.cli",
                "asyncio",
            ),
        )
        == []
    )


def test_a_guard_loaded_without_asyncio_still_runs_async_hooks_and_async_checks() -> None:
    loaded = _loaded_after(
        "import threading\n"
        "from interlock import Action, Guard\n"
        "assert 'asyncio' not in sys.modules\n"
        "seen = threading.Event()\n"
        "async def hook(decision, action):\n"
        "    seen.set()\n"
        f"guard = Guard({str(EXAMPLE)!r}, on_decision=hook)\n"
        "assert guard.check(Action.tool('shell', {'command': 'ls'})).allowed\n"
        "assert seen.wait(10), 'the async hook never ran'\n"
        "import asyncio\n"
        "rm = Action.tool('shell', {'command': 'rm -rf /'})\n"
        "denied = asyncio.run(guard.acheck(rm, timeout=5))\n"
        "assert denied.verdict.value == 'deny', denied\n"
    )
    assert "asyncio" in loaded  # the hook's background loop imported it when it was needed


def test_the_policy_and_store_packages_import_their_parts_on_use() -> None:
    loaded = _loaded_after(
        "from interlock.policy.compiled import CompiledPolicy\n"
        "from interlock.store.records import Reservation\n"
        "from interlock.facts.paths import normalise_path\n"
    )
    assert "interlock.policy.schema" not in loaded
    assert "interlock.policy.loader" not in loaded
    assert "interlock.store.sql" not in loaded
    assert "interlock.store.audit" not in loaded
    import interlock.facts
    import interlock.policy
    import interlock.store

    for package in (interlock.policy, interlock.store, interlock.facts):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"


_CHECK = ("check", "--policy", str(EXAMPLE), "--name", "shell", "--arg", "command=ls -la")


def test_interlock_check_loads_neither_the_store_the_server_nor_typer_and_rich(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLOCK_POLICY_CACHE", str(tmp_path / "cache"))
    parsed, cached = (
        _loaded_after("from interlock.cli import main\nmain()", *_CHECK) for _ in "12"
    )
    assert "interlock.guard" in parsed and "interlock.guard" in cached  # the probe did check
    assert "yaml" in parsed and "yaml" not in cached  # the second one read the cache
    unwanted = (
        "pydantic",
        "pydantic_core",
        "interlock.policy.schema",
        "interlock.store.records",
        "interlock.approvals",
        "interlock.ledger.memory",
        "importlib.resources",
        "difflib",
        "interlock.cli_store",
        "interlock.cli_audit",
        "interlock.cli_server",
        "interlock.store.sql",
        "interlock.store.audit",
        "interlock.server",
        "cel.cli",
        "prompt_toolkit",
        "fastapi",
        "uvicorn",
        "psycopg",
        "interlock.cli_app",
        "asyncio",
        "typer",
        "click",
        "rich",
    )
    for loaded in (parsed, cached):
        assert sorted(m for m in loaded if m.startswith(unwanted)) == []
        # the grammar's extension parsed the command, without its package's __init__
        assert "tree_sitter_bash._binding" in loaded and "tree_sitter_bash" not in loaded


def test_a_budget_guard_imports_the_store_records_with_the_first_call_needing_them() -> None:
    probe = (
        "from interlock import Action, Guard\n"
        f"guard = Guard({str(EXAMPLE)!r})\n"
        "assert guard.check(Action.tool('shell', {'command': 'ls'})).allowed\n"
        "assert 'interlock.store.records' not in sys.modules\n"
        "assert 'pydantic' not in sys.modules\n"
        "assert guard.check(Action.llm('m', arguments={'max_tokens': 10})).allowed\n"
    )
    loaded = _loaded_after(probe)
    assert "interlock.store.records" in loaded  # the model call reserved from its budget


def test_every_lazy_command_resolves_and_help_lists_them_in_order() -> None:
    from typer.main import get_command
    from typer.testing import CliRunner

    from interlock.cli import _HELP_ORDER, _LAZY_COMMANDS, app

    group = get_command(app)
    for name in _LAZY_COMMANDS:
        command = group.get_command(None, name)  # type: ignore[attr-defined,arg-type]
        assert command is not None and command.name == name
        assert command.help, name
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    listed = [
        line.split()[1]
        for line in result.output.splitlines()
        if line.startswith("│ ") and line[2] not in " -"
    ]
    assert listed == list(_HELP_ORDER)


def test_the_cel_binding_loads_without_its_command_line_and_imports_after() -> None:
    loaded = _loaded_after(
        "from interlock.policy.celexpr import compile_condition\n"
        "assert compile_condition('args.amount > 100').variables\n"
    )
    assert "cel.cel" in loaded
    assert "cel" not in loaded and "prompt_toolkit" not in loaded
    after = _loaded_after(
        "from interlock.policy.celexpr import compile_condition\n"
        "compile_condition('1 < 2')\n"
        "import cel\n"
        "assert cel.compile('1 + 1').execute({}) == 2\n"
    )
    assert "cel" in after


def test_the_bash_grammar_loads_without_its_package_and_the_package_imports_after() -> None:
    loaded = _loaded_after(
        "from interlock.facts.shell import shell_facts\n"
        "assert shell_facts('ls -la').commands\n"
        "assert 'tree_sitter_bash' not in sys.modules\n"
        "import tree_sitter_bash\n"
        "from tree_sitter import Language\n"
        "assert Language(tree_sitter_bash.language()) is not None\n"
        "assert tree_sitter_bash.HIGHLIGHTS_QUERY\n"
    )
    assert "tree_sitter_bash" in loaded


def test_libyaml_and_the_python_parser_give_the_same_data_and_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if source._FAST_LOADER is None:
        pytest.skip("PyYAML was built without libyaml")
    texts = [
        EXAMPLE.read_text("utf-8"),
        "version: 1\nrules:\n  - id: a\n    decision: deny\n    reason: 'x: y'\n"
        "    params: {port: 0x1F, ratio: 1e3, flag: yes, when: 2001-12-14, none: ~}\n"
        "    name: &n refund_*\n  - {id: b, decision: allow, reason: z, name: *n}\n",
    ]
    fast = [source.parse_yaml(t) for t in texts]
    monkeypatch.setattr(source, "_FAST_LOADER", None)
    slow = [source.parse_yaml(t) for t in texts]
    for a, b in zip(fast, slow, strict=True):
        assert a.data == b.data
        assert a.lines == b.lines
    assert fast[1].data == yaml.safe_load(texts[1])


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nrules: [\n",
        "version: 1\n  bad: indent\n",
        "a: 'open\n",
        "- a\nb: c\n",
        "a: [1, 2\nb: 3\n",
        "a: b: c\n",
    ],
)
def test_a_yaml_error_keeps_the_python_parsers_words_and_line(text: str) -> None:
    with pytest.raises(yaml.MarkedYAMLError) as reference:
        yaml.compose(text, Loader=yaml.SafeLoader)
    mark = reference.value.problem_mark or reference.value.context_mark
    assert mark is not None
    with pytest.raises(interlock.PolicyError) as caught:
        load_policy_text(text, file="p.yaml")
    [issue] = caught.value.issues
    assert (issue.file, issue.line) == ("p.yaml", mark.line + 1)
    assert issue.message == f"not valid YAML: {reference.value.problem}"


def test_rules_with_the_same_condition_share_it_and_still_decide_by_their_own_ids() -> None:
    policy = load_policy_text(
        "version: 1\ndefault: allow\nrules:\n"
        "  - {id: big-refund, decision: require_approval, reason: r, name: refund,"
        " when: 'args.amount > 100'}\n"
        "  - {id: big-payout, decision: deny, reason: p, name: payout,"
        " when: 'args.amount > 100'}\n"
        "  - {id: odd, decision: deny, reason: o, name: refund, params: {args.note: 'x*'}}\n"
        "  - {id: odd2, decision: deny, reason: o, name: payout, params: {args.note: 'x*'}}\n"
    )
    first, second, _, _ = policy.rules
    assert first.when is second.when is not None
    refund = interlock.evaluate(interlock.Action.tool("refund", {"amount": 500}), policy)
    payout = interlock.evaluate(interlock.Action.tool("payout", {"amount": 500}), policy)
    small = interlock.evaluate(interlock.Action.tool("payout", {"amount": 5}), policy)
    assert (refund.verdict.value, refund.rule_ids) == ("require_approval", ("big-refund",))
    assert (payout.verdict.value, payout.rule_ids) == ("deny", ("big-payout",))
    assert (small.verdict.value, small.rule_ids) == ("allow", ())


def test_a_bad_condition_is_reported_for_every_rule_that_has_it() -> None:
    bad = "args.amount >"
    with pytest.raises(interlock.PolicyError) as caught:
        load_policy_text(
            "version: 1\nrules:\n"
            f"  - {{id: one, decision: deny, reason: r, when: '{bad}'}}\n"
            f"  - {{id: two, decision: deny, reason: r, when: '{bad}'}}\n"
        )
    issues = caught.value.issues
    assert [(i.rule_id, i.line, i.field) for i in issues] == [
        ("one", 3, "when"),
        ("two", 4, "when"),
    ]
    assert all(i.message.startswith("invalid CEL expression") for i in issues)


def test_glob_sets_are_shared_by_patterns_and_case() -> None:
    assert GlobSet.of(["a*", "b"]) is GlobSet.of(("a*", "b"))
    assert GlobSet.of("a*") is not GlobSet.of("a*", ignore_case=True)
    assert GlobSet.of("a*", ignore_case=True).matches("ABC")
    assert not GlobSet.of("a*").matches("ABC")
