"""`audit replay` of a session-aware draft: each session is rebuilt from its records in
order, so a draft rule on labels or `after:` is judged as it would have been; flows and
provenance cannot be (the audit keeps no fingerprints), and the report says so."""

from __future__ import annotations

from pathlib import Path

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.replay import replay_store

RECORDED = """\
version: 1
default: allow
rules: []
"""
DRAFT = """\
version: 1
default: allow
labels:
  - {id: secrets, attach: [secret], name: read_file, params: {path: {glob: "**/.env"}}}
rules:
  - id: no-mail-after-secret
    decision: deny
    reason: a session that read a secret sends no mail
    name: send_mail
    session:
      labels: [secret]
  - id: one-delete
    decision: deny
    reason: one delete per session
    name: delete
    session:
      after: {name: delete}
"""


def test_replay_rebuilds_sessions_in_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with Guard(load_policy_text(RECORDED), store=url) as guard:
        for session, calls in {
            "s-1": [("read_file", {"path": "/srv/.env"}), ("send_mail", {"to": "x@corp.com"})],
            "s-2": [("send_mail", {"to": "x@corp.com"}), ("read_file", {"path": "/srv/.env"})],
            "s-3": [("delete", {"id": 1}), ("delete", {"id": 2}), ("delete", {"id": 3})],
        }.items():
            for name, arguments in calls:
                action = Action.tool(name, arguments, context=Context(session_id=session))
                assert guard.check(action).verdict is Verdict.ALLOW
        store = guard.store
        assert store is not None
        report = replay_store(store, load_policy_text(DRAFT)).as_json()
    assert report["records"]["replayed"] == 7
    # s-1's mail came after the secret read, s-2's before it; s-3's 2nd and 3rd delete
    assert report["rules"]["no-mail-after-secret"]["new"] == 1
    assert report["rules"]["one-delete"]["new"] == 2
    assert report["tightened"] == 3
    assert "no fingerprints" in report["sessions"]["note"]


def test_a_plain_draft_report_has_no_session_note(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with Guard(load_policy_text(RECORDED), store=url) as guard:
        guard.check(Action.tool("x", {}, context=Context(session_id="s")))
        assert guard.store is not None
        report = replay_store(guard.store, load_policy_text(RECORDED)).as_json()
    assert "sessions" not in report
