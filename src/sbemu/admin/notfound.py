"""What the admin port answers for paths no page serves: the favicon, and a plain 404.

The Service Bus management API (admin/atom/) owns every path no other route claims, since an
entity's path is its name. Its clients (the SDKs' administration clients) always send an
``Authorization`` header. A browser that asks for ``/favicon.ico`` or follows a
wrong link sends neither, and a ``401`` with an Azure ``<Error>`` document would tell it
nothing useful. Such a request for a path that names no entity and no API resource is answered
here instead: ``404``
in the format the client asked for (HTML for a browser, XML for an XML client, JSON otherwise),
saying where the dashboard and the API are. From a non-loopback peer it still goes to the API
(which asks for a token), so nobody learns which entity names exist without one.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable

from .access import is_loopback
from .http import Handler, Request, Response

__all__ = [
    "FAVICON_SVG",
    "browser_not_found",
    "client_format",
    "favicon",
    "for_api_clients",
    "not_found",
]

# sbemu's mark: a blue tile with a white "sb" (SVG: every current browser takes it as an icon)
FAVICON_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    b'<rect width="32" height="32" rx="6" fill="#0b6bcb"/>'
    b'<text x="16" y="22" font-family="system-ui,sans-serif" font-size="16" font-weight="700" '
    b'fill="#fff" text-anchor="middle">sb</text></svg>'
)
HINT = (
    "The dashboard is at /; the Service Bus management API answers entity paths "
    "with a SAS token in the Authorization header."
)


def favicon(request: Request, params: dict[str, str]) -> Response:
    """``GET /favicon.ico``: the icon, cacheable, no login (it reveals nothing)."""
    return Response(
        200,
        FAVICON_SVG,
        [("content-type", "image/svg+xml"), ("cache-control", "public, max-age=86400")],
    )


def client_format(headers: dict[str, str]) -> str:
    """'html', 'xml' or 'json': the best of the types the Accept header ranks (json when it
    names none of them, or is missing)."""
    best, best_q = "json", 0.0
    for item in headers.get("accept", "").split(","):
        media, _, params = item.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        media = media.strip().lower()
        if media in ("text/html", "application/xhtml+xml"):
            kind = "html"
        elif media in ("application/xml", "text/xml", "application/atom+xml") or media.endswith(
            "+xml"
        ):
            kind = "xml"
        elif media == "application/json" or media.endswith("+json"):
            kind = "json"
        else:
            continue
        if q > best_q:
            best, best_q = kind, q
    return best


def not_found(request: Request, detail: str) -> Response:
    """A 404 in the client's format."""
    kind = client_format(request.headers)
    if kind == "html":
        page = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            "<title>Not found - sbemu</title></head><body>"
            f"<h1>Not found</h1><p>{html.escape(detail)}</p><p>{html.escape(HINT)}</p>"
            '<p><a href="/">Open the dashboard</a></p></body></html>'
        )
        return Response(404, page.encode(), [("content-type", "text/html; charset=utf-8")])
    if kind == "xml":
        body = (
            f"<Error><Code>404</Code><Detail>{html.escape(detail)} {html.escape(HINT)}"
            "</Detail></Error>"
        )
        return Response(404, body.encode(), [("content-type", "application/xml; charset=utf-8")])
    text = json.dumps({"error": "not found", "path": request.path, "detail": detail, "hint": HINT})
    return Response(404, text.encode(), [("content-type", "application/json")])


def browser_not_found(
    request: Request, names_resource: Callable[[Request], bool]
) -> Response | None:
    """The answer to a loopback GET or HEAD without an Authorization header for a path that
    `names_resource` says names no entity or API resource: :func:`not_found`. None for every
    other request (the management API answers it). Used in front of the API's handler, or by
    an access rule's refusal writer (a refused request is answered the same way)."""
    if (
        request.method in ("GET", "HEAD")
        and "authorization" not in request.headers
        and is_loopback(request.peer.rsplit(":", 1)[0].strip("[]"))
        and not names_resource(request)
    ):
        return not_found(request, f"Nothing is served at {request.path}.")
    return None


def for_api_clients(
    api: Handler, names_resource: Callable[[Request], bool]
) -> Callable[[Request, dict[str, str]], Response | Awaitable[Response]]:
    """Wrap the management API's catch-all route with :func:`browser_not_found`."""

    def handler(request: Request, params: dict[str, str]) -> Response | Awaitable[Response]:
        return browser_not_found(request, names_resource) or api(request, params)

    return handler
