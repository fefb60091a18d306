"""The MCP gateway: a stdio relay that gates every ``tools/call`` before the upstream
server sees it (``interlock mcp-gateway --policy interlock.yaml -- COMMAND ...``).

- :mod:`~interlock.gateways.mcp.messages` reads one JSON-RPC line (strictly: no
  duplicate keys, no batches) and builds the gateway's own replies;
- :mod:`~interlock.gateways.mcp.gate` judges a ``tools/call`` with the action the
  in-process MCP adapter builds (:func:`interlock.adapters.mcp.tool_action`);
- :mod:`~interlock.gateways.mcp.stdio` spawns the upstream and relays both ways
  (:class:`StdioGateway`, one upstream byte for byte), or spawns several and
  merges them (:class:`AggregateGateway`, :mod:`~interlock.gateways.mcp.aggregate`);
- :mod:`~interlock.gateways.mcp.config` reads which upstreams (``--upstream``,
  ``--config``).

Needs ``interlock[mcp]``.
"""

from __future__ import annotations

from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec, load_config, parse_upstream
from interlock.gateways.mcp.gate import ToolCallGate
from interlock.gateways.mcp.stdio import AggregateGateway, StdioGateway, upstream_environment

__all__ = [
    "AggregateGateway",
    "GatewayConfig",
    "StdioGateway",
    "ToolCallGate",
    "UpstreamSpec",
    "load_config",
    "parse_upstream",
    "upstream_environment",
]
