"""Fixtures for the admin tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sbemu.config import NamespaceConfig, QueueConfig
from sbemu.partitions.router import Router
from sbemu.partitions.specs import queue_spec
from sbemu.protocol.views import encode_property, encode_symbol


@pytest.fixture()
def router(tmp_path: Path) -> Iterator[Router]:
    """A real Router over real LMDB stores: one queue of 4 partitions."""
    r = Router(tmp_path, lambda: None, encode_property, encode_symbol)
    ns = NamespaceConfig(name="ns")
    r.add_entity(
        queue_spec(ns, QueueConfig(name="orders", enable_partitioning=True, partition_count=4))
    )
    yield r
    r.close()
