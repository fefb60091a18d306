"""``@modelcontextprotocol/server-memory`` behind the gateway, with a real client of
each generation: the same tools and the same answers as straight into the server, and
a refused call proven absent from the server's own knowledge graph.

Each client kind gets two servers for the whole module, each on its own memory file:
one direct, one behind the gateway. Both are sent the same allowed calls; the gated one
is also sent the refused calls. After every refusal the two graphs (``read_graph``)
must still be equal — what the refused call would have written is in neither."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    portal,
    text_of,
)

POLICY = r"""
version: 1
default: deny
approvals:
  url: https://approvals.example.com/a/{id}
rules:
  - id: memory-reads
    decision: allow
    reason: reading the memory is fine
    name: [read_graph, search_nodes, open_nodes]
  - id: memory-additions
    decision: allow
    reason: the agent may remember things
    name: [create_entities, create_relations, add_observations]
  - id: no-credentials-in-memory
    decision: deny
    reason: credentials are never stored in the memory
    name: create_entities
    when: >-
      args.entities.exists(e, has(e.entityType)
        && e.entityType.matches('(?i)^\\s*(credential|secret|password)s?\\s*$'))
  - id: forgetting-needs-a-human
    decision: require_approval
    reason: deleting memories needs a human
    name: [delete_entities, delete_observations, delete_relations]
