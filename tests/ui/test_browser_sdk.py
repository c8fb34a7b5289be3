"""The JS SDK inside a real headless Chromium page, through sbemu over wss.

@azure/service-bus from npm (pinned in tests/js/package-lock.json) is bundled by esbuild
(tests/ui/browser_sdk/build.mjs), the page is served by this test from its own origin
(http://127.0.0.1:<port>), and the page sends, receives, completes and uses a session. In a
browser the SDK speaks AMQP over WebSockets only, with the browser's WebSocket, to
wss://<host>:<Endpoint port>/$servicebus/websocket: here the admin port and the WebSocket port.

Trust is given as a developer gives it (what ``mkcert -install`` does on Linux): sbemu's
rootCA.pem is added to the NSS database Chromium reads, ``$HOME/.pki/nssdb``, with certutil
(Debian's libnss3-tools; `make chromium-check` installs it); no flag that weakens the browser's
checks. A browser without that trust fails the page's connection in its own verification.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from uihelpers import CHROMEDRIVER, browser_missing, chromium_options, it

HERE = Path(__file__).resolve().parent
JS_MODULES = HERE.parent / "js" / "node_modules"
CERTUTIL = shutil.which("certutil")
PAGE = """<!doctype html>
<meta charset="utf-8"><title>sbemu from a browser</title><link rel="icon" href="data:,">
<script src="sdk.js"></script>
<p>The @azure/service-bus JS SDK, bundled with esbuild, talking to sbemu over wss.</p>
"""


def _missing() -> str | None:
    reason = browser_missing()
    if reason:
        return reason
    if shutil.which("node") is None or not (JS_MODULES / "esbuild").exists():
        return "node or the npm packages are missing (`make js-deps` installs tests/js)"
    if CERTUTIL is None:
        return "certutil is missing (Debian's libnss3-tools; `make chromium-check` installs it)"
    return None


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    reason = _missing()
    if reason:
        pytest.skip(f"browser SDK test skipped: {reason}")
    tmp = tmp_path_factory.mktemp("sbemu-browser")
    srv = it.start_server(
        tmp,
        [
            it.queue_def("page"),
            it.queue_def("page-p", partitioned=True),
            it.queue_def("pagesess", RequiresSession=True),
        ],
    )
    try:
        yield srv
    finally:
        if srv.running:
            srv.stop()


@pytest.fixture(scope="module")
def page_url(tmp_path_factory: pytest.TempPathFactory, sdk_server: Any) -> Iterator[str]:
    """The bundle and its page, served from an origin of their own."""
    site = tmp_path_factory.mktemp("page")
    build = subprocess.run(
        ["node", str(HERE / "browser_sdk" / "build.mjs"), str(site / "sdk.js")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert build.returncode == 0, build.stderr
    (site / "index.html").write_text(PAGE)
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def _trusting_home(ca_file: Path) -> str:
    """A HOME whose NSS database trusts sbemu's CA for TLS servers (mkcert -install's way)."""
    home = tempfile.mkdtemp(prefix="sbemu-browser-home-")
    nssdb = Path(home) / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    for args in (
        ["-N", "--empty-password"],
        ["-A", "-t", "C,,", "-n", "sbemu local CA", "-i", str(ca_file)],
    ):
        assert CERTUTIL is not None
        subprocess.run(
            [CERTUTIL, "-d", f"sql:{nssdb}", *args], check=True, capture_output=True, timeout=60
        )
    return home


def _chromium(home: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = chromium_options(f"{home}/profile")
    service = Service(CHROMEDRIVER, env={**os.environ, "HOME": home})
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(120)
    return driver


@pytest.fixture(scope="module")
def browser_trusting_ca(sdk_server: Any) -> Iterator[Any]:
    home = _trusting_home(sdk_server.ca_file)
    driver = _chromium(home)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(home, ignore_errors=True)


def run_page(driver: Any, url: str, port: int, queue: str, key: str = it.KEY) -> dict[str, Any]:
    """Load the page and run its scenario against sbemu; what the page reported."""
    driver.get(url)
    conn = (
        f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName={it.KEY_NAME};SharedAccessKey={key}"
    )
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.sbemuScenario(arguments[0], arguments[1], arguments[2])"
        ".then((r) => done(JSON.stringify(r)), (e) => done(JSON.stringify({error: String(e)})));",
        conn,
        queue,
        "pagesess",
    )
    return json.loads(result)


EXPECTED = {
    "received": ["from the page", {"json": True, "n": 2}],
    "left": 0,
    "session": ["first", "second"],
    "state": "set by the page",
    "webSocket": "function",
}


def test_page_on_the_admin_port(browser_trusting_ca: Any, page_url: str, sdk_server: Any) -> None:
    assert run_page(browser_trusting_ca, page_url, sdk_server.admin_port, "page") == EXPECTED


def test_page_on_the_websocket_port_partitioned(
    browser_trusting_ca: Any, page_url: str, sdk_server: Any
) -> None:
    assert run_page(browser_trusting_ca, page_url, sdk_server.ws_port, "page-p") == EXPECTED


def test_page_with_a_wrong_key_is_refused(
    browser_trusting_ca: Any, page_url: str, sdk_server: Any
) -> None:
    out = run_page(browser_trusting_ca, page_url, sdk_server.admin_port, "page", key="nope")
    assert out["error"]["code"] == "UnauthorizedAccess", out
    assert "invalid SAS signature" in out["error"]["message"], out


def test_a_browser_without_the_ca_refuses_the_server(page_url: str, sdk_server: Any) -> None:
    home = tempfile.mkdtemp(prefix="sbemu-browser-untrusting-")
    driver = _chromium(home)
    try:
        out = run_page(driver, page_url, sdk_server.admin_port, "page")
        assert out["error"]["code"] == "ServiceCommunicationProblem", out
        console = " ".join(entry["message"] for entry in driver.get_log("browser"))
        assert "ERR_CERT_AUTHORITY_INVALID" in console, console
        log = sdk_server.stderr_text()
        assert "Traceback" not in log, log
    finally:
        driver.quit()
        shutil.rmtree(home, ignore_errors=True)
