"""``@modelcontextprotocol/server-everything`` behind the gateway: every feature the
reference server exercises arrives at a real client (of each generation) through the
gateway as it does straight from the server — tools, progress, logging, sampling
answered from the client's callback, elicitation, roots, resources and subscriptions,
prompts, completion and ``list_changed`` — while the calls the policy refuses never
reach it (its own resource list shows it: a refused ``gzip-file-as-resource`` registers
no session resource).

Each client kind gets two servers for the module: one direct, one behind the gateway,
each with a client whose callbacks record what the server sent it.

Fields that differ from run to run by the server's own making are normalised by name:
the dynamic resources' ``text`` and ``blob`` carry the time they were made, and the
simulated log messages have a random level."""

from __future__ import annotations

import base64
import gzip
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import MCPError

from .npm_servers import (
    CLIENT_KINDS,
    Blocking,
    ClientKind,
    NodeServers,
    blocking_client,
    decision_of,
    direct_params,
    dumped,
    gated_params,
    gateway_command,
    portal,
    text_of,
)
from .support import RawWire, base_env

POLICY = """
version: 1
default: deny
rules:
  - id: demo-tools
    decision: allow
    reason: the demonstration tools are fine
    name: [echo, get-sum, get-tiny-image, get-annotated-message, get-resource-links,
           get-resource-reference, get-structured-content, get-roots-list,
           trigger-long-running-operation, toggle-simulated-logging,
           toggle-subscriber-updates, trigger-sampling-request, trigger-elicitation-request]
  - id: inline-data-only
    decision: allow
    reason: compressing inline data is fine; fetching a URL is not
    name: gzip-file-as-resource
    when: "args.data.startsWith('data:')"
  - id: no-environment
    decision: deny
    reason: the server's environment holds its secrets
    name: get-env
  - id: consent-pages
    decision: allow
    reason: users are sent to consent pages on our own site only
    name: trigger-url-elicitation
    params: {scheme: https, site: example.com}
  - id: the-server-may-sample
    decision: allow
    reason: the demonstration server may ask the client's model
    kind: llm
    name: mcp-sampling
"""

#: A bound on waiting for a notification the server sends in its own time (a hang
#: fails; never an assertion about speed).
WAIT_STEPS = 600
STATIC = "demo://resource/static/document/architecture.md"


@dataclass
class Heard:
    """What one client's callbacks were handed by the server."""

    notifications: list[str] = field(default_factory=list)
    logs: list[tuple[str, Any]] = field(default_factory=list)
    sampling: list[Any] = field(default_factory=list)
    elicitation: list[Any] = field(default_factory=list)
    roots: int = 0

    def callbacks(self) -> dict[str, Any]:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ServerNotification | types.Notification):
                method = getattr(message, "method", None) or getattr(message.root, "method", "")
                self.notifications.append(method)

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            self.logs.append((params.level, params.data))

        async def on_sampling(
            context: Any, params: types.CreateMessageRequestParams
        ) -> types.CreateMessageResult:
            self.sampling.append(dumped(params))
            (message,) = params.messages
            assert isinstance(message.content, types.TextContent)
            answer = f"{message.content.text.upper()} (at most {params.max_tokens} tokens)"
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(text=answer), model="fake-model"
            )

        async def on_elicitation(context: Any, params: Any) -> types.ElicitResult:
            self.elicitation.append(dumped(params))
            if isinstance(params, types.ElicitRequestURLParams):
                return types.ElicitResult(action="accept")  # the user opened the page
            content = {"name": "Ada Lovelace", "check": True, "integer": 7, "email": "ada@x.org"}
            return types.ElicitResult(action="accept", content=content)

        async def on_roots(context: Any) -> types.ListRootsResult:
            self.roots += 1
            root = types.Root(uri="file:///srv/project", name="project")
            return types.ListRootsResult(roots=[root])

        return {
            "message_handler": on_message,
            "logging_callback": on_log,
            "sampling_callback": on_sampling,
            "elicitation_callback": on_elicitation,
            "list_roots_callback": on_roots,
        }

    def wait_for(self, what: Any) -> None:
        for _ in range(WAIT_STEPS):
            if what():
                return
            time.sleep(0.02)
        raise AssertionError(f"the server never sent it; heard {self}")


@dataclass
class Side:
    client: Blocking
    heard: Heard


