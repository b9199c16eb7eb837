"""Test certificates: self-signed, for localhost and 127.0.0.1, with a chosen lifetime."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def make_certificate(directory: Path, *, days: float) -> tuple[Path, Path, datetime.datetime]:
    """A self-signed certificate for localhost and 127.0.0.1 that expires in `days`."""
    key = ec.generate_private_key(ec.SECP256R1())
    # A subject of its own: a client trusting two test certificates matches issuers by name.
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"mcp-gateway test {x509.random_serial_number():x}"[:64])])
    now = datetime.datetime.now(datetime.UTC)
    not_after = (now + datetime.timedelta(days=days)).replace(microsecond=0)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path, not_after
