"""Dashboard end-to-end fixtures: a real server and Debian's headless Chromium (see uihelpers)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from uihelpers import (
    ARTIFACTS,
    CHROMEDRIVER,
    browser_missing,
    chromium_options,
    it,
    screenshot,
    ui_config,
)

# the per-test watchdog and the stderr-on-failure report of the integration suite apply here too
pytest_runtest_call = it.pytest_runtest_call
_integration_report = it.pytest_runtest_makereport


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test leaves a screenshot of what the browser showed (FAILED-<test>.png), and
    the server's stderr in its report."""
    outcome = yield
    report = outcome.get_result()
    driver = getattr(item, "funcargs", {}).get("browser")
    if report.when == "call" and report.failed and driver is not None:
        try:
            screenshot(driver, f"FAILED-{item.name}")
        except Exception as exc:  # the report matters more than the picture
            report.sections.append(("screenshot", f"could not save: {exc}"))
    server = getattr(item, "funcargs", {}).get("ui_server")
    if report.when == "call" and report.failed and server is not None:
        report.sections.append(("sbemu server stderr", server.stderr_text().strip() or "(empty)"))


@pytest.fixture(scope="session", autouse=True)
def fresh_artifacts() -> None:
    """Screenshots of this run only: drop the previous run's failure pictures."""
    for old in ARTIFACTS.glob("FAILED-*.png") if ARTIFACTS.exists() else ():
        old.unlink()


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real server for the module, with the dashboard's queues and topic."""
    tmp = tmp_path_factory.mktemp("sbemu-ui")
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(ui_config(), indent=2))
    srv = it.ServerProcess(cfg, tmp / "data", tmp).start()
    try:
        yield srv
    finally:
        it.shutdown(srv)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through the system chromedriver, fresh profile, no network
    features (no QUIC, no component updates, no sync)."""
    reason = browser_missing()
    if reason:
        pytest.skip(f"dashboard browser tests skipped: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sbemu-chromium-")
    options = chromium_options(profile, "--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
