"""Management over a real Router and real LMDB stores: quotas [P19], Premium partitioning [P3],
validation with Azure's limits, and the runtime catalog laid over the configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sbemu.admin import management as management_module
from sbemu.admin.catalog import CATALOG_FILE
from sbemu.admin.management import Management
from sbemu.config import parse_config
from sbemu.errors import ArgumentError, EntityAlreadyExists, InvalidOperation, QuotaExceeded
from sbemu.partitions.router import Router
from sbemu.protocol.views import encode_property, encode_symbol


def make_config(premium: int | None = None, queues: list[dict] | None = None):  # noqa: ANN201
    ns: dict = {"Name": "testns1", "Queues": queues or [], "Topics": []}
    if premium:
        ns["PremiumMessagingPartitions"] = premium
    return parse_config({"UserConfig": {"Namespaces": [ns], "Logging": {"Type": "Console"}}}, "t")


async def settle(brokers: list) -> None:  # nothing is in flight in these tests
    return None


def open_management(data: Path, config) -> tuple[Router, Management]:  # noqa: ANN001
    router = Router(data, lambda: None, encode_property, encode_symbol)
    mgmt = Management(router, config.namespaces, data, settle)
    mgmt.seed()
    return router, mgmt


def test_defaults_validation_and_conflicts(tmp_path: Path) -> None:
    router, m = open_management(tmp_path, make_config())
    try:
        entity = m.create_entity("testns1", "queue", "q_1", {})
        desc = entity.description
        assert desc["lock_duration_ms"] == 60_000 and desc["max_delivery_count"] == 10
        assert desc["duplicate_detection_window_ms"] == 600_000 and desc["status"] == "Active"
        with pytest.raises(EntityAlreadyExists):
            m.create_entity("testns1", "topic", "Q_1", {})
        with pytest.raises(ArgumentError):
            m.create_entity("testns1", "queue", "bad", {"lock_duration_ms": 600_000})
        with pytest.raises(ArgumentError):
            m.create_entity("testns1", "queue", "-bad", {})
        with pytest.raises(InvalidOperation):  # [P4]
            m.update_entity("testns1", "queue", "q_1", {"enable_partitioning": True})
        m.update_entity("testns1", "queue", "q_1", {"lock_duration_ms": 20_000})
        assert (
            router.get_entity("testns1", "q_1")
            .partitions[0]
            .queues["main"]
            .settings.lock_duration_ms
            == 20_000
        )
    finally:
        router.close()


def test_partitioned_entity_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(management_module, "MAX_PARTITIONED_ENTITIES", 2)
    router, m = open_management(tmp_path, make_config())
    try:
        m.create_entity("testns1", "queue", "p1", {"enable_partitioning": True})
        m.create_entity("testns1", "topic", "p2", {"enable_partitioning": True})
        with pytest.raises(QuotaExceeded) as exc:
            m.create_entity("testns1", "queue", "p3", {"enable_partitioning": True})
        assert exc.value.status_code == 403 and "partitioned entities" in exc.value.description
        m.create_entity("testns1", "queue", "plain", {})  # non-partitioned still allowed
    finally:
        router.close()


def test_premium_namespace_partitions_every_new_entity(tmp_path: Path) -> None:
    router, m = open_management(tmp_path, make_config(premium=4))
    try:
        entity = m.create_entity("testns1", "queue", "q", {"max_message_size_kb": 2048})
        assert entity.spec.partitioned and len(entity.partitions) == 4
        assert entity.description["max_message_size_kb"] == 2048
    finally:
        router.close()


def test_catalog_overlays_configuration_at_start(tmp_path: Path) -> None:
    config = make_config(queues=[{"Name": "cfg", "Properties": {"MaxDeliveryCount": 3}}])
    router, m = open_management(tmp_path, config)
    m.update_entity("testns1", "queue", "cfg", {"max_delivery_count": 8})
    m.create_entity("testns1", "topic", "rt", {})
    m.create_subscription("testns1", "rt", "s1", {"lock_duration_ms": 30_000})
    router.close()
    saved = json.loads((tmp_path / CATALOG_FILE).read_text())
    assert saved["format"] == 1 and "cfg" in saved["namespaces"]["testns1"]["queues"]
    router, m = open_management(tmp_path, config)
    try:
        assert router.get_entity("testns1", "cfg").description["max_delivery_count"] == 8
        topic = router.get_entity("testns1", "rt")
        assert m.subscription(topic, "s1")["lock_duration_ms"] == 30_000
        assert [r.name for r in m.rules(topic, "s1")] == ["$Default"]
    finally:
        router.close()
