"""The routes that serve the approvals page (and the policy replay page at
``/ui/replay``): static files under ``/ui/``, each
with headers that keep the page strict (no inline script, no foreign origin, no
framing, no MIME sniffing).

The files hold no data, so they need no key; the page reads and decides approvals
through the authenticated ``/v1`` API with the key the approver types in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Final

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse, Response

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "UI_PATH", "mount_ui", "ui_router"]

#: Where the page is served.
UI_PATH: Final = "/ui"

#: Only this origin's own files; no inline script or style, no plugins, no framing
#: (the approve button cannot be clickjacked), no form posting anywhere (the sign-in
#: form is handled by script, so a key can never leave in a URL), and DOM sinks that
#: take strings (``innerHTML``) are refused by the browser (Trusted Types).
CONTENT_SECURITY_POLICY: Final = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ]
)

#: Sent with every file of the page.
SECURITY_HEADERS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "no-cache",
    }
)


@dataclass(frozen=True, slots=True)
class _Asset:
    """One file of the page: its route (relative to ``/ui/``), package file and type."""

    route: str
    file: str
    media_type: str


_ASSETS: Final = (
    _Asset("", "index.html", "text/html; charset=utf-8"),
    _Asset("app.js", "app.js", "text/javascript; charset=utf-8"),
    _Asset("app.css", "app.css", "text/css; charset=utf-8"),
    _Asset("favicon.svg", "favicon.svg", "image/svg+xml"),
    # The policy replay page (admin keys): a draft judged against the audit log.
    _Asset("replay", "replay.html", "text/html; charset=utf-8"),
    _Asset("replay.js", "replay.js", "text/javascript; charset=utf-8"),
    _Asset("replay.css", "replay.css", "text/css; charset=utf-8"),
)


#: The flag on ``app.state`` that says the page is mounted (so mounting is idempotent).
_MOUNTED: Final = "interlock_ui_mounted"


def _serve(body: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def asset() -> Response:
        return Response(body, media_type=media_type, headers=dict(SECURITY_HEADERS))

    return asset


async def _to_slash() -> RedirectResponse:
    # Relative, so it also lands right behind a proxy that adds a path prefix.
    return RedirectResponse("ui/", status_code=308, headers=dict(SECURITY_HEADERS))


def ui_router() -> APIRouter:
    """A router serving the page at ``/ui/`` (``/ui`` redirects there). The files are
    read from the package once, here. Left out of the OpenAPI document: it is a page,
    not part of the API."""
    static = files("interlock.server.ui").joinpath("static")
    router = APIRouter(include_in_schema=False)
    router.add_api_route(UI_PATH, _to_slash, methods=["GET"], response_class=RedirectResponse)
    for item in _ASSETS:
        body = static.joinpath(item.file).read_bytes()
        router.add_api_route(
            f"{UI_PATH}/{item.route}",
            _serve(body, item.media_type),
            methods=["GET"],
            response_class=Response,
        )
    return router


def mount_ui(app: FastAPI) -> None:
    """Serve the approvals page on ``app`` (the app :func:`~interlock.server.create_app`
    returns) at ``/ui/``. Calling it again changes nothing.

    Example::

        app = create_app(guard)
        mount_ui(app)            # http://127.0.0.1:8750/ui/
    """
    if getattr(app.state, _MOUNTED, False):
        return
    app.include_router(ui_router())
    setattr(app.state, _MOUNTED, True)
