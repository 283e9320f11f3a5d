"""``self_signed`` (``web/tls.py``) on a folder: what it writes, what it reuses, what it
replaces, and the links it refuses to follow."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from procession.model.errors import InvalidArgument
from procession.web.tls import CERT, KEY, kept_in, self_signed


def test_self_signed_keeps_its_pair_and_replaces_one_unfit_saying_why(tmp_path: Path) -> None:
    folder = tmp_path / "ws.db.web"
    said: list[str] = []
    cert_file, key_file, fingerprint = self_signed(folder, ["192.0.2.7", "Phone.Example"], said.append)
    assert (cert_file, key_file) == (folder / CERT, folder / KEY) and said == []
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)
    assert cert.subject == cert.issuer and cert.public_key() == key.public_key()
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("192.0.2.7")]
    assert names.get_values_for_type(x509.DNSName) == ["phone.example"]
    assert timedelta(days=700) < cert.not_valid_after_utc - datetime.now(UTC) < timedelta(days=760)
    assert fingerprint == hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest().hex(":").upper()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and stat.S_IMODE(os.stat(key_file).st_mode) == 0o600

    assert self_signed(folder, ["192.0.2.7"], said.append)[2] == fingerprint and said == []  # kept: it covers it
    moved = self_signed(folder, ["192.0.2.8"], said.append)[2]
    assert moved != fingerprint and said == [f"TLS: the certificate kept in {folder} is not for 192.0.2.8: a new"
                                             " one is made (a device that accepted the old one will ask again)"]
    other = ec.generate_private_key(ec.SECP256R1())
    key_file.write_bytes(other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    assert self_signed(folder, ["192.0.2.8"], said.append)[2] != moved and "is not its key's" in said[-1]
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert_file.write_bytes(_ending(key, "192.0.2.8", days=10).public_bytes(serialization.Encoding.PEM))
    self_signed(folder, ["192.0.2.8"], said.append)
    assert "is valid only until" in said[-1] and len(said) == 3
    cert_file.unlink()
    self_signed(folder, ["192.0.2.8"], said.append)
    assert "has lost its certificate" in said[-1] and len(said) == 4


def test_self_signed_follows_no_link_and_says_in_one_line_what_it_cannot_do(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked.web").symlink_to(tmp_path / "real")
    with pytest.raises(InvalidArgument, match="linked.web is a symbolic link: it is not followed"):
        self_signed(tmp_path / "linked.web", ["192.0.2.7"], print)
    assert list((tmp_path / "real").iterdir()) == []
    folder = tmp_path / "ws.db.web"
    self_signed(folder, ["192.0.2.7"], print)
    (folder / CERT).unlink()
    (folder / CERT).symlink_to(tmp_path / "real" / "planted.pem")
    with pytest.raises(InvalidArgument, match=f"{CERT} is a symbolic link"):
        self_signed(folder, ["192.0.2.7"], print)
    assert not (tmp_path / "real" / "planted.pem").exists()
    (tmp_path / "taken.web").write_text("a file")
    with pytest.raises(InvalidArgument, match="cannot keep a TLS certificate in .*taken.web: Not a directory"):
        self_signed(tmp_path / "taken.web", ["192.0.2.7"], print)


def test_the_certificate_is_kept_beside_the_workspace_or_per_database_for_postgresql(tmp_path: Path) -> None:
    assert kept_in(tmp_path / "ws.db") == tmp_path / "ws.db.web"
    one = kept_in("postgresql://me@db.example:6543/work?password=secret")
    two = kept_in("postgresql://me@db.example/play")
    assert one.parent == two.parent and one.parent.name == "web"
    assert (one.name, two.name) == ("db.example_6543_work", "db.example_5432_play")  # no password in a name


def _ending(key: ec.EllipticCurvePrivateKey, address: str, days: int) -> x509.Certificate:
    """A certificate of ``key`` for ``address`` that ends in ``days``."""
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "procession web")])
    now = datetime.now(UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + timedelta(days))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
