"""The session's fingerprint index and the cheaper probes decide exactly what a scan of
every step and the full probes decided: a view never sees a later step's data, a
dropped step's data no longer flows, a step of an older format still refuses, the
user's own words stay the user's; and the probe of arguments joined across a seam,
the base64 decoding and the grams of short texts find what they found before."""

from __future__ import annotations

import base64
import binascii
import hashlib
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.policy.sessionrules import FlowTest, StepSelector, provenance_labels
from interlock.session import fingerprints
from interlock.session.fingerprints import FORMAT_MARK, of_data, probe, probe_seams
from interlock.session.history import MemoryHistory, NewStep, SessionView

SECRET = "DB_PASSWORD=pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33"
PAGE = "Release notes: the 4.2 build ships ops-desk@vendor-9f3k2.example as support."
ANY = FlowTest(StepSelector())
SECRETS = FlowTest(StepSelector(labels=frozenset({"secret"})))


def _call(
    history: MemoryHistory, name: str, data: str, labels: frozenset[str] = frozenset()
) -> None:
    decision_id = f"d-{name}-{len(history.view('t', 's').steps)}"
    history.append("t", "s", NewStep("tool", name, "allow", decision_id, labels=labels))
    history.settle("t", "s", decision_id, executed=True, fingerprints=of_data(data))


def _flows(test: FlowTest, view: SessionView, value: str) -> bool:
    return test.holds(view, {"body": value, "to": "bob@corp.example"}, None)


def test_a_view_never_sees_a_step_settled_after_it_was_taken() -> None:
    history = MemoryHistory()
    _call(history, "fetch_url", PAGE, frozenset({"untrusted"}))
    history.append("t", "s", NewStep("tool", "read_file", "allow", "d-secret"))
    before = history.view("t", "s")
    history.settle(
        "t", "s", "d-secret", executed=True, fingerprints=of_data(SECRET), labels=frozenset()
    )
    after = history.view("t", "s")
    assert before.index is after.index  # shared, and grown: a filter only
    assert before.may_hold(probe("pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33"))
    assert not _flows(ANY, before, "pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33")
    assert _flows(ANY, after, "pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33")
    assert not _flows(ANY, after, "the weekly report is attached, nothing more")


def test_a_dropped_steps_data_stops_flowing_and_the_index_is_rebuilt() -> None:
    history = MemoryHistory(max_steps=5)
    values = [hashlib.sha256(str(n).encode()).hexdigest()[:28] for n in range(40)]
    for value in values:
        _call(history, "read_file", f"KEY={value}")
    view = history.view("t", "s")
    assert view.index is not None and view.index.added <= 2 * 5 + 16 + 1
    assert not _flows(ANY, view, values[0])  # dropped long ago
    assert not _flows(ANY, view, values[-6])  # just past the bound
    for value in values[-5:]:
        assert _flows(ANY, view, value), value


def test_a_step_of_an_older_format_is_taken_to_carry_every_argument() -> None:
    history = MemoryHistory()
    _call(history, "fetch_url", PAGE, frozenset({"untrusted"}))
    history.append("t", "s", NewStep("tool", "read_file", "allow", "old", labels=frozenset()))
    old = frozenset({12345, 67890})  # no FORMAT_MARK: an agent not upgraded sent it
    assert FORMAT_MARK not in old
    history.settle("t", "s", "old", executed=True, fingerprints=old)
    view = history.view("t", "s")
    assert _flows(ANY, view, "an unrelated sentence about lunch plans")
    # a selector its step does not match: the old step is not read
    assert not _flows(SECRETS, view, "an unrelated sentence about lunch plans")


def test_the_labels_filter_skips_a_session_without_the_label_and_not_one_with_it() -> None:
    history = MemoryHistory()
    _call(history, "read_file", SECRET)  # no label: flows_from {labels: [secret]} reads none
    view = history.view("t", "s")
    assert not _flows(SECRETS, view, "pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33")
    _call(history, "read_file", SECRET, frozenset({"secret"}))
    assert _flows(SECRETS, history.view("t", "s"), "pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33")


