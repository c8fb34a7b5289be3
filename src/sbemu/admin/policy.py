"""The admin port's one access policy: every route names the right it needs, one function decides.

A route is added to the table (admin/routes.py) with a :class:`Rule`; before its handler runs,
:meth:`AccessPolicy.decide` answers with a :class:`Grant` (who asked, and how they proved it) or
a :class:`Refusal` (status and why), which the route's rule writes in the route's own style (the
Atom API's XML error, the dashboard's JSON, a redirect to the login page, ``WWW-Authenticate``).
docs/security.md lists every route with its rule; tests/security/test_route_rules.py checks
each from loopback, from another address and as a forged browser request.

"Loopback" means the admin listener is bound to a loopback address *and* the peer is one (a
listener bound to 0.0.0.0 treats every request, 127.0.0.1 included, as coming from beyond).
A loopback ``Host`` (:meth:`AccessPolicy.local_host`) is a loopback name or address, or Azure's
name of a configured namespace (``<namespace>.servicebus.windows.net``, mapped to loopback by a
hosts-file line for code that builds Azure's names itself).

=========  =====================================  =============================================
need       on loopback                            beyond loopback
=========  =====================================  =============================================
PUBLIC     anyone                                 anyone
LOGIN      anyone not cross-site (the login form, which checks the key itself)
READ       ``Host`` names a loopback host         a SAS token (any right) whose audience covers
                                                  the resource, a dashboard session, or HTTP
                                                  Basic with a ``Manage`` key
MANAGE     loopback ``Host``, not cross-site, and a SAS token with ``Manage`` for the resource,
           the dashboard's CSRF token or a        or a dashboard session plus its CSRF token;
           ``Manage`` SAS token                   not cross-site
SAS        a SAS token whose audience covers the path (``Manage`` to change anything), as
           Azure's management API; loopback ``Host`` there, and writes not cross-site
AMQP       passed through: AMQP over WebSocket authenticates itself with SAS in ``$cbs``
=========  =====================================  =============================================

Cross-site: an ``Origin`` that is not the request's own ``Host``, or a ``Sec-Fetch-Site`` other
than ``same-origin`` (a browser sends them; SDKs, curl and the CLI do not). Refused credentials
are logged at warning level, rate-limited (sbemu.auth.rejections), with key name, reason and peer.
"""

from __future__ import annotations

import base64
import enum
import hmac
import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..auth.sas import (
    SAS_PREFIX,
    TokenError,
    covers,
    normalize_entity_path,
    token_key_name,
    verify_sas_token,
)
from ..clock import Clock
from .access import CSRF_HEADER, Access, Principal, is_loopback
from .http import Request, Response, json_response

__all__ = [
    "AMQP",
    "LOGIN",
    "MANAGE",
    "PUBLIC",
    "READ",
    "AccessPolicy",
    "Grant",
    "NamespaceKeys",
    "Need",
    "Refusal",
    "Resource",
    "Rule",
    "azure_namespace_host",
    "entity_in_path",
    "loopback_host",
]

log = logging.getLogger("sbemu.admin.access")

READ_METHODS = frozenset({"GET", "HEAD"})


class Need(enum.Enum):
    """What a route needs (see the module's table)."""

    PUBLIC = "public"
    LOGIN = "login"  # public, but not from another site (the login form: no login CSRF)
    READ = "read"
    MANAGE = "manage"
    SAS = "sas"
    AMQP = "amqp"


@dataclass(frozen=True)
class Resource:
    """What a request touches, which a token's audience must cover: ``namespace`` None means
    the whole emulator (a key of any namespace, with a namespace-wide audience)."""

    namespace: str | None
    path: str = ""  # normalised entity path (sbemu.auth.sas.normalize_entity_path); '' = namespace


Locate = Callable[[Request, dict[str, str]], Resource]
Refuse = Callable[[Request, int, str], Response]


def whole_server(request: Request, params: dict[str, str]) -> Resource:
    """The resource of a route about the whole emulator (dashboard, /metrics, GET /partitions)."""
    return Resource(None, "")


