"""Label names, one definition for the policy, the server and the guard: lower case, so
that ``Secret`` attached and ``secret`` tested cannot be two labels."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

__all__ = ["LABEL", "LABEL_PATTERN", "check_labels"]

#: A label name, anchored (for JSON Schema and pydantic ``pattern``).
LABEL_PATTERN: Final = r"^[a-z0-9][a-z0-9_.:\-]{0,63}$"
LABEL: Final = re.compile(LABEL_PATTERN)


def check_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """``labels`` as a tuple, each checked to be a label name; ``ValueError`` names the
    first that is not (a bare string is refused: it would be read letter by letter)."""
    if isinstance(labels, str):
        raise ValueError(f"labels must be a list of label names, not the string {labels!r}")
    out = tuple(labels)
    for label in out:
        if not isinstance(label, str) or LABEL.fullmatch(label) is None:
            raise ValueError(
                f"{label!r} is not a label name: lower-case letters, digits and _ . : -, "
                "starting with a letter or digit, at most 64 characters"
            )
    return out
