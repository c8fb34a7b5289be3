"""The dashboard's login sessions and the CSRF token its POSTs carry.

Bound beyond loopback, the dashboard asks for a SAS key of a namespace with the Manage right:
the login form sets a signed, HttpOnly, SameSite=Strict session cookie; the CSRF token is bound
to that session (on loopback, to the empty session), and only a page served by us can read it.
Which request needs what is decided in one place, sbemu.admin.policy.

Pure: the caller passes `now` (Unix seconds) in; the signing secret is random per process, so a
restart logs everybody out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..auth.rejections import RejectionLog

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
        # refused credentials of this admin port, logged rate-limited (the policy, the login form)
        self.rejections = RejectionLog("admin", logging.getLogger("sbemu.admin.access"))

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
    def session(self, headers: Mapping[str, str], now: float) -> Principal | None:
        """The principal of a request's valid session cookie, else None (the access policy,
        sbemu.admin.policy, decides when one is needed)."""
        cookie = cookies(headers.get("cookie", "")).get(COOKIE_NAME)
        if cookie is not None:
            name = self.session_key_name(cookie, now)
            if name is not None:
                return Principal(name, cookie)
        return None

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
