"""The MCP gateway: a stdio relay that gates every ``tools/call`` before the upstream
server sees it (``interlock mcp-gateway --policy interlock.yaml -- COMMAND ...``).

- :mod:`~interlock.gateways.mcp.messages` reads one JSON-RPC line (strictly: no
  duplicate keys, no batches) and builds the gateway's own replies;
- :mod:`~interlock.gateways.mcp.gate` judges a ``tools/call`` with the action the
  in-process MCP adapter builds (:func:`interlock.adapters.mcp.tool_action`);
- :mod:`~interlock.gateways.mcp.stdio` spawns the upstream and relays both ways.

Needs ``interlock[mcp]``.
"""

from __future__ import annotations

from interlock.gateways.mcp.gate import ToolCallGate
from interlock.gateways.mcp.stdio import StdioGateway, upstream_environment

__all__ = ["StdioGateway", "ToolCallGate", "upstream_environment"]
