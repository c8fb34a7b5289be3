"""The `$cbs` node: put-token requests [contract §2].

A client puts a SAS token on `$cbs` before attaching to an entity; each connection keeps its
Grants (below), checks them at attach and detaches links whose token expires. The token code
itself lives in sbemu/auth/sas.py, shared with the admin HTTP API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..auth.sas import (
    SAS_PREFIX,
    SasGrant,
    TokenError,
    covers,
    make_sas_token,
    normalize_entity_path,
    verify_sas_token,
)
from ..auth.sasrules import SasRule
from ..errors import Unauthorized

__all__ = [
    "SAS_PREFIX",
    "Grants",
    "SasGrant",
    "TokenError",
    "covers",
    "make_sas_token",
    "normalize_entity_path",
    "put_token",
    "verify_sas_token",
]


# Azure's answer for a token put for an entity that does not exist (the SDKs raise it as an
# authentication error; JS and .NET read "could not be found" as MessagingEntityNotFound).
ENTITY_NOT_FOUND = (
    "The messaging entity '{}' could not be found. To know more visit "
    "https://aka.ms/sbResourceMgrExceptions."
)


def put_token(
    properties: Mapping[Any, Any],
    token: object,
    keys: Mapping[str, str],
    now: float,
    entity_of: Callable[[str], str | None] | None = None,
    rules_of: Callable[[str], Sequence[SasRule]] | None = None,
) -> tuple[int, str, SasGrant | None]:
    """Answer one `$cbs` request: (status code, status description, the grant if accepted).

    `properties` are the request's application properties (operation, name = audience);
    `token` its body; `now` Unix seconds. With `entity_of` (an entity path -> the queue or
    topic it names, None when none) an audience naming no entity is refused with 404, as
    Azure refuses it; `rules_of` (queue or topic -> its own SAS rules) lets a token signed
    with one of them through for that entity only.
    """
    operation = properties.get("operation")
    if operation != "put-token":
        return 400, f"Unsupported $cbs operation {operation!r}.", None
    if not isinstance(token, str) or not token.startswith(SAS_PREFIX):
        return 401, "Only SharedAccessSignature tokens are accepted.", None
    audience = properties.get("name")
    wanted = normalize_entity_path(audience) if isinstance(audience, str) else None
    entity = None
    if wanted and entity_of is not None:
        entity = entity_of(wanted)
        if entity is None:
            return 404, ENTITY_NOT_FOUND.format(audience), None
    grant: SasGrant | None
    try:
        grant = verify_sas_token(token, keys, now)
    except TokenError as exc:
        grant = _entity_grant(token, entity, rules_of, now) if entity is not None else None
        if grant is None:
            return exc.status_code, exc.description, None
    if wanted is not None and not covers(grant.scope, wanted):
        return (
            401,
            f"The token's resource '{grant.scope}' does not cover the audience '{wanted}'.",
            None,
        )
    return 202, "Accepted", grant


def _entity_grant(
    token: str,
    entity: str,
    rules_of: Callable[[str], Sequence[SasRule]] | None,
    now: float,
) -> SasGrant | None:
    """The grant of a token signed with one of `entity`'s own rules (primary or secondary
    key): scoped to that entity whatever its resource says, with that rule's rights."""
    for rule in rules_of(entity) if rules_of is not None else ():
        for key in rule.keys:
            try:
                grant = verify_sas_token(token, {rule.key_name: key}, now)
            except TokenError:
                continue
            scope = entity if covers(grant.scope, entity) else grant.scope
            return dataclasses.replace(grant, scope=scope, rights=rule.rights)
    return None


