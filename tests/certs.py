"""Certificates made at run time for the TLS tests: a CA, certificates it signs (a server's for
127.0.0.1 and localhost, a client's), and another CA that nobody trusts."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert_file: Path
    key_file: Path


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class Authority:
    """A CA that writes its certificate and the ones it signs under `folder`."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        folder.mkdir(parents=True, exist_ok=True)
        self.cert_file = folder / f"{name}.crt"
        self.cert_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, name: str, *, server: bool, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    ) -> Pair:
        """A certificate for `name`: a server's (for `hosts`, IP addresses or DNS names) or a
        client's; written as `name.crt` and `name.key` in the CA's folder."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if server:
            names = [_general_name(h) for h in hosts]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return pair


@dataclass(frozen=True)
class Pki:
    """What the TLS tests use: the CA, a server certificate and a client certificate it signed,
    and a client certificate from another CA."""

    ca: Authority
    server: Pair
    client: Pair
    other_ca: Authority
    other_client: Pair


def make_pki(folder: Path) -> Pki:
    ca = Authority(folder / "ca", "ca")
    other = Authority(folder / "other", "other-ca")
    return Pki(
        ca,
        ca.issue("server", server=True),
        ca.issue("client", server=False),
        other,
        other.issue("other-client", server=False),
    )


def replace(src: Path, dst: Path) -> None:
    """Put `src`'s content at `dst` the way Kubernetes updates a mounted Secret: a new file
    moved into place in one step."""
    tmp = dst.with_name(dst.name + ".new")
    tmp.write_bytes(src.read_bytes())
    tmp.replace(dst)
