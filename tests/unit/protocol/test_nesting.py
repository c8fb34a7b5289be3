"""Messages whose sections nest too deep are refused at send (protocol/nesting.py): hand-encoded
values at, just over and far over the limit, in every structured section and shape."""

from __future__ import annotations

import pytest

from sbemu.errors import ArgumentError
from sbemu.protocol.codec import enc_described, enc_list, enc_map, enc_string, enc_symbol
from sbemu.protocol.messages import scan_transfer
from sbemu.protocol.nesting import MAX_VALUE_DEPTH, too_deep, within_depth
from sbemu.protocol.sections import (
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    FOOTER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    SectionTooDeep,
    read_application_properties,
    scan_message,
)


def nested_lists(depth: int) -> bytes:
    """A list in a list ... `depth` levels in all, the innermost holding a string."""
    value = enc_list([enc_string("leaf")])
    for _ in range(depth - 1):
        value = enc_list([value])
    return value


def nested_maps(depth: int) -> bytes:
    value = enc_map([(enc_string("k"), enc_string("v"))])
    for _ in range(depth - 1):
        value = enc_map([(enc_string("k"), value)])
    return value


def nested_arrays(depth: int) -> bytes:
    """Arrays of arrays, array32 throughout (an element shares its array's constructor and
    carries none of its own)."""

    def body(inner: bytes, constructor: int) -> bytes:  # size, count=1, constructor, element
        payload = (1).to_bytes(4, "big") + bytes((constructor,)) + inner
        return len(payload).to_bytes(4, "big") + payload

    # the innermost array's body: size (count + constructor + element), count 1, str8 "" (0x00)
    element = (6).to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\xa1\x00"
    for _ in range(depth - 1):
        element = body(element, 0xF0)
    return b"\xf0" + element


def nested_described(depth: int) -> bytes:
    value = enc_string("leaf")
    for _ in range(depth):  # each described value is a level, as a list is
        value = enc_described(0x99, value)
    return value


def section(code: int, value: bytes) -> bytes:
    return enc_described(code, value)


def message(*sections: bytes) -> bytes:
    return b"".join(sections) or section(DATA, b"\xa0\x00")


def props(value: bytes) -> bytes:
    return section(APPLICATION_PROPERTIES, enc_map([(enc_string("p"), value)]))


@pytest.mark.parametrize("shape", [nested_lists, nested_maps, nested_arrays, nested_described])
def test_within_depth_counts_every_compound_shape(shape) -> None:  # type: ignore[no-untyped-def]
    for depth in (1, 2, MAX_VALUE_DEPTH):
        data = shape(depth)
        assert within_depth(data, 0, len(data)), (shape.__name__, depth)
    data = shape(MAX_VALUE_DEPTH + 1)
    assert not within_depth(data, 0, len(data)), shape.__name__
    data = shape(5000)
    assert not within_depth(data, 0, len(data)), shape.__name__


@pytest.mark.parametrize(
    "build",
    [
        lambda v: props(v),
        lambda v: section(MESSAGE_ANNOTATIONS, enc_map([(enc_symbol("x-user"), v)])),
        lambda v: section(AMQP_VALUE, v),
        lambda v: section(AMQP_SEQUENCE, enc_list([v])),
        lambda v: section(DATA, b"\xa0\x00") + section(FOOTER, enc_map([(enc_symbol("f"), v)])),
    ],
    ids=["application-properties", "message-annotations", "amqp-value", "amqp-sequence", "footer"],
)
def test_sections_nesting_beyond_the_limit_are_refused(build) -> None:  # type: ignore[no-untyped-def]
    scan_message(build(nested_lists(MAX_VALUE_DEPTH - 2)))  # within: accepted
    with pytest.raises(SectionTooDeep, match="nests more than 32 levels"):
        scan_message(build(nested_lists(MAX_VALUE_DEPTH + 1)))
    with pytest.raises(SectionTooDeep):
        scan_message(build(nested_maps(2_000)))  # deep, within Azure's 32 KB per property


