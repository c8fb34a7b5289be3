"""Dashboard end-to-end helpers: the real server (as in tests/integration), real SDK traffic,
and Debian's headless Chromium driven through Selenium with the system chromedriver.

No browser is downloaded at test time: when `chromium`/`chromedriver` (apt: chromium,
chromium-driver; `make chromium-check` installs them as root) or the selenium package is missing,
every test here is skipped with that reason. Screenshots go to tests/ui/artifacts/ (or
$SBEMU_UI_ARTIFACTS), which git ignores.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ARTIFACTS = Path(os.environ.get("SBEMU_UI_ARTIFACTS", HERE / "artifacts"))

# The integration suite's server helpers (a real `python -m sbemu serve` on ephemeral ports);
# its conftest imports modules beside it (admin_support), as pytest would find them there.
sys.path.insert(0, str(HERE.parent / "integration"))
_spec = importlib.util.spec_from_file_location(
    "sbemu_integration_helpers", HERE.parent / "integration" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
it = importlib.util.module_from_spec(_spec)
sys.modules["sbemu_integration_helpers"] = it
_spec.loader.exec_module(it)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
)


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None when they can)."""
    if importlib.util.find_spec("selenium") is None:
        return "the selenium package is missing (pip install -e '.[test]')"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return (
            "Debian's chromium and chromium-driver are not installed "
            "(`make chromium-check` as root, or apt-get install chromium chromium-driver)"
        )
    return None


def ui_config() -> dict[str, Any]:
    """Queues and a topic with rules for the dashboard tests."""
    cfg = it.make_config(
        [
            it.queue_def("orders", partitioned=True, lock_duration="PT30S", max_delivery_count=5),
            it.queue_def("inbox", lock_duration="PT30S"),
            it.queue_def("purgeme", lock_duration="PT30S"),
            it.queue_def("later", lock_duration="PT30S"),
        ]
    )
    cfg["UserConfig"]["Namespaces"][0]["Topics"] = [
        {
            "Name": "events",
            "Properties": {
                "DefaultMessageTimeToLive": "PT1H",
                "DuplicateDetectionHistoryTimeWindow": "PT20S",
                "RequiresDuplicateDetection": False,
                "EnablePartitioning": True,
            },
            "Subscriptions": [
                {
                    "Name": "red",
                    "Properties": {
                        "DeadLetteringOnMessageExpiration": False,
                        "DefaultMessageTimeToLive": "PT1H",
                        "LockDuration": "PT30S",
                        "MaxDeliveryCount": 3,
                        "ForwardDeadLetteredMessagesTo": "",
                        "ForwardTo": "",
                        "RequiresSession": False,
                    },
                    "Rules": [
                        {
                            "Name": "only-red",
                            "Properties": {
                                "FilterType": "Sql",
                                "SqlFilter": {"SqlExpression": "color = 'red'"},
                            },
                        }
                    ],
                }
            ],
        }
    ]
    return cfg


def chromium_options(profile: str, *flags: str) -> Any:
    """Selenium options for headless Debian Chromium on the ``profile`` folder, with no network
    features (no QUIC, no component updates, no sync), plus ``flags``."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *flags,
    ):
        options.add_argument(flag)
    return options


def screenshot(driver: Any, name: str) -> Path:
    """Save a PNG of the current page as a test artefact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
