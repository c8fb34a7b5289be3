"""The dashboard in a real headless Chromium against a real server with real SDK traffic.

One server and one browser for the module; the tests run in file order and each checks what the
page shows against what the SDK did (counts, a peeked message's body and properties, a dead letter
resubmitted, a purge, a partition taken offline, the live rate chart, connections).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import urllib.error
import urllib.request
import zlib
from typing import Any

import pytest
from uihelpers import it, screenshot

pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402
from azure.servicebus.exceptions import ServiceBusError  # noqa: E402

NS = it.NAMESPACE
WAIT = 20  # seconds for the page to show what the SDK did (the snapshot is at most ~1 s old)


# ------------------------------------------------------------------------------- helpers
def base_url(server: Any) -> str:
    return f"http://127.0.0.1:{server.admin_port}"


def wait_for(driver: Any, condition: Any, timeout: float = WAIT) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page re-renders parts of itself every tick: an element can go stale between looks
    wait = WebDriverWait(
        driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    )
    return wait.until(condition)


def css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def css_all(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def text_of(driver: Any, selector: str) -> str:
    """The rendered text of the first match ('' when none), read in one script call."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", selector
    )


def open_page(driver: Any, server: Any, hash_route: str) -> None:
    driver.get(f"{base_url(server)}/#{hash_route}")
    wait_for(driver, lambda d: "live" in text_of(d, "#live"))


def open_entity(driver: Any, server: Any, entity: str, query: str = "") -> None:
    driver.get(f"{base_url(server)}/#/entity/{NS}/{entity}{query}")
    wait_for(driver, lambda d: css_all(d, "#explorer-tabs button"))
    wait_for(driver, lambda d: css_all(d, "#messages") or css_all(d, "#no-messages"))


def click_tab(driver: Any, state: str) -> None:
    css(driver, f'#explorer-tabs button[data-state="{state}"]').click()
    wait_for(
        driver,
        lambda d: (
            "active"
            in css(d, f'#explorer-tabs button[data-state="{state}"]').get_attribute("class")
        ),
    )
    time.sleep(0)  # let the peek request start; the waits below look for its result


def card_count(driver: Any, key: str) -> str:
    return text_of(driver, f'#entity-cards [data-count="{key}"]').replace(",", "")


def accept_confirm(driver: Any) -> None:
    wait_for(driver, lambda d: d.switch_to.alert)
    driver.switch_to.alert.accept()


def sdk(server: Any) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        server.conn_str, retry_total=2, retry_backoff_factor=0.2
    )


def peek_all(server: Any, queue: str, sub_queue: Any = None) -> list[Any]:
    with sdk(server) as client, client.get_queue_receiver(queue, sub_queue=sub_queue) as r:
        return list(r.peek_messages(max_message_count=200))


# ------------------------------------------------------------------------------- tests
def test_overview_rates_move_under_load(ui_server: Any, browser: Any) -> None:
    open_page(browser, ui_server, "/")
    wait_for(browser, lambda d: css_all(d, "#chart-incoming"))
    assert text_of(browser, "#ov-namespaces") == "1"
    assert text_of(browser, "#ov-entities") == "6"  # 4 queues, 1 topic, 1 subscription
    # the server's own memory and CPU, as RabbitMQ's overview shows them (issue 33)
    assert text_of(browser, "#ov-memory").endswith(("MB", "MiB", "KB", "KiB", "GB", "GiB"))
    assert css_all(browser, "#ov-cpu")
    blank = browser.execute_script("return document.getElementById('chart-incoming').toDataURL()")
    stop = threading.Event()
    sent = [0]

    def load() -> None:
        with sdk(ui_server) as client, client.get_queue_sender("inbox") as sender:
            while not stop.is_set():
                sender.send_messages([ServiceBusMessage(f"load {i}") for i in range(20)])
                sent[0] += 20

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        wait_for(browser, lambda d: text_of(d, "#rate-incoming") not in ("", "0/s"))
        wait_for(
            browser,
            lambda d: (
                d.execute_script("return document.getElementById('chart-incoming').toDataURL()")
                != blank
            ),
        )
        wait_for(browser, lambda d: text_of(d, "#ov-connections") not in ("", "0"))
    finally:
        stop.set()
        worker.join(30)
    assert sent[0] > 0
    screenshot(browser, "overview")
    # purge the load so later counts are exact
    with (
        sdk(ui_server) as client,
        client.get_queue_receiver("inbox", receive_mode="receiveanddelete") as r,
    ):
        while r.receive_messages(max_message_count=200, max_wait_time=2):
            pass


