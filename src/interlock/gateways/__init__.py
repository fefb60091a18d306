"""Wire gateways: Interlock in front of an agent whose code cannot be touched.

:mod:`interlock.gateways.mcp` is the MCP gateway (``interlock mcp-gateway``). Nothing
here is imported by ``import interlock``; each gateway is imported by its command.
"""

from __future__ import annotations

__all__: list[str] = []