@dataclass
class Pair:
    kind: ClientKind
    direct: Side
    gated: Side

    def both(self, name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
        return self.direct.client.call_tool(name, arguments), self.gated.client.call_tool(
            name, arguments
        )

    def sides(self) -> tuple[Side, Side]:
        return self.direct, self.gated


@pytest.fixture(scope="module", params=CLIENT_KINDS)
def pair(
    request: pytest.FixtureRequest,
    node_servers: NodeServers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pair]:
    kind: ClientKind = request.param
    tmp = tmp_path_factory.mktemp(f"everything-{kind}")
    policy = tmp / "interlock.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    upstream = node_servers.command("server-everything")
    heard = {"direct": Heard(), "gated": Heard()}
    with (
        portal() as running,
        blocking_client(
            running, kind, direct_params(upstream), **heard["direct"].callbacks()
        ) as direct,
        blocking_client(
            running, kind, gated_params(policy, upstream), **heard["gated"].callbacks()
        ) as gated,
    ):
        for client in (direct, gated):  # as clients do, before calling
            client.list_tools()  # (and the gateway learns the schemas: test_unlisted.py)
        yield Pair(kind, Side(direct, heard["direct"]), Side(gated, heard["gated"]))


def normalised(value: Any) -> Any:
    """``value`` with the named fields that differ run to run replaced: a dynamic
    resource's ``text`` and ``blob`` (they say when they were made)."""
    if isinstance(value, list):
        return [normalised(item) for item in value]
    if not isinstance(value, dict):
        return value
    made_now = str(value.get("uri", "")).startswith("demo://resource/dynamic/")
    return {
        key: "<made at run time>" if made_now and key in ("text", "blob") else normalised(item)
        for key, item in value.items()
    }


def same(direct: Any, gated: Any) -> None:
    assert normalised(dumped(gated)) == normalised(dumped(direct))


# -- listings ------------------------------------------------------------------------------


def test_the_handshake_is_the_servers(pair: Pair) -> None:
    """The version, server info, capabilities and instructions the client settles on
    are the server's. ``mcp.Client`` probes ``server/discover`` first: the server's
    "method not found" reaches it through the gateway, and it falls back to
    ``initialize`` as it does directly."""
    direct, gated = pair.direct.client.client, pair.gated.client.client
    assert gated.protocol_version == direct.protocol_version == "2025-11-25"
    for settled in ("server_info", "server_capabilities", "instructions"):
        assert dumped(getattr(gated, settled)) == dumped(getattr(direct, settled)), settled


def test_the_listings_are_the_servers(pair: Pair) -> None:
    for listing in ("list_tools", "list_prompts", "list_resources", "list_resource_templates"):
        same(getattr(pair.direct.client, listing)(), getattr(pair.gated.client, listing)())
    tools = {tool.name for tool in pair.gated.client.list_tools().tools}
    # the tools the server adds once it knows the client can sample, elicit and list roots
    assert {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"} <= tools


def test_the_tools_list_changed_at_start_up_arrives_as_directly(pair: Pair) -> None:
    def at_start(side: Side) -> list[str]:
        return [m for m in side.heard.notifications if m == "notifications/tools/list_changed"]

    assert at_start(pair.gated) == at_start(pair.direct) != []


# -- tools ---------------------------------------------------------------------------------

ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"message": "héllo ✓ \u2028 wörld"}),
    ("get-sum", {"a": 2, "b": 40}),
    ("get-tiny-image", {}),
    ("get-annotated-message", {"messageType": "error", "includeImage": True}),
    ("get-structured-content", {"location": "New York"}),
    ("get-resource-links", {"count": 3}),
    ("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
    ("get-resource-reference", {"resourceType": "Blob", "resourceId": 3}),
]


@pytest.mark.parametrize(("name", "arguments"), ALLOWED, ids=[f"{n} {a}" for n, a in ALLOWED])
def test_an_allowed_tool_answers_as_directly(
    pair: Pair, name: str, arguments: dict[str, Any]
) -> None:
    direct, gated = pair.both(name, arguments)
    assert not gated.is_error, text_of(gated)
    same(direct, gated)


def test_progress_notifications_arrive_as_directly(pair: Pair) -> None:
    progress: dict[str, list[tuple[float, float | None, str | None]]] = {"direct": [], "gated": []}
    results = {}
    for name, side in (("direct", pair.direct), ("gated", pair.gated)):

        async def on_progress(
            done: float, total: float | None, message: str | None, into: str = name
        ) -> None:
            progress[into].append((done, total, message))

        results[name] = side.client.call_tool(
            "trigger-long-running-operation",
            {"duration": 0.3, "steps": 3},
            progress_callback=on_progress,
        )
    same(results["direct"], results["gated"])
    assert progress["gated"] == progress["direct"] == [(1, 3, None), (2, 3, None), (3, 3, None)]


