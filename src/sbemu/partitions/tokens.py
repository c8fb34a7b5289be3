"""Lock tokens: random version-4 GUIDs whose last two bytes carry the partition id.

Inside partitions/ a lock is its token's int (a "lock key"): the receive path keeps and
passes ints, with no UUID object per delivery. `token_of` makes the UUID at the protocol and
management edges; the partition id in the last two bytes sends a settlement straight to the
partition that issued the lock [SB partitioning P11].
"""

from __future__ import annotations

import os
import uuid

# Lock tokens are drawn from os.urandom a few KB at a time: one system call per
# _TOKEN_POOL tokens rather than one per delivery (only the loop thread makes tokens).
_TOKEN_POOL = 256
_token_pool = b""
_token_at = 0
# A token's int: the random bits minus the version nibble, the variant bits and the last two
# bytes; then version 4, variant 10 (RFC 4122) and the partition id in the last two bytes.
_TOKEN_KEEP = ((1 << 128) - 1) & ~((0xF << 76) | (0x3 << 62) | 0xFFFF)
_TOKEN_V4 = (0x4 << 76) | (0x2 << 62)
# uuid.UUID(int=...) checks its arguments in Python (about 10x the cost of the object): a
# token's int is valid by construction, so the UUID is made as its __init__ ends, directly.
_UUID = uuid.UUID
_new_object = object.__new__
_set_slot = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def make_lock_key(partition_id: int) -> int:
    """The int of a random version-4 GUID whose last two bytes carry the partition id (for
    O(1) lookup): a lock token as the receive path keeps it."""
    global _token_pool, _token_at
    at = _token_at
    if at >= len(_token_pool):
        _token_pool, at = os.urandom(16 * _TOKEN_POOL), 0
    _token_at = at + 16
    bits = int.from_bytes(_token_pool[at : at + 16], "big")
    return (bits & _TOKEN_KEEP) | _TOKEN_V4 | (partition_id & 0xFFFF)


def make_lock_keys(partition_id: int, n: int) -> list[int]:
    """`n` lock keys (make_lock_key) from one draw of random bits: a run of deliveries."""
    raw = os.urandom(16 * n)
    keep, low, from_bytes = _TOKEN_KEEP, _TOKEN_V4 | (partition_id & 0xFFFF), int.from_bytes
    return [(from_bytes(raw[i : i + 16], "big") & keep) | low for i in range(0, 16 * n, 16)]


def token_of(key: int) -> uuid.UUID:
    """The lock token (a UUID) whose int is `key`."""
    token = _new_object(_UUID)
    _set_slot(token, "int", key)
    _set_slot(token, "is_safe", _SAFE_UNKNOWN)
    return token


def partition_of_token(token: uuid.UUID) -> int:
    """The partition id a lock token was issued by."""
    return token.int & 0xFFFF


def partition_of_key(key: int) -> int:
    """The partition id a lock key (a token's int) was issued by."""
    return key & 0xFFFF