def test_send_path_answers_argument_error_not_decode_failure() -> None:
    deep = message(props(nested_maps(2_000)))  # (10,000 levels pass the 64 KB header quota)
    with pytest.raises(ArgumentError, match="application-properties nests more than 32"):
        scan_transfer(deep, 1024 * 1024, False)
    ok = message(props(nested_maps(MAX_VALUE_DEPTH - 1)), section(DATA, b"\xa0\x01x"))
    [incoming] = scan_transfer(ok, 1024 * 1024, False)
    assert incoming is not None


def test_a_stored_message_within_the_limit_decodes_downstream() -> None:
    """What the limit lets through, the decoders downstream (explorer, $management) handle."""
    data = message(props(nested_maps(MAX_VALUE_DEPTH - 1)), section(DATA, b"\xa0\x01x"))
    scan_message(data)
    value = read_application_properties(data)["p"]
    depth = 0
    while isinstance(value, dict):
        value, depth = value["k"], depth + 1
    assert value == "v" and depth == MAX_VALUE_DEPTH - 1


def test_data_sections_are_opaque_and_not_walked() -> None:
    body = bytes(range(256)) * 64  # every compound constructor byte, many times
    data = section(DATA, b"\xb0" + len(body).to_bytes(4, "big") + body)
    scan_message(data)  # a data section is never refused for what its bytes look like


@pytest.mark.parametrize("shape", [nested_lists, nested_maps, nested_arrays, nested_described])
def test_the_cheap_bounds_agree_with_the_walk(shape) -> None:  # type: ignore[no-untyped-def]
    """too_deep lets a value through on its length or its count of constructor bytes only when
    the walk would: at every depth around the limit, and with limits at and below the depth."""
    for depth in (1, 2, MAX_VALUE_DEPTH - 1, MAX_VALUE_DEPTH, MAX_VALUE_DEPTH + 1, 40, 5000):
        data = shape(depth)
        assert too_deep(data, 0, len(data)) is (depth > MAX_VALUE_DEPTH), (shape.__name__, depth)
    for depth in range(1, 40):
        data = shape(depth)
        for limit in range(1, depth + 2):
            walked = not within_depth(data, 0, len(data), limit)
            assert too_deep(data, 0, len(data), limit) is walked, (shape.__name__, depth, limit)


def test_flat_values_full_of_zero_bytes_are_accepted() -> None:
    """Numbers hold 0x00 bytes (what a described value starts with): a flat map of many longs
    passes the count and is walked, and accepted."""
    longs = enc_map([(enc_string(f"k{i}"), b"\x81" + bytes(8)) for i in range(20)])
    assert not too_deep(longs, 0, len(longs))
    scan_message(section(APPLICATION_PROPERTIES, longs) + section(DATA, b"\xa0\x01x"))


def properties(*fields: bytes) -> bytes:
    return section(PROPERTIES, enc_list(list(fields)))


@pytest.mark.parametrize(
    "field", [0, 1, 5, 13], ids=["message-id", "user-id", "correlation-id", "past-the-13"]
)
def test_properties_fields_nesting_beyond_the_limit_are_refused(field: int) -> None:
    """The properties list is checked field by field as the scan walks it: a field is level 2
    (a wanted one decoded, an unwanted one skipped, either way checked first)."""
    null = b"\x40"

    def with_field(value: bytes) -> bytes:
        fields = [null] * max(field + 1, 1)
        fields[field] = value
        return properties(*fields) + section(DATA, b"\xa0\x01x")

    scan_message(with_field(nested_lists(MAX_VALUE_DEPTH - 1)))  # 32 levels with the list
    with pytest.raises(SectionTooDeep, match="properties nests more than 32 levels"):
        scan_message(with_field(nested_lists(MAX_VALUE_DEPTH)))
    with pytest.raises(SectionTooDeep):
        scan_message(with_field(nested_described(MAX_VALUE_DEPTH)))


def test_a_deep_list32_properties_field_is_refused() -> None:
    """list32 properties (as proton writes a long one) are walked field by field too."""
    wide = nested_lists(MAX_VALUE_DEPTH) + b"\xa1\xff" + b"x" * 255  # over 255 bytes
    data = section(
        PROPERTIES, b"\xd0" + (len(wide) + 4).to_bytes(4, "big") + (2).to_bytes(4, "big") + wide
    )
    with pytest.raises(SectionTooDeep, match="properties nests more than 32 levels"):
        scan_message(data + section(DATA, b"\xa0\x01x"))
