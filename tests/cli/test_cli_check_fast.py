"""`interlock check` without typer (ADR 0014): the same bytes, exit codes and messages
as the typer command, or typer itself whenever the command line is not the plain form.

Each case runs twice: through typer (CliRunner on the app, which prints with rich) and
through `interlock.cli.main` in this process (the path the console script takes).
"""

from __future__ import annotations

import io
import json
import re
import sys
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from interlock import cli
from interlock.cli_app import app
from interlock.cli_check import _EMOJI_NAME, Line, parse_check_argv, plain_is_exact

POLICY = str(Path(str(resources.files("interlock").joinpath("examples"))) / "interlock.yaml")
_DECISION_ID = re.compile(r"(dec|apr)_[0-9A-Za-z_-]+")


def _same_ids(text: str) -> str:
    return _DECISION_ID.sub(r"\1_X", text)


def _typer(args: list[str], stdin: str | None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["check", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def _fast(
    args: list[str],
    stdin: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["interlock", "check", *args])
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
    taken: list[str] = []

    def typer_would_run() -> None:  # the fast path must not hand these to typer
        taken.append("typer")

    monkeypatch.setattr("interlock.cli_app.app", typer_would_run)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert taken == []
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["--name", "shell", "--arg", "command=ls -la"], None),
        (["-n", "shell", "-a", "command=rm -rf /"], None),
        (["--name=refund_order", "-a", "amount=500", "-a", "currency=EUR"], None),
        (["--name", "refund_order", "-a", "amount=500", "--output-json"], None),
        (["--name", "refund_order", "-a", 'amount="lots"', "-a", "currency=EUR"], None),
        (["--name", "send_email", "-a", "to=x@y.net"], None),
        (["--name", "send_email", "-a", "to=x@y.net", "--output-json"], None),
        (["--name", "x", "--arg", "url=https://u:hunter2@evil.example.net/"], None),
        (["--name", "x", "--kind", "llm", "--tenant", "acme", "--agent", "a1"], None),
        (["--name", "x", "--scope", "data", "--description", "reads rows", "--session", "s"], None),
        (
            ["--json", "-", "--output-json"],
            '{"name": "refund_order", "arguments": {"amount": 250}}',
        ),
        (["--json", '{"name": "shell", "arguments": {"command": "ls"}}'], None),
        (["--json", "{not json"], None),
        (["--json", "[1]"], None),
        (["--json", '{"kind": "robot", "name": "x"}'], None),
        (["--json", '{"name": "x", "target": 5}'], None),
        (["--json", '{"name": "x", "capabilities": "net"}'], None),
        (["--json", '{"name": "x", "context": {"tenant": "t", "bogus": 1}}'], None),
        (["--json", '{"name": "x", "context": {"tenant": null}}'], None),
        (["--json", '{"name": "shell", "arguments": {"command": "ls"}, "schema": {}}'], None),
        (["--json", '{"name": "refund_order", "arguments": {"amount": 50.5}}'], None),
        (["--json", '{"name": "m", "kind": "llm", "arguments": {"max_tokens": 10}}'], None),
        (["--json", '{"name": "m", "kind": "llm"}', "--agent", "a1"], None),
        (["--arg", "command=ls"], None),
        (["--name", "x", "--arg", "novalue"], None),
        (["--name", "x", "--arg", "[1]=é ✓"], None),
    ],
)
def test_the_fast_check_prints_what_the_typer_command_prints(
    args: list[str],
    stdin: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["-p", POLICY, *args]
    expected = _typer(argv, stdin)
    got = _fast(argv, stdin, capsys, monkeypatch)
    assert got[0] == expected[0]
    assert _same_ids(got[1]) == _same_ids(expected[1])
    assert got[2] == expected[2]


def test_the_fast_check_reports_a_bad_policy_and_writes_the_event_like_typer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - id: r\n    decision: maybe\n", encoding="utf-8")
    assert _fast(["-p", str(bad), "--name", "x"], None, capsys, monkeypatch) == _typer(
        ["-p", str(bad), "--name", "x"], None
    )
    missing = ["-p", str(tmp_path / "nope.yaml"), "--name", "x"]
    assert _fast(missing, None, capsys, monkeypatch) == _typer(missing, None)
    marked = tmp_path / "marked.yaml"
    marked.write_text(
        "version: 1\ndefault: deny\nrules:\n  - id: r\n    decision: deny\n"
        "    name: shell\n    reason: 'see [bold]the runbook[/bold] :warning:'\n",
        encoding="utf-8",
    )
    for extra in ([], ["--output-json"]):  # through rich: its markup and emoji apply
        argv = ["-p", str(marked), "--name", "shell", *extra]
        got, expected = _fast(argv, None, capsys, monkeypatch), _typer(argv, None)
        assert (got[0], _same_ids(got[1]), got[2]) == (
            expected[0],
            _same_ids(expected[1]),
            expected[2],
        )
        assert got[0] == 3
        if not extra:
            assert "[bold]" not in got[1] and ":warning:" not in got[1]
    lax = tmp_path / "lax.yaml"  # valid only by the models' coercion (version: true)
    lax.write_text(Path(POLICY).read_text("utf-8").replace("version: 1", "version: true"))
    for _ in range(2):  # parsed, then from the cache
        argv = ["-p", str(lax), "--name", "shell", "-a", "command=ls"]
        assert _fast(argv, None, capsys, monkeypatch) == _typer(argv, None)
    events = tmp_path / "events.jsonl"
    argv = ["-p", POLICY, "--name", "shell", "-a", "command=rm -rf /", "--events", str(events)]
    assert _fast(argv, None, capsys, monkeypatch)[0] == 3
    assert json.loads(events.read_text("utf-8"))["decision"] == "deny"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["--name", "x", "--help"],
        ["--nme", "x"],
        ["extra", "--name", "x"],
        ["--name"],
        ["--name="],
        ["-n=x"],
        ["-nshell"],
        ["--name", "a", "--name", "b"],
        ["--output-json", "--output-json", "--name", "x"],
        ["--output-json=1", "--name", "x"],
        ["--name", "-x"],
        ["--name", "x", "--", "--arg", "a=1"],
        ["--policy", "", "--name", "x"],
    ],
)
def test_anything_but_the_plain_form_is_left_to_typer(argv: list[str]) -> None:
    assert parse_check_argv(argv) is None


