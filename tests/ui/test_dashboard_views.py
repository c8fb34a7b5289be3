"""The dashboard's views in a real headless Chromium against a real server with SDK traffic:
the entity filter matches Status, a topic page's partition table follows the selected
subscription, internal sub-queues stay hidden, "Settings" once, the explorer's page size,
search and JSON export, and per-entity and per-partition message and byte rates."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dashboard import (
    NS,
    WAIT,
    card_count,
    css,
    css_all,
    open_entity,
    open_page,
    sdk,
    text_of,
    wait_for,
)
from uihelpers import it, screenshot, ui_config

pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode  # noqa: E402


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The dashboard tests' entities, plus a SendDisabled queue, a queue the explorer searches
    and a second subscription on the topic (every message: $Default)."""
    cfg = ui_config()
    namespace = cfg["UserConfig"]["Namespaces"][0]
    namespace["Queues"] += [
        it.queue_def("paused", lock_duration="PT30S", Status="SendDisabled"),
        it.queue_def("browse", lock_duration="PT30S", partitioned=True),
        it.queue_def("bytes", lock_duration="PT30S", partitioned=True),
    ]
    namespace["Topics"][0]["Subscriptions"].append({"Name": "all", "Properties": {}})
    tmp = tmp_path_factory.mktemp("sbemu-ui-views")
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    srv = it.ServerProcess(tmp / "config.json", tmp / "data", tmp).start()
    try:
        yield srv
    finally:
        it.shutdown(srv)


def shown_entities(driver: Any) -> list[str]:
    return [r.get_attribute("data-entity") for r in css_all(driver, "#entities tr[data-entity]")]


def filter_entities(driver: Any, text: str) -> None:
    box = css(driver, "#entity-filter")
    box.clear()
    box.send_keys(text)
    driver.execute_script(
        "document.getElementById('entity-filter').dispatchEvent(new Event('input'))"
    )


def test_entity_filter_matches_status(ui_server: Any, browser: Any) -> None:
    open_page(browser, ui_server, "/entities")
    wait_for(browser, lambda d: f"{NS}/paused" in shown_entities(d))
    assert text_of(browser, f'tr[data-entity="{NS}/paused"] [data-status]') == "SendDisabled"
    assert text_of(browser, f'tr[data-entity="{NS}/orders"] [data-status]') == "Active"
    filter_entities(browser, "senddisabled")
    wait_for(browser, lambda d: shown_entities(d) == [f"{NS}/paused"])
    filter_entities(browser, "active")
    wait_for(browser, lambda d: f"{NS}/orders" in shown_entities(d))
    assert f"{NS}/paused" not in shown_entities(browser)
    screenshot(browser, "entities-filtered-by-status")


