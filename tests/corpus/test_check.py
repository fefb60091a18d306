"""The corpus in process: ``Guard.check`` without a tool schema (what a caller that
declares none gets), ``Guard.acheck`` with the tool's schema, and ``@guard.protect``
on a ``**kwargs`` function (a body that must run only on allow)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from interlock import Action, Blocked, Guard

from .case import DESCRIPTION, Case, PolicyName, tool_schema
from .surfaces import Bodies, Recorder, assert_outcome, fresh, make_guards
from .table import params


@pytest.fixture(scope="module")
def guards() -> Iterator[tuple[dict[PolicyName, Guard], Recorder]]:
    made, recorder = make_guards()
    yield made, recorder
    for guard in made.values():
        guard.close()


@pytest.mark.parametrize("case", params())
def test_check_without_a_schema(
    case: Case, guards: tuple[dict[PolicyName, Guard], Recorder]
) -> None:
    made, recorder = guards
    with fresh(recorder):
        made[case.policy].check(Action.tool(case.tool, dict(case.args)))
        assert_outcome(case, recorder.decisions, None, "Guard.check")


@pytest.mark.parametrize("case", params())
async def test_acheck_with_the_tool_schema(
    case: Case, guards: tuple[dict[PolicyName, Guard], Recorder]
) -> None:
    made, recorder = guards
    action = Action.tool(
        case.tool, dict(case.args), schema=tool_schema(case.tool), description=DESCRIPTION
    )
    with fresh(recorder):
        await made[case.policy].acheck(action)
        assert_outcome(case, recorder.decisions, None, "Guard.acheck with a schema")


@pytest.mark.parametrize("case", params())
def test_protect_runs_the_body_only_on_allow(
    case: Case, guards: tuple[dict[PolicyName, Guard], Recorder]
) -> None:
    made, recorder = guards
    bodies = Bodies()

    def tool(**arguments: Any) -> str:
        return bodies.run(case.tool, arguments)

    protected = made[case.policy].protect(name=case.tool)(tool)
    raised: Blocked | None = None
    with fresh(recorder):
        try:
            protected(**case.args)
        except Blocked as exc:
            raised = exc
        assert_outcome(case, recorder.decisions, bodies.ran, "@guard.protect")
    assert (raised is None) is case.expect.allows, raised
