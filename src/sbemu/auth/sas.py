"""Shared Access Signature tokens: verification, entity scopes and signing (contract §2).

Shared by the AMQP `$cbs` node (protocol/cbs.py) and the admin HTTP API, so neither side
imports the other.

A SAS token is ``SharedAccessSignature sr=<enc-resource>&sig=<enc-sig>&se=<unix
seconds>&skn=<key name>`` with fields in any order. The signature is
HMAC-SHA256 over ``<sr exactly as it appears in the token> + "\\n" + <se>``, keyed
with the UTF-8 bytes of the key string (contract §2.3).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote_plus, unquote, unquote_plus

__all__ = [
    "SAS_PREFIX",
    "SasGrant",
    "TokenError",
    "covers",
    "make_sas_token",
    "normalize_entity_path",
    "token_key_name",
    "verify_sas_token",
]

SAS_PREFIX = "SharedAccessSignature "

_SCHEME_HOST = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/]*")
_MANAGEMENT = "/$management"


@dataclass(frozen=True)
class SasGrant:
    """What a verified token grants: the key used, its entity scope and expiry."""

    key_name: str
    scope: str  # normalised entity path prefix; '' = the whole namespace
    expires_at: float  # unix seconds
    rights: frozenset[str] | None = None  # an entity rule's rights; None: the namespace key's


class TokenError(Exception):
    """A rejected token, carrying the `$cbs` status code and description."""

    def __init__(self, status_code: int, description: str) -> None:
        super().__init__(description)
        self.status_code = status_code
        self.description = description


def normalize_entity_path(address: str) -> str:
    """Reduce an address/audience to a lower-case entity path ('' = namespace)."""
    # contract §2.2: "ignore scheme (sb, amqps, amqp), host and port, trailing
    # slash and case, and strip a trailing /$management".
    path = _SCHEME_HOST.sub("", address, count=1).strip("/")
    low = path.lower()
    if low == "$management":
        return ""
    if low.endswith(_MANAGEMENT):
        low = low[: -len(_MANAGEMENT)].rstrip("/")
    return low


def covers(scope: str, entity_path: str) -> bool:
    """True if a token scoped to `scope` authorises `entity_path` (both normalised)."""
    # Prefix on a path-segment boundary only: 'q1' must not cover 'q10'.
    return scope == "" or entity_path == scope or entity_path.startswith(scope + "/")


def _sign(string_to_sign: str, key: str) -> str:
    mac = hmac.new(key.encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode("ascii")


def verify_sas_token(token: str, keys: Mapping[str, str], now: float) -> SasGrant:
    """Verify a SAS token against the namespace keys; return its grant or raise TokenError."""
    if not isinstance(token, str) or not token.startswith(SAS_PREFIX):
        raise TokenError(401, "not a SharedAccessSignature token")
    fields: dict[str, str] = {}
    for part in token[len(SAS_PREFIX) :].strip().split("&"):
        name, sep, value = part.partition("=")
        if not sep or not value:
            raise TokenError(401, f"malformed SAS token field {name!r}")
        if name in fields:
            raise TokenError(401, f"duplicate SAS token field {name!r}")
        fields[name] = value
    missing = [f for f in ("sr", "sig", "se", "skn") if f not in fields]
    if missing:
        raise TokenError(401, f"SAS token is missing {', '.join(missing)}")

    raw_sr, raw_se = fields["sr"], fields["se"]
    if not raw_se.isascii() or not raw_se.isdigit():
        raise TokenError(401, f"SAS token expiry se={raw_se!r} is not unix seconds")
    expires_at = int(raw_se)

    key_name = unquote_plus(fields["skn"])
    key = keys.get(key_name)
    if key is None:
        # pyamqp's generate_sas_token quote_plus()es the key name and then
        # urlencode()s it again, so a name with reserved characters arrives
        # double-encoded; accept that spelling too.
        twice = unquote_plus(key_name)
        key = keys.get(twice)
        if key is None:
            raise TokenError(401, f"unknown SAS key name {key_name!r}")
        key_name = twice

    # Decode sig with unquote (not unquote_plus): a client that left the base64
    # '+' unescaped would otherwise have it turned into a space.
    presented = unquote(fields["sig"]).encode("ascii", "replace")
    # contract §2.3: sign the raw sr text; never decode and re-encode it.
    expected = _sign(f"{raw_sr}\n{raw_se}", key).encode("ascii")
    if not hmac.compare_digest(expected, presented):
        raise TokenError(401, f"invalid SAS signature for key {key_name!r}")
    if expires_at <= now:
        # Azure's words, which the Go SDK's tests look for
        when = datetime.fromtimestamp(expires_at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        raise TokenError(401, f"ExpiredToken: The token is expired. Expiration time: '{when}'")
    return SasGrant(key_name, token_scope(unquote_plus(raw_sr)), float(expires_at))


def token_scope(resource: str) -> str:
    """The entity path a token's ``sr`` grants ('' = the namespace). An ``sr`` is a URI; one
    without a scheme starts with the host, as the Go SDK signs a namespace's connection string
    (``sr=<namespace FQDN>``, CreateConnectionStringWithSAS), which Azure takes for the namespace."""
    if "://" not in resource:
        resource = "sb://" + resource
    return normalize_entity_path(resource)


_SKN = re.compile(r"(?:^|[&\s])skn=([^&]{0,200})")


def token_key_name(token: object) -> str | None:
    """The key name a token says it was signed with (for logging a rejected token), or None."""
    if not isinstance(token, str) or not token.startswith(SAS_PREFIX):
        return None
    match = _SKN.search(token[len(SAS_PREFIX) :])
    return unquote_plus(match.group(1)) if match else None


def make_sas_token(resource: str, key_name: str, key: str, expiry: int) -> str:
    """Make a SAS token the way azure-servicebus for Python signs (quote_plus)."""
    sr = quote_plus(resource)
    sig = quote_plus(_sign(f"{sr}\n{int(expiry)}", key))
    return f"{SAS_PREFIX}sr={sr}&sig={sig}&se={int(expiry)}&skn={quote_plus(key_name)}"