def test_the_plain_form_parses_as_typer_would() -> None:
    request = parse_check_argv(
        [
            "-p",
            "a.yaml",
            "--name=shell",
            "-a",
            "x=1",
            "--arg",
            "y=-2",
            "--json",
            "-",
            "--output-json",
        ]
    )
    assert request is not None
    assert request.policy == Path("a.yaml")
    assert (request.name, request.arg, request.action_json) == ("shell", ("x=1", "y=-2"), "-")
    assert request.as_json and request.kind == "tool" and request.tenant == "default"


def _rich(line: Line) -> str:
    console = Console(file=io.StringIO(), highlight=False, soft_wrap=True, width=160)
    if line.json:
        console.print_json(line.markup)
    else:
        console.print(line.markup, markup=True)
    return console.file.getvalue()  # type: ignore[attr-defined]


_TEXT = st.lists(
    st.sampled_from(
        [*"ab :[]/\\\t\n\r\x07\x1b{}\"'é✓😀_-8.", ":smile:", "[red]", "[/]", ":Smile-text:"]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(reason=_TEXT, rule=_TEXT)
def test_plain_text_is_printed_only_when_rich_would_print_the_same(reason: str, rule: str) -> None:
    lines = [Line(f"[green]allow[/]  {reason}", f"allow  {reason}"), Line(rule, rule)]
    if plain_is_exact(lines, environ={}):
        assert [_rich(line) for line in lines] == [f"{line.plain}\n" for line in lines]


@settings(max_examples=200, deadline=None)
@given(data=st.dictionaries(_TEXT, st.one_of(_TEXT, st.lists(_TEXT, max_size=3)), max_size=4))
def test_plain_json_is_printed_only_when_rich_would_print_the_same(data: dict[str, object]) -> None:
    text = json.dumps(data)
    line = Line(text, json.dumps(json.loads(text), indent=2, ensure_ascii=False), json=True)
    if plain_is_exact([line], environ={}):
        assert _rich(line) == f"{line.plain}\n"


def test_colour_asked_for_by_the_environment_goes_through_rich() -> None:
    plain = [Line("[green]allow[/]  fine", "allow  fine")]
    assert plain_is_exact(plain, environ={})
    assert not plain_is_exact(plain, environ={"FORCE_COLOR": "1"})
    assert not plain_is_exact(plain, environ={"TTY_COMPATIBLE": "1"})
    assert not plain_is_exact([Line("x [b]y[/b]", "x [b]y[/b]")], environ={})
    assert not plain_is_exact([Line("a :smile: b", "a :smile: b")], environ={})
    url = "approve at: http://127.0.0.1:8740/approvals/apr_1"
    assert plain_is_exact([Line(url, url)], environ={})
    long = Line("[red]deny[/]  " + "why " * 100, "deny  " + "why " * 100)
    assert plain_is_exact([long], environ={})
    assert _rich(long) == f"{long.plain}\n"  # no wrap at the console's 160 columns


def test_text_other_than_ascii_is_plain_only_on_a_utf8_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    accented = [Line("café ✓", "café ✓")]
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    assert plain_is_exact(accented, environ={})
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    assert not plain_is_exact(accented, environ={})
    assert plain_is_exact([Line("cafe", "cafe")], environ={})


def test_every_emoji_name_is_one_the_plain_check_refuses() -> None:
    from rich._emoji_codes import EMOJI

    assert all(_EMOJI_NAME.fullmatch(name) for name in EMOJI)
