"""Throw-away TLS certificates for tests: a certificate authority made at test time and the
server certificates it signs (``cryptography``; EC P-256, valid for a day).

    ca = CertificateAuthority.create()
    server = ca.issue()                  # for 127.0.0.1 and localhost
    ca.write(tmp_path / "ca.pem")        # a CA file for a client (ssl.ca.location), or
    ca.cert_pem                          # its PEM text (ssl.ca.pem)

Nothing is kept anywhere but where the caller writes it.
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

from tocsin.clock import SystemClock

__all__ = ["CertificateAuthority", "ServerCertificate"]

_VALID_FOR = datetime.timedelta(days=1)
_SKEW = datetime.timedelta(minutes=5)
"""Certificates are valid from a little before now: a peer whose clock is behind accepts them."""
_LOOPBACK = ("127.0.0.1", "localhost")


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerCertificate:
    """A server's certificate and its private key, PEM text."""

    cert_pem: str
    key_pem: str

    def write(self, folder: Path) -> tuple[Path, Path]:
        """``server.pem`` and ``server.key`` in ``folder`` (the key readable by its owner
        only): the certificate file and the key file, as :mod:`ssl` loads them."""
        cert, key = folder / "server.pem", folder / "server.key"
        cert.write_text(self.cert_pem)
        key.touch(0o600)
        key.write_text(self.key_pem)
        return cert, key


@dataclass(frozen=True, kw_only=True, slots=True)
class CertificateAuthority:
    """A self-signed CA: its certificate (what clients trust) and its key (what signs)."""

    name: str
    cert_pem: str
    key_pem: str

    @classmethod
    def create(cls, name: str = "Tocsin test CA") -> CertificateAuthority:
        """A new CA called ``name``, with a new key."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name)
        cert = (_builder(subject, subject, key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=False, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                               critical=False)
                .sign(key, hashes.SHA256()))
        return cls(name=name, cert_pem=_cert_pem(cert), key_pem=_key_pem(key))

    def issue(self, hosts: tuple[str, ...] = _LOOPBACK) -> ServerCertificate:
        """A server certificate signed by this CA, for ``hosts`` (IP addresses and DNS
        names, each a subject alternative name; the first is also the common name)."""
        ca_key = serialization.load_pem_private_key(self.key_pem.encode(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem.encode())
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (_builder(_name(hosts[0]), ca_cert.subject, key.public_key())
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]),
                               critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256()))
        return ServerCertificate(cert_pem=_cert_pem(cert), key_pem=_key_pem(key))

    def write(self, path: Path) -> Path:
        """The CA's certificate written to ``path`` (a CA file for clients); ``path``."""
        path.write_text(self.cert_pem)
        return path


def _builder(subject: x509.Name, issuer: x509.Name,
             public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = SystemClock().now()  # certificates are checked against the real time
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW).not_valid_after(now + _VALID_FOR))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()
