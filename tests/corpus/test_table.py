"""The corpus itself: big enough, every row well-formed, every known hole explained."""

from __future__ import annotations

import json

from .case import TOOLS, Case
from .table import ADVERSARIAL, CASES


def _key(case: Case) -> str:
    return json.dumps([case.policy, case.tool, case.args], sort_keys=True)


def test_the_corpus_holds_at_least_300_distinct_adversarial_inputs() -> None:
    assert len({_key(case) for case in ADVERSARIAL}) >= 300


def test_every_row_has_its_own_id_and_input() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    keys = [_key(case) for case in CASES]
    doubles = {k for k in keys if keys.count(k) > 1}
    assert not doubles, doubles


def test_every_row_calls_a_corpus_tool_with_exactly_its_parameters() -> None:
    for case in CASES:
        params = TOOLS[case.tool]
        assert set(case.args) == set(params), case.id
        for name, value in case.args.items():
            kind = "list" if isinstance(value, list) else "str"
            assert kind == params[name], f"{case.id}: {name} is a {kind}"
            if kind == "list":
                assert all(isinstance(item, str) for item in value), case.id


def test_every_row_says_what_intent_it_tests() -> None:
    for case in CASES:
        assert case.intent.strip(), case.id
        assert case.category.split(":")[0] in {
            "shell",
            "denylist",
            "url",
            "path",
            "scope",
            "benign",
        }


def test_a_hole_is_marked_on_the_side_it_belongs_to() -> None:
    """``bypass`` only on adversarial rows, ``false_positive`` only on benign ones, each
    with its reason in words."""
    for case in CASES:
        if case.bypass is not None:
            assert case.adversarial and len(case.bypass) > 20, case.id
        if case.false_positive is not None:
            assert not case.adversarial and len(case.false_positive) > 20, case.id


def test_every_kind_of_input_the_brief_names_is_in_the_corpus() -> None:
    categories = {case.category for case in CASES}
    for wanted in (
        "shell:operators",
        "shell:substitutions",
        "shell:compound",
        "shell:nested",
        "shell:quoting",
        "shell:program-paths",
        "shell:wrappers",
        "shell:flags",
        "shell:variables",
        "shell:globs",
        "shell:steering",
        "shell:unicode",
        "shell:nul",
        "shell:long",
        "shell:comments",
        "url:parser-differential",
        "url:scheme-and-host",
        "url:idna",
        "url:addresses",
        "url:file",
        "url:lists",
        "url:aliases",
        "path:spellings",
        "path:nul",
        "path:lists",
        "path:aliases",
        "scope",
        "benign:shell",
        "benign:urls",
        "benign:paths",
    ):
        assert wanted in categories, wanted
