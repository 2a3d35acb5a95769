"""The browser client's files, beside ``/acp`` on crow serve --http.

``/`` is the app's page (``webapp/index.html``) and ``/app/<path>`` any file under
``webapp/``: plain JavaScript modules, CSS and vendored libraries that ship in the
package as they are (no build step).  The page then talks ACP to ``/acp`` over a
WebSocket from the same origin, with the server's token, which the page takes from
its URL's fragment (``crow serve`` prints ``/#token=...``: a fragment never reaches
the server, its logs, or a ``Referer``).

The files hold no secret, so they are served without the token (a page cannot send
one before it has read it); the ``Host`` and ``Origin`` checks still apply, as on
every path.  Each answer carries a strict Content-Security-Policy: scripts, styles,
images and connections from this origin only, no inline script or style, no
frames, forms or plugins.  Whatever the model or a tool wrote can then at worst be
shown, never run.

Starlette's ``StaticFiles`` serves them (ETag, ``If-None-Match``, ``HEAD``, and
paths that climb out of the folder refused); this module only routes and adds the
headers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["APP_PREFIX", "CSP", "WEBAPP", "WebApp"]

#: The app's folder in the package.
WEBAPP = Path(__file__).with_name("webapp")
#: Where the app's files are served.
APP_PREFIX = "/app/"

#: ``connect-src 'self'`` takes the page's own ``ws:``/``wss:`` origin too (CSP 3).
CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "font-src 'self'",
        "connect-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)

_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    # Revalidate each time (an ETag makes that a 304): a new Crow's files are seen at
    # once, never mixed with the last version's modules.
    "Cache-Control": "no-cache",
}


class WebApp:
    """``/`` and ``/app/...``; every other path goes to ``inner``."""

    def __init__(
        self,
        inner: ASGIApp,
        *,
        check_place: Callable[[Scope], Response | None],
        folder: Path = WEBAPP,
    ) -> None:
        self.inner = inner
        self.check_place = check_place
        self.folder = folder
        self.files = StaticFiles(directory=folder, check_dir=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/" or path.startswith(APP_PREFIX)):
            await self.inner(scope, receive, send)
            return
        refusal = self.check_place(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if scope.get("method") not in ("GET", "HEAD"):
            refused = JSONResponse({"error": "use GET"}, 405, headers={"Allow": "GET, HEAD"})
            await refused(scope, receive, send)
            return
        await self._serve(scope, receive, _with_headers(send))

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/":
            page = self.folder / "index.html"
            if not page.is_file():
                missing = JSONResponse({"error": "this Crow has no web app installed"}, 404)
                await missing(scope, receive, send)
                return
            await FileResponse(page, media_type="text/html")(scope, receive, send)
            return
        inside = scope["path"].removeprefix(APP_PREFIX)  # "js/main.js"
        try:  # StaticFiles refuses a path out of the folder (normalised, then checked)
            response = await self.files.get_response(os.path.normpath(inside), scope)
        except HTTPException as exc:
            response = JSONResponse({"error": exc.detail}, exc.status_code)
        await response(scope, receive, send)


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in _HEADERS.items():
                headers[name] = value
        await send(message)

    return sending
