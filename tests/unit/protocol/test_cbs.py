"""Tests for sbemu.protocol.cbs: SAS token verification and scope checks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse

import pytest

from sbemu.auth.sas import (
    SasGrant,
    TokenError,
    covers,
    make_sas_token,
    normalize_entity_path,
    verify_sas_token,
)

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE+/=base64ish"
KEYS = {KEY_NAME: KEY, "listen-only": "other-key"}
NOW = 1_700_000_000.0
EXPIRY = int(NOW) + 3600


def fields(token: str) -> dict[str, str]:
    body = token[len("SharedAccessSignature ") :]
    return dict(part.split("=", 1) for part in body.split("&"))


def assemble(f: dict[str, str], order=("sr", "sig", "se", "skn")) -> str:
    return "SharedAccessSignature " + "&".join(f"{k}={f[k]}" for k in order if k in f)


# --- normalize_entity_path / covers ------------------------------------------------


@pytest.mark.parametrize(
    "address,expected",
    [
        ("amqps://localhost:5672/Q1", "q1"),
        ("/q1", "q1"),
        ("q1", "q1"),
        ("Q1/", "q1"),
        ("sb://localhost:5673/topic/Subscriptions/s1/$management", "topic/subscriptions/s1"),
        ("sb://localhost/topic/Subscriptions/s1/$Management", "topic/subscriptions/s1"),
        ("amqps://localhost/", ""),
        ("amqps://localhost", ""),
        ("amqp://localhost:5672/$management", ""),
        ("sb://host/q1/$DeadLetterQueue", "q1/$deadletterqueue"),
        ("", ""),
    ],
)
def test_normalize_entity_path(address, expected):
    assert normalize_entity_path(address) == expected


@pytest.mark.parametrize(
    "scope,path,expected",
    [
        ("", "q1", True),
        ("", "", True),
        ("q1", "q1", True),
        ("q1", "q1/$deadletterqueue", True),
        ("topic", "topic/subscriptions/s1", True),
        ("topic/subscriptions/s1", "topic/subscriptions/s1", True),
        ("q1", "q10", False),  # prefix but not on a segment boundary
        ("q1", "q", False),
        ("q1", "", False),
        ("topic/subscriptions/s1", "topic", False),
        ("topic/subscriptions/s1", "topic/subscriptions/s10", False),
    ],
)
def test_covers(scope, path, expected):
    assert covers(scope, path) is expected


# --- verification ------------------------------------------------------------------


def test_make_sas_token_verifies():
    token = make_sas_token("sb://localhost:5672/MyQueue", KEY_NAME, KEY, EXPIRY)
    grant = verify_sas_token(token, KEYS, NOW)
    assert grant == SasGrant(key_name=KEY_NAME, scope="myqueue", expires_at=float(EXPIRY))
    # Python's field order and quote_plus encoding
    assert list(fields(token)) == ["sr", "sig", "se", "skn"]
    assert fields(token)["sr"] == "sb%3A%2F%2Flocalhost%3A5672%2FMyQueue"


def test_token_from_azure_sdk_helper_verifies():
    utils = pytest.importorskip("azure.servicebus._pyamqp.utils")
    resource = "sb://localhost:5672/topic/Subscriptions/sub1"
    token = utils.generate_sas_token(resource, KEY_NAME, KEY, EXPIRY)
    grant = verify_sas_token(token, KEYS, NOW)
    assert grant.key_name == KEY_NAME
    assert grant.scope == "topic/subscriptions/sub1"
    assert grant.expires_at == EXPIRY


def test_token_from_azure_sdk_credential_path_verifies():
    base = pytest.importorskip("azure.servicebus._base_handler")
    access = base._generate_sas_token("sb://localhost/q1", KEY_NAME, KEY)
    grant = verify_sas_token(access.token, KEYS, time.time())
    assert grant.scope == "q1"
    assert grant.expires_at == access.expires_on


def dotnet_style_token(resource: str, key_name: str, key: str, expiry: int) -> str:
    """.NET SharedAccessSignature: lower-cased resource, upper-case escapes, fields reordered."""
    sr = urllib.parse.quote(resource.lower(), safe="")
    sig = base64.b64encode(
        hmac.new(key.encode("utf-8"), f"{sr}\n{expiry}".encode(), hashlib.sha256).digest()
    ).decode()
    return f"SharedAccessSignature sr={sr}&sig={urllib.parse.quote(sig, safe='')}&se={expiry}&skn={key_name}"


def test_dotnet_style_namespace_token_covers_everything():
    token = dotnet_style_token("amqps://LocalHost/", KEY_NAME, KEY, EXPIRY)
    grant = verify_sas_token(token, KEYS, NOW)
    assert grant.scope == ""
    assert covers(grant.scope, "any/entity")


def test_field_order_does_not_matter():
    f = fields(make_sas_token("sb://h/q1", KEY_NAME, KEY, EXPIRY))
    for order in (("skn", "se", "sig", "sr"), ("se", "sr", "skn", "sig")):
        assert verify_sas_token(assemble(f, order), KEYS, NOW).scope == "q1"


def test_raw_sr_text_is_what_is_signed():
    # A signer whose encoding of sr differs (here: '/' left unescaped) must still
    # verify, because the verifier signs the raw sr text, not a re-encoding.
    sr = "sb%3A//localhost/q1"
    sig = base64.b64encode(
        hmac.new(KEY.encode(), f"{sr}\n{EXPIRY}".encode(), hashlib.sha256).digest()
    ).decode()
    token = f"SharedAccessSignature sr={sr}&sig={urllib.parse.quote_plus(sig)}&se={EXPIRY}&skn={KEY_NAME}"
    assert verify_sas_token(token, KEYS, NOW).scope == "q1"


def test_unescaped_plus_in_sig_is_tolerated():
    f = fields(make_sas_token("sb://h/q1", KEY_NAME, KEY, EXPIRY))
    raw_sig = urllib.parse.unquote(f["sig"])
    f["sig"] = raw_sig.replace("=", "%3D")  # '+' and '/' left raw
    assert verify_sas_token(assemble(f), KEYS, NOW).scope == "q1"


def _err(token: str, keys=KEYS, now=NOW) -> TokenError:
    with pytest.raises(TokenError) as info:
        verify_sas_token(token, keys, now)
    assert info.value.status_code == 401
    assert info.value.description and str(info.value) == info.value.description
    return info.value


def test_wrong_key():
    token = make_sas_token("sb://h/q1", KEY_NAME, "not-the-key", EXPIRY)
    assert "signature" in _err(token).description


def test_unknown_key_name():
    token = make_sas_token("sb://h/q1", "nobody", KEY, EXPIRY)
    assert "nobody" in _err(token).description


def test_expired():
    token = make_sas_token("sb://h/q1", KEY_NAME, KEY, EXPIRY)
    assert "expired" in _err(token, now=EXPIRY).description  # se <= now
    assert "expired" in _err(token, now=EXPIRY + 1).description
    assert verify_sas_token(token, KEYS, EXPIRY - 0.5).expires_at == EXPIRY


def test_expired_in_azures_words():
    # the Go SDK's live tests look for Azure's description of an expired token
    token = make_sas_token("sb://h/q1", KEY_NAME, KEY, 1_700_000_000)
    description = _err(token, now=1_700_000_001).description
    assert description == (
        "ExpiredToken: The token is expired. Expiration time: '2023-11-14 22:13:20Z'"
    )


@pytest.mark.parametrize(
    ("sr", "scope"),
    [
        ("localhost", ""),  # Go's CreateConnectionStringWithSAS: sr = the namespace FQDN
        ("myns.servicebus.windows.net", ""),
        ("localhost:5671/q1", "q1"),
        ("sb://localhost/q1", "q1"),
    ],
)
def test_an_sr_without_a_scheme_starts_with_the_host(sr, scope):
    token = make_sas_token(sr, KEY_NAME, KEY, EXPIRY)
    assert verify_sas_token(token, KEYS, NOW).scope == scope


def test_tampered_sr_and_se():
    f = fields(make_sas_token("sb://h/q1", KEY_NAME, KEY, EXPIRY))
    g = dict(f, sr=urllib.parse.quote_plus("sb://h/q2"))
    _err(assemble(g))
    g = dict(f, sr=f["sr"].lower())  # same resource, different raw text: signature breaks
    _err(assemble(g))
    g = dict(f, se=str(EXPIRY + 100))
    _err(assemble(g))


@pytest.mark.parametrize(
    "token",
    [
        "",
        "Bearer abc",
        "SharedAccessSignature ",
        "SharedAccessSignature sr=a&sig=b&se=1",  # no skn
        "SharedAccessSignature sr=a&sig=b&skn=k",  # no se
        "SharedAccessSignature sr=a&se=1&skn=k",  # no sig
        "SharedAccessSignature sig=b&se=1&skn=k",  # no sr
        "SharedAccessSignature sr=a&sig=b&se=soon&skn=RootManageSharedAccessKey",
        "SharedAccessSignature sr=a&sig=b&se=-5&skn=RootManageSharedAccessKey",
        "SharedAccessSignature sr=a&sr=a&sig=b&se=1&skn=RootManageSharedAccessKey",
        "SharedAccessSignature sr&sig=b&se=1&skn=RootManageSharedAccessKey",
        "SharedAccessSignature sr=a&sig=%FF%FE&se=9999999999&skn=RootManageSharedAccessKey",
    ],
)
def test_malformed(token):
    _err(token)


def test_non_string_token():
    _err(b"SharedAccessSignature sr=a")  # type: ignore[arg-type]


def test_grant_is_frozen():
    grant = verify_sas_token(make_sas_token("sb://h/q1", KEY_NAME, KEY, EXPIRY), KEYS, NOW)
    with pytest.raises(AttributeError):
        grant.scope = ""  # type: ignore[misc]