"""


def entity(name: str, kind: str, *observations: str) -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(observations)}


#: Allowed calls, sent to both servers in order; their answers must be equal.
ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("read_graph", {}),
    ("create_entities", {"entities": [entity("Ada", "person", "writes programs")]}),
    ("create_entities", {"entities": [entity("Engine", "machine"), entity("Mill", "machine")]}),
    ("create_relations", {"relations": [{"from": "Ada", "to": "Engine", "relationType": "uses"}]}),
    ("add_observations", {"observations": [{"entityName": "Ada", "contents": ["born 1815"]}]}),
    ("search_nodes", {"query": "machine"}),
    ("open_nodes", {"names": ["Ada", "Nobody"]}),
    ("read_graph", {}),
]

#: Calls that must be refused (verdict, rule ids, a fragment of the text) and leave the
#: graph as it was.
REFUSED: list[tuple[str, str, dict[str, Any], str, list[str], str]] = [
    (
        "a credential",
        "create_entities",
        {"entities": [entity("prod-db", "credential", "password hunter2")]},
        "deny",
        ["no-credentials-in-memory"],
        "credentials are never stored",
    ),
    (
        "a credential in capitals, padded",
        "create_entities",
        {"entities": [entity("api", " SECRETS ", "sk-live-123")]},
        "deny",
        ["no-credentials-in-memory"],
        "credentials are never stored",
    ),
    (
        "a credential behind a benign entity (none of the two is stored)",
        "create_entities",
        {"entities": [entity("Bob", "person"), entity("bob-pw", "password", "hunter2")]},
        "deny",
        ["no-credentials-in-memory"],
        "credentials are never stored",
    ),
    (
        "entities that are not a list (the rule cannot be evaluated)",
        "create_entities",
        {"entities": "prod-db:credential"},
        "undetermined",
        ["no-credentials-in-memory"],
        "could not decide",
    ),
    (
        "deleting an entity",
        "delete_entities",
        {"entityNames": ["Ada"]},
        "require_approval",
        ["forgetting-needs-a-human"],
        "requires approval",
    ),
    (
        "deleting an observation",
        "delete_observations",
        {"deletions": [{"entityName": "Ada", "observations": ["writes programs"]}]},
        "require_approval",
        ["forgetting-needs-a-human"],
        "requires approval",
    ),
    (
        "a look-alike of an allowed tool, in capitals",
        "Create_Entities",
        {"entities": [entity("Eve", "person")]},
        "deny",
        [],
        "no rule matched",
    ),
    (
        "a look-alike with a zero-width space",
        "create_\u200bentities",
        {"entities": [entity("Eve", "person")]},
        "deny",
        [],
        "no rule matched",
    ),
    (
        "a look-alike with a trailing space",
        "add_observations ",
        {"observations": [{"entityName": "Ada", "contents": ["evil"]}]},
        "deny",
        [],
        "no rule matched",
    ),
    (
        "a look-alike of a held tool, singular",
        "delete_entity",
        {"entityNames": ["Ada"]},
        "deny",
        [],
        "no rule matched",
    ),
]

#: Calls that look like refused ones but are allowed: they reach both servers.
BENIGN: list[tuple[str, str, dict[str, Any]]] = [
    (
        "an entity named 'credential'",
        "create_entities",
        {"entities": [entity("credential", "note")]},
    ),
    (
        "a type that only contains the word",
        "create_entities",
        {"entities": [entity("rotation", "credential_policy", "rotate every 90 days")]},
    ),
    (
        "an observation that mentions a password",
        "add_observations",
        {"observations": [{"entityName": "Ada", "contents": ["never shares her password"]}]},
    ),
]


class Pair:
    """The direct server and the gated one, on one client kind."""

    def __init__(
        self, kind: ClientKind, direct: Blocking, gated: Blocking, memory: dict[str, Path]
    ) -> None:
        self.kind, self.direct, self.gated, self.memory = kind, direct, gated, memory

    def both(self, name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
        return self.direct.call_tool(name, arguments), self.gated.call_tool(name, arguments)

    def graphs(self) -> tuple[Any, Any]:
        direct, gated = self.both("read_graph", {})
        assert not direct.is_error and not gated.is_error
        return direct.structured_content, gated.structured_content


@pytest.fixture(scope="module", params=CLIENT_KINDS)
def pair(
    request: pytest.FixtureRequest,
    node_servers: NodeServers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pair]:
    kind: ClientKind = request.param
    tmp = tmp_path_factory.mktemp(f"memory-{kind}")
    (tmp / "interlock.yaml").write_text(POLICY, encoding="utf-8")
    memory = {"direct": tmp / "direct.jsonl", "gated": tmp / "gated.jsonl"}
    upstream = node_servers.command("server-memory")
    direct = direct_params(upstream, {"MEMORY_FILE_PATH": str(memory["direct"])})
    gated = gated_params(
        tmp / "interlock.yaml", upstream, {"MEMORY_FILE_PATH": str(memory["gated"])}
    )
    with (
        portal() as running,
        blocking_client(running, kind, direct) as direct_client,
        blocking_client(running, kind, gated) as gated_client,
    ):
        for client in (direct_client, gated_client):  # as clients do, before calling
            client.list_tools()  # (and the gateway learns the schemas: test_unlisted.py)
        yield Pair(kind, direct_client, gated_client, memory)


def test_the_handshake_is_the_servers(pair: Pair) -> None:
    """The version, server info, capabilities and instructions the client settles on
    are the server's. ``mcp.Client`` probes ``server/discover`` first: the server's
    "method not found" reaches it through the gateway, and it falls back to
    ``initialize`` as it does directly."""
    direct, gated = pair.direct.client, pair.gated.client
    assert gated.protocol_version == direct.protocol_version == "2025-11-25"
    for settled in ("server_info", "server_capabilities", "instructions"):
        assert dumped(getattr(gated, settled)) == dumped(getattr(direct, settled)), settled


def test_the_tools_are_listed_as_the_server_lists_them(pair: Pair) -> None:
    direct, gated = pair.direct.list_tools(), pair.gated.list_tools()
    assert dumped(gated) == dumped(direct)
    assert {tool.name for tool in gated.tools} >= {"create_entities", "read_graph"}


def test_an_allowed_call_answers_as_the_server_does(pair: Pair) -> None:
    for name, arguments in ALLOWED:
        direct, gated = pair.both(name, arguments)
        assert not gated.is_error, (name, text_of(gated))
        assert dumped(gated) == dumped(direct), name
    graph, _ = pair.graphs()
    assert {e["name"] for e in graph["entities"]} >= {"Ada", "Engine", "Mill"}


@pytest.mark.parametrize(
    ("name", "arguments", "verdict", "rule_ids", "says"),
    [row[1:] for row in REFUSED],
    ids=[row[0] for row in REFUSED],
)
def test_a_refused_call_never_reaches_the_memory(
    pair: Pair, name: str, arguments: dict[str, Any], verdict: str, rule_ids: list[str], says: str
) -> None:
    refused = pair.gated.call_tool(name, arguments)
    assert refused.is_error
    decision = decision_of(refused)
    assert (decision["verdict"], decision["rule_ids"]) == (verdict, rule_ids)
    assert says in text_of(refused)
    direct, gated = pair.graphs()
    assert gated == direct
    stored = (
        pair.memory["gated"].read_text(encoding="utf-8") if pair.memory["gated"].exists() else ""
    )
    for value in ("hunter2", "sk-live-123", "prod-db", "Eve", "evil"):
        assert value not in stored


@pytest.mark.parametrize(
    ("name", "arguments"), [row[1:] for row in BENIGN], ids=[row[0] for row in BENIGN]
)
def test_a_benign_look_alike_reaches_the_memory(
    pair: Pair, name: str, arguments: dict[str, Any]
) -> None:
    direct, gated = pair.both(name, arguments)
    assert not gated.is_error, text_of(gated)
    assert dumped(gated) == dumped(direct)
    graphs = pair.graphs()
    assert graphs[0] == graphs[1]


def test_the_memory_files_hold_the_same_graph(pair: Pair) -> None:
    def records(path: Path) -> list[Any]:
        return sorted(
            (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()),
            key=json.dumps,
        )

    assert records(pair.memory["gated"]) == records(pair.memory["direct"])
