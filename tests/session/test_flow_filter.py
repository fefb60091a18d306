"""The first look FlowTest and ProvenanceTest take at a call — the union of its
argument probes, kept by value, against the session's index — refuses nothing and lets
nothing through by itself: the same arguments flow once a later view holds the data, a
secret split across two arguments or inside a list still flows, a recipient joined
from two arguments is still the page's, and a benign look-alike passes."""

from __future__ import annotations

from interlock.policy.sessionrules import FlowTest, ProvenanceTest, StepSelector
from interlock.session.fingerprints import of_data
from interlock.session.history import MemoryHistory, NewStep

TOKEN = "q8Zr4Wm2Kx7Tn3Vb9Lp5Hs1Dg6Fj0Yc"
SECRET = f"DB_PASSWORD=pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33 API_KEY={TOKEN}"
SECRETS = FlowTest(StepSelector(labels=frozenset({"secret"})))


def _read(history: MemoryHistory, decision_id: str, data: str, secret: bool) -> None:
    labels = frozenset({"secret"}) if secret else frozenset()
    history.append("t", "s", NewStep("tool", "read_file", "allow", decision_id, labels=labels))
    history.settle("t", "s", decision_id, executed=True, fingerprints=of_data(data))


def test_the_same_arguments_flow_once_a_later_view_holds_the_data() -> None:
    history = MemoryHistory()
    _read(history, "d-1", "the weekly report: revenue up 12% in Q3", secret=False)
    args = {"to": "bob@corp.example", "body": "pa55-w0rd-4b1c-9d2e-7f00"}
    before = history.view("t", "s")
    assert not SECRETS.holds(before, args, None)
    assert not SECRETS.holds(before, args, None)  # from the kept union: still no
    _read(history, "d-2", SECRET, secret=True)
    after = history.view("t", "s")
    assert SECRETS.holds(after, args, None)
    assert not SECRETS.holds(before, args, None)  # the earlier view never sees it


def test_a_secret_split_across_arguments_or_in_a_list_flows_and_a_look_alike_does_not() -> None:
    history = MemoryHistory()
    _read(history, "d-1", SECRET, secret=True)
    view = history.view("t", "s")
    # each half shorter than a gram: only the probe across the seam finds it
    split = {"subject": TOKEN[:13], "body": TOKEN[13:26]}
    assert SECRETS.holds(view, split, None)
    assert SECRETS.holds(view, split, None)  # the union kept: the same answer
    assert SECRETS.holds(view, {"to": "a@b.example", "items": ["x", SECRET[12:40]]}, None)
    look_alike = {"subject": "DB_PASSWORD=<redacted>", "body": "rotate it on Monday"}
    assert not SECRETS.holds(view, look_alike, None)
    assert not SECRETS.holds(view, look_alike, None)


PAGE = "Release notes: the 4.2 build ships ops-desk@vendor-9f3k2.example as support."
FROM_PAGE = ProvenanceTest(("to", "cc"), frozenset({"untrusted"}))


def test_provenance_first_look_neither_refuses_nor_lets_through_by_itself() -> None:
    history = MemoryHistory()
    history.append(
        "t", "s", NewStep("input", "input", "input", fingerprints=of_data("mail bob"), trusted=True)
    )
    history.append(
        "t", "s", NewStep("tool", "fetch_url", "allow", "d-1", labels=frozenset({"untrusted"}))
    )
    before = history.view("t", "s")
    history.settle("t", "s", "d-1", executed=True, fingerprints=of_data(PAGE))
    view = history.view("t", "s")
    whole = {"to": "ops-desk@vendor-9f3k2.example"}
    split = {"to": "ops-desk@vend", "cc": "or-9f3k2.example"}  # joined: the page's
    for _ in range(2):  # the second time from the kept union
        assert FROM_PAGE.holds(view, whole, None)
        assert FROM_PAGE.holds(view, split, None)
        assert not FROM_PAGE.holds(before, whole, None)  # taken before the page came
        assert not FROM_PAGE.holds(view, {"to": "bob@corp.example", "cc": "ops"}, None)
