"""A refusal's reason is read by a model, written to the audit log and sent over the
wire: it must stay short whatever the input. (The verdicts are the corpus's business;
this is what comes with them.)"""

from __future__ import annotations

from typing import Final

import pytest

from interlock import Action, Verdict

from .surfaces import make_guards
from .table import CASES

#: Far above any reason the corpus gets today (a few hundred characters).
MAX_REASON: Final = 2_000

GUARDS, _ = make_guards()


def test_no_row_of_the_corpus_gets_a_long_reason() -> None:
    too_long = []
    for case in CASES:
        decision = GUARDS[case.policy].check(Action.tool(case.tool, dict(case.args)))
        if len(decision.reason) > MAX_REASON:
            too_long.append((case.id, len(decision.reason)))
    assert not too_long


@pytest.mark.parametrize("levels", [20, 100, 1000])
def test_nested_substitutions_get_a_short_reason(levels: int) -> None:
    """Each command whose program is a substitution was quoted whole in the reason:
    a reason quadratic in the input (4,000 levels, 12 kB, made 48 MB and 1.6 s)."""
    command = "echo " + "$(" * levels + "ls" + ")" * levels
    decision = GUARDS["example"].check(Action.tool("shell", {"command": command}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert len(decision.reason) <= MAX_REASON, len(decision.reason)
