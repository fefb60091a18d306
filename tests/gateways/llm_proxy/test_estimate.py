"""What the ``llm`` action carries: the prompt, with inline binary data left out (it
is not text: counted as characters it would exhaust any token budget)."""

from __future__ import annotations

import socket

import anthropic
import openai
import pytest

from interlock.gateways.llm_proxy import ProxyConfig, Upstream, create_app
from interlock.gateways.llm_proxy.flavours import flavour_of, without_blobs

from .conftest import Proxy, Served

IMAGE = "iVBORw0KGgo" + "A" * 2_000_000  # 2 MB of base64: 500,000 "tokens" as characters


def test_inline_blobs_are_replaced_by_their_size_and_the_input_is_not_changed() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": IMAGE},
                },
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + IMAGE}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "text", "text": "data: a short text that starts like a URL"},
            ],
        }
    ]
    shown = without_blobs(messages)
    parts = shown[0]["content"]
    assert parts[0]["text"] == "What is in this picture?"
    assert parts[1]["source"]["data"] == f"<data: {len(IMAGE)} characters>"
    assert parts[2]["image_url"]["url"].startswith("<data: ")
    assert parts[3]["image_url"]["url"] == "https://example.com/cat.png"
    assert parts[4]["text"] == "data: a short text that starts like a URL"
    assert messages[0]["content"][1]["source"]["data"] == IMAGE  # the original is untouched


def test_client_stated_token_counts_are_not_arguments() -> None:
    body = {"model": "m", "messages": [], "input_tokens": 1, "prompt_tokens": 1, "max_tokens": 9}
    assert flavour_of("openai").arguments(body) == {
        "provider": "openai",
        "messages": [],
        "max_tokens": 9,
    }


def test_an_image_request_fits_the_budget_and_reaches_the_upstream_whole(proxy: Proxy) -> None:
    api = anthropic.Anthropic(base_url=proxy.url, api_key=proxy.tokens["agent"], max_retries=0)
    source = {"type": "base64", "media_type": "image/png", "data": IMAGE}
    api.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": source},  # type: ignore[typeddict-item]
                    {"type": "text", "text": "What is this?"},
                ],
            }
        ],
    )
    sent = proxy.standin.seen[0].body["messages"][0]["content"][0]["source"]["data"]
    assert sent == IMAGE
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (27, 0)


def test_an_unreachable_upstream_is_a_502_and_the_reservation_is_released(proxy: Proxy) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = ProxyConfig(openai=Upstream(f"http://127.0.0.1:{port}/v1", "sk-x"))
    served = Served(create_app(proxy.guard, config))
    try:
        api = openai.OpenAI(
            base_url=served.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0
        )
        with pytest.raises(openai.APIStatusError) as raised:
            api.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
            )
    finally:
        served.close()
    assert raised.value.status_code == 502
    body = raised.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_unreachable"
    assert str(port) not in body["message"]  # the upstream's address stays with the proxy
    assert proxy.spent() == (0, 0)
