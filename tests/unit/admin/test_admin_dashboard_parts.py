"""Pure parts of the dashboard: per-partition rates from sampled counters (admin/rates.py), the
explorer's search (admin/msgsearch.py) over a real Router's messages, and the client format of a
404 (admin/notfound.py)."""

from __future__ import annotations

import pytest

from sbemu.admin import explorer
from sbemu.admin.http import Request
from sbemu.admin.msgsearch import MessageSearch
from sbemu.admin.notfound import client_format, not_found
from sbemu.admin.rates import PartitionRates
from sbemu.errors import ArgumentError
from sbemu.partitions.commits import GroupCommit
from sbemu.partitions.router import Router
from sbemu.protocol.wirecodec import WIRE_CODEC

NOW = 1_800_000_000_000


def send(router: Router, form: dict) -> None:
    """A test send through the normal path, committed at once (as the explorer's)."""
    errors: list[Exception | None] = []
    explorer.send_bytes(
        WIRE_CODEC, router.entities[("ns", "orders")], explorer.build_test_message(form, NOW),
        256 * 1024, NOW, errors.append,
    )  # fmt: skip
    GroupCommit(router).turn(NOW)
    assert errors == [None]


K0, K1 = ("ns", "q", 0), ("ns", "q", 1)


# ------------------------------------------------------------------------------ rates
def test_rates_are_counter_growth_over_the_window() -> None:
    rates = PartitionRates(window_s=5)
    zero = {"incoming": 0.0, "outgoing": 0.0, "incoming_bytes": 0.0, "outgoing_bytes": 0.0}
    assert rates.partition("ns", "q", 0) == zero
    for second in range(11):  # partition 0: 10 in and 4 out per second, of 100 bytes each
        totals = (10 * second, 4 * second, 1000 * second, 400 * second)
        rates.sample(1_000_000 + second * 1000, [(K0, totals), (K1, (7, 7, 700, 700))])
    busy = {"incoming": 10.0, "outgoing": 4.0, "incoming_bytes": 1000.0, "outgoing_bytes": 400.0}
    assert rates.partition("NS", "Q", 0) == busy
    assert rates.partition("ns", "q", 1) == zero  # partition 1 idle
    assert rates.entity("ns", "q", [0, 1]) == busy
    # a burst fades within the window: 50 more, then nothing
    rates.sample(1_011_000, [(K0, (150, 40, 15000, 4000)), (K1, (7, 7, 700, 700))])
    assert rates.partition("ns", "q", 0)["incoming"] == pytest.approx((150 - 60) / 5)
    assert rates.partition("ns", "q", 0)["incoming_bytes"] == pytest.approx((15000 - 6000) / 5)
    for second in range(12, 18):
        rates.sample(
            1_000_000 + second * 1000, [(K0, (150, 40, 15000, 4000)), (K1, (7, 7, 700, 700))]
        )
    assert rates.partition("ns", "q", 0) == zero


def test_rates_forget_partitions_that_are_gone_and_ignore_a_still_clock() -> None:
    rates = PartitionRates(window_s=5)
    rates.sample(1000, [(K0, (0, 0, 0, 0)), (K1, (0, 0, 0, 0))])
    rates.sample(2000, [(K0, (5, 0, 50, 0)), (K1, (3, 0, 30, 0))])
    rates.sample(
        2000, [(K0, (9, 0, 90, 0)), (K1, (3, 0, 30, 0))]
    )  # same instant: no division by zero
    assert rates.partition("ns", "q", 0)["incoming"] == 5.0
    rates.sample(3000, [(K0, (10, 0, 100, 0))])  # the entity lost partition 1 (deleted, re-created)
    assert rates.partition("ns", "q", 1)["incoming"] == 0.0
    assert len(rates._samples) == 1
    for t in range(4000, 100_000, 1000):  # bounded: a window's worth of samples per partition
        rates.sample(t, [(K0, (t, t, t, t))])
    assert len(rates._samples[K0]) <= 7


# ------------------------------------------------------------------------------ search
def test_search_parse() -> None:
    assert MessageSearch.parse("", " ") is None
    assert MessageSearch.parse(" ABC ", None) == MessageSearch("abc", None, None)
    assert MessageSearch.parse(None, "region=eu west") == MessageSearch(None, "region", "eu west")
    assert MessageSearch.parse(None, "region") == MessageSearch(None, "region", None)
    with pytest.raises(ArgumentError):
        MessageSearch.parse(None, "=x")
    with pytest.raises(ArgumentError):
        MessageSearch.parse("x" * 513, None)


def test_search_over_peeked_messages(router: Router) -> None:
    for i in range(30):
        send(
            router,
            {
                "body": f"m{i}",
                "message_id": f"order-{i:03d}",
                "properties": {"region": "eu" if i % 3 == 0 else "us", "n": i},
            },
        )
    entity = router.entities[("ns", "orders")]

    def ids(search: MessageSearch | None, count: int = 100) -> list[str]:
        page = explorer.peek(WIRE_CODEC, entity, None, "active", 0, count, NOW, search)
        return sorted(m["message_id"] for m in page["messages"])

    assert ids(MessageSearch.parse("ORDER-01", None)) == [f"order-{i:03d}" for i in range(10, 20)]
    assert ids(MessageSearch.parse(None, "region=eu")) == [
        f"order-{i:03d}" for i in range(0, 30, 3)
    ]
    assert ids(MessageSearch.parse(None, "n=7")) == ["order-007"]  # numbers read as shown
    assert ids(MessageSearch.parse("order-00", "region=eu")) == [
        "order-000",
        "order-003",
        "order-006",
        "order-009",
    ]
    assert ids(MessageSearch.parse(None, "missing")) == []
    assert len(ids(None, count=10)) == 10  # the page size


# ------------------------------------------------------------------------------ 404 format
def request(accept: str | None) -> Request:
    headers = {"accept": accept} if accept is not None else {}
    return Request("GET", "/nope", {}, headers, b"", "127.0.0.1:1", False)


@pytest.mark.parametrize(
    ("accept", "kind"),
    [
        (None, "json"),
        ("*/*", "json"),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "html"),
        ("application/json", "json"),
        ("application/atom+xml", "xml"),
        ("application/xml;q=0.5, application/json;q=0.9", "json"),
        ("image/avif,image/webp,*/*", "json"),
    ],
)
def test_client_format(accept: str | None, kind: str) -> None:
    assert client_format(request(accept).headers) == kind
    response = not_found(request(accept), "Nothing is served at /nope.")
    assert response.status == 404
    ctype = dict(response.headers)["content-type"]
    assert {"json": "application/json", "html": "text/html", "xml": "application/xml"}[
        kind
    ] in ctype
