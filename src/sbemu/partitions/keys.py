"""Partition keys: which key a message carries, and which partition a key lands on.

[SB partitioning P6] precedence: SessionId, then PartitionKey (must equal SessionId when both
are set), then MessageId but only on entities with duplicate detection. [P7] the same key always
lands on the same partition, so the hash is a fixed function of the key's UTF-8 bytes (CRC-32,
IEEE polynomial), never Python's salted hash(). [P8] key-less messages go round-robin; that
counter lives in the router.
"""

from __future__ import annotations

import zlib

from ..errors import InvalidOperation


def partition_key_of(
    session_id: str | None,
    partition_key: str | None,
    message_id: str | None,
    duplicate_detection: bool,
) -> str | None:
    """Return the key that pins a message to a partition, or None for round-robin."""
    if session_id is not None:
        if partition_key is not None and partition_key != session_id:
            raise InvalidOperation(
                f"The SessionId '{session_id}' and PartitionKey '{partition_key}' of a message "
                "must be the same when both are set."
            )
        return session_id
    if partition_key is not None:
        return partition_key
    if duplicate_detection and message_id is not None:
        return message_id
    return None


def stable_hash(key: str) -> int:
    """CRC-32 (IEEE) of the key's UTF-8 bytes: stable across processes and machines."""
    return zlib.crc32(key.encode("utf-8"))


def partition_for_key(key: str, partition_count: int) -> int:
    """The partition id (0-based) a key always lands on."""
    return stable_hash(key) % partition_count
