"""The parsed-policy cache of `interlock check` (interlock.policy.cache): it saves the
YAML parse and nothing else, is never stale, never shared with another user, and a
damaged entry is only ever a miss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, PolicyError, evaluate, load_policy
from interlock.policy import source
from interlock.policy.cache import CACHE_ENV, PolicyCache, RecordedLines, default_cache

EXAMPLE = Path(str(resources.files("interlock").joinpath("examples"))) / "interlock.yaml"
ACTIONS = [
    Action.tool("shell", {"command": "ls -la"}),
    Action.tool("shell", {"command": "rm -rf /"}),
    Action.tool("refund_order", {"amount": 500, "currency": "EUR"}),
    Action.tool("send_email", {"to": "x@y.net"}),
]


@pytest.fixture
def cache(tmp_path: Path) -> PolicyCache:
    return PolicyCache(tmp_path / "cache")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "interlock.yaml"
    path.write_text(EXAMPLE.read_text("utf-8"), encoding="utf-8")
    return path


@pytest.fixture
def no_parse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the parses: a hit never parses."""
    parses: list[str] = []
    real = source.parse_yaml

    def counted(text: str, *, file: str | None = None) -> Any:
        parses.append(file or "")
        return real(text, file=file)

    monkeypatch.setattr(source, "parse_yaml", counted)
    return parses


def _verdicts(policy: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.verdict.value, d.rule_ids) for d in (evaluate(a, policy) for a in ACTIONS)]


def _summary(policy: Any) -> Any:
    rules = [(r.id, r.line, r.arguments) for r in policy.rules]
    return rules, policy.budgets, policy.rate_limits, policy.source, _verdicts(policy)


