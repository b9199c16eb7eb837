"""TLS material: a self-signed certificate generated on first start, or the operator's own
(`mcp-ssl_cert`/`mcp-ssl_key`); and re-reading the files into the live SSL context on reload.

uvicorn builds each worker's `ssl.SSLContext` inside `Config.load()`, in the worker process,
and offers no handle on it. `ReloadableTLSConfig` keeps that context in `ACTIVE_CONTEXTS`
(one per worker process) so a reload can call `load_cert_chain` on it: new handshakes use the
new certificate, open connections keep theirs, no restart.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger("mcp_gateway.tls")
ACTIVE_CONTEXTS: list[ssl.SSLContext] = []


def self_signed_paths(data_dir: Path) -> tuple[Path, Path]:
    return data_dir / "tls" / "cert.pem", data_dir / "tls" / "key.pem"


def ensure_self_signed(data_dir: Path) -> tuple[Path, Path]:
    """Generate a self-signed ECDSA certificate for localhost unless one exists."""
    cert_path, key_path = self_signed_paths(data_dir)
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    # cryptography is imported where it is used: ~10 MiB RSS that a worker never needs (issue 30).
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    hostname = socket.gethostname()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "MCP Gateway self-signed"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "MCP Gateway"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    alt_names = [
        x509.DNSName("localhost"),
        x509.DNSName(hostname),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key_bytes)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def resolve_material(data_dir: Path, cert: str, key: str) -> tuple[Path, Path]:
    """The configured pair, or the generated self-signed one when none is configured."""
    if cert or key:
        if not (cert and key):
            raise ValueError("mcp-ssl_cert and mcp-ssl_key must be set together")
        return Path(cert), Path(key)
    return ensure_self_signed(data_dir)


def load_certificate(cert: Path) -> x509.Certificate:
    """The first (leaf) certificate of a PEM chain file."""
    from cryptography import x509

    return x509.load_pem_x509_certificate(Path(cert).read_bytes())


def certificate_not_after(cert: Path) -> float:
    """The leaf certificate's expiry as a Unix time (exported as mcp_gateway_tls_certificate_not_after_seconds).

    Every worker exports it at start, so it is read with CPython's own decoder of a PEM file's
    first certificate (the `_ssl` module uvicorn has loaded anyway) rather than by importing
    cryptography, ~10 MiB RSS per worker (issue 30). Elsewhere: cryptography, as before."""
    decode = getattr(ssl._ssl, "_test_decode_cert", None)  # type: ignore[attr-defined]
    if decode is None:
        return load_certificate(cert).not_valid_after_utc.timestamp()
    Path(cert).stat()  # a missing file is the OSError it was
    try:
        not_after = decode(str(cert))["notAfter"]
    except ssl.SSLError as exc:  # not a PEM certificate: the ValueError cryptography would raise
        raise ValueError(f"{cert}: not a PEM certificate") from exc
    return float(ssl.cert_time_to_seconds(not_after))


def describe_certificate(cert: Path) -> str:
    """Subject, serial and expiry of the leaf certificate, for logs (no key material)."""
    leaf = load_certificate(cert)
    return (
        f"{leaf.subject.rfc4514_string()} serial {leaf.serial_number:x} not after {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    )


def reload_contexts(cert: Path, key: Path) -> int:
    """Re-read the certificate files into every live context of this process."""
    for context in ACTIVE_CONTEXTS:
        context.load_cert_chain(str(cert), str(key))
    return len(ACTIVE_CONTEXTS)


class ReloadableTLSConfig(uvicorn.Config):
    def load(self) -> None:
        super().load()
        if self.ssl is not None:
            ACTIVE_CONTEXTS.append(self.ssl)
