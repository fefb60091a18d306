"""The extras and the environments the adapters are tested in (the README's matrix).

- every framework extra spans one major version (a 0.x minor counts as one), with a
  lower bound, so a resolver can never fall back to a release the adapter was not
  written for;
- `all` holds every extra except the frameworks that cannot share an environment with
  the rest (their adapters are tested in environments of their own);
- the development environment holds every framework of `all`, each inside its range,
  and `pip check` passes in it: `.[all]` installs together;
- the README's compatibility matrix names the same extras and ranges as pyproject.toml.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PROJECT["project"]["optional-dependencies"]

#: extra -> the distributions that are the framework itself (the rest of an extra's
#: requirements are its helpers).
FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "langchain": ("langchain", "langchain-core", "langgraph"),
    "openai-agents": ("openai-agents",),
    "crewai": ("crewai",),
    "autogen": ("autogen-agentchat", "autogen-ext"),
    "pydantic-ai": ("pydantic-ai-slim",),
    "llama-index": ("llama-index-core",),
    "smolagents": ("smolagents",),
    "google-adk": ("google-adk",),
    "browser-use": ("browser-use",),
    "mcp": ("mcp",),
    "openai": ("openai",),
    "anthropic": ("anthropic",),
}
#: The frameworks that pin what the others need newer: tested apart (Makefile targets).
APART = {"crewai", "browser-use"}


def requirements(extra: str) -> list[Requirement]:
    return [Requirement(text) for text in EXTRAS[extra]]


def framework_requirements(extra: str) -> list[Requirement]:
    return [r for r in requirements(extra) if r.name in FRAMEWORKS[extra]]


def bounds(requirement: Requirement) -> tuple[Version, Version]:
    low = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    high = [Version(s.version) for s in requirement.specifier if s.operator == "<"]
    assert len(low) == 1 and len(high) == 1, f"{requirement}: needs one '>=' and one '<'"
    return low[0], high[0]


def one_major(low: Version, high: Version) -> bool:
    if low.major >= 1:
        return high.release[:1] == (low.major + 1,) and all(p == 0 for p in high.release[1:])
    return high.release[:2] == (0, low.minor + 1) and all(p == 0 for p in high.release[2:])


@pytest.mark.parametrize("extra", sorted(FRAMEWORKS))
def test_every_framework_extra_spans_one_major_version(extra: str) -> None:
    found = framework_requirements(extra)
    assert {r.name for r in found} == set(FRAMEWORKS[extra])
    for requirement in found:
        low, high = bounds(requirement)
        assert one_major(low, high), f"{extra}: {requirement} spans more than one major"


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        ("1.0", "2", True),
        ("1.15", "2", True),
        ("0.13", "0.14", True),
        ("0.7.5", "0.8", True),
        ("1.0", "3", False),  # two majors: a resolver may pick the one never tested
        ("0.11", "1", False),
        ("0.13", "0.15", False),
    ],
)
def test_the_one_major_rule_itself(low: str, high: str, expected: bool) -> None:
    assert one_major(Version(low), Version(high)) is expected


def test_all_holds_every_extra_but_those_tested_apart() -> None:
    (only,) = EXTRAS["all"]
    held = set(Requirement(only).extras)
    assert held == set(FRAMEWORKS) - APART | {
        "cedar",
        "otel",
        "effects",
        "postgres",
        "server",
        "llm-proxy",
    }
    assert not held & APART


def test_the_dev_environment_holds_all_and_the_test_tools() -> None:
    names = {Requirement(text).name: Requirement(text) for text in EXTRAS["dev"]}
    assert names["interlock"].extras == {"all", "test"}


@pytest.mark.parametrize("extra", sorted(set(FRAMEWORKS) - APART))
def test_each_framework_of_all_is_installed_inside_its_range(extra: str) -> None:
    for requirement in framework_requirements(extra):
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{requirement.name} is not installed: pip install -e '.[dev]'")
        assert requirement.specifier.contains(installed, prereleases=True), (
            f"{requirement.name} {installed} is outside {requirement.specifier}"
        )


def test_pip_check_passes_in_the_development_environment() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def readme_matrix() -> dict[str, str]:
    """extra -> the version range the README's compatibility matrix states."""
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| [^|]+ \| `interlock\[([\w-]+)\]` \| `([^`]+)` \|", text, re.M)
    return dict(rows)


def test_the_readme_matrix_names_every_framework_extra_and_its_range() -> None:
    matrix = readme_matrix()
    assert set(matrix) == set(FRAMEWORKS)
    for extra, stated in matrix.items():
        said = Requirement(stated)
        (meant,) = [r for r in framework_requirements(extra) if r.name == said.name]
        assert said.specifier == meant.specifier, (
            f"README says {stated} for {extra}; pyproject.toml says {meant}"
        )


def declared_ranges() -> list[tuple[str, str, str, str, str]]:
    """(module, class, distribution, low, high) of every adapter class, read from the
    source (an adapter whose framework is not installed here cannot be imported)."""
    import ast

    found = []
    for path in sorted((ROOT / "src/interlock/adapters").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            fields: dict[str, object] = {}
            for statement in node.body:
                if (
                    isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)
                ):
                    try:
                        fields[statement.targets[0].id] = ast.literal_eval(statement.value)
                    except ValueError:
                        continue
            supported, distribution = fields.get("supported"), fields.get("distribution")
            if isinstance(supported, tuple) and isinstance(distribution, str):
                low, high = supported
                found.append((path.stem, node.name, distribution, low, high))
    return found


def test_adapters_are_found_by_the_source_reader() -> None:
    names = {(module, cls) for module, cls, *_ in declared_ranges()}
    assert ("openai_agents", "FunctionToolAdapter") in names
    assert any(module == "langchain" for module, _ in names)


@pytest.mark.parametrize(
    ("module", "cls", "distribution", "low", "high"),
    declared_ranges(),
    ids=[f"{m}.{c}" for m, c, *_ in declared_ranges()],
)
def test_each_adapter_refuses_outside_the_range_its_extra_installs(
    module: str, cls: str, distribution: str, low: str, high: str
) -> None:
    installs = [
        Requirement(text)
        for extra in FRAMEWORKS
        for text in EXTRAS[extra]
        if Requirement(text).name == distribution
    ]
    assert installs, f"{module}.{cls}: no extra installs {distribution}"
    for requirement in installs:
        assert set(requirement.specifier) == {
            *Requirement(f"{distribution}>={low},<{high}").specifier
        }, f"{module}.{cls} supports >={low},<{high}; the extra installs {requirement}"
