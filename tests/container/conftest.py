"""Fixtures of the container tests (tests/container): one image per run, one Docker API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from container_support import (
    SESSION,
    build_image,
    docker_api,
    remove_labelled,
    skip_unless_podman,
)


@pytest.fixture(scope="session")
def sbemu_image() -> Iterator[str]:
    """sbemu's image, built once per run (or named by SBEMU_TEST_IMAGE)."""
    skip_unless_podman()
    yield build_image()
    remove_labelled(SESSION)  # what a failed test of this process left


@pytest.fixture(scope="session")
def docker_host(sbemu_image: str) -> Iterator[str]:
    """DOCKER_HOST of a podman API service for the Testcontainers libraries."""
    with docker_api() as url:
        yield url
