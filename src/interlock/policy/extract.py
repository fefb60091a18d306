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
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final
from urllib.parse import unquote

from interlock.core.action import Context
from interlock.errors import EvaluationError
from interlock.facts.paths import PathPattern, normalise_path
from interlock.facts.url import UrlError, registrable_domain, url_facts

__all__ = [
    "SAFE_ROOTS",
    "SCOPE_KEYS",
    "AliasConflict",
    "AmbiguousUrl",
    "Facts",
    "est_cost_param",
    "infer_keyword_scope",
    "kind_params",
    "mcp_params",
    "name_tokens",
    "plain_roots",
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
@lru_cache(maxsize=4096)
def infer_keyword_scope(name: str, description: str | None) -> str | None:
    """The scope the tool's name (first) or description (second) suggests, if any
    (remembered: a process sees the same few tools again and again)."""
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


class AmbiguousUrl(Exception):
    """A URL whose host depends on which parser reads it."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(
            f"the URL {url!r} goes to different hosts depending on the client ({why}), "
            "so the call is refused"
        )
        self.url = url


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
    #: every scope of the call, when it has more than one (the first is ``scope``)
    scopes: tuple[str, ...] | None = None
    #: parameter sets, one per combination of listed paths and URLs, to judge each
    variants: tuple[dict[str, Any], ...] | None = None
    #: the check is judged for a derived use (a file a shell command reads): only the
    #: rules that could refuse it count
    derived: str | None = None

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
        if name == "shell":
            return _shell_root(self)
        raise KeyError(name)

    @property
    def inexact(self) -> bool:
        """Whether some parameter is known only as a pattern (see facts.paths)."""
        # (types compare by identity: the C-level scan of ``in``, no generator)
        return PathPattern in map(type, self.params.values())

    def with_params(self, scope: str, params: dict[str, Any], derived: str | None = None) -> Facts:
        """A copy judged under ``scope`` with ``params`` (for one scope, one listed
        value, or one file a command uses)."""
        return Facts(
            self.kind,
            self.name,
            scope,
            params.get("verb", self.verb) if derived else self.verb,
            self.args,
            params,
            self.context,
            self.target,
            self.capabilities,
            derived=derived,
        )


def _shell_root(facts: Facts) -> Mapping[str, Any]:
    """``shell`` for CEL: the facts of the call's command (empty without one).
    Incomplete facts make the expression unevaluable: CEL never sees a guess."""
    from interlock.policy.shellmatch import facts_of_command

    shell = facts_of_command(facts)
    if shell is None:
        return {
            "programs": [],
            "commands": [],
            "reads": [],
            "writes": [],
            "deletes": [],
            "touches": [],
            "urls": [],
            "complete": True,
        }
    if not shell.complete:
        raise EvaluationError(f"cannot judge the shell command: {shell.unknown}")
    return shell.as_cel()


#: The CEL roots whose building cannot raise for a check :func:`plain_roots` holds for.
SAFE_ROOTS: Final = frozenset({"args", "params", "action", "context"})


def plain_roots(facts: Facts) -> bool:
    """Whether building the CEL roots of :data:`SAFE_ROOTS` cannot raise for this
    check: its arguments a dict, its context a ``Context``, its capabilities a tuple
    (the usual check)."""
    return (
        type(facts.args) is dict
        and type(facts.context) is Context
        and type(facts.capabilities) is tuple
    )


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


def _texts(name: str, value: Any, max_chars: int) -> list[str]:
    """One value or a list of them, each as text (a list of paths or URLs names
    several, each judged)."""
    if isinstance(value, (list, tuple)):
        if not value:
            return []
        return [_as_text(name, item, max_chars) for item in value]
    return [_as_text(name, value, max_chars)]


def _normal_domain(domain: str) -> str:
    return domain.strip().rstrip(".").lower()


# Argument names, by the parameter they give. A name of each group adds the scope.
_PATH_KEYS: Final = ("path", "file_path", "paths", "file_paths", "filepath", "filename")
_URL_KEYS: Final = ("url", "urls", "uri", "uris", "href")
_HOST_KEYS: Final = ("domain", "host", "hostname")
#: Argument names that add a scope to a call (an argument can add one, never remove).
SCOPE_KEYS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("network", _URL_KEYS + _HOST_KEYS),
    ("filesystem", _PATH_KEYS),
    ("shell", ("command", "cmd")),
)
_ALIAS_KEYS: Final = frozenset(_PATH_KEYS + _URL_KEYS + _HOST_KEYS + ("command", "cmd"))
_NONE: Final[frozenset[str]] = frozenset()
_COMMAND_KEYS: Final = frozenset({"command", "cmd"})
#: The most combinations of listed values (paths x URLs) one call may ask to judge.
MAX_VARIANTS: Final = 256


def _url_params(text: str) -> dict[str, Any]:
    try:
        found = url_facts(text)
    except UrlError as exc:
        raise EvaluationError(f"parameter 'url': {exc}") from None
    if found.ambiguous is not None:
        raise AmbiguousUrl(text, found.ambiguous)
    params: dict[str, Any] = {
        "url": text,
        "domain": found.host,
        "scheme": found.scheme,
    }
    if found.port is not None:
        params["port"] = found.port
    if found.site is not None:
        params["site"] = found.site
    if found.ip_class is not None:
        params["ip_class"] = found.ip_class
    if found.scheme == "file" and found.path:
        params["@file"] = normalise_path(unquote(found.path))
    return params


def extract(
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
    """Derive the parameters and the scopes. Raises AliasConflict, AmbiguousUrl or
    EvaluationError."""
    params: dict[str, Any] = {}
    variants: list[list[dict[str, Any]]] = []

    # An explicit None is an unset optional parameter, not a value. The aliases are
    # read here so that the usual call, with neither, costs no call to _pick.
    command, cmd = arguments.get("command"), arguments.get("cmd")
    if command is not None or cmd is not None:
        command = _pick("command", "cmd", command, cmd)
        params["command"] = _as_text("command", command, max_param_chars)

    # Which alias names the call uses at all (usually none): one set operation
    # instead of a lookup per name.
    present = _ALIAS_KEYS.intersection(arguments) if arguments else _NONE
    # A dict's keys are exactly what ``get`` finds: only the names it has are read.
    # Another mapping is read name by name, as it answers ``get``.
    plan = _alias_plan(present) if type(arguments) is dict else _EVERY_ALIAS
    if present and not present <= _COMMAND_KEYS:
        _paths_and_urls(arguments, params, variants, plan, max_param_chars)

    session_id = arguments.get("session_id", _MISSING)
    if session_id is not _MISSING:
        params["session_id"] = session_id

    est_cost = arguments.get("est_cost", _MISSING)
    if est_cost is not _MISSING:
        params["est_cost"] = est_cost_param(est_cost)

    verb = verb_of(name)
    if verb is not None:
        params["verb"] = verb
    if target is not None:
        params["target"] = target
    trusted = kind_params(kind, target, capabilities)
    if trusted:
        params.update(trusted)

    if pinned_scope is not None:  # the usual case: decided without a call
        scopes: tuple[str, ...] = (pinned_scope,)
    else:
        scopes = _scopes(kind, name, description, arguments, default_scope, present, plan)
    scope = scopes[0]
    if "command" not in params and scope == "shell" and set(arguments) == {"input"}:
        params["command"] = _as_text("command", arguments["input"], max_param_chars)

    # Positional, in field order (kind, name, scope, verb, args, params, context,
    # target, capabilities): built on every check, and keywords cost more.
    facts = Facts(kind, name, scope, verb, arguments, params, context, target, capabilities)
    if len(scopes) > 1:
        facts.scopes = scopes
    if variants:
        facts.variants = _combine(variants)
    return facts


#: The capabilities an MCP action carries for its tool's annotation hints, and the
#: parameter each one sets (see interlock.adapters.mcp.mcp_capabilities).
_MCP_HINTS: Final = (
    ("mcp:read-only", "read_only"),
    ("mcp:destructive", "destructive"),
    ("mcp:idempotent", "idempotent"),
    ("mcp:open-world", "open_world"),
)


def kind_params(
    kind: str, target: str | None, capabilities: tuple[str, ...]
) -> dict[str, Any] | None:
    """The parameters an action's kind adds from its trusted fields: an MCP tool's
    (:func:`mcp_params`), a server's sampling request's ``server`` (an ``llm`` action
    whose target is ``mcp:<server>``, from the MCP gateway); ``None`` for any other.
    Every path that builds a check's parameters adds them (the full extraction and
    the per-shape facts functions alike)."""
    if kind == "mcp":
        return mcp_params(target, capabilities)
    if kind == "llm" and target is not None and target.startswith("mcp:"):
        return {"server": target[4:]}
    return None


def mcp_params(target: str | None, capabilities: tuple[str, ...]) -> dict[str, Any]:
    """An MCP tool's trusted facts as parameters: ``server`` (the upstream, from the
    target ``mcp:<server>``) and its four annotation hints, each true or false. The
    same for every call of the tool: known before any call is made."""
    params: dict[str, Any] = {}
    if target is not None and target.startswith("mcp:"):
        params["server"] = target[4:]
    for capability, param in _MCP_HINTS:
        params[param] = capability in capabilities
    return params


def est_cost_param(value: Any) -> Any:
    """``value`` as the ``est_cost`` parameter; raises EvaluationError unless it is a
    finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EvaluationError(f"parameter 'est_cost' must be a finite number, not {value!r}")
    return value


