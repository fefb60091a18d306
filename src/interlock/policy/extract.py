"""Scope inference and parameter extraction: what a call's arguments mean to a policy.

The steps, in order, for each check:

1. **Projection** — arguments are cut down to the properties the tool's declared JSON
   schema names (unless the schema admits additional properties), so a key the tool
   never receives cannot steer the verdict.
2. **Limits** — arguments nested deeper, or with more values, than the policy's limits
   cannot be judged (the check is undetermined).
3. **Aliases** — ``command``/``cmd``, ``path``/``file_path`` and ``domain``/the ``url``'s
   host must agree when both are present; when they disagree the call is denied
   without evaluating policy, since the guard cannot know which one the tool reads.
4. **Parameters** — command, url, domain, path (normalised), verb, session_id,
   est_cost and target.
5. **Scope** — a pinned scope (on the action, then the policy's ``scopes.tools``) wins;
   then the kind (``llm``, ``browser``); then the argument keys (url/domain → network,
   path/file_path → filesystem); then keywords in the tool's name, then its
   description; then the policy's ``scopes.default``.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final
from urllib.parse import urlsplit

from interlock.errors import EvaluationError

__all__ = [
    "AliasConflict",
    "Facts",
    "infer_keyword_scope",
    "name_tokens",
    "project_arguments",
    "verb_of",
]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")

# Scope keyword groups, strongest first: the first group with a token wins.
_SCOPE_KEYWORDS: Final[tuple[tuple[str, frozenset[str]], ...]] = (
    (
        "shell",
        frozenset(
            {
                "shell",
                "bash",
                "sh",
                "zsh",
                "exec",
                "execute",
                "command",
                "cmd",
                "terminal",
                "subprocess",
                "powershell",
                "console",
            }
        ),
    ),
    ("browser", frozenset({"browser", "navigate", "click", "page", "tab", "screenshot"})),
    (
        "network",
        frozenset(
            {
                "http",
                "https",
                "api",
                "fetch",
                "request",
                "url",
                "web",
                "curl",
                "wget",
                "download",
                "upload",
                "webhook",
                "domain",
            }
        ),
    ),
    (
        "filesystem",
        frozenset({"file", "files", "read", "write", "directory", "dir", "path", "folder", "fs"}),
    ),
)

# Verbs, strictest first.
_VERBS: Final[tuple[tuple[str, frozenset[str]], ...]] = (
    (
        "delete",
        frozenset({"delete", "remove", "rm", "del", "drop", "destroy", "purge", "unlink", "erase"}),
    ),
    (
        "write",
        frozenset(
            {
                "write",
                "save",
                "create",
                "update",
                "put",
                "post",
                "set",
                "add",
                "send",
                "edit",
                "modify",
                "append",
                "upload",
                "insert",
                "patch",
                "move",
                "rename",
            }
        ),
    ),
    (
        "read",
        frozenset(
            {
                "read",
                "get",
                "list",
                "fetch",
                "view",
                "search",
                "show",
                "find",
                "load",
                "query",
                "download",
                "open",
                "cat",
                "ls",
            }
        ),
    ),
)


@lru_cache(maxsize=4096)
def name_tokens(text: str) -> tuple[str, ...]:
    """``readFile``, ``read_file`` and ``read-file`` all give ``("read", "file")``."""
    return tuple(t for t in _SPLIT.split(_CAMEL.sub(" ", text).lower()) if t)


@lru_cache(maxsize=4096)
def infer_keyword_scope(name: str, description: str | None) -> str | None:
    """The scope the tool's name (first) or description (second) suggests, if any."""
    for text in (name, description):
        if not text:
            continue
        tokens = set(name_tokens(text))
        for scope, words in _SCOPE_KEYWORDS:
            if tokens & words:
                return scope
    return None


@lru_cache(maxsize=4096)
def verb_of(name: str) -> str | None:
    """read / write / delete from the tool name's words; the strictest one wins."""
    tokens = set(name_tokens(name))
    for verb, words in _VERBS:
        if tokens & words:
            return verb
    return None


def project_arguments(
    arguments: Mapping[str, Any], schema: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """The arguments the tool actually receives under its declared schema."""
    if schema is None:
        return arguments
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    extra = schema.get("additionalProperties", False)
    if extra is True or isinstance(extra, Mapping):
        return arguments
    return {key: value for key, value in arguments.items() if key in properties}


class AliasConflict(Exception):
    """Two names of one parameter disagree."""

    def __init__(self, first: str, second: str, first_value: Any, second_value: Any) -> None:
        super().__init__(
            f"conflicting arguments {first!r} and {second!r}: the tool would read one of "
            "two different values, so the call is refused"
        )
        self.names = (first, second)
        self.values = (first_value, second_value)


@dataclass(slots=True)
class Facts:
    """Everything the engine matches on for one check. Built once per check."""

    kind: str
    name: str
    scope: str
    verb: str | None
    args: Mapping[str, Any]
    params: dict[str, Any]
    context: Any  # interlock.core.action.Context
    target: str | None
    capabilities: tuple[str, ...]
    _roots: _Roots | None = None

    @property
    def root(self) -> Callable[[str], Mapping[str, Any]]:
        """The CEL root variables (args, params, action, context) by name, each built
        on first use and shared by every rule of the check."""
        roots = self._roots
        if roots is None:
            roots = self._roots = _Roots()
            roots.facts = self
        return roots.__getitem__

    def _build_root(self, name: str) -> Mapping[str, Any]:
        if name == "args":
            return self.args if type(self.args) is dict else dict(self.args)
        if name == "params":
            return self.params
        if name == "action":
            return {
                "kind": self.kind,
                "name": self.name,
                "scope": self.scope,
                "verb": self.verb,
                "target": self.target,
                "capabilities": list(self.capabilities),
            }
        if name == "context":
            return dict(self.context.as_dict())
        raise KeyError(name)


class _Roots(dict[str, Mapping[str, Any]]):
    __slots__ = ("facts",)
    facts: Facts

    def __missing__(self, name: str) -> Mapping[str, Any]:
        value = self[name] = self.facts._build_root(name)
        return value


_MISSING: Final = object()


_SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})