def entity_in_path(request: Request, params: dict[str, str]) -> Resource:
    """``<prefix>/<namespace>/<entity path...>[/<n>/(offline|online)|/status/<s>]``: the
    namespace and the entity (a topic's subscription counts as its topic) named after the
    route's prefix."""
    parts = [p for p in params.get("rest", "").split("/") if p]
    if not parts:
        return Resource(None, "")
    entity = [p for p in parts[1:]]
    if len(entity) >= 2 and entity[-2].lower() == "status":
        entity = entity[:-2]
    elif len(entity) >= 2 and entity[-1].lower() in ("offline", "online"):
        entity = entity[:-2]
    if len(entity) >= 2 and entity[1].lower() == "subscriptions":
        entity = entity[:1]
    return Resource(parts[0], normalize_entity_path("/".join(entity)))


def json_refusal(request: Request, status: int, message: str) -> Response:
    return json_response(status, {"error": message})


@dataclass(frozen=True)
class Rule:
    """The right a route needs, what a token must cover, and how a refusal is written."""

    need: Need
    audience: str = "namespace-wide"  # what a token's audience must cover, for the docs table
    locate: Locate = whole_server
    refuse: Refuse = json_refusal

    def but(self, **changes: object) -> Rule:
        """A copy with some fields changed (e.g. ``READ.but(refuse=...)``)."""
        fields = {
            "need": self.need,
            "audience": self.audience,
            "locate": self.locate,
            "refuse": self.refuse,
        }
        fields.update(changes)
        return Rule(**fields)  # type: ignore[arg-type]

    def describe(self, method: str) -> str:
        """One line for the docs table (tests/security checks docs/security.md against it)."""
        if self.need is Need.SAS:
            return f"sas ({self.audience}){', Manage' if method not in READ_METHODS else ''}"
        if self.need in (Need.READ, Need.MANAGE):
            return f"{self.need.value} ({self.audience})"
        return self.need.value


PUBLIC = Rule(Need.PUBLIC, audience="")
LOGIN = Rule(Need.LOGIN, audience="")
READ = Rule(Need.READ)
MANAGE = Rule(Need.MANAGE)
AMQP = Rule(Need.AMQP, audience="")


@dataclass(frozen=True)
class Grant:
    """Who made an allowed request and how they proved it."""

    via: str  # "loopback", "session", "sas", "basic", "public", "amqp"
    key_name: str = ""
    session: str = ""  # the dashboard session cookie ('' otherwise): CSRF tokens bind to it
    can_read: bool = True  # on a PUBLIC route: whether the request would pass a READ rule

    @property
    def principal(self) -> Principal:
        """The dashboard's view of it (its CSRF token is bound to the session)."""
        return Principal(self.key_name, self.session)


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: ``status`` and a message for the client."""

    status: int
    message: str
    key_name: str | None = None  # as presented (logged)
    warn: bool = True  # presented credentials were wrong / a cross-site request (warning)


@dataclass(frozen=True)
class NamespaceKeys:
    """A namespace's SAS policies: key name -> key, key name -> rights."""

    name: str
    keys: Mapping[str, str]
    rights: Mapping[str, frozenset[str]] = field(default_factory=dict)