def test_topic_partition_table_follows_the_subscription(ui_server: Any, browser: Any) -> None:
    with sdk(ui_server) as client, client.get_topic_sender("events") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"red {i}", application_properties={"color": "red"}) for i in
             range(3)]
            + [ServiceBusMessage(f"blue {i}", application_properties={"color": "blue"}) for i in
               range(5)]
        )  # fmt: skip

    def partition_total(d: Any) -> int:
        cells = css_all(d, '#partitions tr[data-partition] td[data-count="active"]')
        return sum(int(c.text.replace(",", "")) for c in cells)

    open_entity(browser, ui_server, "events", "?sub=all")
    wait_for(browser, lambda d: card_count(d, "active") == "8")
    # the cards say whose counts they show (issue 33: a topic's cards had no label)
    wait_for(browser, lambda d: "all" in text_of(d, "#cards-subscription"))
    wait_for(browser, lambda d: partition_total(d) == 8)
    select = css(browser, "#subscription-select")
    from selenium.webdriver.support.ui import Select

    Select(select).select_by_value("red")
    wait_for(browser, lambda d: card_count(d, "active") == "3")
    assert text_of(browser, "#cards-subscription").endswith("red")
    wait_for(browser, lambda d: partition_total(d) == 3)  # not the topic's 8 + 3
    assert css(browser, "#partitions").get_attribute("data-row") == "events/Subscriptions/red"
    # the topic's internal $scheduled sub-queue is not listed; its subscriptions are
    settings = text_of(browser, "#settings")
    assert "$scheduled" not in settings and "scheduled" not in settings.lower()
    assert "red" in settings and "all" in settings
    screenshot(browser, "topic-subscription-partitions")
    with sdk(ui_server) as client:
        for sub in ("all", "red"):
            with client.get_subscription_receiver(
                "events", sub, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as r:
                while r.receive_messages(max_message_count=50, max_wait_time=2):
                    pass


def test_settings_heading_appears_once(ui_server: Any, browser: Any) -> None:
    open_entity(browser, ui_server, "inbox")
    wait_for(browser, lambda d: css_all(d, "#settings"))
    headings = browser.execute_script(
        "return [...document.querySelectorAll('h1, h2, h3')].map((h) => h.textContent.trim())"
    )
    assert headings.count("Settings") == 1, headings


def test_explorer_page_size_search_and_export(ui_server: Any, browser: Any, tmp_path: Path) -> None:
    with sdk(ui_server) as client, client.get_queue_sender("browse") as sender:
        sender.send_messages(
            [
                ServiceBusMessage(
                    f"item {i}",
                    message_id=f"browse-{i:03d}",
                    application_properties={"tenant": "contoso" if i % 10 == 0 else "fabrikam"},
                )
                for i in range(60)
            ]
        )
    open_entity(browser, ui_server, "browse")
    wait_for(browser, lambda d: card_count(d, "active") == "60")

    def rows(d: Any) -> list[str]:
        return [r.get_attribute("data-seq") for r in css_all(d, "#messages tr[data-seq]")]

    wait_for(browser, lambda d: len(rows(d)) == 25)  # the default page
    from selenium.webdriver.support.ui import Select

    Select(css(browser, "#page-size")).select_by_value("10")
    wait_for(browser, lambda d: len(rows(d)) == 10)
    css(browser, "#more").click()
    wait_for(browser, lambda d: len(rows(d)) == 20)
    Select(css(browser, "#page-size")).select_by_value("100")
    wait_for(browser, lambda d: len(rows(d)) == 60)
    assert "no more" in text_of(browser, "#peek-status")

    # search by message id (part of it)
    css(browser, "#search-message-id").send_keys("BROWSE-04")
    css(browser, "#search-form button").click()
    wait_for(browser, lambda d: len(rows(d)) == 10)
    assert all("browse-04" in r.text for r in css_all(browser, "#messages tr[data-seq]"))
    # ... and by application property
    css(browser, "#search-message-id").clear()
    css(browser, "#search-property").send_keys("tenant=contoso")
    css(browser, "#search-form button").click()
    wait_for(browser, lambda d: len(rows(d)) == 6)
    ids = sorted(
        r.find_element("css selector", "td.id").text
        for r in css_all(browser, "#messages tr[data-seq]")
    )
    assert ids == [f"browse-{i:03d}" for i in range(0, 60, 10)]
    assert "6 found" in text_of(browser, "#peek-status")
    screenshot(browser, "explorer-search")

    # export: the shown messages as a JSON download
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    css(browser, "#export").click()
    target = tmp_path / "browse-active.json"
    deadline = time.monotonic() + WAIT
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # a download lands in the directory: nothing to wait on but the file
    assert target.exists(), list(tmp_path.iterdir())
    doc = json.loads(target.read_text())
    assert doc["entity"] == "browse" and doc["state"] == "active"
    assert sorted(m["message_id"] for m in doc["messages"]) == ids
    assert all(m["application_properties"]["tenant"] == "contoso" for m in doc["messages"])
    assert all(m["body"]["text"].startswith("item ") for m in doc["messages"])


def rate_value(text: str) -> float:
    """A rate as the dashboard prints it ("0", "12.5", "1.0k", "12k") as a number."""
    text = text.strip()
    if text.endswith("k"):
        return float(text[:-1]) * 1000
    return float(text or 0)


def test_entity_and_partition_rates(ui_server: Any, browser: Any) -> None:
    stop = threading.Event()

    def load() -> None:
        with sdk(ui_server) as client, client.get_queue_sender("orders") as sender:
            n = 0
            while not stop.is_set():
                sender.send_messages(
                    [
                        ServiceBusMessage(f"rate {n + i}", partition_key="rate-key")
                        for i in range(10)
                    ]
                )
                n += 10

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        open_entity(browser, ui_server, "orders")
        wait_for(
            browser, lambda d: rate_value(text_of(d, '#entity-cards [data-rate="incoming"]')) > 0
        )

        # one partition key: one partition takes the load, the others stay at 0
        def busy(d: Any) -> list[str]:
            return [
                r.get_attribute("data-partition")
                for r in css_all(d, "#partitions tr[data-partition]")
                if rate_value(r.find_element("css selector", '[data-rate="incoming"]').text) > 0
            ]

        wait_for(browser, lambda d: len(busy(d)) == 1)
        screenshot(browser, "entity-rates")
        open_page(browser, ui_server, "/entities")
        filter_entities(browser, "")  # (the filter outlives the page within one load)
        row = f'tr[data-entity="{NS}/orders"]'
        wait_for(browser, lambda d: rate_value(text_of(d, f'{row} [data-rate="incoming"]')) > 0)
        assert text_of(browser, f'tr[data-entity="{NS}/paused"] [data-rate="incoming"]') == "0"
    finally:
        stop.set()
        worker.join(30)
    # with the load gone, the rate falls back to 0 within the rate window (5 s)
    wait_for(
        browser,
        lambda d: text_of(d, f'tr[data-entity="{NS}/orders"] [data-rate="incoming"]') == "0",
    )


def byte_rate_value(text: str) -> float:
    """A byte rate as the dashboard prints it ("0 B/s", "812 B/s", "1.5 KiB/s") in bytes/s."""
    number, unit = text.strip().removesuffix("/s").split(" ")
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
    return float(number) * scale


def test_byte_rates_beside_the_message_rates(ui_server: Any, browser: Any) -> None:
    """Bytes per second in and out, per entity and per partition, beside the message rates:
    under a load of 4 KiB bodies sent and received, the cards, the partition table and the
    entities table show them, and in the server's own figures bytes/s over messages/s is the
    size of one message (its body and the AMQP sections around it)."""
    import urllib.request

    body = b"b" * 4096
    stop = threading.Event()

    def load() -> None:
        with sdk(ui_server) as client:
            with (
                client.get_queue_sender("bytes") as sender,
                client.get_queue_receiver(
                    "bytes", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=1
                ) as receiver,
            ):
                while not stop.is_set():
                    sender.send_messages(
                        [ServiceBusMessage(body, partition_key="bytes-key") for _ in range(10)]
                    )
                    receiver.receive_messages(max_message_count=10, max_wait_time=1)

    def rates() -> dict[str, float]:
        url = f"http://127.0.0.1:{ui_server.admin_port}/api/entities"
        with urllib.request.urlopen(url, timeout=10) as resp:
            rows = json.load(resp)["entities"]
        return next(r for r in rows if r["name"] == "bytes")["rates"]

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        open_entity(browser, ui_server, "bytes")
        for key in ("incoming_bytes", "outgoing_bytes"):
            wait_for(
                browser,
                lambda d, key=key: (
                    byte_rate_value(text_of(d, f'#entity-cards [data-rate="{key}"]')) > 0
                ),
            )

        # one partition key: one partition's row shows the bytes, the others 0 B/s
        def busy(d: Any) -> list[str]:
            return [
                r.get_attribute("data-partition")
                for r in css_all(d, "#partitions tr[data-partition]")
                if byte_rate_value(
                    r.find_element("css selector", '[data-rate="incoming_bytes"]').text
                )
                > 0
            ]

        wait_for(browser, lambda d: len(busy(d)) == 1)
        screenshot(browser, "entity-byte-rates")
        seen = rates()
        assert seen["incoming"] > 0 and seen["incoming_bytes"] > 0
        per_message = seen["incoming_bytes"] / seen["incoming"]
        assert len(body) < per_message < len(body) + 1024, seen
        open_page(browser, ui_server, "/entities")
        filter_entities(browser, "")
        row = f'tr[data-entity="{NS}/bytes"]'
        wait_for(
            browser,
            lambda d: byte_rate_value(text_of(d, f'{row} [data-rate="incoming_bytes"]')) > 0,
        )
        wait_for(
            browser,
            lambda d: byte_rate_value(text_of(d, f'{row} [data-rate="outgoing_bytes"]')) > 0,
        )
        assert text_of(browser, f'tr[data-entity="{NS}/paused"] [data-rate="incoming_bytes"]') == (
            "0 B/s"
        )
    finally:
        stop.set()
        worker.join(30)


def test_rates_are_sampled_on_the_servers_clock(ui_server: Any) -> None:
    """The sampler reads the server's clock (a TestClock here), not the wall clock: under a
    steady load, moving the server's clock 10 minutes on spreads the last seconds' messages
    over those minutes, so for a few seconds the rate reads about 1/120 of the load's, although
    the load goes on. (On the wall clock it would stay at the load's rate.)"""
    import urllib.request

    def incoming() -> float:
        url = f"http://127.0.0.1:{ui_server.admin_port}/api/entities"
        with urllib.request.urlopen(url, timeout=10) as resp:
            rows = json.load(resp)["entities"]
        return float(next(r for r in rows if r["name"] == "inbox")["rates"]["incoming"])

    stop = threading.Event()
    sent: list[tuple[float, int]] = [(time.monotonic(), 0)]  # the load's own record

    def load() -> None:
        with sdk(ui_server) as client, client.get_queue_sender("inbox") as sender:
            while not stop.is_set():
                sender.send_messages([ServiceBusMessage("steady") for _ in range(10)])
                sent.append((time.monotonic(), sent[-1][1] + 10))

    def client_rate(seconds: float = 5.0) -> float:
        """Messages per second the load sent over its last `seconds`."""
        now, total = sent[-1]
        then, earlier = next((t, n) for t, n in reversed(sent) if t <= now - seconds)
        return (total - earlier) / (now - then)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    seen: list[float] = []
    try:
        deadline = time.monotonic() + WAIT
        # a window's worth of steady load, seen by the server too
        while sent[-1][0] - sent[0][0] < 6 or incoming() < 10:
            assert time.monotonic() < deadline, f"no steady load: {sent[-1]}"
            time.sleep(0.2)  # waiting on the load and the sampler, both in real time
        load_rate = client_rate()
        ui_server.advance_clock(600)
        deadline = time.monotonic() + WAIT
        while not seen or seen[-1] >= load_rate / 20:
            assert time.monotonic() < deadline, f"load {load_rate}/s, dashboard read {seen}"
            seen.append(incoming())
            time.sleep(0.2)  # the snapshot behind /api/entities is renewed about once a second
        assert worker.is_alive() and client_rate(3.0) > load_rate / 20  # the load went on
    finally:
        stop.set()
        worker.join(30)
    with (
        sdk(ui_server) as client,
        client.get_queue_receiver(
            "inbox", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as r,
    ):
        while r.receive_messages(max_message_count=200, max_wait_time=2):
            pass