def test_a_sampling_request_is_answered_from_the_clients_callback(pair: Pair) -> None:
    direct, gated = pair.both("trigger-sampling-request", {"prompt": "ready?", "maxTokens": 9})
    same(direct, gated)
    assert "READY? (at most 9 tokens)" in text_of(gated)
    assert pair.gated.heard.sampling == pair.direct.heard.sampling != []


def test_an_elicitation_is_answered_from_the_clients_callback(pair: Pair) -> None:
    direct, gated = pair.both("trigger-elicitation-request", {})
    same(direct, gated)
    assert "Ada Lovelace" in text_of(gated)
    assert pair.gated.heard.elicitation == pair.direct.heard.elicitation != []


def test_the_clients_roots_reach_the_server(pair: Pair) -> None:
    direct, gated = pair.both("get-roots-list", {})
    same(direct, gated)
    assert "file:///srv/project" in text_of(gated)
    assert pair.gated.heard.roots >= 1 and pair.direct.heard.roots >= 1


def test_a_url_elicitation_reaches_the_client(pair: Pair) -> None:
    """The request path: the server asks the client to send its user to a page."""
    arguments = {"url": "https://consent.example.com/ok", "elicitationId": "e-1"}
    before = len(pair.gated.heard.elicitation)
    direct, gated = pair.both("trigger-url-elicitation", arguments)
    assert not gated.is_error, text_of(gated)
    same(direct, gated)
    (asked,) = pair.gated.heard.elicitation[before:]
    assert asked["mode"] == "url" and asked["url"] == "https://consent.example.com/ok"


def test_a_url_elicitation_error_is_relayed(pair: Pair) -> None:
    """The error path: the server answers the call with JSON-RPC error -32042, which
    names the page to open first; the client gets it through the gateway as directly
    (the server makes up that page's ``elicitationId`` afresh each time)."""
    arguments = {"url": "https://consent.example.com/error", "errorPath": True}
    outcomes = []
    for side in pair.sides():
        with pytest.raises(MCPError) as raised:
            side.client.call_tool("trigger-url-elicitation", arguments)
        error = raised.value
        data = json.loads(json.dumps(error.data))
        for asked in data["elicitations"]:
            asked["elicitationId"] = "<made at run time>"
        outcomes.append((error.code, error.message, data))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][0] == -32042


@pytest.mark.parametrize(
    "url",
    [
        "https://phish.example.net/consent",
        "http://consent.example.com/ok",  # not https
        "https://example.com.evil.example/ok",
        "https://evil.example\\@consent.example.com/",  # a browser goes to evil.example
    ],
)
def test_a_url_elicitation_to_another_site_is_refused(pair: Pair, url: str) -> None:
    before = len(pair.gated.heard.elicitation)
    refused = pair.gated.client.call_tool("trigger-url-elicitation", {"url": url})
    assert refused.is_error
    assert decision_of(refused)["verdict"] == "deny"
    assert len(pair.gated.heard.elicitation) == before  # the user was never sent there


# -- logging and subscriptions -------------------------------------------------------------


#: Logging and subscriptions are deprecated as of protocol 2026-07-28 (the SDK warns);
#: these servers speak 2025-11-25, where they are current.
HANDSHAKE_ERA = pytest.mark.filterwarnings(
    "ignore:.*(deprecated|removed) as of 2026-07-28:mcp.shared.exceptions.MCPDeprecationWarning"
)


@HANDSHAKE_ERA
def test_a_log_message_arrives_as_directly(pair: Pair) -> None:
    """Subscribing makes the server log the request, before it answers."""
    for side in pair.sides():
        side.client.set_logging_level("debug")
        side.client.subscribe_resource(STATIC)
    logged = f"Received Subscribe Resource request for URI: {STATIC} "

    def subscribed(side: Side) -> list[Any]:
        return [entry for entry in side.heard.logs if entry == ("info", logged)]

    for side in pair.sides():
        side.heard.wait_for(lambda side=side: subscribed(side))
    assert subscribed(pair.gated) == subscribed(pair.direct)


