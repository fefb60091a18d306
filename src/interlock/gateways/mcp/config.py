"""Which upstream MCP servers a gateway fronts: from the command line
(``--upstream NAME=COMMAND``, ``--upstream NAME=URL``, or one unnamed ``-- COMMAND``)
or from a YAML file (``--config gateway.yaml``)::

    upstreams:
      files:
        command: [npx, "@modelcontextprotocol/server-filesystem", /srv/docs]
        env: {LOG_LEVEL: warn}
      github:
        url: https://mcp.example.com/mcp
        headers:
          Authorization: "Bearer ${GITHUB_TOKEN}"   # from the gateway's environment
        namespace: false       # its tools under their own names (default: github__...)
    hide_denied_tools: true

A name is what the policy sees as the tool's ``server`` and the prefix of its tool
and prompt names (``files__read_file``), unless ``namespace: false``: letters, digits and ``-``,
starting with a letter or digit, at most 32 characters. ``${VAR}`` in an ``env`` or
``headers`` value is read from the gateway's own environment (a missing variable is
an error, never an empty credential).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from interlock.errors import ConfigError

__all__ = [
    "NAME_PATTERN",
    "SEPARATOR",
    "GatewayConfig",
    "UpstreamSpec",
    "load_config",
    "parse_upstream",
]

#: What an upstream may be called.
NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,31}$")
#: Between an upstream's name and its tool's (``files__read_file``). A name holds
#: no ``_``, so the first separator in a prefixed name is always this one.
SEPARATOR: Final = "__"

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One upstream server: a command to spawn (stdio) or a URL (streamable HTTP).

    ``name`` is ``None`` only for the single unnamed upstream of ``-- COMMAND``,
    whose messages are relayed byte for byte, tool names unchanged."""

    name: str | None
    command: tuple[str, ...] | None = None
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    #: its tools and prompts under ``<name>__`` (``False``: under their own names)
    namespace: bool = True

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ConfigError(f"upstream {self.label}: give a command or a url, not both")
        if self.command is not None and not self.command:
            raise ConfigError(f"upstream {self.label}: the command is empty")
        if self.name is not None and not NAME_PATTERN.match(self.name):
            raise ConfigError(
                f"upstream name {self.name!r}: use letters, digits and '-' (at most 32, "
                "starting with a letter or digit)"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"upstream {self.label}: the url must be http:// or https://")
        if self.headers and self.url is None:
            raise ConfigError(f"upstream {self.label}: headers are for an HTTP upstream")

    @property
    def label(self) -> str:
        return repr(self.name) if self.name is not None else "(unnamed)"

    @property
    def prefix(self) -> str:
        """What this upstream's tool and prompt names start with at the gateway."""
        if self.name is None or not self.namespace:
            return ""
        return f"{self.name}{SEPARATOR}"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """The upstreams (at least one; names unique), and whether ``tools/list`` leaves
    out the tools the policy never allows the calling agent."""

    upstreams: tuple[UpstreamSpec, ...]
    hide_denied_tools: bool = False

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise ConfigError("no upstream: give --upstream NAME=COMMAND, --config, or -- COMMAND")
        names = [spec.name for spec in self.upstreams]
        if None in names and len(names) > 1:
            raise ConfigError("an unnamed upstream (-- COMMAND) cannot be combined with others")
        seen: set[str] = set()
        for name in names:
            if name is not None and name.casefold() in seen:
                raise ConfigError(f"two upstreams are named {name!r}")
            if name is not None:
                seen.add(name.casefold())

    @property
    def transparent(self) -> bool:
        """One unnamed upstream: every message relayed byte for byte."""
        return len(self.upstreams) == 1 and self.upstreams[0].name is None


def parse_upstream(text: str) -> UpstreamSpec:
    """``NAME=COMMAND ARGS...`` (split as a POSIX shell would) or ``NAME=URL``."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest.strip():
        raise ConfigError(f"--upstream takes NAME=COMMAND or NAME=URL, not {text!r}")
    rest = rest.strip()
    if rest.startswith(("http://", "https://")):
        return UpstreamSpec(name, url=rest)
    try:
        command = tuple(shlex.split(rest))
    except ValueError as exc:
        raise ConfigError(f"--upstream {name}: cannot split the command ({exc})") from exc
    return UpstreamSpec(name, command=command)


def _expand(value: Any, where: str, environ: Mapping[str, str]) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"{where}: a value must be text, not {type(value).__name__}")

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(f"{where}: ${{{name}}} is not set in the gateway's environment")
        return environ[name]

    return _VARIABLE.sub(variable, str(value))


def _mapping(value: Any, where: str, environ: Mapping[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of NAME: value")
    return {str(key): _expand(item, f"{where}.{key}", environ) for key, item in value.items()}


def _command(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise ConfigError(f"{where}: cannot split the command ({exc})") from exc
    if isinstance(value, Sequence) and all(isinstance(part, str) for part in value):
        return tuple(value)
    raise ConfigError(f"{where}: a command is a string or a list of strings")


_UPSTREAM_KEYS: Final = frozenset({"command", "url", "env", "headers", "namespace"})


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """The gateway configuration in ``path``; :class:`ConfigError` naming the file
    and the field for anything wrong."""
    import yaml

    env = os.environ if environ is None else environ
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({exc})") from exc
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path}: expected a mapping with 'upstreams'")
    unknown = set(document) - {"upstreams", "hide_denied_tools"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    upstreams = document.get("upstreams")
    if not isinstance(upstreams, Mapping) or not upstreams:
        raise ConfigError(f"{path}: 'upstreams' must map each upstream's name to its settings")
    specs = []
    for name, settings in upstreams.items():
        where = f"{path}: upstreams.{name}"
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{where}: expected a mapping with 'command' or 'url'")
        extra = set(settings) - _UPSTREAM_KEYS
        if extra:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(map(str, extra)))}")
        command, url = settings.get("command"), settings.get("url")
        namespace = settings.get("namespace", True)
        if not isinstance(namespace, bool):
            raise ConfigError(f"{where}.namespace: true or false")
        try:
            specs.append(
                UpstreamSpec(
                    str(name),
                    command=_command(command, f"{where}.command") if command is not None else None,
                    url=_expand(url, f"{where}.url", env) if url is not None else None,
                    env=_mapping(settings.get("env"), f"{where}.env", env),
                    headers=_mapping(settings.get("headers"), f"{where}.headers", env),
                    namespace=namespace,
                )
            )
        except ConfigError as exc:
            message = str(exc)
            where_from = message if message.startswith(str(path)) else f"{path}: {message}"
            raise ConfigError(where_from) from exc
    hide = document.get("hide_denied_tools", False)
    if not isinstance(hide, bool):
        raise ConfigError(f"{path}: hide_denied_tools must be true or false")
    try:
        return GatewayConfig(tuple(specs), hide_denied_tools=hide)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