def test_a_second_load_is_not_parsed_and_loads_the_same_policy(
    cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    first = load_policy(policy_file, cache=cache)
    assert len(no_parse) == 1 and len(list(cache.entries())) == 1
    second = load_policy(policy_file, cache=cache)
    assert len(no_parse) == 1  # served from the entry
    assert _summary(second) == _summary(first) == _summary(load_policy(policy_file))


def test_a_changed_file_is_never_served_the_old_entry(
    cache: PolicyCache, policy_file: Path
) -> None:
    assert load_policy(policy_file, cache=cache).budgets[0].limit == 500_000
    text = policy_file.read_text("utf-8")
    changed = text.replace("limit: 500000", "limit: 400000")
    assert len(changed) == len(text) and changed != text
    stat = policy_file.stat()
    policy_file.write_text(changed, encoding="utf-8")
    os.utime(policy_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # only the text differs
    assert load_policy(policy_file, cache=cache).budgets[0].limit == 400_000
    policy_file.write_text(text, encoding="utf-8")
    assert load_policy(policy_file, cache=cache).budgets[0].limit == 500_000


def test_an_entry_for_another_text_under_this_texts_name_is_a_miss(
    cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    """A collision of names (or a swapped file) cannot serve another policy: the entry
    holds the whole text, compared in full."""
    text = policy_file.read_text("utf-8")
    other = text.replace("default: deny", "default: allow")
    load_policy(policy_file, cache=cache)
    [name] = cache.entries()
    policy_file.write_text(other, encoding="utf-8")
    load_policy(policy_file, cache=cache)
    other_name = next(n for n in cache.entries() if n != name)
    directory = Path(cache.directory)
    os.replace(directory / other_name, directory / name)  # `other`'s entry, `text`'s name
    policy_file.write_text(text, encoding="utf-8")
    parses = len(no_parse)
    assert load_policy(policy_file, cache=cache).default.value == "deny"
    assert len(no_parse) == parses + 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],
        lambda raw: b"",
        lambda raw: b"not json\n{}",
        lambda raw: raw.replace(b'"deny"', b'"allow"', 1),  # valid JSON, wrong digest
        lambda raw: raw.replace(b'"format": 1', b'"format": 99', 1),
        lambda raw: b"\xff\xfe" + raw,
    ],
)
def test_a_damaged_entry_is_ignored_and_written_again(
    damage: Any, cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    load_policy(policy_file, cache=cache)
    [name] = cache.entries()
    entry = Path(cache.directory) / name
    entry.write_bytes(damage(entry.read_bytes()))
    policy = load_policy(policy_file, cache=cache)
    assert len(no_parse) == 2  # parsed again ...
    load_policy(policy_file, cache=cache)
    assert len(no_parse) == 2  # ... and the entry rewritten whole
    assert _verdicts(policy) == _verdicts(load_policy(policy_file))


def test_an_entry_missing_a_line_the_compiler_asks_for_is_a_miss(
    cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    text = policy_file.read_text("utf-8")
    document = source.parse_yaml(text, file=str(policy_file))
    assert cache.store(text, document.data, RecordedLines(document))  # no line asked
    policy = load_policy(policy_file, cache=cache)
    assert len(no_parse) == 2  # the parse above, and the miss
    assert [r.line for r in policy.rules] == [r.line for r in load_policy(policy_file).rules]


def test_an_invalid_policy_is_never_cached_and_fails_as_without_a_cache(
    cache: PolicyCache, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - id: r\n    decision: maybe\n", encoding="utf-8")
    with pytest.raises(PolicyError) as cached:
        load_policy(bad, cache=cache)
    with pytest.raises(PolicyError) as plain:
        load_policy(bad)
    assert str(cached.value) == str(plain.value)
    assert list(cache.entries()) == []


def test_data_json_would_not_give_back_is_not_cached(cache: PolicyCache, tmp_path: Path) -> None:
    dated = tmp_path / "dated.yaml"
    dated.write_text(
        "version: 1\ntools:\n  t:\n    parameters: {since: 2024-05-01, blob: !!binary aGk=}\n",
        encoding="utf-8",
    )
    assert load_policy(dated, cache=cache).source == str(dated)
    assert list(cache.entries()) == []


def test_entries_and_their_directory_are_private(cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    directory = Path(cache.directory)
    assert directory.stat().st_mode & 0o777 == 0o700
    [name] = cache.entries()
    assert (directory / name).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in directory.iterdir()] == [name]  # no temporary file left


def test_an_entry_others_could_write_or_read_is_not_used(
    cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    load_policy(policy_file, cache=cache)
    [name] = cache.entries()
    entry = Path(cache.directory) / name
    entry.chmod(0o644)
    load_policy(policy_file, cache=cache)
    assert len(no_parse) == 2


def test_a_directory_others_could_write_is_neither_read_nor_written(
    cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    load_policy(policy_file, cache=cache)
    directory = Path(cache.directory)
    directory.chmod(0o777)
    try:
        load_policy(policy_file, cache=cache)
        assert len(no_parse) == 2
        for entry in directory.iterdir():
            entry.unlink()
        load_policy(policy_file, cache=cache)
        assert list(directory.iterdir()) == []
    finally:
        directory.chmod(0o700)


def test_a_symlinked_entry_or_directory_is_not_followed(
    cache: PolicyCache, policy_file: Path, tmp_path: Path, no_parse: list[str]
) -> None:
    load_policy(policy_file, cache=cache)
    [name] = cache.entries()
    directory = Path(cache.directory)
    elsewhere = tmp_path / "elsewhere.json"
    (directory / name).rename(elsewhere)
    (directory / name).symlink_to(elsewhere)
    load_policy(policy_file, cache=cache)
    assert len(no_parse) == 2
    linked = PolicyCache(tmp_path / "linked")
    (tmp_path / "linked").symlink_to(directory)
    load_policy(policy_file, cache=linked)
    assert len(no_parse) == 3


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_an_entry_or_directory_of_another_user_is_not_used(
    cache: PolicyCache, policy_file: Path, no_parse: list[str]
) -> None:
    load_policy(policy_file, cache=cache)
    [name] = cache.entries()
    directory = Path(cache.directory)
    os.chown(directory / name, 65534, 65534)
    load_policy(policy_file, cache=cache)
    assert len(no_parse) == 2
    os.chown(directory, 65534, 65534)
    load_policy(policy_file, cache=cache)
    assert len(no_parse) == 3


def test_a_changed_parser_is_a_miss(
    cache: PolicyCache, policy_file: Path, no_parse: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    load_policy(policy_file, cache=cache)
    fresh = PolicyCache(cache.directory)
    monkeypatch.setattr(fresh, "_stamp", "another PyYAML")
    load_policy(policy_file, cache=fresh)
    assert len(no_parse) == 2


def test_the_entry_records_the_files_of_the_parser_it_depends_on(
    cache: PolicyCache, policy_file: Path
) -> None:
    load_policy(policy_file, cache=cache)
    [name] = cache.entries()
    header = json.loads((Path(cache.directory) / name).read_bytes().split(b"\n", 1)[0])
    import yaml

    assert str(Path(yaml.__file__).parent) in header["parser"]
    assert str(Path(source.__file__)) in header["parser"]


def test_where_the_cache_is() -> None:
    assert default_cache({CACHE_ENV: "off"}) is None
    assert default_cache({CACHE_ENV: "/somewhere"}).directory == "/somewhere"  # type: ignore[union-attr]
    assert (
        default_cache({"XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}).directory  # type: ignore[union-attr]
        == "/xdg/interlock/policies"
    )
    assert (
        default_cache({"XDG_CACHE_HOME": "relative", "HOME": "/home/u"}).directory  # type: ignore[union-attr]
        == "/home/u/.cache/interlock/policies"
    )


def test_interlock_check_from_the_cache_prints_the_same_and_imports_no_yaml(
    tmp_path: Path,
) -> None:
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    probe = (
        "import sys\nfrom interlock.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n"
        "    code = e.code\nprint('yaml' in sys.modules, 'pydantic' in sys.modules, code)\n"
    )
    argv = [sys.executable, "-c", probe, "check", "-p", str(EXAMPLE), "-n", "shell"]
    argv += ["-a", "command=rm -rf /"]
    runs = [
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=True)
        for _ in range(2)
    ]
    first, second = (run.stdout.splitlines() for run in runs)
    assert first[:-1] == second[:-1] and first[0].startswith("deny")
    assert first[-1] == "True False 3"  # parsed (no pydantic even then)
    assert second[-1] == "False False 3"  # from the cache
    assert runs[0].stderr == runs[1].stderr == ""


def test_a_policy_nested_deeper_than_json_goes_loads_and_is_not_cached(
    cache: PolicyCache, tmp_path: Path
) -> None:
    nested = "1"
    for _ in range(800):
        nested = "{a: " + nested + "}"
    deep = tmp_path / "deep.yaml"
    deep.write_text(f"version: 1\ntools:\n  t:\n    parameters: {nested}\n", encoding="utf-8")
    for _ in range(2):
        assert load_policy(deep, cache=cache).source == str(deep)
    assert list(cache.entries()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_the_cache_is_never_created_inside_another_users_tree(
    tmp_path: Path, policy_file: Path
) -> None:
    home = tmp_path / "someone"
    home.mkdir()
    os.chown(home, 65534, 65534)
    cache = PolicyCache(home / ".cache" / "interlock" / "policies")
    assert load_policy(policy_file, cache=cache).source == str(policy_file)
    assert list(home.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_the_cache_may_be_created_under_another_users_sticky_directory(tmp_path: Path) -> None:
    sticky = tmp_path / "shared"  # as /tmp: anyone's, and no one may replace another's
    sticky.mkdir()
    os.chown(sticky, 65534, 65534)
    sticky.chmod(0o1777)
    cache = PolicyCache(sticky / "mine" / "policies")
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\n", encoding="utf-8")
    load_policy(policy, cache=cache)
    assert len(list(cache.entries())) == 1
    assert (sticky / "mine" / "policies").stat().st_mode & 0o777 == 0o700


def test_the_cache_keeps_the_newest_entries_and_no_dead_writers_files(
    cache: PolicyCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlock.policy import cache as cache_module

    monkeypatch.setattr(cache_module, "_KEPT", 3)
    directory = Path(cache.directory)
    policy = tmp_path / "p.yaml"
    written: list[str] = []  # in the order written
    for version in range(6):
        if version == 5:  # a writer that died long ago left its temporary file
            dead = directory / ".dead.json.1.abc"
            dead.write_bytes(b"half")
            os.utime(dead, (1e9, 1e9))
        policy.write_text(f"version: 1\ndescription: v{version}\n", encoding="utf-8")
        before = set(cache.entries())
        load_policy(policy, cache=cache)
        (new,) = set(cache.entries()) - before
        os.utime(directory / new, (1e9 + version, 1e9 + version))
        written.append(new)
    assert list(cache.entries()) == sorted(written[-3:])
    assert not dead.exists()