@HANDSHAKE_ERA
def test_resource_updates_arrive_for_a_subscription(pair: Pair) -> None:
    for side in pair.sides():
        side.client.subscribe_resource(STATIC)
        before = side.heard.notifications.count("notifications/resources/updated")
        started = side.client.call_tool("toggle-subscriber-updates", {})
        assert "Started" in text_of(started)
        side.heard.wait_for(
            lambda side=side, before=before: (
                side.heard.notifications.count("notifications/resources/updated") > before
            )
        )
        stopped = side.client.call_tool("toggle-subscriber-updates", {})
        assert "Stopped" in text_of(stopped)


def test_simulated_logging_arrives_at_a_random_level(pair: Pair) -> None:
    levels = {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
    simulated = re.compile(r"\w+[- ]level[- ]message")  # "Debug-level message", ...

    for side in pair.sides():
        before = len(side.heard.logs)

        def arrived(side: Side = side, before: int = before) -> list[tuple[str, Any]]:
            later = side.heard.logs[before:]
            return [(level, data) for level, data in later if simulated.fullmatch(str(data))]

        started = side.client.call_tool("toggle-simulated-logging", {})
        assert "Started" in text_of(started)
        side.heard.wait_for(arrived)
        stopped = side.client.call_tool("toggle-simulated-logging", {})
        assert "Stopped" in text_of(stopped)
        level, _ = arrived()[0]
        assert level in levels


# -- resources, prompts, completion --------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [STATIC, "demo://resource/dynamic/text/1", "demo://resource/dynamic/blob/2"],
    ids=["static", "dynamic text", "dynamic blob"],
)
def test_a_resource_reads_as_directly(pair: Pair, uri: str) -> None:
    direct, gated = pair.direct.client.read_resource(uri), pair.gated.client.read_resource(uri)
    same(direct, gated)
    assert gated.contents


PROMPTS: list[tuple[str, dict[str, str] | None]] = [
    ("simple-prompt", None),
    ("args-prompt", {"city": "Paris", "state": "Île-de-France"}),
    ("completable-prompt", {"department": "Sales", "name": "Eve"}),
    ("resource-prompt", {"resourceType": "Text", "resourceId": "4"}),
]


@pytest.mark.parametrize(("name", "arguments"), PROMPTS, ids=[name for name, _ in PROMPTS])
def test_a_prompt_renders_as_directly(
    pair: Pair, name: str, arguments: dict[str, str] | None
) -> None:
    direct = pair.direct.client.get_prompt(name, arguments)
    gated = pair.gated.client.get_prompt(name, arguments)
    same(direct, gated)
    assert gated.messages


def test_a_completion_completes_as_directly(pair: Pair) -> None:
    prompt = types.PromptReference(type="ref/prompt", name="completable-prompt")
    department = {"name": "department", "value": "S"}
    person = {"name": "name", "value": ""}
    for argument, context in ((department, None), (person, {"department": "Engineering"})):
        direct = pair.direct.client.complete(prompt, argument, context)
        gated = pair.gated.client.complete(prompt, argument, context)
        same(direct, gated)
    assert pair.gated.client.complete(prompt, department).completion.values == ["Sales", "Support"]


# -- list_changed, and what a refused call leaves -----------------------------------------


def data_uri(text: str) -> str:
    return "data:text/plain;base64," + base64.b64encode(text.encode()).decode()


def session_resources(side: Side) -> set[str]:
    return {
        resource.uri
        for resource in side.client.list_resources().resources
        if resource.uri.startswith("demo://resource/session/")
    }


def test_a_new_session_resource_lists_changed_as_directly(pair: Pair) -> None:
    arguments = {"name": "hello.txt.gz", "data": data_uri("hello\n"), "outputType": "resource"}
    for side in pair.sides():
        side.heard.notifications.clear()
    direct, gated = pair.both("gzip-file-as-resource", arguments)
    same(direct, gated)
    for side in pair.sides():
        side.heard.wait_for(
            lambda side=side: "notifications/resources/list_changed" in side.heard.notifications
        )
        assert "demo://resource/session/hello.txt.gz" in session_resources(side)
    read = pair.gated.client.read_resource("demo://resource/session/hello.txt.gz")
    same(pair.direct.client.read_resource("demo://resource/session/hello.txt.gz"), read)
    assert gzip.decompress(base64.b64decode(read.contents[0].blob)) == b"hello\n"