#: The longest text whose path, URL and host parameters are remembered (a key of the
#: memo holds its text).
_MEMO_CHARS: Final = 512


def _paths_and_urls(
    arguments: Mapping[str, Any],
    params: dict[str, Any],
    variants: list[list[dict[str, Any]]],
    plan: _AliasPlan,
    max_param_chars: int,
) -> None:
    """The path, URL and host parameters (one value each, or listed values to judge in
    turn). Raises AliasConflict, AmbiguousUrl or EvaluationError."""
    if type(arguments) is dict:
        # Short text values only (the usual call): the parameters they give are
        # remembered, keyed by the names and values read.
        names = plan[4]
        values: list[str | None] = []
        for name in names:
            value = arguments.get(name)
            if value is not None and (type(value) is not str or len(value) > _MEMO_CHARS):
                break
            values.append(value)
        else:
            found = _text_params(names, tuple(values), max_param_chars)
            if found is not None:
                params.update(found)
                return
    _read_paths_and_urls(arguments, params, variants, plan, max_param_chars)


@lru_cache(maxsize=4096)
def _text_params(
    names: tuple[str, ...], values: tuple[str | None, ...], max_param_chars: int
) -> dict[str, Any] | None:
    """The parameters the alias ``names`` with these text ``values`` give (for the
    caller to copy, never to change); None when they name several paths or URLs to
    judge in turn (read each time). An error is raised, not kept."""
    params: dict[str, Any] = {}
    variants: list[list[dict[str, Any]]] = []
    plan = _alias_plan(frozenset(names))
    _read_paths_and_urls(
        dict(zip(names, values, strict=True)), params, variants, plan, max_param_chars
    )
    return None if variants else params


