"""Partition key precedence [SB partitioning P6] and the stable hash [P7]."""

import pytest

from sbemu.errors import InvalidOperation
from sbemu.partitions.keys import partition_for_key, partition_key_of, stable_hash

# Golden vectors (CRC-32/IEEE; 'a' and '123456789' are the published check values):
# these must never change, or keys move between partitions across versions.
GOLDEN = [
    ("", 0, 0),
    ("a", 0xE8B7BE43, 3),
    ("session-1", 0x23C0BE2E, 14),
    ("order-42", 0x57F706DE, 14),
    ("ключ", 0x0CAF961A, 10),
    ("123456789", 0xCBF43926, 6),  # the CRC-32/IEEE check value
]


@pytest.mark.parametrize("key,crc,pid", GOLDEN)
def test_golden_vectors(key, crc, pid):
    assert stable_hash(key) == crc
    assert partition_for_key(key, 16) == pid


def test_same_key_same_partition_any_count():
    for n in (1, 2, 4, 16):
        assert {partition_for_key("k-17", n) for _ in range(10)} == {partition_for_key("k-17", n)}


def test_keys_spread_over_all_16_partitions():
    assert {partition_for_key(f"key-{i}", 16) for i in range(400)} == set(range(16))


def test_precedence_session_then_partition_key_then_message_id():
    assert partition_key_of("s", None, "m", True) == "s"
    assert partition_key_of("s", "s", "m", True) == "s"
    assert partition_key_of(None, "p", "m", True) == "p"
    assert partition_key_of(None, None, "m", True) == "m"


def test_message_id_is_a_key_only_with_duplicate_detection():
    assert partition_key_of(None, None, "m", False) is None


def test_session_and_partition_key_must_match():
    with pytest.raises(InvalidOperation):
        partition_key_of("s1", "p1", None, False)