def loopback_host(host_header: str) -> bool:
    """Whether a ``Host`` header names this machine: a loopback address, ``localhost`` or a
    ``*.localhost`` name (RFC 6761: those always resolve to loopback, so a DNS-rebinding page
    cannot be served under them)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        if "]" not in host:
            return False
        name = host[1 : host.find("]")]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".")
    if not name:
        return False
    return name == "localhost" or name.endswith(".localhost") or is_loopback(name)


# The host names Azure gives a namespace (public cloud, China, US Government). Code that builds
# ``<namespace>.servicebus.windows.net`` itself (kombu's transport, for one) reaches sbemu when
# the user maps that name to loopback in a hosts file; only a configured namespace's name is
# accepted, so a page under any other name still meets the DNS-rebinding guard.
AZURE_SUFFIXES = (
    ".servicebus.windows.net",
    ".servicebus.chinacloudapi.cn",
    ".servicebus.usgovcloudapi.net",
)


def azure_namespace_host(host_header: str, namespaces: Iterable[str]) -> bool:
    """Whether a ``Host`` header is Azure's name of one of ``namespaces`` (lower-case names):
    ``<namespace>.servicebus.windows.net``, with or without a port."""
    name = host_header.strip().lower()
    name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    name = name.rstrip(".")
    for suffix in AZURE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)] in namespaces
    return False


def peer_is_loopback(peer: str) -> bool:
    """Whether a request's peer ("addr:port") is a loopback address (IPv4-mapped too)."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def cross_site(headers: Mapping[str, str]) -> str | None:
    """Why a request comes from another site (a browser's ``Sec-Fetch-Site`` or ``Origin``
    says so), or None."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() != "same-origin":
        return f"Sec-Fetch-Site is {site!r}"
    origin = headers.get("origin")
    if origin is not None:
        try:
            netloc = urlsplit(origin.strip()).netloc.lower()
        except ValueError:
            netloc = ""
        if not netloc or netloc != headers.get("host", "").strip().lower():
            return f"Origin {origin!r} is not this server"
    return None


class AccessPolicy:
    """Decides every admin request (see the module's table)."""

    def __init__(
        self,
        bind_host: str,
        namespaces: Iterable[NamespaceKeys],
        access: Access,
        clock: Clock,
    ) -> None:
        self.bind_local = is_loopback(bind_host)
        self.namespaces = {ns.name.lower(): ns for ns in namespaces}
        self.access = access
        self.clock = clock
        self.rejections = access.rejections

    def local_host(self, host_header: str) -> bool:
        """Whether a loopback request's ``Host`` may be served: a loopback name, or Azure's name
        of a configured namespace (mapped to loopback by the user's hosts file)."""
        return loopback_host(host_header) or azure_namespace_host(host_header, self.namespaces)

    def is_local(self, request: Request) -> bool:
        """Loopback: a loopback-bound listener and a loopback peer."""
        return self.bind_local and peer_is_loopback(request.peer)

    # ------------------------------------------------------------------ the decision
    def decide(self, rule: Rule, request: Request, params: dict[str, str]) -> Grant | Refusal:
        """The one place an admin request is allowed or refused (logged when refused)."""
        verdict = self._decide(rule, request, params)
        if isinstance(verdict, Refusal):
            reason = f"{request.method} {request.path[:200]}: {verdict.message}"
            if verdict.warn:
                self.rejections.rejected(verdict.key_name, reason, request.peer, self.clock())
            else:
                log.debug("admin request refused from %s: %s", request.peer, reason)
        return verdict

    def _decide(self, rule: Rule, request: Request, params: dict[str, str]) -> Grant | Refusal:
        need = rule.need
        if need is Need.AMQP:
            return Grant("amqp")
        local = self.is_local(request)
        headers = request.headers
        if need is Need.LOGIN:
            why = cross_site(headers)
            if why is not None:
                return Refusal(403, f"cross-origin request refused: {why}")
            return Grant("public", can_read=False)
        if need is Need.PUBLIC:
            read = self._read(rule, request, params, local)
            return Grant("public", can_read=isinstance(read, Grant))
        writes = need is Need.MANAGE or (need is Need.SAS and request.method not in READ_METHODS)
        if local and not self.local_host(headers.get("host", "")):
            return Refusal(
                403,
                "Host header is not a loopback name: use localhost, 127.0.0.1 or a configured "
                "namespace's <namespace>.servicebus.windows.net (requests under another name "
                "are refused, a DNS-rebinding guard)",
            )
        if writes:
            why = cross_site(headers)
            if why is not None:
                return Refusal(403, f"cross-origin request refused: {why}")
        if need is Need.SAS:
            return self._token(
                headers.get("authorization", ""), rule.locate(request, params), manage=writes
            )
        if writes:
            auth = headers.get("authorization", "")
            if auth:
                return self._token(auth, rule.locate(request, params), manage=True)
            principal = Principal("", "") if local else self.access.session(headers, self.clock())
            if principal is None:
                return Refusal(
                    401,
                    "login required: a SharedAccessSignature token with the Manage right, or "
                    "a dashboard session (/login)",
                    warn=False,
                )
            presented = headers.get(CSRF_HEADER)
            if not self.access.check_csrf(principal, presented):
                return Refusal(
                    403,
                    "missing or wrong CSRF token: send the dashboard's X-CSRF-Token "
                    "(GET /api/session) or a SharedAccessSignature token with the Manage right",
                    key_name=principal.key_name or None,
                    warn=presented is not None,
                )
            return Grant("loopback" if local else "session", principal.key_name, principal.session)
        return self._read(rule, request, params, local)

    def _read(
        self, rule: Rule, request: Request, params: dict[str, str], local: bool
    ) -> Grant | Refusal:
        headers = request.headers
        if local:
            if not self.local_host(headers.get("host", "")):
                return Refusal(403, "Host header is not a loopback name")
            return Grant("loopback")
        principal = self.access.session(headers, self.clock())
        if principal is not None:
            return Grant("session", principal.key_name, principal.session)
        auth = headers.get("authorization", "")
        if auth[:6].lower() == "basic ":
            return self._basic(auth[6:], rule.locate(request, params))
        if auth:
            return self._token(auth, rule.locate(request, params), manage=False)
        return Refusal(
            401,
            "login required: a SharedAccessSignature token, HTTP Basic with a Manage key, or "
            "a dashboard session (/login)",
            warn=False,
        )

    # ------------------------------------------------------------------ credentials
    def _candidates(self, resource: Resource) -> list[NamespaceKeys]:
        if resource.namespace is None:
            return list(self.namespaces.values())
        ns = self.namespaces.get(resource.namespace.lower())
        return [ns] if ns is not None else []

    def _basic(self, encoded: str, resource: Resource) -> Grant | Refusal:
        try:
            user, _, password = base64.b64decode(encoded.strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return Refusal(401, "malformed HTTP Basic credentials")
        for ns in self._candidates(resource):
            key = ns.keys.get(user)
            if key is not None and "Manage" in ns.rights.get(user, frozenset()):
                if hmac.compare_digest(key.encode(), password.encode()):
                    return Grant("basic", user)
        return Refusal(
            401, "HTTP Basic: not a key name and key with the Manage right", key_name=user
        )

    def _token(self, auth: str, resource: Resource, *, manage: bool) -> Grant | Refusal:
        """A SharedAccessSignature token in ``Authorization`` that a key of the resource's
        namespace signed, unexpired, whose audience covers the resource, with ``Manage`` when
        the request changes something."""
        if not auth:
            return Refusal(401, "MissingToken: The authorization header was not found.", warn=False)
        key_name = token_key_name(auth)
        if not auth.startswith(SAS_PREFIX):
            return Refusal(401, "InvalidSignature: not a SharedAccessSignature token.")
        candidates = self._candidates(resource)
        if not candidates:
            return Refusal(
                401, f"InvalidAudience: no namespace {resource.namespace!r}.", key_name=key_name
            )
        refusal: Refusal | None = None
        now = self.clock()
        for ns in candidates:
            try:
                grant = verify_sas_token(auth, ns.keys, now)
            except TokenError as exc:
                kind = "ExpiredToken" if "expired" in exc.description else "InvalidSignature"
                refusal = refusal or Refusal(401, f"{kind}: {exc.description}.", key_name)
                continue
            # The JS admin client signs the whole request URL (query included) as audience.
            scope = grant.scope.split("?", 1)[0].rstrip("/")
            if not covers(scope, resource.path):
                what = f"'{resource.path}'" if resource.path else "the whole namespace"
                refusal = Refusal(
                    401,
                    f"InvalidAudience: The token audience '{scope}' does not cover {what}.",
                    grant.key_name,
                )
                continue
            if manage and "Manage" not in ns.rights.get(grant.key_name, frozenset()):
                refusal = Refusal(
                    401,
                    "Unauthorized access. 'Manage' claim(s) are required to perform this "
                    "operation.",
                    grant.key_name,
                )
                continue
            return Grant("sas", grant.key_name)
        assert refusal is not None
        return refusal
