"""A local certificate authority and the admin port's server certificate, mkcert style.

The Python and JS admin clients speak HTTPS to the admin port whatever the connection string says,
and clients without the emulator flag speak AMQPS (port 5671) or WebSockets over TLS (``wss``),
so those ports answer TLS with a certificate for ``localhost``, ``127.0.0.1``, ``::1`` and Azure's
``*.servicebus.windows.net`` (and the China and US Government clouds' suffixes: a hosts-file line
``127.0.0.1 <namespace>.servicebus.windows.net`` then serves code that builds Azure's names itself)
signed by a CA generated on first start into ``<data dir>/tls/`` (``rootCA.pem`` + ``rootCA-key.pem``, and
``localhost.pem`` + ``localhost-key.pem``: mkcert's file names). Users trust ``rootCA.pem`` once
(``sbemu cert`` prints its path). Files are reused across restarts; the server certificate is
re-issued when it is missing, expires within 30 days, was not signed by the CA on disk or names
other hosts (an older sbemu's).

``SSL_CERT_FILE`` replaces a program's whole trust store, so pointing it at ``rootCA.pem`` alone
breaks every other HTTPS call of that shell: :func:`write_ca_bundle` writes the system's CAs plus
ours into one PEM file (``sbemu cert --bundle`` and the pytest plugin use it).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..atomicfile import atomic_write

__all__ = [
    "CA_FILE",
    "ca_path",
    "ensure_certificates",
    "server_ssl_context",
    "system_ca_file",
    "write_ca_bundle",
]

TLS_DIR = "tls"
CA_FILE = "rootCA.pem"
CA_KEY_FILE = "rootCA-key.pem"
CERT_FILE = "localhost.pem"
KEY_FILE = "localhost-key.pem"
CA_DAYS = 3650
CERT_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)
# Azure's host names too (one label under each cloud's suffix: <namespace>.servicebus.windows.net),
# for code that builds them itself and a hosts-file line that maps them to loopback
NAMES = (
    "localhost",
    "*.servicebus.windows.net",
    "*.servicebus.chinacloudapi.cn",
    "*.servicebus.usgovcloudapi.net",
)
ADDRESSES = ("127.0.0.1", "::1")


def ca_path(data_dir: Path) -> Path:
    return Path(data_dir) / TLS_DIR / CA_FILE


def _write_private(path: Path, data: bytes, mode: int) -> None:
    atomic_write(path, data, mode)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _new_ca(folder: Path, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sbemu development CA"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"sbemu local CA {os.uname().nodename}"[:64]),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(folder / CA_KEY_FILE, _key_pem(key), 0o600)
    _write_private(folder / CA_FILE, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert, key


def _alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """localhost, 127.0.0.1 and ::1, plus the server's own bind address (``--host``) when it
    is another: an address as an IP entry, a name as a DNS entry; wildcards add nothing."""
    names, addresses = list(NAMES), list(ADDRESSES)
    for host in hosts:
        host = host.strip().strip("[]").lower()
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            if host and host not in names:
                names.append(host)
            continue
        if not ip.is_unspecified and str(ip) not in addresses:
            addresses.append(str(ip))
    return [x509.DNSName(n) for n in names] + [
        x509.IPAddress(ipaddress.ip_address(a)) for a in addresses
    ]


def _new_server_cert(
    folder: Path,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    alt: list[x509.GeneralName],
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sbemu development certificate"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                ]
            )
        )
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(folder / KEY_FILE, _key_pem(key), 0o600)
    _write_private(folder / CERT_FILE, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def ensure_certificates(
    data_dir: Path, now: dt.datetime | None = None, hosts: Sequence[str] = ()
) -> tuple[Path, Path, Path]:
    """Create what is missing; (CA file, server certificate file, server key file). The
    server certificate is issued again when it does not name every one of ``hosts`` and the
    names it always carries (an older sbemu's lacks Azure's)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    folder = Path(data_dir) / TLS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    ca_file, ca_key_file = folder / CA_FILE, folder / CA_KEY_FILE
    if ca_file.exists() and ca_key_file.exists():
        ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    else:
        ca, ca_key = _new_ca(folder, now)
    cert_file, key_file = folder / CERT_FILE, folder / KEY_FILE
    alt = _alt_names(hosts)
    renew = not (cert_file.exists() and key_file.exists())
    if not renew:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        renew = cert.not_valid_after_utc - now < RENEW_BEFORE or cert.issuer != ca.subject
        if not renew:
            try:
                cert.verify_directly_issued_by(ca)
            except Exception:  # signature, key type or extension mismatch: re-issue
                renew = True
        if not renew:  # a name missing (another --host, or an older sbemu's without Azure's)
            renew = not set(alt).issubset(_cert_alt_names(cert))
    if renew:
        _new_server_cert(folder, ca, ca_key, now, alt)
    return ca_file, cert_file, key_file


def _cert_alt_names(cert: x509.Certificate) -> set[x509.GeneralName]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return set(ext.value)


def server_ssl_context(
    data_dir: Path, alpn: tuple[str, ...] = ("http/1.1",), hosts: Sequence[str] = ()
) -> ssl.SSLContext:
    """A server-side TLS context with the local certificate (created when missing).

    ``alpn``: the protocols offered (the admin port's HTTP/1.1; none for AMQPS on 5671);
    ``hosts``: the bind address, named by the certificate too (``--host 127.0.0.2``)."""
    _, cert_file, key_file = ensure_certificates(data_dir, hosts=hosts)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def system_ca_file() -> Path | None:
    """The platform's CA bundle: OpenSSL's compiled-in default file (not $SSL_CERT_FILE, which
    may name a bundle of ours already), else certifi's when it is installed, else None."""
    default = ssl.get_default_verify_paths().openssl_cafile
    if default and Path(default).is_file():
        return Path(default)
    try:
        import certifi
    except ImportError:
        return None
    where = Path(certifi.where())
    return where if where.is_file() else None


def write_ca_bundle(ca_file: Path, bundle: Path) -> tuple[Path, Path | None]:
    """Write the system's CAs followed by ``ca_file`` into ``bundle`` (atomically);
    returns (bundle, the system CA file used, or None when none was found)."""
    system = system_ca_file()
    parts = [system.read_text()] if system is not None else []
    parts.append(Path(ca_file).read_text())
    atomic_write(Path(bundle), "\n".join(p.rstrip("\n") + "\n" for p in parts).encode(), 0o644)
    return Path(bundle), system
