"""Interlock at the wire: gateways for agents whose code cannot be touched.

:mod:`interlock.gateways.llm_proxy` is an OpenAI- and Anthropic-compatible model
proxy (``interlock llm-proxy``). Nothing here is imported by ``import interlock``.
"""

__all__: list[str] = []