def _read_paths_and_urls(
    arguments: Mapping[str, Any],
    params: dict[str, Any],
    variants: list[list[dict[str, Any]]],
    plan: _AliasPlan,
    max_param_chars: int,
) -> None:
    path, file_path = arguments.get("path"), arguments.get("file_path")
    if path is not None or file_path is not None:
        _pick("path", "file_path", path, file_path)
    path_keys, url_keys, host_keys, _, _ = plan
    paths = _gather(arguments, path_keys, max_param_chars)
    if paths:
        normal = [normalise_path(p) if p else p for p in dict.fromkeys(paths)]
        if len(normal) == 1:
            params["path"] = normal[0]
        else:
            variants.append([{"path": p} for p in normal])

    urls = _gather(arguments, url_keys, max_param_chars)
    hosts = _gather(arguments, host_keys, max_param_chars)
    stated: str | None = None
    if hosts:
        normal_hosts = {_stated_host(h) for h in hosts}
        if len(normal_hosts) > 1:
            first, second = sorted(normal_hosts)[:2]
            raise AliasConflict("domain", "host", first, second)
        stated = normal_hosts.pop()
    if urls:
        found = [_url_params(u) for u in dict.fromkeys(urls)]
        for entry in found:
            if stated is not None and entry["domain"] and entry["domain"] != stated:
                raise AliasConflict("domain", "url", stated, entry["url"])
        if len(found) == 1:
            params.update(found[0])
        else:
            variants.append(found)
    elif stated is not None:
        params["domain"] = stated
        site = registrable_domain(stated) if stated else None
        if site is not None:
            params["site"] = site


