"""Certificates for a throwaway control plane: one CA, the API server's serving certificate,
client certificates for each component, and the service-account signing key.

Everything is generated fresh for each cluster (keys never leave its state folder), so no
secret is committed and two clusters never trust each other.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)  # a test cluster lives minutes; a week is ample


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys generate in microseconds, unlike RSA, which keeps a cold start fast.
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    path.chmod(0o600)


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clock skew
        .not_valid_after(now + VALIDITY)
    )


class CertificateAuthority:
    """A CA that signs serving and client certificates into one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = _new_key()
        self.name = _name("pagoda-e2e-ca")
        cert = (
            _builder(self.name, self.name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pair = self._save("ca", cert, self._key)

    def _save(self, stem: str, cert: x509.Certificate, key) -> KeyPair:
        pair = KeyPair(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def _issue(self, stem: str, subject: x509.Name, usage, sans=None) -> KeyPair:
        key = _new_key()
        builder = _builder(subject, self.name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return self._save(stem, builder.sign(self._key, hashes.SHA256()), key)

    def serving(self, stem: str, hosts: list[str]) -> KeyPair:
        """A server certificate valid for `hosts` (IP addresses and DNS names)."""
        sans = [_san(host) for host in hosts]
        return self._issue(stem, _name(hosts[0]), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, stem: str, user: str, group: str | None = None) -> KeyPair:
        """A client certificate: the API server reads CN as the user and O as a group."""
        return self._issue(stem, _name(user, group), ExtendedKeyUsageOID.CLIENT_AUTH)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def service_account_keys(folder: Path) -> KeyPair:
    """The key pair the API server signs service-account tokens with (`cert` is the
    public key in PEM, which is what --service-account-key-file takes)."""
    key = _new_key()
    pair = KeyPair(folder / "sa.pub", folder / "sa.key")
    _write_key(key, pair.key)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pair.cert.write_bytes(pub)
    return pair
