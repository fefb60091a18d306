"""Interlock's benchmarks. Run them all with ``python -m bench`` (from the repository
root), or one with ``python -m bench <name>``; see BENCHMARKS.md for what each measures.
"""

from __future__ import annotations
