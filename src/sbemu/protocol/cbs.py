"""The `$cbs` node: put-token requests [contract §2].

A client puts a SAS token on `$cbs` before attaching to an entity; the connection keeps the
grants and checks them at attach (and detaches links whose token expires). The token code
itself lives in sbemu/sas.py, shared with the admin HTTP API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sas import (
    SAS_PREFIX,
    SasGrant,
    TokenError,
    covers,
    make_sas_token,
    normalize_entity_path,
    verify_sas_token,
)

__all__ = [
    "SAS_PREFIX",
    "SasGrant",
    "TokenError",
    "covers",
    "make_sas_token",
    "normalize_entity_path",
    "put_token",
    "verify_sas_token",
]


def put_token(
    properties: Mapping[Any, Any], token: object, keys: Mapping[str, str], now: float
) -> tuple[int, str, SasGrant | None]:
    """Answer one `$cbs` request: (status code, status description, the grant if accepted).

    `properties` are the request's application properties (operation, name = audience);
    `token` its body; `now` Unix seconds.
    """
    operation = properties.get("operation")
    if operation != "put-token":
        return 400, f"Unsupported $cbs operation {operation!r}.", None
    if not isinstance(token, str) or not token.startswith(SAS_PREFIX):
        return 401, "Only SharedAccessSignature tokens are accepted.", None
    try:
        grant = verify_sas_token(token, keys, now)
    except TokenError as exc:
        return exc.status_code, exc.description, None
    audience = properties.get("name")
    if isinstance(audience, str):
        wanted = normalize_entity_path(audience)
        if not covers(grant.scope, wanted):
            return (
                401,
                f"The token's resource '{grant.scope}' does not cover the audience '{wanted}'.",
                None,
            )
    return 202, "Accepted", grant