def _gather(arguments: Mapping[str, Any], keys: tuple[str, ...], max_chars: int) -> list[str]:
    found: list[str] = []
    for key in keys:
        value = arguments.get(key)
        if value is not None:
            found.extend(_texts(key, value, max_chars))
    return found


#: The alias names to read, in order: paths, URLs, hosts, each scope's, and the first
#: three together.
_AliasPlan = tuple[
    tuple[str, ...],
    tuple[str, ...],
    tuple[str, ...],
    tuple[tuple[str, tuple[str, ...]], ...],
    tuple[str, ...],
]
_EVERY_ALIAS: Final[_AliasPlan] = (
    _PATH_KEYS,
    _URL_KEYS,
    _HOST_KEYS,
    SCOPE_KEYS,
    _PATH_KEYS + _URL_KEYS + _HOST_KEYS,
)


@lru_cache(maxsize=1024)
def _alias_plan(present: frozenset[str]) -> _AliasPlan:
    """The alias names of a dict of arguments whose keys include ``present`` (of the
    alias names), in the order they are read (remembered: calls of a tool repeat)."""
    paths = tuple(key for key in _PATH_KEYS if key in present)
    urls = tuple(key for key in _URL_KEYS if key in present)
    hosts = tuple(key for key in _HOST_KEYS if key in present)
    return (
        paths,
        urls,
        hosts,
        tuple(
            (scope, named)
            for scope, keys in SCOPE_KEYS
            if (named := tuple(key for key in keys if key in present))
        ),
        paths + urls + hosts,
    )


def _stated_host(text: str) -> str:
    if "\x00" in text:
        raise EvaluationError("a host with a NUL byte cannot be judged")
    host = _normal_domain(text)
    if not host:
        return host
    try:
        found = url_facts(
            f"http://[{host}]/" if ":" in host and "[" not in host else f"http://{host}/"
        )
    except UrlError:
        return host
    return found.host


def _combine(variants: list[list[dict[str, Any]]]) -> tuple[dict[str, Any], ...]:
    total = 1
    for values in variants:
        total *= len(values)
    if total > MAX_VARIANTS:
        raise EvaluationError(
            f"the call lists {total} combinations of paths and URLs, over the "
            f"{MAX_VARIANTS} judged in one check"
        )
    combined: list[dict[str, Any]] = [{}]
    for values in variants:
        combined = [{**base, **value} for base in combined for value in values]
    return tuple(combined)


def _scopes(
    kind: str,
    name: str,
    description: str | None,
    arguments: Mapping[str, Any],
    default_scope: str,
    present: frozenset[str],
    plan: _AliasPlan,
) -> tuple[str, ...]:
    """Every scope of a call when none is pinned: the argument names' (first), then
    the tool's name or description's; the default only when nothing else gives one.
    An argument can add a scope, never take one away: ``shell(command=..., url=...)``
    is judged under shell and network rules alike."""
    if kind == "llm":
        return ("llm",)
    if kind == "browser":
        return ("browser",)
    found: list[str] = []
    if present:
        for scope, keys in plan[3]:
            for key in keys:
                if arguments.get(key) is not None:
                    found.append(scope)
                    break
    keyword = infer_keyword_scope(name, description)
    if keyword is not None and keyword not in found:
        found.append(keyword)
    if not found:
        return (default_scope,)
    return tuple(found)
