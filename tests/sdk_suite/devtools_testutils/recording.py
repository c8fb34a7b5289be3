"""Recorded test case bases and ``recorded_by_proxy``: every test runs live against sbemu."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any


def recorded_by_proxy(test: Callable[..., Any]) -> Callable[..., Any]:
    """Live only: the test runs as written, nothing goes through a recording proxy."""
    return test


def set_custom_default_matcher(**_: Any) -> None:
    """No playback, so no request matcher."""


class AzureRecordedTestCase:
    """The base of the SDK's test classes; live mode, always."""

    is_live = True

    @staticmethod
    def await_prepared_test(test_fn: Callable[..., Any]) -> Callable[..., Any]:
        """Run a coroutine test method to completion from a synchronous test (old style)."""

        @functools.wraps(test_fn)
        def run(test_class_instance: Any, *args: Any, **kwargs: Any) -> Any:
            return asyncio.run(test_fn(test_class_instance, *args, **kwargs))

        return run


class AzureMgmtRecordedTestCase(AzureRecordedTestCase):
    """The base of the SDK's test classes that use resource preparers."""
