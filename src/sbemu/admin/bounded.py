"""Untrusted request bodies of the admin port, parsed with bounds: every refusal is a
:class:`BodyError` with a message for a 400, never a RecursionError, OverflowError or traceback.

- XML (the Atom API): `defusedxml` (the well-kept library for untrusted XML) refuses DTDs,
  entity declarations and external references outright; an encoding Python does not know is
  refused; elements nest at most ``MAX_XML_DEPTH`` levels (an Atom entry needs about ten).
- JSON (the dashboard): at most ``MAX_JSON_DEPTH`` levels of arrays and objects (checked by a
  linear scan before parsing: the parser itself recurses), no NaN/Infinity, floats finite,
  integers within a signed 64-bit (what AMQP and the stores hold); :func:`int_field` and
  friends check each field's own range.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

import defusedxml
import defusedxml.ElementTree as SafeET

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_XML_DEPTH",
    "BodyError",
    "bool_field",
    "int_field",
    "json_object",
    "str_field",
    "xml_document",
]

MAX_XML_DEPTH = 32
MAX_JSON_DEPTH = 32
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class BodyError(ValueError):
    """A request body refused: the message says why (for a 400)."""


# ------------------------------------------------------------------ XML
def xml_document(body: bytes) -> ET.Element:
    """The root element of an untrusted XML document (BodyError when refused)."""
    try:
        root = SafeET.fromstring(body, forbid_dtd=True)
    except defusedxml.DTDForbidden:
        raise BodyError("a DTD is not allowed in the request body") from None
    except defusedxml.EntitiesForbidden:
        raise BodyError("entity declarations are not allowed in the request body") from None
    except defusedxml.ExternalReferenceForbidden:
        raise BodyError("external references are not allowed in the request body") from None
    except ET.ParseError as exc:
        raise BodyError(f"not valid XML: {exc}") from None
    except LookupError as exc:  # <?xml encoding="..."?> names an encoding Python does not know
        raise BodyError(f"unsupported XML encoding: {exc}") from None
    except (ValueError, UnicodeError) as exc:
        raise BodyError(f"not valid XML: {exc}") from None
    _check_xml_depth(root)
    return root


def _check_xml_depth(root: ET.Element) -> None:
    stack = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        if depth > MAX_XML_DEPTH:
            raise BodyError(f"XML elements nest more than {MAX_XML_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in element)


# ------------------------------------------------------------------ JSON
def _json_depth_ok(text: str) -> bool:
    """Whether arrays/objects nest at most MAX_JSON_DEPTH levels (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyError(f"number {text[:40]} is out of range")
    return value


def _int64(text: str) -> int:
    if len(text) > 20:
        raise BodyError(f"integer {text[:40]}... is out of range")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise BodyError(f"integer {text} is out of the signed 64-bit range")
    return value


def _no_constant(name: str) -> Any:
    raise BodyError(f"{name} is not a JSON number")


def json_object(body: bytes, max_bytes: int) -> dict[str, Any]:
    """An untrusted JSON object (``{}`` for an empty body); BodyError when refused."""
    if len(body) > max_bytes:
        raise BodyError(f"request body larger than {max_bytes} bytes")
    try:
        text = (body or b"{}").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"request body is not UTF-8: {exc}") from None
    if not _json_depth_ok(text):
        raise BodyError(f"JSON nests more than {MAX_JSON_DEPTH} levels deep")
    try:
        value = json.loads(text, parse_float=_finite, parse_int=_int64, parse_constant=_no_constant)
    except BodyError:
        raise
    except (ValueError, RecursionError) as exc:
        raise BodyError(f"request body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BodyError("request body must be a JSON object")
    return value


def int_field(
    obj: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None
) -> int:
    """``obj[name]`` as an int in [low, high] (a JSON number or a numeric string)."""
    value = obj.get(name)
    if value is None or value == "":
        if default is None:
            raise BodyError(f"{name} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BodyError(f"{name} must be a whole number")
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit() or len(text) > 20:
            raise BodyError(f"{name} must be a whole number")
        value = int(text)
    if isinstance(value, float):
        if not value.is_integer():
            raise BodyError(f"{name} must be a whole number")
        value = int(value)
    if not low <= value <= high:
        raise BodyError(f"{name} must be between {low} and {high}")
    return value


def str_field(obj: Mapping[str, Any], name: str, max_len: int, default: str | None = None) -> str:
    """``obj[name]`` as a string of at most ``max_len`` characters (numbers are spelled out)."""
    value = obj.get(name)
    if value is None:
        if default is None:
            raise BodyError(f"{name} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BodyError(f"{name} must be a string")
    text = str(value)
    if len(text) > max_len:
        raise BodyError(f"{name} is longer than {max_len} characters")
    return text


def bool_field(obj: Mapping[str, Any], name: str, default: bool | None = None) -> bool:
    value = obj.get(name)
    if value is None:
        if default is None:
            raise BodyError(f"{name} is required")
        return default
    if not isinstance(value, bool):
        raise BodyError(f"{name} must be true or false")
    return value
