"""``@modelcontextprotocol/server-filesystem`` behind the gateway, with a real client of
each generation, the server rooted in a temporary directory. The policy lets the agent
read the root and write only in ``ROOT/workspace`` (never key files); the server itself
would write anywhere in the root, so the gateway is what keeps ``ROOT/private`` intact.

Each client kind gets two servers for the module, each on a root of its own with the
same layout: one direct, one behind the gateway. Allowed calls go to both and answer
alike (the root's own path aside). A refused call goes to the gated one only, and the
gated root's files and the directory outside it are what they were before the call.

Paths are judged lexically (docs/policy.md, Paths): ``..`` is resolved, a symbolic link
is not. A link inside the workspace to elsewhere in the root is therefore written
through (pinned below); a link out of the root is stopped by the server's own check."""

from __future__ import annotations

import os
import time
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

POLICY = """
version: 1
default: deny
rules:
  - id: read-the-project
    decision: allow
    reason: reading the project is fine
    name: [read_text_file, read_multiple_files, list_directory, directory_tree,
           search_files, get_file_info]
    params: {{path: {{glob: "{root}/*"}}}}
  - id: where-am-i
    decision: allow
    reason: the agent may ask where it can work
    name: list_allowed_directories
  - id: write-the-workspace
    decision: allow
    reason: the agent writes in its workspace
    name: [write_file, edit_file, create_directory]
    params: {{path: {{glob: "{root}/workspace/*"}}}}
  - id: move-in-the-workspace
    decision: allow
    reason: the agent renames files in its workspace
    name: move_file
    params:
      args.source: {{glob: "{root}/workspace/*", not_regex: '(^|/)\\.\\.(/|$)'}}
      args.destination: {{glob: "{root}/workspace/*", not_regex: '(^|/)\\.\\.(/|$)'}}
  - id: no-key-files
    decision: deny
    reason: key files are never touched
    params: {{path: ["*.pem", "*/.env", "*/id_rsa", "*/id_ed25519"]}}
"""

SECRET = "the launch codes\n"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n"
#: A bound on polling the server (a hang fails, never an assertion about speed).
WAIT_STEPS = 600


def lay_out(root: Path, outside: Path) -> None:
    """The same tree under each root."""
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "readme.txt").write_text("hello\nworld\n")
    (root / "workspace" / "draft.txt").write_text("first line\nsecond line\n")
    (root / "workspace" / "id_rsa").write_text(KEY)
    (root / "private").mkdir()
    (root / "private" / "secret.txt").write_text(SECRET)
    (root / "workspace-evil").mkdir()  # a sibling whose name starts like the workspace's
    (root / "WORKSPACE").mkdir()  # another directory where case matters
    (root / "workspace" / "to-private").symlink_to(root / "private")
    (root / "workspace" / "to-outside").symlink_to(outside)
    outside.mkdir()


def files(*tops: Path) -> dict[str, bytes]:
    """Every file under the given directories (links not followed), with its bytes."""
    found: dict[str, bytes] = {}
    for top in tops:
        for folder, _, names in os.walk(top):
            for name in names:
                path = Path(folder) / name
                if not path.is_symlink():
                    found[str(path)] = path.read_bytes()
    return found


def filled(template: Any, root: Path, outside: Path) -> Any:
    """``template`` with ``{root}`` and ``{outside}`` filled in, in every string."""
    if isinstance(template, str):
        return template.replace("{root}", str(root)).replace("{outside}", str(outside))
    if isinstance(template, list):
        return [filled(item, root, outside) for item in template]
    if isinstance(template, dict):
        return {key: filled(value, root, outside) for key, value in template.items()}
    return template


class Side:
    def __init__(self, client: Blocking, root: Path, outside: Path) -> None:
        self.client, self.root, self.outside = client, root, outside

    def call(self, name: str, template: dict[str, Any]) -> Any:
        return self.client.call_tool(name, filled(template, self.root, self.outside))

    def seen(self, result: Any) -> Any:
        """The result with this side's root written as ``{root}``."""
        text = repr(dumped(result))
        return text.replace(str(self.root), "{root}").replace(str(self.outside), "{outside}")


class Pair:
    def __init__(self, kind: ClientKind, direct: Side, gated: Side) -> None:
        self.kind, self.direct, self.gated = kind, direct, gated

    def both(self, name: str, template: dict[str, Any]) -> tuple[Any, Any]:
        return self.direct.call(name, template), self.gated.call(name, template)


