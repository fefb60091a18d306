"""Deciders: what turns an Action into a Decision (the local engine by default)."""

from __future__ import annotations

from interlock.deciders.base import CancelToken, Decider
from interlock.deciders.local import LocalDecider

__all__ = ["CancelToken", "Decider", "LocalDecider"]
