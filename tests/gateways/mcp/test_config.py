"""The gateway's upstreams from ``--upstream`` and from a config file: what is
accepted, and the error — naming the file and the field — for what is not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from interlock.errors import ConfigError
from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec, load_config, parse_upstream


def test_an_upstream_from_the_command_line() -> None:
    spec = parse_upstream("files=npx '@modelcontextprotocol/server-filesystem' '/srv/my docs'")
    assert spec.name == "files"
    assert spec.command == ("npx", "@modelcontextprotocol/server-filesystem", "/srv/my docs")
    assert spec.prefix == "files__"
    web = parse_upstream("web=https://mcp.example.com/mcp")
    assert (web.url, web.command) == ("https://mcp.example.com/mcp", None)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("files", "NAME=COMMAND"),
        ("=python x.py", "NAME=COMMAND"),
        ("files=", "NAME=COMMAND"),
        ("fi_les=python x.py", "use letters, digits and '-'"),
        ("files__x=python x.py", "use letters, digits and '-'"),
        ("-files=python x.py", "use letters, digits and '-'"),
        ("f" * 33 + "=python x.py", "use letters, digits and '-'"),
        ("files=python 'x.py", "cannot split the command"),
        ("web=ftp://example.com", None),  # not a URL: a command named so (it will not start)
    ],
)
def test_a_bad_upstream_is_refused(text: str, says: str | None) -> None:
    if says is None:
        assert parse_upstream(text).command == ("ftp://example.com",)
        return
    with pytest.raises(ConfigError, match=says):
        parse_upstream(text)


def test_names_are_unique_whatever_their_case() -> None:
    one, other = UpstreamSpec("Files", command=("a",)), UpstreamSpec("files", command=("b",))
    with pytest.raises(ConfigError, match="two upstreams are named"):
        GatewayConfig((one, other))
    with pytest.raises(ConfigError, match="cannot be combined"):
        GatewayConfig((UpstreamSpec(None, command=("a",)), other))
    with pytest.raises(ConfigError, match="no upstream"):
        GatewayConfig(())


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_config_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
upstreams:
  files:
    command: [npx, server-filesystem, /srv]
    env: {LEVEL: "${LEVEL}", FIXED: 3}
  web:
    url: https://mcp.example.com/mcp
    headers: {Authorization: "Bearer ${TOKEN}"}
    namespace: false
hide_denied_tools: true
""",
    )
    config = load_config(path, environ={"LEVEL": "warn", "TOKEN": "t0k"})
    files, web = config.upstreams
    assert files.command == ("npx", "server-filesystem", "/srv")
    assert dict(files.env) == {"LEVEL": "warn", "FIXED": "3"}
    assert dict(web.headers) == {"Authorization": "Bearer t0k"}
    assert web.prefix == "" and files.prefix == "files__"
    assert config.hide_denied_tools and not config.transparent


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("upstreams: []", "'upstreams' must map"),
        ("- a", "expected a mapping"),
        ("upstreams: {a: {command: x}}\nextra: 1", "unknown key(s) extra"),
        ("upstreams: {a: {command: x, cmd: y}}", "upstreams.a: unknown key(s) cmd"),
        ("upstreams: {a: {}}", "give a command or a url"),
        ("upstreams: {a: {command: x, url: 'https://h/mcp'}}", "not both"),
        ("upstreams: {a: {command: [x, 1]}}", "upstreams.a.command"),
        ("upstreams: {a: {command: x, env: {K: '${MISSING}'}}}", "${MISSING} is not set"),
        ("upstreams: {a: {command: x, env: [K]}}", "upstreams.a.env: expected a mapping"),
        ("upstreams: {a: {command: x, headers: {H: v}}}", "headers are for an HTTP upstream"),
        ("upstreams: {a: {url: 'ftp://h'}}", "must be http"),
        ("upstreams: {a: {command: x, namespace: 'no'}}", "namespace: true or false"),
        ("upstreams: {a_b: {command: x}}", "use letters"),
        ("upstreams: {a: {command: x}}\nhide_denied_tools: 1", "true or false"),
        ("upstreams: {a: {command: x}, A: {command: y}}", "two upstreams are named"),
        ("upstreams: [", "not YAML"),
    ],
)
def test_a_bad_config_file_names_the_file_and_the_field(
    tmp_path: Path, text: str, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(says)) as raised:
        load_config(path, environ={})
    assert str(raised.value).startswith(str(path))


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_config(tmp_path / "nope.yaml")
