"""Recording sanitizers: nothing is recorded against sbemu, so there is nothing to sanitize."""

from __future__ import annotations

from typing import Any


def add_remove_header_sanitizer(**_: Any) -> None:
    """No recording, no header to remove."""


def add_general_regex_sanitizer(**_: Any) -> None:
    """No recording, no text to rewrite."""


def add_oauth_response_sanitizer(**_: Any) -> None:
    """No recording, no OAuth response to hide."""
