"""The certificate ``procession web`` serves off loopback when it is given none: self-signed,
made once and kept beside the workspace, so that a phone that accepted it once keeps trusting it
(a new one at each start would teach its user to click through the browser's warning). Its
SHA-256 fingerprint is what that user compares with the one their browser shows before
accepting it.

The folder it is kept in is its owner's only (0700), the key is readable by its owner only from
its first byte (0600), and no file in it is read or written through a symbolic link: one planted
there is refused, not followed.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from procession.model import own_files
from procession.model.errors import InvalidArgument

CERT, KEY = "cert.pem", "key.pem"
#: Two years: Apple's devices refuse a server certificate valid for more than 825 days.
VALID = timedelta(days=730)
#: A kept certificate this close to its end is replaced at a start (a server may run for weeks).
RENEW = timedelta(days=30)
#: How far back a new certificate is valid from: a phone's clock may be a little behind.
SKEW = timedelta(hours=1)


class Unfit(Exception):
    """Why the kept certificate may not be served (the text completes "the certificate kept in
    FOLDER ...")."""


def kept_in(workspace: Path | str) -> Path:
    """Where the certificate of ``workspace`` is kept (``own_files.web``: a run's world never
    holds it)."""
    return own_files.web(workspace)


def self_signed(folder: Path, names: list[str], say: Callable[[str], object]) -> tuple[Path, Path, str]:
    """The certificate and key files kept in ``folder`` for serving at ``names`` (IP addresses or
    DNS names), and the certificate's SHA-256 fingerprint (``AA:BB:...``, as browsers show it).
    The kept pair is reused; one that does not cover ``names``, ends soon, or whose key is not
    the certificate's is replaced by a new pair, and ``say`` is told why in one line."""
    try:
        os.makedirs(folder.parent, exist_ok=True)
        with suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)
            cert_pem, key_pem = _read(fd, CERT), _read(fd, KEY)
            try:
                cert = _kept(cert_pem, key_pem, names)
            except Unfit as why:
                if cert_pem is not None or key_pem is not None:
                    say(f"TLS: the certificate kept in {folder} {why}: a new one is made (a device that accepted"
                        " the old one will ask again)")
                cert = _make(fd, names)
        finally:
            os.close(fd)
    except OSError as exc:
        where = folder / exc.filename if exc.filename in (CERT, KEY) else folder
        if where.is_symlink():
            raise InvalidArgument(f"{where} is a symbolic link: it is not followed (remove it, and a new certificate"
                                  " is made)") from None
        raise InvalidArgument(f"cannot keep a TLS certificate in {folder}: {exc.strerror or exc}") from None
    return folder / CERT, folder / KEY, cert.fingerprint(hashes.SHA256()).hex(":").upper()


def _kept(cert_pem: bytes | None, key_pem: bytes | None, names: list[str]) -> x509.Certificate:
    """The kept certificate, if it may be served at ``names``; else ``Unfit``."""
    if cert_pem is None or key_pem is None:
        raise Unfit(f"has lost its {'certificate' if cert_pem is None else 'key'}")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        covered = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, UnsupportedAlgorithm, x509.ExtensionNotFound):
        raise Unfit("cannot be read") from None
    missing = [name for name in names if _general(name) not in covered]
    if missing:
        raise Unfit(f"is not for {', '.join(missing)}")
    if cert.not_valid_after_utc - datetime.now(UTC) < RENEW:
        raise Unfit(f"is valid only until {cert.not_valid_after_utc:%Y-%m-%d}")
    if _public(cert.public_key()) != _public(key.public_key()):
        raise Unfit("is not its key's")
    return cert


def _make(fd: int, names: list[str]) -> x509.Certificate:
    """A new ECDSA P-256 key and a certificate it signs for ``names``, written into the folder
    ``fd`` (the key first: a start cut off between the two finds a pair that does not match)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "procession web")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - SKEW).not_valid_after(now + VALID)
            .add_extension(x509.SubjectAlternativeName([_general(name) for name in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(fd, KEY, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    _write(fd, CERT, cert.public_bytes(serialization.Encoding.PEM))
    return cert


def _general(name: str) -> x509.GeneralName:
    """``name`` as a subjectAltName entry: an IP address as one (a browser matches an address
    against those only), anything else as a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name.lower())


def _public(key: PublicKeyTypes) -> bytes:
    """A public key's bytes, to compare two."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _read(fd: int, name: str) -> bytes | None:
    """The file ``name`` in the folder ``fd`` (None: there is none), never through a link."""
    try:
        opened = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        return None
    with open(opened, "rb") as file:
        return file.read()


def _write(fd: int, name: str, data: bytes) -> None:
    """Put ``data`` at ``name`` in the folder ``fd``: written beside it first, readable by its
    owner only from its first byte and never through a link, then renamed over it (whatever was
    there, a link included, is replaced, not written through)."""
    beside = f".{name}.{os.getpid()}"
    with suppress(FileNotFoundError):
        os.unlink(beside, dir_fd=fd)
    opened = os.open(beside, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600, dir_fd=fd)
    with open(opened, "wb") as file:
        file.write(data)
    os.replace(beside, name, src_dir_fd=fd, dst_dir_fd=fd)
