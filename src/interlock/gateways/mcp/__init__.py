"""The MCP gateway: a relay that gates every ``tools/call`` before the upstream server
sees it (``interlock mcp-gateway --policy interlock.yaml -- COMMAND ...``), on stdio or
listening on streamable HTTP (``--http``), in front of stdio or HTTP upstreams.

- :mod:`~interlock.gateways.mcp.messages` reads one JSON-RPC line (strictly: no
  duplicate keys, no batches) and builds the gateway's own replies;
- :mod:`~interlock.gateways.mcp.gate` judges a ``tools/call`` with the action the
  in-process MCP adapter builds (:func:`interlock.adapters.mcp.tool_action`);
- :mod:`~interlock.gateways.mcp.stdio` spawns the upstream and relays both ways
  (:class:`StdioGateway`, one upstream byte for byte), or spawns several and
  merges them (:class:`AggregateGateway`, :mod:`~interlock.gateways.mcp.aggregate`);
- :mod:`~interlock.gateways.mcp.config` reads which upstreams (``--upstream``,
  ``--config``);
- :mod:`~interlock.gateways.mcp.relay` runs a session core with the upstreams it owns
  (:mod:`~interlock.gateways.mcp.upstreams`: spawned;
  :mod:`~interlock.gateways.mcp.http_upstream`: over streamable HTTP), for any
  transport;
- :mod:`~interlock.gateways.mcp.http_server` is the gateway on streamable HTTP: its
  sessions (:mod:`~interlock.gateways.mcp.http_session`), their SSE streams and event
  store (:mod:`~interlock.gateways.mcp.http_events`, :mod:`~interlock.gateways.mcp.sse`)
  and the clients' keys (:mod:`~interlock.gateways.mcp.http_auth`); imported on its own
  (it needs Starlette, which the SDK brings).

Needs ``interlock[mcp]``.
"""

from __future__ import annotations

from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec, load_config, parse_upstream
from interlock.gateways.mcp.gate import ToolCallGate
from interlock.gateways.mcp.stdio import (
    AggregateGateway,
    RelaySession,
    StdioGateway,
    upstream_environment,
)

__all__ = [
    "AggregateGateway",
    "GatewayConfig",
    "RelaySession",
    "StdioGateway",
    "ToolCallGate",
    "UpstreamSpec",
    "load_config",
    "parse_upstream",
    "upstream_environment",
]
