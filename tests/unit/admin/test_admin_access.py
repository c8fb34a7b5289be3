"""Dashboard sessions: SAS-key login cookies and CSRF tokens (the rules: test_admin_policy.py)."""

from __future__ import annotations

import base64

import pytest

from sbemu.admin.access import COOKIE_NAME, Access, Principal, cookies, is_loopback

KEYS = {"RootManageSharedAccessKey": "SAS_KEY_VALUE"}
NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.20", False),
        ("::", False),
        ("example.com", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert Access(host, KEYS).login_required is (not loopback)


def test_remote_binding_requires_a_session_cookie() -> None:
    access = Access("0.0.0.0", KEYS)
    assert access.session({}, NOW) is None
    assert not access.check_key("RootManageSharedAccessKey", "wrong")
    assert not access.check_key("nobody", "SAS_KEY_VALUE")
    assert access.check_key("RootManageSharedAccessKey", "SAS_KEY_VALUE")
    session = access.new_session("RootManageSharedAccessKey", NOW)
    headers = {"cookie": f"other=1; {COOKIE_NAME}={session}"}
    principal = access.session(headers, NOW + 60)
    assert principal is not None and principal.key_name == "RootManageSharedAccessKey"
    # expired
    assert access.session(headers, NOW + 13 * 3600) is None
    # tampered: another key name with the old signature
    name, expiry, sig = session.split(".")
    forged = base64.urlsafe_b64encode(b"someoneelse").rstrip(b"=").decode() + f".{expiry}.{sig}"
    assert access.session({"cookie": f"{COOKIE_NAME}={forged}"}, NOW) is None
    longer = f"{name}.{int(expiry) + 999999}.{sig}"
    assert access.session({"cookie": f"{COOKIE_NAME}={longer}"}, NOW) is None
    # signed by another process (another secret): refused
    other = Access("0.0.0.0", KEYS)
    assert other.session(headers, NOW) is None
    cookie = access.cookie_header(session, secure=False)
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert "Secure" in access.cookie_header(session, secure=True)


def test_csrf_token_is_bound_to_the_session() -> None:
    access = Access("0.0.0.0", KEYS)
    a = Principal("RootManageSharedAccessKey", access.new_session("RootManageSharedAccessKey", NOW))
    b = Principal(
        "RootManageSharedAccessKey", access.new_session("RootManageSharedAccessKey", NOW + 1)
    )
    token = access.csrf_token(a)
    assert access.check_csrf(a, token)
    assert not access.check_csrf(b, token)
    assert not access.check_csrf(a, None)
    assert not access.check_csrf(a, "")
    loop = Access("127.0.0.1", KEYS)
    anon = Principal("", "")
    assert loop.check_csrf(anon, loop.csrf_token(anon))
    assert not loop.check_csrf(anon, access.csrf_token(anon))  # another process' secret


def test_cookie_header_parsing() -> None:
    assert cookies("a=1; b=two; junk; c=") == {"a": "1", "b": "two", "c": ""}
    assert cookies("") == {}