@pytest.fixture(scope="module", params=CLIENT_KINDS)
def pair(
    request: pytest.FixtureRequest,
    node_servers: NodeServers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pair]:
    kind: ClientKind = request.param
    tmp = tmp_path_factory.mktemp(f"filesystem-{kind}")
    roots = {side: (tmp / side / "root", tmp / side / "outside") for side in ("direct", "gated")}
    for root, outside in roots.values():
        lay_out(root, outside)
    gated_root = roots["gated"][0]
    policy = tmp / "interlock.yaml"
    policy.write_text(POLICY.format(root=gated_root), encoding="utf-8")
    direct = direct_params(node_servers.command("server-filesystem", str(roots["direct"][0])))
    gated = gated_params(policy, node_servers.command("server-filesystem", str(gated_root)))
    with (
        portal() as running,
        blocking_client(running, kind, direct) as direct_client,
        blocking_client(running, kind, gated) as gated_client,
    ):
        for client in (direct_client, gated_client):  # as clients do, before calling
            client.list_tools()  # (and the gateway learns the schemas: test_unlisted.py)
        yield Pair(kind, Side(direct_client, *roots["direct"]), Side(gated_client, *roots["gated"]))


#: Allowed calls, in order, on both sides.
ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("list_allowed_directories", {}),
    ("read_text_file", {"path": "{root}/workspace/readme.txt"}),
    ("read_text_file", {"path": "{root}/private/secret.txt"}),
    ("write_file", {"path": "{root}/workspace/notes.txt", "content": "one\ntwo\n"}),
    (
        "edit_file",
        {"path": "{root}/workspace/notes.txt", "edits": [{"oldText": "two", "newText": "2"}]},
    ),
    ("create_directory", {"path": "{root}/workspace/sub"}),
    (
        "move_file",
        {"source": "{root}/workspace/notes.txt", "destination": "{root}/workspace/sub/notes.txt"},
    ),
    ("list_directory", {"path": "{root}/workspace/sub"}),
    (
        "read_multiple_files",
        {"paths": ["{root}/workspace/readme.txt", "{root}/workspace/sub/notes.txt"]},
    ),
    ("search_files", {"path": "{root}/workspace", "pattern": "*.txt"}),
]


def test_the_handshake_is_the_servers(pair: Pair) -> None:
    """The version, server info, capabilities and instructions the client settles on
    are the server's. ``mcp.Client`` probes ``server/discover`` first: the server's
    "method not found" reaches it through the gateway, and it falls back to
    ``initialize`` as it does directly."""
    direct, gated = pair.direct.client.client, pair.gated.client.client
    assert gated.protocol_version == direct.protocol_version == "2025-11-25"
    for settled in ("server_info", "server_capabilities", "instructions"):
        assert dumped(getattr(gated, settled)) == dumped(getattr(direct, settled)), settled


def test_the_tools_are_listed_as_the_server_lists_them(pair: Pair) -> None:
    direct, gated = pair.direct.client.list_tools(), pair.gated.client.list_tools()
    assert dumped(gated) == dumped(direct)
    assert {"write_file", "edit_file", "move_file"} <= {tool.name for tool in gated.tools}


def test_an_allowed_call_answers_as_the_server_does(pair: Pair) -> None:
    for name, template in ALLOWED:
        direct, gated = pair.both(name, template)
        assert not gated.is_error, (name, text_of(gated))
        assert pair.gated.seen(gated) == pair.direct.seen(direct), name
    assert (pair.gated.root / "workspace" / "sub" / "notes.txt").read_text() == "one\n2\n"


