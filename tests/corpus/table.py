"""The whole corpus: every row, and the rows of each policy, as pytest parameters."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from .case import Case, as_params
from .cases_benign import BENIGN
from .cases_denylist import DENYLIST
from .cases_paths import PATHS
from .cases_scope import SCOPES
from .cases_shell import SHELL
from .cases_urls import URLS

__all__ = ["ADVERSARIAL", "CASES", "params", "summary"]

CASES: Final[list[Case]] = [*SHELL, *DENYLIST, *URLS, *PATHS, *SCOPES, *BENIGN]
ADVERSARIAL: Final[list[Case]] = [case for case in CASES if case.adversarial]


def params(cases: list[Case] | None = None) -> list[Any]:
    """Every row (or ``cases``) as a ``pytest.param`` with its id and marks."""
    return as_params(CASES if cases is None else cases)


def summary() -> dict[str, int]:
    """Rows per category (adversarial and benign), for the report and the README."""
    return dict(sorted(Counter(case.category for case in CASES).items()))
