"""Message and batch size limits per link, as Service Bus advertises and enforces them.

A queue or topic has its own maximum message size (MaxMessageSizeInKilobytes: 256 KB on
Standard, 1 MB by default and up to 100 MB on Premium), advertised as the attach's
``max-message-size`` on sender and receiver links. A batch (one transfer carrying several
messages) is limited separately to the tier's batch size, 256 KB on Standard and 1 MB on
Premium, whatever the entity's message size: the service says so in the sender link's
``com.microsoft:max-message-batch-size`` property, which the SDKs size their batches from
(Python 7.15, and the .NET, JS and Go fixes "Read max-message-batch-size vendor property for
batch sizing": azure-sdk-for-net#57941, azure-sdk-for-js#38049, azure-sdk-for-go#26530).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["BATCH_SIZE_PROPERTY", "batch_limit", "message_limit"]

BATCH_SIZE_PROPERTY = "com.microsoft:max-message-batch-size"


class _Spec(Protocol):
    @property
    def max_message_size(self) -> int: ...


class _Entity(Protocol):
    @property
    def spec(self) -> _Spec: ...


class _Namespace(Protocol):
    @property
    def max_message_size(self) -> int: ...


def message_limit(entity: _Entity | None, namespace: _Namespace) -> int:
    """The largest message (bytes) the entity takes: its own limit, else the namespace's."""
    own = entity.spec.max_message_size if entity is not None else 0
    return own or namespace.max_message_size


def batch_limit(namespace: _Namespace) -> int:
    """The largest batch transfer (bytes): the tier's (an entity's own message limit is never
    below it: 256 KB on Standard, at least 1 MB on Premium)."""
    return namespace.max_message_size