#: (label, tool, arguments, verdict, rule ids). Every one of them the server itself
#: would carry out (or at least try): the root is its allowed directory.
REFUSED: list[tuple[str, str, dict[str, Any], str, list[str]]] = [
    ("a write outside the workspace", "write_file", {"path": "{root}/private/x.txt"}, "deny", []),
    ("a write over the secret", "write_file", {"path": "{root}/private/secret.txt"}, "deny", []),
    ("traversal with ..", "write_file", {"path": "{root}/workspace/../private/x.txt"}, "deny", []),
    (
        "traversal with ./ and ..",
        "write_file",
        {"path": "{root}/workspace/./sub/../../private/x.txt"},
        "deny",
        [],
    ),
    (
        "traversal with doubled slashes",
        "write_file",
        {"path": "{root}//workspace//..//private//x.txt"},
        "deny",
        [],
    ),
    ("traversal to the root", "write_file", {"path": "{root}/workspace/../x.txt"}, "deny", []),
    ("a relative traversal", "write_file", {"path": "../private/x.txt"}, "deny", []),
    # judged as written, not against the server's root: refused, never guessed
    ("a relative path into the workspace", "write_file", {"path": "workspace/x.txt"}, "deny", []),
    ("the home directory", "write_file", {"path": "~/x.txt"}, "deny", []),
    (
        "a sibling named like the workspace",
        "write_file",
        {"path": "{root}/workspace-evil/x.txt"},
        "deny",
        [],
    ),
    ("the workspace in capitals", "write_file", {"path": "{root}/WORKSPACE/x.txt"}, "deny", []),
    (
        "a NUL in the path",
        "write_file",
        {"path": "{root}/workspace/x.txt\u0000.pem"},
        "undetermined",
        [],
    ),
    (
        "a key file in the workspace",
        "write_file",
        {"path": "{root}/workspace/key.pem"},
        "deny",
        ["no-key-files"],
    ),
    (
        "a key file in capitals",
        "write_file",
        {"path": "{root}/workspace/KEY.PEM"},
        "deny",
        ["no-key-files"],
    ),
    (
        "an .env in the workspace",
        "write_file",
        {"path": "{root}/workspace/.env"},
        "deny",
        ["no-key-files"],
    ),
    (
        "an .ENV reached by traversal",
        "write_file",
        {"path": "{root}/workspace/sub/../.ENV"},
        "deny",
        ["no-key-files"],
    ),
    ("an edit of the secret", "edit_file", {"path": "{root}/private/secret.txt"}, "deny", []),
    (
        "an edit of the secret by traversal",
        "edit_file",
        {"path": "{root}/workspace/../private/secret.txt"},
        "deny",
        [],
    ),
    (
        "a move out of the workspace",
        "move_file",
        {"source": "{root}/workspace/draft.txt", "destination": "{root}/private/draft.txt"},
        "deny",
        [],
    ),
    (
        "a move out by traversal in the destination",
        "move_file",
        {"source": "{root}/workspace/draft.txt", "destination": "{root}/workspace/../draft.txt"},
        "deny",
        [],
    ),
    (
        "a move of the secret into the workspace",
        "move_file",
        {"source": "{root}/private/secret.txt", "destination": "{root}/workspace/secret.txt"},
        "deny",
        [],
    ),
    (
        "a move of the secret by traversal in the source",
        "move_file",
        {"source": "{root}/workspace/../private/secret.txt", "destination": "{root}/workspace/s"},
        "deny",
        [],
    ),
    (
        "a read of a key file",
        "read_text_file",
        {"path": "{root}/workspace/id_rsa"},
        "deny",
        ["no-key-files"],
    ),
    (
        "a key file among the files read",
        "read_multiple_files",
        {"paths": ["{root}/workspace/readme.txt", "{root}/private/../workspace/id_rsa"]},
        "deny",
        ["no-key-files"],
    ),
    ("a read outside the root", "read_text_file", {"path": "/etc/passwd"}, "deny", []),
    (
        "an undeclared file_path in the workspace, beside path outside it",
        "write_file",
        {"path": "{root}/private/aliased.txt", "file_path": "{root}/workspace/aliased.txt"},
        "deny",
        [],
    ),
    ("a look-alike tool name", "Write_File", {"path": "{root}/workspace/x.txt"}, "deny", []),
    (
        "a look-alike with a Cyrillic e",
        "writ\u0435_file",
        {"path": "{root}/workspace/x.txt"},
        "deny",
        [],
    ),
]


def with_content(template: dict[str, Any], name: str) -> dict[str, Any]:
    if name == "write_file":
        return {"content": "pwned\n", **template}
    if name == "edit_file":
        return {"edits": [{"oldText": "launch", "newText": "pwned"}], **template}
    return template


@pytest.mark.parametrize(
    ("name", "template", "verdict", "rule_ids"),
    [row[1:] for row in REFUSED],
    ids=[row[0] for row in REFUSED],
)
def test_a_refused_call_leaves_no_trace_on_disk(
    pair: Pair, name: str, template: dict[str, Any], verdict: str, rule_ids: list[str]
) -> None:
    gated = pair.gated
    before = files(gated.root, gated.outside)
    refused = gated.call(name, with_content(template, name))
    assert refused.is_error, text_of(refused)
    decision = decision_of(refused)
    assert (decision["verdict"], decision["rule_ids"]) == (verdict, rule_ids)
    assert files(gated.root, gated.outside) == before
    assert (gated.root / "private" / "secret.txt").read_text() == SECRET
    assert "launch codes" not in text_of(refused) and "PRIVATE KEY" not in text_of(refused)


