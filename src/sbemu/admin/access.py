"""Who may use the dashboard and /metrics, and the CSRF token every POST carries.

On a loopback address nobody logs in (like Microsoft's emulator, the machine's user is trusted),
but the Host header must name a loopback host (a DNS-rebinding page cannot reach us) and every
POST carries the CSRF token, which only a page served by us can read. Bound to any other
address, the dashboard asks for a SAS key of the namespace with the Manage right: the login form
sets a signed, HttpOnly, SameSite=Strict session cookie; /metrics also takes HTTP Basic
(key name / key, what Prometheus' `basic_auth` sends) or a SharedAccessSignature token.

Pure: the caller passes `now` (Unix seconds) in; the signing secret is random per process, so a
restart logs everybody out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..sas import SAS_PREFIX, TokenError, verify_sas_token

COOKIE_NAME = "sbemu_session"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 12 * 3600
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class Principal:
    """An authenticated dashboard user (key name; '' when no login is required)."""

    key_name: str
    session: str  # the session cookie value ('' without login): the CSRF token is bound to it


class Access:
    """Login, session cookies and CSRF tokens for one admin listener."""

    def __init__(
        self,
        bind_host: str,
        manage_keys: Mapping[str, str] | Iterable[tuple[str, str]],
        secret: bytes | None = None,
    ) -> None:
        self.login_required = not is_loopback(bind_host)
        pairs = manage_keys.items() if isinstance(manage_keys, Mapping) else manage_keys
        # key name -> keys of the policies with the Manage right (namespaces may reuse a name)
        self._keys: dict[str, list[str]] = {}
        for name, key in pairs:
            self._keys.setdefault(name, []).append(key)
        self._secret = secret if secret is not None else os.urandom(32)

    # ------------------------------------------------------------------ keys
    def check_key(self, key_name: str, key: str) -> bool:
        """A namespace SAS key with the Manage right."""
        return any(
            hmac.compare_digest(k.encode(), key.encode()) for k in self._keys.get(key_name, ())
        )

    # ------------------------------------------------------------------ sessions
    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())

    def new_session(self, key_name: str, now: float) -> str:
        """A cookie value: key name and expiry, signed with the process secret."""
        payload = f"{_b64(key_name.encode())}.{int(now) + SESSION_SECONDS}"
        return f"{payload}.{self._sign(payload)}"

    def session_key_name(self, cookie: str, now: float) -> str | None:
        """The key name of a valid, unexpired session cookie, else None."""
        parts = cookie.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        payload = f"{parts[0]}.{parts[1]}"
        if not hmac.compare_digest(self._sign(payload), parts[2]) or int(parts[1]) <= now:
            return None
        try:
            name = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return name if name in self._keys else None

    def csrf_token(self, principal: Principal) -> str:
        """The token POSTs of this principal must carry (bound to its session)."""
        return self._sign("csrf|" + principal.session)

    def check_csrf(self, principal: Principal, token: str | None) -> bool:
        """Whether a POST's token matches its principal's."""
        return token is not None and hmac.compare_digest(self.csrf_token(principal), token)

    # ------------------------------------------------------------------ requests
    def principal(self, headers: Mapping[str, str], now: float) -> Principal | None:
        """Who made a request (None: not logged in where a login is required)."""
        if not self.login_required:
            return Principal("", "")
        cookie = cookies(headers.get("cookie", "")).get(COOKIE_NAME)
        if cookie is not None:
            name = self.session_key_name(cookie, now)
            if name is not None:
                return Principal(name, cookie)
        return None

    def scraper(self, headers: Mapping[str, str], now: float) -> bool:
        """/metrics: a session, HTTP Basic with a Manage key, or a SAS token."""
        if self.principal(headers, now) is not None:
            return True
        auth = headers.get("authorization", "")
        if auth[:6].lower() == "basic ":
            try:
                user, _, password = base64.b64decode(auth[6:].strip()).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return self.check_key(user, password)
        if auth.startswith(SAS_PREFIX):
            for i in range(max((len(v) for v in self._keys.values()), default=0)):
                keys = {name: v[i] for name, v in self._keys.items() if len(v) > i}
                try:
                    verify_sas_token(auth, keys, now)
                except TokenError:
                    continue
                return True
        return False

    def host_allowed(self, headers: Mapping[str, str]) -> bool:
        """On loopback, the Host header must name a loopback host (DNS-rebinding guard)."""
        if self.login_required:
            return True
        host = headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if host.startswith("[") and "]" in host:
            name = host[: host.index("]") + 1]
        return is_loopback(name.lower())

    @staticmethod
    def same_origin(headers: Mapping[str, str]) -> bool:
        """A POST a browser sent from a page of ours: its Origin (when sent) names our Host."""
        origin = headers.get("origin")
        if origin is None:
            return True  # not a browser (curl, scripts): the CSRF token still applies
        return urlsplit(origin).netloc.lower() == headers.get("host", "").lower()

    def cookie_header(self, session: str, secure: bool) -> str:
        """Set-Cookie value for a new session."""
        flags = "; Secure" if secure else ""
        return (
            f"{COOKIE_NAME}={session}; Path=/; HttpOnly; SameSite=Strict; "
            f"Max-Age={SESSION_SECONDS}{flags}"
        )


def cookies(header: str) -> dict[str, str]:
    """Parse a Cookie header (name=value pairs separated by ';')."""
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name:
            out.setdefault(name, value)
    return out
