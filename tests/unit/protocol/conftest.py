"""Fixtures for the protocol tests (in-memory engine pairs and a real server subprocess)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from amqp_harness import EnginePair, make_services, session_config  # noqa: E402


@pytest.fixture
def services(tmp_path):
    svc = make_services(tmp_path / "data")
    yield svc
    svc.router.close()


@pytest.fixture
def pair(services):
    """An open connection authenticated with SASL PLAIN (all rights): entity tests need no CBS."""
    return EnginePair(services, sasl="PLAIN").open()


@pytest.fixture
def anon(services):
    """An open connection with SASL ANONYMOUS: authorisation only through $cbs."""
    return EnginePair(services, sasl="ANONYMOUS").open()


@pytest.fixture
def spair(tmp_path):
    """An open SASL PLAIN connection to services with session-enabled queues (session_config)."""
    svc = make_services(tmp_path / "sdata", session_config())
    yield EnginePair(svc, sasl="PLAIN").open()
    svc.router.close()
