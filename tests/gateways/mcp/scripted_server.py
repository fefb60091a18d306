"""An upstream stand-in that says exactly what a test tells it to: newline-delimited
JSON-RPC on stdin/stdout, no SDK, so that it can send what no honest server sends
(forged ``_meta``, a disguised method, a reused id) and exit mid-request.

It answers ``initialize`` (the version it was asked for), ``ping`` and
``tools/list`` (one tool, ``script``). A ``tools/call`` of ``script`` runs its
``steps`` in order:

- ``{"send": MESSAGE}`` writes MESSAGE (a server-to-client request, a notification);
  with ``"repeat": N``, the content of its first message repeated N times (a message
  too large to pass as the call's own arguments);
- ``{"print": TEXT}`` writes TEXT and a newline as it is (a stray ``print``, not JSON-RPC);
- ``{"await": ID}`` reads until the response to ID arrives;
- ``{"exit": CODE}`` exits at once;
- ``{"result": RESULT}`` answers the call with RESULT (and ends the steps);

else answers the call with the JSON of the responses it awaited (in a text block).
Every line it reads is appended to ``MCP_TEST_LOG`` as ``{"tool": "script",
"received": MESSAGE}`` for a ``tools/call``, else ``{"received": MESSAGE}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TOOL = {
    "name": "script",
    "description": "Run the steps.",
    "inputSchema": {"type": "object", "properties": {"steps": {"type": "array"}}},
}


def write(body: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(body) + "\n")
    sys.stdout.flush()


def record(entry: dict[str, Any]) -> None:
    with open(os.environ["MCP_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def read() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    if not line:
        return None
    body: dict[str, Any] = json.loads(line)
    if body.get("method") == "tools/call":
        record({"tool": "script", "received": body})
    else:
        record({"received": body})
    return body


def run(request: dict[str, Any]) -> None:
    steps = request.get("params", {}).get("arguments", {}).get("steps", [])
    answers: list[dict[str, Any]] = []
    for step in steps:
        if "send" in step:
            message = step["send"]
            if "repeat" in step:
                first = message["params"]["messages"][0]
                first["content"] = [first["content"]] * step["repeat"]
            write(message)
        elif "print" in step:
            sys.stdout.write(step["print"] + "\n")
            sys.stdout.flush()
        elif "await" in step:
            while (body := read()) is not None:
                if "method" not in body and body.get("id") == step["await"]:
                    answers.append(body)
                    break
            else:
                return
        elif "exit" in step:
            sys.exit(step["exit"])
        elif "result" in step:
            write({"jsonrpc": "2.0", "id": request["id"], "result": step["result"]})
            return
    text = json.dumps(answers)
    write(
        {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"content": [{"type": "text", "text": text}]},
        }
    )


def main() -> None:
    while (body := read()) is not None:
        method = body.get("method")
        if "id" not in body or method is None:
            continue
        if method == "initialize":
            version = body.get("params", {}).get("protocolVersion", "2025-11-25")
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1"},
            }
            write({"jsonrpc": "2.0", "id": body["id"], "result": result})
        elif method == "tools/list":
            write({"jsonrpc": "2.0", "id": body["id"], "result": {"tools": [TOOL]}})
        elif method == "tools/call":
            run(body)
        elif method == "ping":
            write({"jsonrpc": "2.0", "id": body["id"], "result": {}})
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            write({"jsonrpc": "2.0", "id": body["id"], "error": error})


if __name__ == "__main__":
    main()
