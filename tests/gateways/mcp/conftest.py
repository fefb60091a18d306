"""Shared pieces of the MCP gateway tests: the policy, the upstream's record, how to
launch the gateway (the real ``interlock`` command) and the upstream directly, and a
raw JSON-RPC line client for the wire-level tests."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")
