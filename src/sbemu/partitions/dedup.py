"""Durable duplicate detection for one partition [Azure: duplicate detection, P6].

The history of admitted MessageIds lives in the partition's LMDB store (store.py, `dd:*`
databases) and is written in the same transaction as the messages it admitted: after a
restart or kill -9 a MessageId is remembered exactly when its message was stored. Memory holds
only the ids admitted since the last commit (so duplicates within one turn meet too); the
committed history is looked up in LMDB. Expired history is swept from the front of a
time-ordered index inside the commits that admit new messages: no timer per message, and the
stored history stays bounded by what one window admits.

On a partitioned entity with duplicate detection the MessageId is the partition key (unless a
SessionId or PartitionKey is set) [P6], so all copies of one message meet on one partition.
"""

from __future__ import annotations

import hashlib

from .broker import PartitionBroker
from .records import IncomingMessage

_MAX_KEY = 400  # LMDB keys are at most 511 bytes; longer ids are stored by digest


def history_key(message_id: str) -> bytes:
    """The stored key of a MessageId (UTF-8, or a digest of a very long one)."""
    raw = message_id.encode("utf-8")
    if len(raw) > _MAX_KEY:
        return b"#" + hashlib.blake2b(raw, digest_size=32).digest()
    return raw


class DuplicateHistory:
    """The duplicate-detection history of one partition."""

    def __init__(self, broker: PartitionBroker, window_ms: int) -> None:
        self.broker = broker
        self.window_ms = window_ms
        self._pending: dict[bytes, int] = {}  # admitted, not yet committed

    def admit(self, messages: list[IncomingMessage], now_ms: int) -> list[IncomingMessage]:
        """The messages to store: those whose MessageId was not admitted inside the window
        (a duplicate is accepted by the send and dropped, as Azure does)."""
        since = now_ms - self.window_ms
        keys = [history_key(m.message_id) if m.message_id is not None else None for m in messages]
        ids = [k for k in keys if k is not None]
        if not ids:
            return messages
        seen = self.broker.dedup_seen(ids, since)
        pending = self._pending
        kept: list[IncomingMessage] = []
        admitted: list[bytes] = []
        for msg, key in zip(messages, keys, strict=True):
            if key is not None:
                first = pending.get(key)
                if key in seen or (first is not None and first >= since):
                    continue
                pending[key] = now_ms
                admitted.append(key)
            kept.append(msg)
        if admitted:

            def committed(error: Exception | None) -> None:
                for key in admitted:
                    if pending.get(key) == now_ms:
                        del pending[key]

            self.broker.remember_ids(admitted, now_ms, since, committed)
        return kept