#: (label, tool, arguments, verdict, rule ids).
REFUSED: list[tuple[str, str, dict[str, Any], str, list[str]]] = [
    ("the environment", "get-env", {}, "deny", ["no-environment"]),
    ("a look-alike of it", "get_env", {}, "deny", []),
    ("a look-alike in capitals", "Echo", {"message": "x"}, "deny", []),
    ("a look-alike with a zero-width joiner", "ec\u200dho", {"message": "x"}, "deny", []),
    ("a look-alike with a trailing space", "get-sum ", {"a": 1, "b": 2}, "deny", []),
    (
        "a URL to fetch",
        "gzip-file-as-resource",
        {"name": "fetched.gz", "data": "http://127.0.0.1:9/secret"},
        "deny",
        [],
    ),
    (
        "a data URI in capitals (the prefix the rule names is case-sensitive: refused)",
        "gzip-file-as-resource",
        {"name": "capital.gz", "data": "DATA:text/plain,hi"},
        "deny",
        [],
    ),
    (
        "a data URI behind a space (a URL parser strips it: refused)",
        "gzip-file-as-resource",
        {"name": "padded.gz", "data": " data:text/plain,hi"},
        "deny",
        [],
    ),
    (
        "no data at all (the rule cannot be evaluated)",
        "gzip-file-as-resource",
        {"name": "empty.gz"},
        "undetermined",
        ["inline-data-only"],
    ),
]


@pytest.mark.parametrize(
    ("name", "arguments", "verdict", "rule_ids"),
    [row[1:] for row in REFUSED],
    ids=[row[0] for row in REFUSED],
)
def test_a_refused_call_never_reaches_the_server(
    pair: Pair, name: str, arguments: dict[str, Any], verdict: str, rule_ids: list[str]
) -> None:
    before = session_resources(pair.gated)
    refused = pair.gated.client.call_tool(name, arguments)
    assert refused.is_error
    decision = decision_of(refused)
    assert (decision["verdict"], decision["rule_ids"]) == (verdict, rule_ids)
    assert session_resources(pair.gated) == before == session_resources(pair.direct)


#: Calls that look like refused ones but are allowed: they reach the server.
BENIGN: list[tuple[str, str, dict[str, Any]]] = [
    ("an echo that names the environment tool", "echo", {"message": "get-env"}),
    (
        "a data URI whose text holds a URL",
        "gzip-file-as-resource",
        {"name": "url-inside.gz", "data": data_uri("see http://127.0.0.1:9/secret")},
    ),
]


@pytest.mark.parametrize(
    ("name", "arguments"), [row[1:] for row in BENIGN], ids=[row[0] for row in BENIGN]
)
def test_a_benign_look_alike_reaches_the_server(
    pair: Pair, name: str, arguments: dict[str, Any]
) -> None:
    direct, gated = pair.both(name, arguments)
    assert not gated.is_error, text_of(gated)
    same(direct, gated)


# -- tasks ---------------------------------------------------------------------------------

TASK_POLICY = """
version: 1
default: deny
rules:
  - id: research
    decision: allow
    reason: research is fine
    name: simulate-research-query
  - id: no-research-on-secrets
    decision: deny
    reason: no research on secrets
    name: simulate-research-query
    when: "args.topic.contains('secret')"
"""


def test_a_refused_task_augmented_call_creates_no_task(
    node_servers: NodeServers, tmp_path: Path
) -> None:
    """A ``tools/call`` that asks to run as a task (``params.task``, which this server's
    ``simulate-research-query`` requires) is judged like any other: allowed, the server
    makes a task; refused, the gateway answers and the server's task list stays as it
    was."""
    policy = tmp_path / "interlock.yaml"
    policy.write_text(TASK_POLICY, encoding="utf-8")
    upstream = node_servers.command("server-everything")
    wire = RawWire(gateway_command(policy, upstream, "--grace", "0.1"), base_env())

    def research(request_id: int, topic: str) -> dict[str, Any]:
        arguments = {"topic": topic}
        params = {"name": "simulate-research-query", "arguments": arguments, "task": {"ttl": 60000}}
        wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        reply, _ = wire.until(request_id)
        result: dict[str, Any] = reply["result"]
        return result

    def tasks(request_id: int) -> list[str]:
        wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tasks/list", "params": {}})
        reply, _ = wire.until(request_id)
        return [task["taskId"] for task in reply["result"]["tasks"]]

    try:
        wire.handshake()
        made = research(1, "tides")
        refused = research(2, "the secret plan")
        listed = tasks(3)
        wire.close()  # the server stays up for its running task: the grace ends it
    finally:
        wire.kill()
    assert listed == [made["task"]["taskId"]]
    assert refused["isError"] is True
    assert refused["_meta"]["interlock/decision"]["rule_ids"] == ["no-research-on-secrets"]
