"""Replay the audit log against a draft policy: what would a policy change have
decided differently, on the calls the agents really made?

The names are imported on first use (PEP 562): the CLI's help must stay cheap.

Example::

    from interlock.policy import load_policy
    from interlock.replay import replay_store
    from interlock.store import open_store

    report = replay_store(open_store("sqlite:///.interlock/interlock.db"),
                          load_policy("draft.yaml"))
    print(report.as_json()["changes"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes

if TYPE_CHECKING:
    from interlock.replay.compare import CHANGES, LOOSENING, TIGHTENING, change_of
    from interlock.replay.report import SCHEMA, ReplayFilter, ReplayReport
    from interlock.replay.run import Replayer, replay_rows, replay_store

__all__ = [
    "CHANGES",
    "LOOSENING",
    "SCHEMA",
    "TIGHTENING",
    "ReplayFilter",
    "ReplayReport",
    "Replayer",
    "change_of",
    "replay_rows",
    "replay_store",
]

_LAZY: dict[str, str] = {
    "CHANGES": "interlock.replay.compare",
    "LOOSENING": "interlock.replay.compare",
    "TIGHTENING": "interlock.replay.compare",
    "change_of": "interlock.replay.compare",
    "SCHEMA": "interlock.replay.report",
    "ReplayFilter": "interlock.replay.report",
    "ReplayReport": "interlock.replay.report",
    "Replayer": "interlock.replay.run",
    "replay_rows": "interlock.replay.run",
    "replay_store": "interlock.replay.run",
}

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
