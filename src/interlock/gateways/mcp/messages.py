"""One JSON-RPC line, read strictly, and the gateway's own replies.

The gateway forwards the exact bytes it read, so what it judged must be what the
upstream will parse. A line is therefore refused (never forwarded) when two parsers
could read it differently:

- it is not UTF-8, not one JSON object, or has a duplicate key anywhere (parsers
  disagree on which value wins);
- it has a carriage return inside it: a server reading its stdin in text mode with
  universal newlines (the Python SDK's does) splits the line there, and a second,
  complete message can hide between two carriage returns;
- it is a batch (a JSON array): MCP has no batches, and each element would need
  its own verdict.

A ``\\r\\n`` line ending is accepted (it ends the line for every reader).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_TIMEOUT",
    "TOOLS_CALL",
    "Message",
    "NotAMessage",
    "disguised",
    "disguised_tools_call",
    "encode",
    "error_reply",
    "id_key",
    "parse_body",
    "parse_line",
    "progress_token",
    "result_reply",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
#: The MCP SDKs' code for a request that was not answered in time.
REQUEST_TIMEOUT: Final = -32001

TOOLS_CALL: Final = "tools/call"

Kind = Literal["request", "notification", "response"]


class NotAMessage(ValueError):
    """A line the gateway refuses to read as one JSON-RPC message. ``code`` is the
    JSON-RPC error for it; ``request_id`` the id to answer, when one could be read."""

    def __init__(self, problem: str, code: int = INVALID_REQUEST, request_id: Any = None) -> None:
        super().__init__(problem)
        self.code = code
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message: the bytes as read (``raw``, forwarded unchanged) and
    the parsed object (``body``, read only to route and to judge)."""

    raw: bytes
    body: dict[str, Any]
    kind: Kind

    @property
    def method(self) -> str | None:
        method = self.body.get("method")
        return method if isinstance(method, str) else None

    @property
    def id(self) -> Any:
        return self.body.get("id")

    @property
    def params(self) -> Any:
        return self.body.get("params")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key, value in pairs:
        if key in body:
            raise NotAMessage(f"duplicate key {key!r} in a JSON object")
        body[key] = value
    return body


def _no_constant(name: str) -> Any:
    raise NotAMessage(f"{name} is not JSON", PARSE_ERROR)


def _valid_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def parse_line(raw: bytes) -> Message:
    """The message on ``raw`` (one line, its newline included), or
    :class:`NotAMessage` saying why it cannot be forwarded."""
    text = raw[:-2] if raw.endswith(b"\r\n") else raw.rstrip(b"\n")
    if b"\r" in text:
        raise NotAMessage("a carriage return inside a line (it splits the line for some readers)")
    return _message(raw, _decoded(text))


def parse_body(raw: bytes) -> Message:
    """The message in an HTTP body (one JSON value; whitespace anywhere JSON allows
    it), read as strictly as :func:`parse_line`. Its ``raw`` is the message
    re-encoded on one line (:func:`encode`): the bytes the gateway forwards, read
    from exactly the object it judged. A string holding a lone surrogate
    (``"\\ud800"``) is refused: it is not Unicode text, and servers differ on it
    (the Python SDK's drops the whole message, so the call would never be answered)."""
    body = _decoded(raw)
    line = b""
    if isinstance(body, dict):
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        try:
            line = text.encode("utf-8") + b"\n"
        except UnicodeEncodeError as exc:
            problem = "a string holds a lone surrogate (it is not Unicode text)"
            raise NotAMessage(problem, PARSE_ERROR, _id_of(body)) from exc
    return _message(line, body)


def _id_of(body: dict[str, Any]) -> Any:
    return body.get("id") if _valid_id(body.get("id")) else None


def _decoded(text: bytes) -> Any:
    try:
        decoded = text.decode("utf-8")
        return json.loads(decoded, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except NotAMessage:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise NotAMessage(f"not JSON: {exc}", PARSE_ERROR) from exc


def _message(raw: bytes, body: Any) -> Message:
    if isinstance(body, list):
        raise NotAMessage("JSON-RPC batches are not supported over MCP")
    if not isinstance(body, dict):
        raise NotAMessage("a JSON-RPC message is an object")
    request_id = body.get("id") if _valid_id(body.get("id")) else None
    if body.get("jsonrpc") != "2.0":
        raise NotAMessage('"jsonrpc" must be "2.0"', request_id=request_id)
    if "method" in body:
        if not isinstance(body["method"], str):
            raise NotAMessage('"method" must be a string', request_id=request_id)
        if "result" in body or "error" in body:
            raise NotAMessage(
                "a message is a request or a response, not both", request_id=request_id
            )
        if "id" not in body:
            return Message(raw, body, "notification")
        if not _valid_id(body["id"]):
            raise NotAMessage('a request "id" is a string or an integer')
        return Message(raw, body, "request")
    if "id" in body and ("result" in body) != ("error" in body):
        return Message(raw, body, "response")
    raise NotAMessage("neither a request, a notification nor a response", request_id=request_id)


def id_key(request_id: Any) -> str:
    """The key a request id is tracked under: ``1`` and ``"1"`` share one, so that no
    reader that conflates them can be handed two live requests under one id."""
    return str(request_id)


def _visible(text: str) -> str:
    """``text`` as a reader sees it: compatibility forms folded, case folded, and
    no spaces, control or zero-width format marks."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if unicodedata.category(ch) not in ("Cf", "Zs", "Cc"))


def disguised_tools_call(method: str) -> bool:
    """True for a method that reads as ``tools/call`` but is not exactly it (another
    case, padding, zero-width marks, compatibility forms): no honest client sends
    one, and a lenient upstream could still route it to its tools."""
    return disguised(method, TOOLS_CALL)


def disguised(method: str, real: str) -> bool:
    """True for a method that reads as ``real`` but is not exactly it (see
    :func:`disguised_tools_call`): a lenient peer could still take it for ``real``."""
    return method != real and _visible(method).replace("\u2215", "/") == real.casefold()


def encode(body: dict[str, Any]) -> bytes:
    """One line of JSON (compact, UTF-8, newline-terminated). A string holding a lone
    surrogate (``"\\ud800"`` in the JSON read) cannot be UTF-8: the line is then
    ASCII, every such character escaped as it came."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii") + b"\n"


def progress_token(body: Mapping[str, Any]) -> str | None:
    """The progress token a request asks for (``params._meta.progressToken``), as
    text; ``None`` when it asks for none."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    return None if token is None else str(token)


def error_reply(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    """A JSON-RPC error response line."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return encode({"jsonrpc": "2.0", "id": request_id, "error": error})


def result_reply(request_id: Any, result: dict[str, Any]) -> bytes:
    """A JSON-RPC result response line."""
    return encode({"jsonrpc": "2.0", "id": request_id, "result": result})
