"""The check endpoints encode a plain decision straight from its fields: the bytes must
be exactly what the documented model (``DecisionOut``) encodes, for any text a reason
or a rule id can hold — control characters, quotes, non-ASCII, secrets to redact."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core.decision import ApprovalRef, Decision, ReservationRef, ShadowVerdict, Verdict
from interlock.core.redaction import Redactor
from interlock.server.api_models import DecisionOut
from interlock.server.routes.checks import decision_json

REDACTOR = Redactor(extra_patterns=("acct-[0-9]+",))
SECRETS = st.sampled_from(["", " sk-live-0123456789abcdef0123", " acct-123", ' "quoted"\n'])
TEXT = st.builds(lambda a, b: a + b, st.text(max_size=40), SECRETS)
PLAIN = st.builds(
    Decision,
    verdict=st.sampled_from(list(Verdict)),
    reason=TEXT,
    rule_ids=st.lists(st.text(max_size=12), max_size=4).map(tuple),
    decision_id=st.text(min_size=1, max_size=24),
    fail_open=st.booleans(),
    grant=st.none(),  # a grant goes through the model (the last test); core names it by a protocol
)


def _model(decision: Decision) -> bytes:
    return DecisionOut.of(decision, REDACTOR).model_dump_json().encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(PLAIN)
def test_a_plain_decision_encodes_exactly_as_the_model(decision: Decision) -> None:
    assert decision_json(decision, REDACTOR) == _model(decision)


@settings(max_examples=100, deadline=None)
@given(
    PLAIN,
    st.sampled_from(["approval", "reservation", "shadow", "cause"]),
)
def test_any_other_decision_goes_through_the_model(decision: Decision, extra: str) -> None:
    fields = {
        "approval": ApprovalRef(id="apr_1", url="https://example.com/a", status="pending"),
        "reservation": ReservationRef(id="res_1", amounts=(("per-tool", 3, "USD"),)),
        "shadow": ShadowVerdict(Verdict.DENY, "shadow \u2028 acct-9", ("r",)),
        "cause": ValueError("the store is away"),
    }
    richer = Decision(
        decision.verdict,
        decision.reason,
        decision.rule_ids,
        decision_id=decision.decision_id,
        fail_open=decision.fail_open,
        **{extra: fields[extra]},  # type: ignore[arg-type]
    )
    assert decision_json(richer, REDACTOR) == _model(richer)


def test_secrets_in_a_reason_are_redacted() -> None:
    decision = Decision(Verdict.DENY, "refused: acct-4242", ("r",), decision_id="dec_1")
    body = decision_json(decision, REDACTOR)
    assert b"acct-4242" not in body and b"REDACTED" in body
