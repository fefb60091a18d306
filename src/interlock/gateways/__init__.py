"""Wire gateways: Interlock in front of an agent whose code cannot be touched.

:mod:`interlock.gateways.mcp` is the MCP gateway (``interlock mcp-gateway``), and
:mod:`interlock.gateways.llm_proxy` an OpenAI- and Anthropic-compatible model proxy
(``interlock llm-proxy``). Nothing here is imported by ``import interlock``; each
gateway is imported by its command.
"""

from __future__ import annotations

__all__: list[str] = []