def test_entities_table_counts_match_what_was_sent(ui_server: Any, browser: Any) -> None:
    with sdk(ui_server) as client, client.get_queue_sender("orders") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"order {i}", partition_key=f"k{i % 5}") for i in range(23)]
        )
    open_page(browser, ui_server, "/entities")
    row = f'tr[data-entity="{NS}/orders"]'
    wait_for(browser, lambda d: text_of(d, f'{row} td[data-count="active"]') == "23")
    assert text_of(browser, f'{row} td[data-count="deadletter"]') == "0"
    cells = css_all(browser, f"{row} .strip .cell")
    assert len(cells) == 16
    assert text_of(browser, f"{row} [data-availability]") == "Available"
    assert text_of(browser, f'{row} td[data-count="consumers"]') == "0"
    # consumers per entity, as RabbitMQ's queue list shows them (issue 33)
    with sdk(ui_server) as client, client.get_queue_receiver("orders") as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=5)  # attaches
        browser.refresh()
        wait_for(browser, lambda d: text_of(d, f'{row} td[data-count="consumers"]') == "1")
        for m in got:
            receiver.abandon_message(m)
    # filtering
    box = css(browser, "#entity-filter")
    box.send_keys("events")
    wait_for(browser, lambda d: not css_all(d, row))
    assert css_all(browser, f'tr[data-entity="{NS}/events/Subscriptions/red"]')
    box.clear()
    box.send_keys(" ")  # an 'input' event with an empty filter
    box.clear()
    browser.execute_script(
        "document.getElementById('entity-filter').dispatchEvent(new Event('input'))"
    )
    wait_for(browser, lambda d: css_all(d, row))
    # sorting by active count (descending first): orders on top
    css(browser, 'th[data-sort="active"]').click()
    first = css_all(browser, "#entities tr[data-entity]")[0]
    assert first.get_attribute("data-entity") == f"{NS}/orders"
    screenshot(browser, "entities")


def test_peek_shows_body_and_properties(ui_server: Any, browser: Any) -> None:
    msg = ServiceBusMessage(
        json.dumps({"order": 42, "items": ["a", "b"]}),
        content_type="application/json",
        subject="created",
        message_id="peek-me-1",
        application_properties={"region": "eu-west", "priority": 7},
        partition_key="peek-key",
    )
    with sdk(ui_server) as client, client.get_queue_sender("orders") as sender:
        sender.send_messages(msg)
    open_entity(browser, ui_server, "orders")
    wait_for(browser, lambda d: card_count(d, "active") == "24")
    # page until our message is listed, then open it
    for _ in range(5):
        found = [r for r in css_all(browser, "#messages tr[data-seq]") if "peek-me-1" in r.text]
        if found:
            found[0].click()
            break
        css(browser, "#more").click()
        time.sleep(0.3)
    wait_for(browser, lambda d: "peek-me-1" in text_of(d, "#system-properties"))
    body = text_of(browser, "#message-body")
    assert css(browser, "#message-body").get_attribute("data-kind") == "json"
    assert '"order": 42' in body and '"items"' in body
    props = text_of(browser, "#application-properties")
    assert "region" in props and "eu-west" in props and "priority" in props and "7" in props
    system = text_of(browser, "#system-properties")
    assert "peek-key" in system and "created" in system and "application/json" in system
    assert "not locked" in system and "partition" in system
    screenshot(browser, "entity-explorer")
    # the picture in docs/dashboard.md: the whole entity page, explorer included
    size = browser.get_window_size()
    browser.set_window_size(1400, 1350)
    browser.execute_script("window.scrollTo(0, 0)")
    screenshot(browser, "dashboard")
    browser.set_window_size(size["width"], size["height"])
    # peeking did not lock or count a delivery: the SDK receives it with delivery count 0
    with sdk(ui_server) as client, client.get_queue_receiver("orders") as r:
        got = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = [
                m
                for m in r.receive_messages(max_message_count=50, max_wait_time=2)
                if m.message_id == "peek-me-1"
            ]
        assert got and got[0].delivery_count == 0
        r.complete_message(got[0])