class Grants:
    """What one connection may do: the rights of its SASL PLAIN key, the `$cbs` tokens put so
    far, and the links a token authorised, watched until that token expires (then detached
    unless a renewed token covers them, as Azure does). Times are Unix seconds; `key_rights`
    maps a SAS key name to its rights ("Manage", "Send", "Listen")."""

    def __init__(self) -> None:
        self.plain_rights: frozenset[str] | None = None  # set when SASL PLAIN authenticated
        self.tokens: list[SasGrant] = []
        self._watched: dict[Any, tuple[float, str, tuple[str, ...]]] = {}  # link -> ...

    def add(self, grant: SasGrant, now: float) -> None:
        """Keep a token accepted on `$cbs` (and drop expired ones). A token granting what a
        kept one grants (same key, scope and rights) keeps only the later expiry, so a client
        renewing its tokens, or putting the same one in a loop, holds one per scope."""
        same = (grant.key_name, grant.scope, grant.rights)
        kept: list[SasGrant] = []
        for g in self.tokens:
            if g.expires_at <= now:
                continue
            if (g.key_name, g.scope, g.rights) == same:
                if g.expires_at >= grant.expires_at:
                    grant = g
                continue
            kept.append(g)
        kept.append(grant)
        self.tokens = kept

    def holds_authorisation(self, now: float) -> bool:
        """Whether the connection authenticated with SASL PLAIN or holds a live `$cbs` token."""
        return self.plain_rights is not None or any(g.expires_at > now for g in self.tokens)

    def authorize(
        self,
        path: str,
        rights: tuple[str, ...],
        key_rights: Mapping[str, frozenset[str]],
        now: float,
    ) -> float | None:
        """None when SASL PLAIN credentials grant the rights (no expiry), else the latest
        expiry of the $cbs tokens that do; raises Unauthorized when nothing does."""
        if self.plain_rights is not None and any(r in self.plain_rights for r in rights):
            return None
        best: float | None = None
        for grant in self.tokens:
            if grant.expires_at > now and covers(grant.scope, path):
                held = grant.rights
                if held is None:
                    held = key_rights.get(grant.key_name, frozenset())
                if "Manage" in held or any(r in held for r in rights):
                    best = max(best or 0.0, grant.expires_at)
        if best is not None:
            return best
        raise Unauthorized(
            f"Unauthorized access. '{'/'.join(rights)}' claim(s) are required to perform this "
            f"operation on '{path}'. Put a valid token on $cbs for this entity first."
        )

    def authorize_link(
        self,
        link: Any,
        path: str,
        rights: tuple[str, ...],
        key_rights: Mapping[str, frozenset[str]],
        now: float,
    ) -> None:
        """Authorise an attach; a token-authorised link is watched until its token expires."""
        expires_at = self.authorize(path, rights, key_rights, now)
        if expires_at is not None:
            self._watched[link] = (expires_at, path, rights)

    def forget(self, link: Any) -> None:
        """The link is gone: stop watching it."""
        self._watched.pop(link, None)

    def next_expiry(self) -> float | None:
        """When the first watched link's token expires, if any link is watched."""
        if not self._watched:
            return None
        return min(e for e, _, _ in self._watched.values())

    def expired(
        self,
        now: float,
        key_rights: Mapping[str, frozenset[str]],
        attached: Callable[[Any], bool],
    ) -> list[tuple[Any, str, float]]:
        """Watched links whose token expired and was not renewed: (link, path, expiry), to be
        detached by the caller; links no longer `attached` are just forgotten."""
        lost: list[tuple[Any, str, float]] = []
        for link, (expires_at, path, rights) in list(self._watched.items()):
            if expires_at > now:
                continue
            if not attached(link):  # refused or already gone
                del self._watched[link]
                continue
            try:
                renewed = self.authorize(path, rights, key_rights, now)
            except Unauthorized:
                del self._watched[link]
                lost.append((link, path, expires_at))
                continue
            if renewed is None:  # SASL PLAIN rights cover it: nothing left to watch
                del self._watched[link]
            else:
                self._watched[link] = (renewed, path, rights)
        return lost

    def identities(self, now: float) -> list[str]:
        """The key names of the live tokens, sorted (for the dashboard)."""
        return sorted({g.key_name for g in self.tokens if g.expires_at > now})
