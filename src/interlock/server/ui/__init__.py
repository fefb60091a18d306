"""The approvals web UI: one static page, served by the server itself at ``/ui/``.

An approver signs in with an API key (kept in the browser tab's ``sessionStorage``
only), sees the tenant's pending approvals — the exact call, redacted by the server,
with its agent, session, rules, reason and expiry — live, newest first, and approves
or denies each with a reason. Everything the page shows comes from the ``/v1`` API
with that key; the page's own files hold no data and need none. No build step and no
third-party resources: plain HTML, CSS and JavaScript shipped in the package.

Example::

    from interlock.server import create_app
    from interlock.server.ui import mount_ui

    app = create_app(guard)
    mount_ui(app)            # the page is at http://127.0.0.1:8750/ui/
"""

from __future__ import annotations

from interlock.server.ui._router import (
    CONTENT_SECURITY_POLICY,
    SECURITY_HEADERS,
    UI_PATH,
    mount_ui,
    ui_router,
)

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "UI_PATH", "mount_ui", "ui_router"]