def test_scheduled_and_deferred_tabs(ui_server: Any, browser: Any) -> None:
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    with sdk(ui_server) as client:
        with client.get_queue_sender("later") as sender:
            sender.schedule_messages(ServiceBusMessage("tomorrow's news", message_id="sched-1"), at)
            sender.send_messages(ServiceBusMessage("not now", message_id="defer-1"))
        with client.get_queue_receiver("later") as r:
            (m,) = r.receive_messages(max_message_count=1, max_wait_time=10)
            r.defer_message(m)
    open_entity(browser, ui_server, "later")
    wait_for(
        browser, lambda d: card_count(d, "scheduled") == "1" and card_count(d, "deferred") == "1"
    )
    assert card_count(browser, "active") == "0"
    wait_for(browser, lambda d: css_all(d, "#no-messages"))  # the active tab is empty
    click_tab(browser, "scheduled")
    wait_for(browser, lambda d: "sched-1" in text_of(d, "#messages"))
    css(browser, "#messages tr[data-seq]").click()
    wait_for(browser, lambda d: "Scheduled" in text_of(d, "#system-properties"))
    system = text_of(browser, "#system-properties")
    assert "scheduled" in system and at.strftime("%Y-%m-%d %H:%M:%S") in system
    click_tab(browser, "deferred")
    wait_for(browser, lambda d: "defer-1" in text_of(d, "#messages"))
    assert "sched-1" not in text_of(browser, "#messages")


def test_resubmit_moves_a_dead_letter_back(ui_server: Any, browser: Any) -> None:
    with sdk(ui_server) as client:
        with client.get_queue_sender("inbox") as sender:
            sender.send_messages(
                ServiceBusMessage(
                    "please retry me", message_id="dl-1", application_properties={"attempt": 1}
                )
            )
        with client.get_queue_receiver("inbox") as r:
            (m,) = r.receive_messages(max_message_count=1, max_wait_time=10)
            r.dead_letter_message(m, reason="BadOrder", error_description="customer unknown")
    open_entity(browser, ui_server, "inbox", "?state=deadletter")
    wait_for(browser, lambda d: card_count(d, "deadletter") == "1")
    wait_for(browser, lambda d: css_all(d, "#messages tr[data-seq]"))
    row = css_all(browser, "#messages tr[data-seq]")[0]
    assert "BadOrder" in row.text
    # the Reason column is in sight without scrolling the list sideways (issue 33), on a
    # laptop-sized window too
    size = browser.get_window_size()
    browser.set_window_size(1100, size["height"])
    visible = browser.execute_script(
        "const heads = [...document.querySelectorAll('#messages tr:first-child th')];"
        "const at = heads.findIndex((th) => th.textContent === 'Reason');"
        "const td = document.querySelector('#messages tr[data-seq]').children[at];"
        "if (at < 0 || !td) return false;"
        "const box = td.closest('.msglist').getBoundingClientRect();"
        "const r = td.getBoundingClientRect();"
        "return r.width > 0 && r.left >= box.left && r.right <= box.right + 1;"
    )
    browser.set_window_size(size["width"], size["height"])
    assert visible, "the dead-letter reason is scrolled out of sight"
    row.click()
    wait_for(browser, lambda d: "customer unknown" in text_of(d, "#system-properties"))
    # a dead-lettered message's State says so, not "active"
    assert "dead-lettered" in text_of(browser, "#system-properties")
    screenshot(browser, "dead-letters")
    css(browser, "#messages input[data-select]").click()
    css(browser, "#resubmit").click()
    wait_for(browser, lambda d: card_count(d, "deadletter") == "0")
    wait_for(browser, lambda d: css_all(d, "#no-messages"))
    assert peek_all(ui_server, "inbox", "deadletter") == []
    active = peek_all(ui_server, "inbox")
    assert [str(m) for m in active] == ["please retry me"]
    assert active[0].application_properties[b"attempt"] == 1
    assert b"DeadLetterReason" not in (active[0].application_properties or {})


