"""What a browser meets on the admin port outside the dashboard: /favicon.ico is an icon, a path
that names nothing is a 404 in the format asked for (not the management API's 401 XML), while
the management API's own clients still get its answers. A real server (the pytest plugin's)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from sbemu.testing.pytest_plugin import EntityFactory, SbemuServer

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"


def get(server: SbemuServer, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"{server.admin_url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def test_favicon_is_an_icon(sbemu_server: SbemuServer) -> None:
    status, headers, body = get(sbemu_server, "/favicon.ico", Accept="image/*")
    assert status == 200
    assert headers["content-type"] == "image/svg+xml" and body.startswith(b"<svg")
    assert "www-authenticate" not in headers


def test_unknown_paths_are_404_in_the_format_asked_for(sbemu_server: SbemuServer) -> None:
    status, headers, body = get(sbemu_server, "/no/such/page", Accept=BROWSER)
    assert status == 404 and headers["content-type"].startswith("text/html")
    assert b"Not found" in body and b'href="/"' in body
    status, headers, body = get(sbemu_server, "/no-such-page", Accept="application/json")
    assert status == 404 and headers["content-type"] == "application/json"
    assert json.loads(body)["path"] == "/no-such-page"
    status, headers, body = get(sbemu_server, "/no-such-page")  # curl, scripts: */* or nothing
    assert status == 404 and json.loads(body)["error"] == "not found"
    status, headers, body = get(sbemu_server, "/no-such-page", Accept="application/xml")
    assert status == 404 and body.startswith(b"<Error><Code>404</Code>")
    status, headers, body = get(sbemu_server, "/static/no-such.js", Accept=BROWSER)
    assert status == 404 and headers["content-type"].startswith("text/html")
    status, headers, body = get(sbemu_server, "/static/app.js")  # the real ones still load
    assert status == 200 and headers["content-type"].startswith("text/javascript")


def test_api_clients_still_get_the_management_api(
    sbemu_server: SbemuServer, sbemu_entities: EntityFactory
) -> None:
    queue = sbemu_entities.queue()
    # an existing entity without a token: the API asks for one, even from a browser
    status, headers, body = get(sbemu_server, f"/{queue}", Accept=BROWSER)
    assert status == 401 and b"MissingToken" in body
    # an API resource, or a request carrying Authorization: the API's answer
    status, _, body = get(sbemu_server, "/$namespaceinfo")
    assert status == 401 and b"MissingToken" in body
    status, _, body = get(sbemu_server, "/no-such-queue", Authorization="")
    assert status == 401 and b"<Error>" in body
    # signed: a missing entity is Azure's empty feed, an existing one its entry
    status, body = sbemu_server.request("GET", "/no-such-queue")
    assert status == 200 and b"<feed" in body and b"<entry" not in body
    status, body = sbemu_server.request("GET", f"/{queue}")
    assert status == 200 and b"<QueueDescription" in body
