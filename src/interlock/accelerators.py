"""Which of Interlock's optional C accelerators this process uses.

Four hot paths have a C twin, built when a C compiler is there at install time
(``pyproject.toml``'s optional ``ext-modules``); the Python code is the reference and
computes the same values without it, only slower (docs/performance.md):

- ``fingerprints`` (``interlock.session._speedups``): a tool result's fingerprints and
  an argument's probe, for session rules' data flows (ADR 0031);
- ``session records`` (``interlock.session._history``): a session step's records made
  in one call (ADR 0032), and the loop that joins a call's arguments to what the
  session's earlier calls sent (``interlock.session.tails``, ADR 0043);
- ``redaction`` (``interlock.core._redaction``): the audit record's redaction walk
  (ADR 0036);
- ``chain links`` (``interlock.store._chain``): the bytes an audit chain link hashes
  (ADR 0036).

Each module decides at import whether to use its accelerator: one that was not built
is not, nor any while ``INTERLOCK_NO_SPEEDUPS`` is set (to anything but empty or
``0``) when it is imported. :func:`accelerators` reports what was decided, importing
the four modules if need be (``import interlock`` imports none of them).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Final

from interlock._extension import switched_off

__all__ = [
    "Accelerator",
    "accelerators",
    "accelerators_warning",
    "describe_accelerators",
]

_NOT_BUILT: Final = "not built (no C compiler when Interlock was installed)"
_SWITCHED_OFF: Final = "INTERLOCK_NO_SPEEDUPS is set"
#: what to do about each reason (docs/performance.md)
_REMEDIES: Final = {
    _NOT_BUILT: "reinstall Interlock where a C compiler is available (docs/performance.md)",
    _SWITCHED_OFF: "unset INTERLOCK_NO_SPEEDUPS",
}


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One optional C accelerator: its ``name``, the extension ``module``, what it
    speeds up, whether this process uses it, and why not (``None`` when it does)."""

    name: str
    module: str
    speeds_up: str
    in_use: bool
    why_not: str | None


def accelerators() -> tuple[Accelerator, ...]:
    """The four accelerators, in a fixed order, as this process uses them."""
    from interlock.core import redaction
    from interlock.session import fingerprints, history
    from interlock.store import chain

    switch = switched_off()
    found: list[Accelerator] = []
    for name, module, speeds_up, in_use in (
        (
            "fingerprints",
            "interlock.session._speedups",
            "session data-flow fingerprints",
            fingerprints.ACCELERATED,
        ),
        (
            "session records",
            "interlock.session._history",
            "a session step's records and argument tails",
            history.ACCELERATED,
        ),
        (
            "redaction",
            "interlock.core._redaction",
            "every audit record's redaction",
            redaction.ACCELERATED,
        ),
        (
            "chain links",
            "interlock.store._chain",
            "every audit record's chain link",
            chain.ACCELERATED,
        ),
    ):
        why_not = None
        if not in_use:
            if not _importable(module):
                why_not = _NOT_BUILT
            elif switch:
                why_not = _SWITCHED_OFF
            else:
                why_not = "switched off in this process"
        found.append(Accelerator(name, module, speeds_up, in_use, why_not))
    return tuple(found)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def describe_accelerators() -> str:
    """One line for a start-up report: all in C, or which are not and why (it starts
    with ``WARNING:`` then, and says what to do)."""
    found = accelerators()
    missing = [a for a in found if not a.in_use]
    if not missing:
        return f"accelerators: {', '.join(a.name for a in found)} in C"
    by_reason: dict[str, list[str]] = {}
    for accelerator in missing:
        by_reason.setdefault(accelerator.why_not or "", []).append(accelerator.name)
    parts = "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())
    remedies = [_REMEDIES[why] for why in by_reason if why in _REMEDIES]
    return (
        f"WARNING: accelerators: {len(missing)} of {len(found)} in Python ({parts}) — the "
        f"same verdicts, slower checks{': ' if remedies else ''}{'; '.join(remedies)}"
    )


def accelerators_warning() -> str | None:
    """:func:`describe_accelerators`'s line when it is a warning, else None (for the
    gateways' start-up, which say nothing when all four run in C)."""
    line = describe_accelerators()
    return line if line.startswith("WARNING:") else None