def test_send_test_message_through_the_router(ui_server: Any, browser: Any) -> None:
    open_entity(browser, ui_server, "events")
    body = css(browser, "#send-body")
    body.clear()
    body.send_keys('{"color": "red", "n": 1}')
    css(browser, "#send-message-id").send_keys("from-dashboard-1")
    css(browser, "#send-properties").send_keys('{"color": "red"}')
    css(browser, "#send-submit").click()
    wait_for(browser, lambda d: "sent, sequence number" in text_of(d, "#send-result"))
    # the red subscription's SQL filter matched: the copy is there, with its property
    msgs = []
    with sdk(ui_server) as client, client.get_subscription_receiver("events", "red") as r:
        deadline = time.monotonic() + 20
        while not msgs and time.monotonic() < deadline:
            msgs = r.receive_messages(max_message_count=5, max_wait_time=2)
        assert [m.message_id for m in msgs] == ["from-dashboard-1"]
        assert (
            msgs[0].application_properties[b"color"] == b"red"
            or msgs[0].application_properties[b"color"] == "red"
        )
        assert json.loads(str(msgs[0])) == {"color": "red", "n": 1}
        r.complete_message(msgs[0])
    rules = text_of(browser, "#rules")
    assert "only-red" in rules and "color = 'red'" in rules


def test_purge_empties_the_queue(ui_server: Any, browser: Any) -> None:
    with sdk(ui_server) as client, client.get_queue_sender("purgeme") as sender:
        sender.send_messages([ServiceBusMessage(f"junk {i}") for i in range(12)])
    open_entity(browser, ui_server, "purgeme")
    wait_for(browser, lambda d: card_count(d, "active") == "12")
    css(browser, "#purge").click()
    accept_confirm(browser)
    wait_for(browser, lambda d: card_count(d, "active") == "0")
    assert peek_all(ui_server, "purgeme") == []
    # "Purge everything": active, locked and dead-lettered messages all go
    with sdk(ui_server) as client:
        with client.get_queue_sender("purgeme") as sender:
            sender.send_messages([ServiceBusMessage(f"more {i}") for i in range(3)])
        with client.get_queue_receiver("purgeme") as r:
            (m,) = r.receive_messages(max_message_count=1, max_wait_time=10)
            r.dead_letter_message(m, reason="junk")
    css(browser, "#refresh").click()
    wait_for(
        browser, lambda d: card_count(d, "active") == "2" and card_count(d, "deadletter") == "1"
    )
    css(browser, "#purge-all").click()
    accept_confirm(browser)
    wait_for(
        browser, lambda d: card_count(d, "active") == "0" and card_count(d, "deadletter") == "0"
    )
    assert peek_all(ui_server, "purgeme") == []
    assert peek_all(ui_server, "purgeme", "deadletter") == []


def test_offline_toggle_turns_partition_red_and_entity_limited(
    ui_server: Any, browser: Any
) -> None:
    open_entity(browser, ui_server, "orders")
    wait_for(browser, lambda d: text_of(d, "#entity-availability") == "Available")
    css(browser, 'button[data-toggle="3"]').click()
    wait_for(browser, lambda d: text_of(d, "#entity-availability") == "Limited")
    wait_for(
        browser,
        lambda d: "offline" in css(d, '.strip .cell[data-partition="3"]').get_attribute("class"),
    )
    color = browser.execute_script(
        "return getComputedStyle(document.querySelector('.strip .cell[data-partition=\"3\"]')).backgroundColor"
    )
    assert color == "rgb(208, 52, 44)"  # --bad red
    assert text_of(browser, 'tr[data-partition="3"] [data-health]') == "offline"
    screenshot(browser, "partition-offline")
    # a send pinned to the offline partition is throttled (server-busy), and /metrics counts it
    key = next(f"k{i}" for i in range(1000) if zlib.crc32(f"k{i}".encode()) % 16 == 3)
    client = ServiceBusClient.from_connection_string(ui_server.conn_str, retry_total=0)
    with client, client.get_queue_sender("orders") as sender:
        with pytest.raises(ServiceBusError):
            sender.send_messages(ServiceBusMessage("pinned", partition_key=key))
    with urllib.request.urlopen(f"{base_url(ui_server)}/metrics", timeout=10) as resp:
        throttled = [
            line
            for line in resp.read().decode().splitlines()
            if line.startswith("sbemu_throttled_requests_total{")
        ]
    assert throttled and int(throttled[0].rsplit(" ", 1)[1]) >= 1
    with urllib.request.urlopen(f"{base_url(ui_server)}/partitions", timeout=10) as resp:
        status = json.load(resp)
    orders = [e for e in status["entities"] if e["entity"] == "orders"][0]
    assert orders["status"] == "Limited" and orders["partitions"][3]["online"] is False
    open_page(browser, ui_server, "/entities")
    wait_for(
        browser,
        lambda d: text_of(d, f'tr[data-entity="{NS}/orders"] [data-availability]') == "Limited",
    )
    open_entity(browser, ui_server, "orders")
    css(browser, 'button[data-toggle="3"]').click()
    wait_for(browser, lambda d: text_of(d, "#entity-availability") == "Available")


