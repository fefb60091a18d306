"""The official ``anthropic`` client: every model call it sends, judged before it is
sent.

``guard.attach(client)`` (or :func:`guard_client`) guards one ``Anthropic`` /
``AsyncAnthropic`` instance (and its subclasses, ``AnthropicAWS`` and
``AnthropicFoundry``): ``messages.create`` (streamed or not), ``messages.stream(...)``,
``messages.parse``, ``client.beta.messages...``, and every other way to
``POST /v1/messages`` (``with_raw_response``, ``with_streaming_response``,
``client.post(...)``). A refusal raises ``ActionDenied`` / ``ApprovalRequired`` /
``ActionUndetermined`` and no request is sent; the budget is reserved before and
committed from the reported usage after — a stream's input from its ``message_start``,
its output from its last ``message_delta`` (:mod:`interlock.adapters.model_client`).

Example::

    from anthropic import Anthropic
    from interlock.adapters.anthropic_client import guard_client

    client = guard_client(Anthropic(), guard)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=300, messages=[...])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar

from interlock.adapters.base import register_adapter
from interlock.adapters.model_client import (
    ModelClientAdapter,
    ModelRoute,
    OnApproval,
    SideDoor,
)
from interlock.gateways.llm_proxy.flavours import flavour_of

try:
    from anthropic import Anthropic, AsyncAnthropic
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the Anthropic client adapter needs anthropic ({exc}): pip install 'interlock[anthropic]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = ["ADAPTER", "ASYNC_ADAPTER", "ROUTES", "SIDE_DOORS", "guard_client"]

C = TypeVar("C", Anthropic, AsyncAnthropic)

#: The model endpoints every call to which is judged.
ROUTES: Final = (ModelRoute("messages", "/v1/messages", flavour_of("anthropic")),)

#: Ways to a model through this client that are sent unjudged.
SIDE_DOORS: Final = (
    SideDoor(
        "messages.batches",
        "POST /v1/messages/batches: the provider runs the requests later, unjudged",
    ),
    SideDoor("completions", "the legacy POST /v1/complete is not judged"),
    SideDoor(
        "beta.sessions, beta.agents",
        "managed agents run their model calls on the provider's side: not seen",
    ),
    SideDoor(
        "AnthropicBedrock, AnthropicVertex",
        "other client classes: guard them with guard.llm_call or the LLM proxy",
    ),
)


class AnthropicClientAdapter(ModelClientAdapter):
    """Guards one ``Anthropic`` client at its ``request`` (the one method every call
    of the SDK goes through; the SDK has no hook before a request is sent)."""

    framework = "anthropic"
    distribution = "anthropic"
    supported = ("2", "3")
    extra = "anthropic"
    targets = ModelClientAdapter.client_targets(Anthropic)
    routes = ROUTES
    side_doors = SIDE_DOORS


class AsyncAnthropicClientAdapter(AnthropicClientAdapter):
    """:class:`AnthropicClientAdapter` for ``AsyncAnthropic``."""

    framework = "anthropic-async"
    targets = ModelClientAdapter.client_targets(AsyncAnthropic)
    asynchronous = True


ADAPTER = register_adapter(AnthropicClientAdapter())
ASYNC_ADAPTER = register_adapter(AsyncAnthropicClientAdapter())


def guard_client(
    client: C,
    guard: Guard,
    *,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
) -> C:
    """Guard ``client`` in place (``guard.attach(client)``) and return it;
    ``guard.detach(client)`` restores it exactly. ``on_approval="wait"`` (with a
    store): a call that needs a human waits until one decides (at most
    ``approval_timeout`` seconds), then the identical call is judged again — it claims
    the grant once and is sent; a denial, or no decision in time, raises."""
    adapter = ASYNC_ADAPTER if isinstance(client, AsyncAnthropic) else ADAPTER
    adapter.attach(client, guard)
    adapter.configure(client, on_approval=on_approval, approval_timeout=approval_timeout)
    return client