#: Writes that look like refused ones but stay in the workspace: they are written.
BENIGN: list[tuple[str, dict[str, Any], str]] = [
    (
        "a .. that stays in the workspace",
        {"path": "{root}/workspace/sub/../benign.txt"},
        "benign.txt",
    ),
    ("dots inside a name", {"path": "{root}/workspace/a..b.txt"}, "a..b.txt"),
    ("a name that starts with ..", {"path": "{root}/workspace/..notes"}, "..notes"),
    ("pem in a name, not its extension", {"path": "{root}/workspace/pem.txt"}, "pem.txt"),
    ("env without its dot", {"path": "{root}/workspace/env"}, "env"),
    (
        "a doubled slash inside the workspace",
        {"path": "{root}/workspace//double.txt"},
        "double.txt",
    ),
    (
        # the tool's schema has no file_path: the check, like the tool, reads only path
        "an undeclared file_path outside, beside path",
        {"path": "{root}/workspace/aliased.txt", "file_path": "{root}/private/aliased.txt"},
        "aliased.txt",
    ),
]


@pytest.mark.parametrize(
    ("template", "written"), [row[1:] for row in BENIGN], ids=[row[0] for row in BENIGN]
)
def test_a_benign_look_alike_is_written(pair: Pair, template: dict[str, Any], written: str) -> None:
    arguments = {**template, "content": "fine\n"}
    direct, gated = pair.both("write_file", arguments)
    assert not gated.is_error, text_of(gated)
    assert pair.gated.seen(gated) == pair.direct.seen(direct)
    assert (pair.gated.root / "workspace" / written).read_text() == "fine\n"
    assert not (pair.gated.root / "private" / written).exists()


def test_a_symlink_out_of_the_root_is_stopped_by_the_server_not_the_policy(pair: Pair) -> None:
    """The policy allows ``workspace/to-outside/x`` (its name is in the workspace); the
    server resolves the link, finds it leads out of its root and refuses."""
    gated = pair.gated
    result = gated.call("write_file", {"path": "{root}/workspace/to-outside/x.txt", "content": "x"})
    assert result.is_error
    assert "interlock/decision" not in (result.meta or {})  # the gateway let it through
    assert "outside allowed directories" in text_of(result)
    assert files(gated.outside) == {}


def test_a_symlink_inside_the_root_is_judged_by_its_name(pair: Pair) -> None:
    """The documented limit (docs/policy.md, Paths: links are not resolved), pinned:
    ``workspace/to-private`` links to ``private``, which the policy never lets the agent
    write, yet a write through it is allowed by name and lands in ``private``. Root the
    server at no more than the policy lets the agent write where links can exist."""
    gated = pair.gated
    result = gated.call(
        "write_file", {"path": "{root}/workspace/to-private/through-a-link.txt", "content": "x"}
    )
    assert not result.is_error, text_of(result)
    assert (gated.root / "private" / "through-a-link.txt").read_text() == "x"


def test_the_clients_roots_reach_the_server_through_the_gateway(
    node_servers: NodeServers, tmp_path: Path
) -> None:
    """The server asks the client for its roots (``roots/list``, a server-to-client
    request) and works in them instead of its arguments: through the gateway as
    directly."""
    import mcp_types as types

    root, outside = tmp_path / "root", tmp_path / "outside"
    lay_out(root, outside)
    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICY.format(root=root), encoding="utf-8")

    asked: list[str] = []

    async def roots(context: Any) -> types.ListRootsResult:
        asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri=(root / "workspace").as_uri())])

    def allowed_directories(client: Blocking) -> str:
        """What the server lists once it has taken the client's roots: it asks for them
        after the handshake and applies them in its own time, so ask until it has."""
        for _ in range(WAIT_STEPS):
            text = text_of(client.call_tool("list_allowed_directories", {}))
            if str(root / "workspace") in text:
                break
            time.sleep(0.05)
        return text

    upstream = node_servers.command("server-filesystem", str(root))
    answers = []
    with portal() as running:
        for params in (direct_params(upstream), gated_params(policy, upstream)):
            with blocking_client(running, "ClientSession", params, list_roots_callback=roots) as c:
                answers.append(allowed_directories(c))
    assert asked == ["roots/list", "roots/list"]
    assert answers[0] == answers[1] == f"Allowed directories:\n{root / 'workspace'}"