def test_connections_page_lists_and_closes(ui_server: Any, browser: Any) -> None:
    client = sdk(ui_server)
    receiver = client.get_queue_receiver("orders", prefetch_count=0)
    receiver.__enter__()
    try:
        receiver.peek_messages(max_message_count=1)  # opens the connection and its links
        open_page(browser, ui_server, "/connections")
        wait_for(browser, lambda d: "orders" in text_of(d, "#connections"))
        text = text_of(browser, "#connections")
        assert "127.0.0.1:" in text
        assert any(m in text for m in ("ANONYMOUS", "MSSBCBS", "PLAIN"))  # SASL mechanism
        assert "RootManageSharedAccessKey" in text  # the key its $cbs token was signed with
        assert "receiver (peek-lock)" in text
        screenshot(browser, "connections")
        rows = [
            r
            for r in css_all(
                browser,
                "#connections > tbody > tr[data-connection], #connections > tr[data-connection]",
            )
            if "orders" in r.text
        ]
        conn_id = rows[0].get_attribute("data-connection")
        css(browser, f'button[data-close="{conn_id}"]').click()
        accept_confirm(browser)
        wait_for(browser, lambda d: not css_all(d, f'tr[data-connection="{conn_id}"]'))
    finally:
        try:
            receiver.__exit__(None, None, None)
        finally:
            client.close()


def test_metrics_endpoint(ui_server: Any) -> None:
    with urllib.request.urlopen(f"{base_url(ui_server)}/metrics", timeout=10) as resp:
        assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    incoming = 0
    for line in text.splitlines():
        if line.startswith(
            'sbemu_incoming_messages_total{namespace="sbemulatorns",entity="orders"'
        ):
            incoming += int(line.rsplit(" ", 1)[1])
    assert incoming == 24  # 23 + the peeked one
    assert "# TYPE sbemu_active_messages gauge" in text
    assert (
        'sbemu_deadlettered_messages{namespace="sbemulatorns",entity="inbox",partition="0"} 0'
        in text
    )
    assert (
        'sbemu_deadletter_messages_total{namespace="sbemulatorns",entity="inbox",partition="0"} 1'
        in text
    )
    assert "sbemu_active_connections" in text and "sbemu_throttled_requests_total" in text


