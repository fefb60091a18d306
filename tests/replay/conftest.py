"""Fixtures of the replay tests: a recorded log of the demo's agents in a real SQLite
store (written once per module, as a guard writes decisions), and draft policies
derived from the example policy by one edit each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.demo import example_policy_text
from interlock.replay.demo_log import write_demo_log
from interlock.store import SqlStore, open_store

#: Records in the shared log: small enough to be quick, large enough for every kind.
RECORDS = 3000

EXAMPLE = example_policy_text()


def draft(old: str, new: str) -> str:
    """The example policy with ``old`` replaced by ``new`` (which must be there)."""
    assert old in EXAMPLE, old
    return EXAMPLE.replace(old, new, 1)


#: deny → allow: a stranger's paste site joins the known hosts.
LOOSENED = draft(
    'domain: ["docs.example.com", "*.example.org", "api.github.com"]',
    'domain: ["docs.example.com", "*.example.org", "api.github.com", "pastebin.example.net"]',
)
#: allow → deny: nobody may send mail any more (the default, deny, decides).
TIGHTENED = draft(
    """  - id: email-allowed
    decision: allow
    reason: sending mail is allowed
    name: send_email""",
    "",
)


@pytest.fixture(scope="module")
def log_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("replay") / "log.db"
    url = f"sqlite:///{path}"
    store = open_store(url)
    try:
        write_demo_log(store, RECORDS)
    finally:
        store.close()
    return url


@pytest.fixture
def log(log_url: str) -> Iterator[SqlStore]:
    store = open_store(log_url)
    yield store
    store.close()


@pytest.fixture
def write_policy(tmp_path: Path) -> object:
    def write(text: str, name: str = "draft.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
