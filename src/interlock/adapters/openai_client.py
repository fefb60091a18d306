"""The official ``openai`` client: every model call it sends, judged before it is sent.

``guard.attach(client)`` (or :func:`guard_client`) guards one ``OpenAI`` /
``AsyncOpenAI`` instance (``AzureOpenAI`` too): ``chat.completions.create`` /
``.parse`` / ``.stream``, ``responses.create`` / ``.parse`` / ``.stream``, streamed or
not, and every other way to the same endpoints (``with_raw_response``,
``with_streaming_response``, ``client.beta.responses``, ``client.post(...)``). A
refusal raises ``ActionDenied`` / ``ApprovalRequired`` / ``ActionUndetermined`` and no
request is sent; the budget is reserved before and committed from the reported usage
after (:mod:`interlock.adapters.model_client` says how, streams included). A streamed
chat call that did not ask for its usage is sent with
``stream_options={"include_usage": True}``, and the usage chunk it then ends with is
hidden from the caller, who sees the stream they asked for.

Example::

    from openai import OpenAI
    from interlock.adapters.openai_client import guard_client

    client = guard_client(OpenAI(), guard)
    client.chat.completions.create(model="gpt-5", messages=[...], max_tokens=300)
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
from interlock.gateways.llm_proxy.responses import RESPONSES

try:
    from openai import AsyncOpenAI, OpenAI
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the OpenAI client adapter needs openai ({exc}): pip install 'interlock[openai]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = ["ADAPTER", "ASYNC_ADAPTER", "ROUTES", "SIDE_DOORS", "guard_client"]

C = TypeVar("C", OpenAI, AsyncOpenAI)

#: The model endpoints every call to which is judged.
ROUTES: Final = (
    ModelRoute("chat.completions", "/chat/completions", flavour_of("openai"), ask_usage=True),
    ModelRoute("responses", "/responses", RESPONSES),
)

#: Ways to a model through this client that are sent unjudged.
SIDE_DOORS: Final = (
    SideDoor("batches", "POST /batches: the provider runs the requests later, unjudged"),
    SideDoor("completions", "the legacy POST /completions is not judged"),
    SideDoor("responses.compact", "POST /responses/compact runs a model, unjudged"),
    SideDoor("beta.threads.runs", "Assistants runs (POST /threads/.../runs) run a model, unjudged"),
    SideDoor("realtime", "the Realtime API is a websocket, not a request: not seen"),
    SideDoor(
        "embeddings, images, audio, videos, moderations",
        "other model endpoints are sent unjudged (no llm action, no budget)",
    ),
)


class OpenAIClientAdapter(ModelClientAdapter):
    """Guards one ``OpenAI`` client at its ``request`` (the one method every call of
    the SDK goes through; the SDK has no hook before a request is sent)."""

    framework = "openai"
    distribution = "openai"
    supported = ("3", "4")
    extra = "openai"
    targets = ModelClientAdapter.client_targets(OpenAI)
    routes = ROUTES
    side_doors = SIDE_DOORS


class AsyncOpenAIClientAdapter(OpenAIClientAdapter):
    """:class:`OpenAIClientAdapter` for ``AsyncOpenAI``."""

    framework = "openai-async"
    targets = ModelClientAdapter.client_targets(AsyncOpenAI)
    asynchronous = True


ADAPTER = register_adapter(OpenAIClientAdapter())
ASYNC_ADAPTER = register_adapter(AsyncOpenAIClientAdapter())


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
    adapter = ASYNC_ADAPTER if isinstance(client, AsyncOpenAI) else ADAPTER
    adapter.attach(client, guard)
    adapter.configure(client, on_approval=on_approval, approval_timeout=approval_timeout)
    return client