def _http(
    server: Any,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"{base_url(server)}{path}", data=body, method=method, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_state_changes_need_the_csrf_token_and_a_loopback_host(ui_server: Any) -> None:
    action = json.dumps({"ns": NS, "entity": "orders", "partition": 1, "online": False}).encode()
    json_type = {"content-type": "application/json"}
    # a cross-site form or script cannot read the token, so its POST is refused
    status, body = _http(ui_server, "POST", "/api/partition", action, json_type)
    assert status == 403 and b"CSRF" in body
    status, _ = _http(
        ui_server, "POST", "/api/partition", action, {**json_type, "x-csrf-token": "forged"}
    )
    assert status == 403
    # a page reaching us under another host name (DNS rebinding) gets nothing
    status, _ = _http(ui_server, "GET", "/api/session", headers={"host": "attacker.example"})
    assert status == 403
    status, body = _http(ui_server, "GET", "/api/session")
    token = json.loads(body)["csrf"]
    status, body = _http(
        ui_server, "POST", "/api/partition", action, {**json_type, "x-csrf-token": token}
    )
    assert status == 200 and json.loads(body)["status"] == "Limited"
    back = json.dumps({"ns": NS, "entity": "orders", "partition": 1, "online": True}).encode()
    status, body = _http(
        ui_server, "POST", "/api/partition", back, {**json_type, "x-csrf-token": token}
    )
    assert status == 200 and json.loads(body)["status"] == "Available"
    # reads are GETs, state changes only POSTs
    status, _ = _http(ui_server, "GET", "/api/purge")
    assert status in (401, 404, 405)  # not a dashboard route (the Atom API takes the path)


def test_live_events_stream(ui_server: Any) -> None:
    with urllib.request.urlopen(f"{base_url(ui_server)}/api/events", timeout=10) as resp:
        assert resp.headers["content-type"] == "text/event-stream"
        events: list[str] = []
        started = time.monotonic()
        while len([e for e in events if e == "event: tick"]) < 2:
            line = resp.readline().decode().strip()
            if line.startswith("event:"):
                events.append(line)
        # the first event carries the history; ticks come at least every 2 s
        assert events[0] == "event: hello"
        assert time.monotonic() - started < 4.5


def test_create_and_delete_an_entity_from_the_dashboard(ui_server: Any, browser: Any) -> None:
    """RabbitMQ's UI adds and deletes queues; so does ours, as the admin API does (issue 33)."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    open_page(browser, ui_server, "/entities")
    wait_for(browser, lambda d: css_all(d, "#new-entity-ns option"))
    css(browser, "#new-entity-name").send_keys("made-in-ui")
    css(browser, "#new-entity-partitioned").click()
    css(browser, "#new-entity button[type=submit]").click()
    row = f'tr[data-entity="{NS}/made-in-ui"]'
    wait_for(browser, lambda d: css_all(d, row))
    admin = ServiceBusAdministrationClient.from_connection_string(
        ui_server.ready.admin_connection_string, connection_verify=str(ui_server.ca_file)
    )
    with admin:
        assert admin.get_queue("made-in-ui").enable_partitioning is True
        with sdk(ui_server) as client, client.get_queue_sender("made-in-ui") as sender:
            sender.send_messages(ServiceBusMessage("soon gone"))
        open_entity(browser, ui_server, "made-in-ui")
        wait_for(browser, lambda d: card_count(d, "active") == "1")
        css(browser, "#delete-entity").click()
        accept_confirm(browser)
        wait_for(browser, lambda d: "#/entities" in d.current_url)
        assert "made-in-ui" not in [q.name for q in admin.list_queues()]


def test_session_list_of_a_session_queue(ui_server: Any, browser: Any) -> None:
    """The entity page lists a session queue's sessions: messages, lock, state (issue 33)."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    admin = ServiceBusAdministrationClient.from_connection_string(
        ui_server.ready.admin_connection_string, connection_verify=str(ui_server.ca_file)
    )
    with admin:
        admin.create_queue("with-sessions", requires_session=True)
        try:
            with sdk(ui_server) as client:
                with client.get_queue_sender("with-sessions") as sender:
                    sender.send_messages(
                        [ServiceBusMessage(f"m{i}", session_id=f"s{i % 2}") for i in range(5)]
                    )
                with client.get_queue_receiver("with-sessions", session_id="s1") as receiver:
                    receiver.session.set_state(b"halfway")
                    open_entity(browser, ui_server, "with-sessions")
                    wait_for(browser, lambda d: css_all(d, '#session-list tr[data-session="s1"]'))
                    s0 = text_of(browser, '#session-list tr[data-session="s0"]')
                    s1 = text_of(browser, '#session-list tr[data-session="s1"]')
                    assert s0.split()[:2] == ["s0", "3"] and "not locked" in s0, s0
                    assert s1.split()[:2] == ["s1", "2"] and "not locked" not in s1, s1
                    assert s1.endswith("7 B"), s1  # the state's size
        finally:
            admin.delete_queue("with-sessions")
