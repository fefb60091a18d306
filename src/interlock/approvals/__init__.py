"""Approvals: a call that needs a human becomes a request bound to its intent hash;
the identical retried call, once approved, claims it exactly once."""

from __future__ import annotations

from interlock.approvals.requests import approval_decision, request_approval

__all__ = ["approval_decision", "request_approval"]
