"""Access control end to end: a server bound beyond loopback asks for the namespace SAS key.

The server listens on 0.0.0.0 (every address, loopback included); the test only ever connects to
127.0.0.1. Without a session the page sends the browser to the login form; a wrong key is refused;
the Manage key logs in (signed cookie) and the dashboard works, POSTs still need the CSRF token,
and /metrics takes HTTP Basic with the key name and key.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from uihelpers import it, screenshot

WAIT = 20


@pytest.fixture(scope="module")
def remote_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real server whose listeners are bound to 0.0.0.0 (SBEMU_HOST), reached on 127.0.0.1."""
    tmp = tmp_path_factory.mktemp("sbemu-login")
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(it.make_config([it.queue_def("q1")])))
    mp = pytest.MonkeyPatch()
    mp.setenv("SBEMU_HOST", "0.0.0.0")
    try:
        srv = it.ServerProcess(cfg, tmp / "data", tmp).start()
    finally:
        mp.undo()
    try:
        yield srv
    finally:
        it.shutdown(srv)


def _http(
    url: str, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_api_and_metrics_need_the_key(remote_server: Any) -> None:
    base = f"http://127.0.0.1:{remote_server.admin_port}"
    status, body = _http(f"{base}/api/overview")
    assert status == 401 and json.loads(body)["login"] == "/login"
    status, _ = _http(f"{base}/metrics")
    assert status == 401
    good = base64.b64encode(f"{it.KEY_NAME}:{it.KEY}".encode()).decode()
    status, body = _http(f"{base}/metrics", headers={"authorization": f"Basic {good}"})
    assert status == 200 and b"sbemu_active_messages" in body
    # a key without the Manage right does not open the dashboard
    send_only = base64.b64encode(f"{it.SEND_ONLY_KEY_NAME}:{it.SEND_ONLY_KEY}".encode()).decode()
    status, _ = _http(f"{base}/metrics", headers={"authorization": f"Basic {send_only}"})
    assert status == 401
    # /health stays open, as on Microsoft's emulator
    status, _ = _http(f"{base}/health")
    assert status == 200


def test_login_form_then_dashboard(remote_server: Any, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base = f"http://127.0.0.1:{remote_server.admin_port}"
    browser.delete_all_cookies()
    browser.get(f"{base}/")
    wait = WebDriverWait(browser, WAIT, poll_frequency=0.2)
    wait.until(lambda d: d.current_url.endswith("/login"))
    browser.find_element(By.ID, "key").send_keys("not the key")
    browser.find_element(By.ID, "login-submit").click()
    wait.until(lambda d: "failed=1" in d.current_url)
    assert browser.find_element(By.ID, "failed").is_displayed()
    screenshot(browser, "login")
    name = browser.find_element(By.ID, "key_name")
    name.clear()
    name.send_keys(it.KEY_NAME)
    browser.find_element(By.ID, "key").send_keys(it.KEY)
    browser.find_element(By.ID, "login-submit").click()
    wait.until(
        lambda d: (
            d.execute_script("return (document.getElementById('live') || {}).textContent") == "live"
        )
    )
    cookie = browser.get_cookie("sbemu_session")
    assert cookie is not None and cookie["httpOnly"] is True and cookie.get("sameSite") == "Strict"
    wait.until(
        lambda d: (
            d.execute_script(
                "const e = document.getElementById('ov-entities'); return e && e.textContent"
            )
            == "1"
        )
    )
    # the session cookie alone does not make a POST: the CSRF token is needed too
    status, body = _http(
        f"{base}/api/partition",
        "POST",
        json.dumps({"ns": it.NAMESPACE, "entity": "q1", "partition": 0, "online": False}).encode(),
        {"content-type": "application/json", "cookie": f"sbemu_session={cookie['value']}"},
    )
    assert status == 403 and b"CSRF" in body
    # logging out ends the session
    browser.find_element(By.ID, "logout").click()
    wait.until(lambda d: d.current_url.endswith("/login"))
    assert browser.get_cookie("sbemu_session") is None