def check_limits(arguments: Mapping[str, Any], *, max_depth: int, max_items: int) -> None:
    """Refuse arguments too deep or too many to judge, without recursion."""
    if type(arguments) is dict and len(arguments) <= max_items:
        for value in arguments.values():
            if type(value) not in _SCALARS:
                break
        else:
            return  # flat: the common case
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    items = 0
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > max_depth:
            raise EvaluationError(f"arguments are nested deeper than {max_depth} levels")
        for child in children:
            items += 1
            if items > max_items:
                raise EvaluationError(f"arguments hold more than {max_items} values")
            if isinstance(child, (Mapping, list, tuple)):
                stack.append((child, depth + 1))


def _pick(first: str, second: str, a: Any, b: Any) -> Any:
    """The value of a parameter named ``first`` or ``second`` (``a`` and ``b``, read
    by the caller, at least one not None); raises AliasConflict when they disagree."""
    if a is not None and b is not None and not _same(a, b):
        raise AliasConflict(first, second, a, b)
    return a if a is not None else b


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _as_text(name: str, value: Any, max_chars: int) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes):
        if len(value) > 4 * max_chars:  # a character is at most 4 bytes: surely too long
            raise EvaluationError(
                f"parameter {name!r} is {len(value)} bytes long, over the {max_chars} limit"
            )
        text = value.decode("utf-8", errors="backslashreplace")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        text = shlex.join(value)
    else:
        raise EvaluationError(
            f"parameter {name!r} is a {type(value).__name__}, not a string; cannot judge it"
        )
    if len(text) > max_chars:
        raise EvaluationError(
            f"parameter {name!r} is {len(text)} characters long, over the {max_chars} limit"
        )
    return text


def _domain_of_url(url: str) -> str | None:
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        host = parts.hostname
    except ValueError as exc:
        raise EvaluationError(f"parameter 'url' is not a valid URL: {exc}") from exc
    return _normal_domain(host) if host else None


def _normal_domain(domain: str) -> str:
    return domain.strip().rstrip(".").lower()


def extract(
    *,
    kind: str,
    name: str,
    arguments: Mapping[str, Any],
    pinned_scope: str | None,
    description: str | None,
    context: Any,
    target: str | None,
    capabilities: tuple[str, ...],
    default_scope: str,
    max_param_chars: int,
) -> Facts:
    """Derive the parameters and the scope. Raises AliasConflict or EvaluationError."""
    params: dict[str, Any] = {}

    # An explicit None is an unset optional parameter, not a value. The aliases are
    # read here so that the usual call, with neither, costs no call to _pick.
    command, cmd = arguments.get("command"), arguments.get("cmd")
    if command is not None or cmd is not None:
        command = _pick("command", "cmd", command, cmd)
        params["command"] = _as_text("command", command, max_param_chars)

    path, file_path = arguments.get("path"), arguments.get("file_path")
    if path is not None or file_path is not None:
        text = _as_text("path", _pick("path", "file_path", path, file_path), max_param_chars)
        params["path"] = posixpath.normpath(text) if text else text

    url = arguments.get("url", _MISSING)
    url_domain: str | None = None
    if url is not _MISSING:
        params["url"] = _as_text("url", url, max_param_chars)
        url_domain = _domain_of_url(params["url"])
    domain = arguments.get("domain", _MISSING)
    if domain is not _MISSING:
        given = _normal_domain(_as_text("domain", domain, max_param_chars))
        if url_domain is not None and given != url_domain:
            raise AliasConflict("domain", "url", domain, url)
        params["domain"] = given
    elif url_domain is not None:
        params["domain"] = url_domain

    session_id = arguments.get("session_id", _MISSING)
    if session_id is not _MISSING:
        params["session_id"] = session_id

    est_cost = arguments.get("est_cost", _MISSING)
    if est_cost is not _MISSING:
        if (
            isinstance(est_cost, bool)
            or not isinstance(est_cost, (int, float))
            or not math.isfinite(est_cost)
        ):
            raise EvaluationError(f"parameter 'est_cost' must be a finite number, not {est_cost!r}")
        params["est_cost"] = est_cost

    verb = verb_of(name)
    if verb is not None:
        params["verb"] = verb
    if target is not None:
        params["target"] = target

    scope = (
        pinned_scope
        if pinned_scope is not None  # the usual case: decided without a call
        else _scope(kind, name, description, arguments, default_scope)
    )
    if "command" not in params and scope == "shell" and set(arguments) == {"input"}:
        params["command"] = _as_text("command", arguments["input"], max_param_chars)

    # Positional, in field order (kind, name, scope, verb, args, params, context,
    # target, capabilities): built on every check, and keywords cost more.
    return Facts(kind, name, scope, verb, arguments, params, context, target, capabilities)


def _scope(
    kind: str,
    name: str,
    description: str | None,
    arguments: Mapping[str, Any],
    default_scope: str,
) -> str:
    """The scope when none is pinned."""
    if kind == "llm":
        return "llm"
    if kind == "browser":
        return "browser"
    if "url" in arguments or "domain" in arguments:
        return "network"
    if "path" in arguments or "file_path" in arguments:
        return "filesystem"
    return infer_keyword_scope(name, description) or default_scope
