"""What a namespace's tier allows an entity description: Azure's MaxMessageSizeInKilobytes rules.

Standard (and Basic) namespaces have one message size, 256 KB [P19]: a description may echo
it (the SDKs' get-then-update sends back the 256 a GET returned) and anything else is refused
with the bare ``SubCode=40000. Bad Request.`` Azure answers (MicrosoftDocs/azure-docs#104074,
Azure/ResourceModules#2629). Premium namespaces take 1024 to 102400 per queue or topic
(default 1024) and refuse the rest with Azure's text naming the range and the tier.
"""

from __future__ import annotations

from typing import Any

from ..config import (
    PREMIUM_MAX_MESSAGE_SIZE,
    PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE,
    STANDARD_MAX_MESSAGE_SIZE,
    NamespaceConfig,
)
from ..errors import ArgumentError

__all__ = ["default_message_size_kb", "check_message_size"]


def default_message_size_kb(ns: NamespaceConfig) -> int:
    """An entity's MaxMessageSizeInKilobytes when none is given: 256 (Standard), 1024 (Premium)."""
    premium = ns.premium_partitions is not None
    return (PREMIUM_MAX_MESSAGE_SIZE if premium else STANDARD_MAX_MESSAGE_SIZE) // 1024


def check_message_size(desc: dict[str, Any], ns: NamespaceConfig, given: bool) -> None:
    """Apply the tier to desc["max_message_size_kb"]; `given`: the request set it.
    Raises ArgumentError (400) as Azure does."""
    kb = desc.get("max_message_size_kb")
    if ns.premium_partitions is None:
        standard = STANDARD_MAX_MESSAGE_SIZE // 1024
        if given and kb != standard:
            raise ArgumentError(
                "SubCode=40000. Bad Request. (MaxMessageSizeInKilobytes can only be set on a "
                f"Premium namespace; '{ns.name}' is Standard, where it is {standard}.)"
            )
        desc["max_message_size_kb"] = standard
        return
    if kb is None:
        desc["max_message_size_kb"] = default_message_size_kb(ns)
        return
    low, high = PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE
    if isinstance(kb, bool) or not isinstance(kb, int) or not low <= kb <= high:
        raise ArgumentError(
            f"SubCode=40000. The property value for 'MaxMessageSizeInKilobytes' must be between "
            f"{low} and {high} when the namespace '{ns.name}' is using 'Premium' tier.\r\n"
            "Parameter name: MaxMessageSizeInKilobytes"
        )