def test_provenance_with_the_index_keeps_the_users_words_the_users() -> None:
    history = MemoryHistory()
    history.append(
        "t",
        "s",
        NewStep(
            "input",
            "input",
            "input",
            fingerprints=of_data("mail the notes to carol.ng@corp.example"),
            trusted=True,
            executed=True,
        ),
    )
    view = history.view("t", "s")
    assert view.index is not None and not view.index.prints  # trusted inputs: not in it
    assert provenance_labels(view, probe("carol.ng@corp.example")) == frozenset()
    _call(history, "fetch_url", PAGE + " or carol.ng@corp.example", frozenset({"untrusted"}))
    view = history.view("t", "s")
    assert provenance_labels(view, probe("carol.ng@corp.example")) == frozenset()
    assert provenance_labels(view, probe("ops-desk@vendor-9f3k2.example")) == {"untrusted"}


def test_a_secret_split_across_two_arguments_is_a_flow_and_its_halves_alone_are_not() -> None:
    history = MemoryHistory()
    _call(history, "read_file", SECRET, frozenset({"secret"}))
    view = history.view("t", "s")
    value = "pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33"
    split = {"subject": "notes " + value[:13], "body": value[13:] + " thanks"}
    assert SECRETS.holds(view, split, None)
    assert not SECRETS.holds(view, {"subject": "notes " + value[:13]}, None)


WORDS = st.sampled_from(["alpha", "ZmFrZQ==", "%41%42", "\\u0041", "7f00aa11", "the", "x"])
TEXT = st.one_of(
    st.text(string.ascii_letters + string.digits + " @.-_/+=%:\\", max_size=60),
    st.lists(WORDS, max_size=8).map(" ".join),
    st.text(max_size=30),  # any Unicode
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(TEXT, min_size=2, max_size=4))
def test_the_seams_probe_and_the_parts_probes_hold_the_joined_probe(parts: list[str]) -> None:
    covered = set(probe_seams(parts))
    for part in parts:
        covered |= probe(part)
    assert probe("".join(parts)) <= covered


_CONTROL = bytes([*range(9), 11, 12, *range(14, 32), 127])


def _mostly_text_reference(raw: bytes) -> str | None:
    """Whether a decoding reads as text, as it was first written."""
    if not raw:
        return None
    decoded = raw.decode("utf-8", "replace")
    bad = len(raw) - len(raw.translate(None, _CONTROL)) + decoded.count("\ufffd")
    return decoded if bad <= 0.15 * len(decoded) else None


@settings(max_examples=500, deadline=None)
@given(
    raw=st.one_of(
        st.binary(max_size=80),
        st.text(max_size=40).map(str.encode),
        st.lists(st.one_of(st.text(max_size=6).map(str.encode), st.binary(max_size=2))).map(
            b"".join
        ),
    )
)
def test_what_reads_as_text_is_decided_as_before(raw: bytes) -> None:
    assert fingerprints._mostly_text(raw) == _mostly_text_reference(raw)


def _b64_forms_reference(run: str) -> list[str]:
    """The decoding as it was written with the ``base64`` module."""
    core = run.rstrip("=")
    urlsafe = "-" in core or "_" in core
    out = []
    for start in range(4):
        piece = core[start:]
        rest = len(piece) % 4
        piece = piece[:-1] if rest == 1 else piece + "=" * (-rest % 4)
        if len(piece) < 12:
            continue
        try:
            raw = (
                base64.urlsafe_b64decode(piece)
                if urlsafe
                else base64.b64decode(piece, validate=True)
            )
        except (binascii.Error, ValueError):
            continue
        decoded = _mostly_text_reference(raw)
        if decoded is not None:
            out.append(decoded)
    return out


@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(st.binary(min_size=9, max_size=60), st.text(max_size=40).map(str.encode)),
    urlsafe=st.booleans(),
    cut=st.integers(0, 3),
)
def test_base64_runs_decode_as_the_base64_module_decodes_them(
    raw: bytes, urlsafe: bool, cut: int
) -> None:
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()[cut:]
    for run in fingerprints._B64_RUN.findall(encoded):
        assert list(fingerprints._b64_forms(run)) == _b64_forms_reference(run)


@settings(max_examples=200, deadline=None)
@given(text=st.text(string.ascii_lowercase + string.digits + "@.", min_size=0, max_size=300))
def test_grams_of_short_and_long_texts_are_every_gram(text: str) -> None:
    data = text.encode()
    want = {
        int.from_bytes(data[i : i + 16], "big") % ((1 << 61) - 1) for i in range(len(data) - 15)
    }
    assert set(fingerprints._grams(data, 1)) == want
