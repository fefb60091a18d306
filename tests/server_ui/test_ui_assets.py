"""The page's files as the server sends them (no browser needed): strict headers on
every file, no key needed, nothing inline, nothing from another origin."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from interlock import Guard, load_policy_text
from interlock.server import create_app
from interlock.server.ui import CONTENT_SECURITY_POLICY, mount_ui

from .harness import POLICY

ASSETS = {
    "/ui/": "text/html",
    "/ui/app.js": "text/javascript",
    "/ui/app.css": "text/css",
    "/ui/favicon.svg": "image/svg+xml",
}
STATIC = files("interlock.server.ui").joinpath("static")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    guard = Guard(load_policy_text(POLICY), store=f"sqlite:///{tmp_path / 'ui.db'}")
    app = create_app(guard)
    mount_ui(app)
    with TestClient(app) as opened:
        yield opened
    guard.close()


@pytest.mark.parametrize("path", sorted(ASSETS))
def test_every_file_is_served_without_a_key_and_with_strict_headers(
    client: TestClient, path: str
) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(ASSETS[path])
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "set-cookie" not in response.headers


def test_the_policy_allows_only_this_origin_and_no_inline_script() -> None:
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["form-action"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_ui_without_the_slash_redirects_to_the_page(client: TestClient) -> None:
    response = client.get("/ui", follow_redirects=False)
    assert response.status_code == 308
    assert response.headers["location"] == "ui/"
    assert client.get("/ui").text == client.get("/ui/").text


def test_the_page_is_not_part_of_the_api_and_mounting_twice_changes_nothing(
    client: TestClient,
) -> None:
    app = client.app
    assert isinstance(app, FastAPI)
    routes = len(app.router.routes)
    mount_ui(app)
    assert len(app.router.routes) == routes
    paths = client.get("/v1/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith("/ui")]


def test_the_data_still_needs_a_key(client: TestClient) -> None:
    assert client.get("/v1/approvals").status_code == 401


def test_the_page_has_nothing_inline_and_nothing_from_elsewhere() -> None:
    html = STATIC.joinpath("index.html").read_text()
    lines = STATIC.joinpath("app.js").read_text().splitlines()
    script = "\n".join(line for line in lines if not line.lstrip().startswith("//"))
    css = STATIC.joinpath("app.css").read_text()
    assert re.findall(r"<script[^>]*>", html) == ['<script src="app.js" defer>']
    assert not re.search(r"\son\w+\s*=", html), "inline event handler"
    assert "<style" not in html and "style=" not in html
    for text in (html, script, css):
        assert not re.search(r"https?://", text), "a resource from another origin"
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
    assert "cookie" not in script.lower()
