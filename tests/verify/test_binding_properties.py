"""Properties of the binding as the verifier applies it: a grant for request A passes
for A and for nothing else — any change to the method, the target's bytes, the body's
bytes or the idempotency key is refused, and the refusal leaves the grant usable."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.errors import BindingMismatch
from interlock.verify import Verifier

from .support import JWKS, Clock, Req, grant_for

TARGET_CHARS = st.sampled_from(list("abz019/-._~%2FAF?&=+;:@!$'()*,"))
REQUESTS = st.builds(
    Req,
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
    target=st.text(TARGET_CHARS, max_size=30).map(lambda t: "/" + t),
    body=st.binary(max_size=64),
    idempotency_key=st.none() | st.text(st.characters(codec="ascii"), min_size=1, max_size=12),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granted=REQUESTS, sent=REQUESTS)
def test_a_grant_passes_for_its_request_and_no_other(granted: Req, sent: Req) -> None:
    verifier = Verifier(JWKS, audience="shop", clock=Clock())
    token = grant_for(granted)
    if sent != granted:
        with pytest.raises(BindingMismatch):
            verifier.verify(token, **sent.kwargs())
    assert verifier.verify(token, **granted.kwargs()).binding == granted.binding()


@settings(max_examples=200, deadline=None)
@given(granted=REQUESTS, data=st.data())
def test_any_single_change_is_refused(granted: Req, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(["method", "target", "body", "idempotency_key"]))
    other = data.draw(REQUESTS)
    sent = replace(granted, **{field: getattr(other, field)})
    verifier = Verifier(JWKS, audience="shop", clock=Clock())
    token = grant_for(granted)
    if getattr(sent, field) == getattr(granted, field):
        assert verifier.verify(token, **sent.kwargs())
    else:
        with pytest.raises(BindingMismatch):
            verifier.verify(token, **sent.kwargs())
