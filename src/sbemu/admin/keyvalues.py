"""Typed values of rule parameters and correlation properties in the Atom documents.

SqlFilter and SqlRuleAction ``Parameters`` and CorrelationFilter ``Properties`` are lists of
``<KeyValueOfstringanyType><Key>..</Key><Value i:type="d6p1:int" xmlns:d6p1="XMLSchema">..``
(the .NET DataContract form). Each value keeps its type from the request to the filter that
runs it and back to every GET, written as Azure writes it: ``string``, ``int`` (32-bit),
``long`` (64-bit), ``double``, ``boolean``, ``dateTime`` and ``duration`` (the types the
Python, JS, Go and .NET admin clients send and read back). A dateTime keeps its kind: without
a zone it comes back without one (the Python SDK compares it with the naive datetime it sent),
in UTC it comes back with ``Z`` (Go parses RFC 3339 and needs the zone).
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET
from typing import Any
from xml.sax.saxutils import escape

from ..config import format_duration_ms, parse_duration_ms
from ..errors import ArgumentError

__all__ = ["format_value", "parse_value", "read_key_values", "key_values_xml"]

SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
INT32 = range(-(2**31), 2**31)
INT64 = range(-(2**63), 2**63)
_INTEGERS = (
    "int",
    "long",
    "short",
    "byte",
    "unsignedInt",
    "unsignedLong",
    "unsignedShort",
    "unsignedByte",
    "integer",
)
_FRACTION = re.compile(r"(\.\d{6})\d+")  # .NET writes 7 digits; Python reads 6


def parse_value(typ: str, text: str, key: str) -> Any:
    """The Python value of an xsi-typed Value (ArgumentError naming `key` when it is not one)."""
    try:
        if typ in _INTEGERS:
            value = int(text.strip())
            if value not in INT64:
                raise ValueError("out of the 64-bit range")
            return value
        if typ in ("double", "float", "decimal"):
            return float(text)
        if typ == "boolean":
            low = text.strip().lower()
            if low not in ("true", "false", "1", "0"):
                raise ValueError(f"'{text}' is not a boolean")
            return low in ("true", "1")
        if typ == "dateTime":
            return dt.datetime.fromisoformat(_FRACTION.sub(r"\1", text.strip()))
        if typ == "duration":
            return dt.timedelta(milliseconds=parse_duration_ms(text.strip()))
        if typ in ("string", "guid", "char", "anyURI"):
            return text
    except ValueError as exc:
        raise ArgumentError(f"The value of '{key}' is not a valid {typ}: {exc}.") from None
    raise ArgumentError(
        f"The type '{typ}' of '{key}' is not supported: use string, int, long, double, boolean, "
        "dateTime or duration."
    )


def format_value(value: Any) -> tuple[str, str]:
    """(xsi type, text) of a value as Azure writes it back."""
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, int):
        return ("int" if value in INT32 else "long"), str(value)
    if isinstance(value, float):
        return "double", repr(value)
    if isinstance(value, dt.datetime):
        return "dateTime", _datetime_text(value)
    if isinstance(value, dt.timedelta):
        return "duration", format_duration_ms(value // dt.timedelta(milliseconds=1))
    return "string", str(value)


def _datetime_text(value: dt.datetime) -> str:
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    offset = value.utcoffset()
    if offset is None:
        return text  # no zone given: none written back (a .NET DateTime of Unspecified kind)
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def read_key_values(parent: ET.Element | None) -> dict[str, Any]:
    """The typed key/values under a Parameters or Properties element (empty when absent)."""
    out: dict[str, Any] = {}
    if parent is None:
        return out
    for kv in parent:
        key = kv.findtext(f"{{{SB}}}Key")
        value_el = kv.find(f"{{{SB}}}Value")
        if key is None or value_el is None:
            continue
        if value_el.get(f"{{{XSI}}}nil") == "true":
            raise ArgumentError(f"The value of '{key}' is null: a parameter needs a value.")
        typ = (value_el.get(f"{{{XSI}}}type") or "string").split(":")[-1]
        out[key] = parse_value(typ, value_el.text or "", key)
    return out


def key_values_xml(element: str, values: Any) -> str:
    """``<element>`` with one KeyValueOfstringanyType per value (empty element when none)."""
    items = []
    for key, value in (values or {}).items():
        typ, text = format_value(value)
        items.append(
            f"<KeyValueOfstringanyType><Key>{escape(str(key))}</Key>"
            f'<Value i:type="d6p1:{typ}" xmlns:d6p1="{XSD}">{escape(text)}</Value>'
            "</KeyValueOfstringanyType>"
        )
    return f"<{element}>{''.join(items)}</{element}>"
