"""The web face off loopback: served over TLS with a self-signed certificate made once and kept
(``web/tls.py``), as a phone meets it. A real server (the CLI's own command) on an address of
this machine off loopback, spoken to over TLS by a client that does not trust the certificate
(refused) and by one that trusts the kept file (it pairs); the fingerprint printed is the served
certificate's; a second start serves the very same one, a start at another address a new one
(and says so). ``self_signed`` itself on a folder: what it writes, what it reuses, what it
replaces, and the links it refuses to follow."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import HANG_S
from procession.model.errors import InvalidArgument
from procession.web import loopback
from procession.web.tls import CERT, KEY, kept_in, self_signed
from support import netns
from test_web import Served, made

FINGERPRINT = re.compile(r"fingerprint is ((?:[0-9A-F]{2}:){31}[0-9A-F]{2}): check")


@pytest.fixture
def away() -> str:
    """An IPv4 address of one of this machine's interfaces off loopback: where a phone on its
    network would reach it, the one its default route leaves from where ``ip`` says which (a
    page served on every address names it first)."""
    routed = subprocess.run(["ip", "-j", "route", "get", "192.0.2.1"], capture_output=True, text=True) \
        if shutil.which("ip") else None
    if routed is not None and routed.returncode == 0 and json.loads(routed.stdout)[0].get("prefsrc"):
        return str(json.loads(routed.stdout)[0]["prefsrc"])
    for addresses in psutil.net_if_addrs().values():
        for found in addresses:
            if found.family == socket.AF_INET:
                ip = ipaddress.ip_address(found.address)
                if not ip.is_loopback and not ip.is_link_local:
                    return found.address
    pytest.skip("this machine has no IPv4 address off loopback to serve at")


def test_served_on_every_address_it_names_first_where_the_default_route_leaves(tmp_path: Path) -> None:
    """Served on every address (``0.0.0.0``), the link (and its QR code) names the address the
    machine's default route leaves from, where a phone on its network reaches it, though a
    container bridge's or a VPN's may sort before it; the others are said after. In a network
    namespace of its own: a link whose address sorts first, and the one the default route takes."""
    why = netns.available()
    if why:
        if os.environ.get("PROCESSION_REQUIRE_NETNS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    db = made(tmp_path / "ws.db")
    with netns.Network() as net:
        net.ip("link", "add", "routed", "type", "veth", "peer", "name", "bridge")
        net.ip("addr", "add", "10.9.0.1/24", "dev", "routed")
        net.ip("addr", "add", "10.1.0.1/24", "dev", "bridge")
        for link in ("routed", "bridge"):
            net.ip("link", "set", link, "up")
        net.ip("route", "add", "default", "via", "10.9.0.254", "dev", "routed")
        served = Served(db, "--listen", "0.0.0.0", "--pair", "phone", within=net.prefix())
        try:
            assert served.address.startswith("https://10.9.0.1:") and served.link.startswith("https://10.9.0.1:")
            assert "also at https://10.1.0.1:" in served.line and "https://127.0.0.1:" in served.line
        finally:
            served.stop()


def served_fingerprint(host: str, address: str) -> str:
    """The SHA-256 fingerprint of the certificate the server at ``address`` shows, reached at ``host``."""
    pem = ssl.get_server_certificate((host, int(address.rsplit(":", 1)[1])), timeout=HANG_S)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).digest().hex(":").upper()


def printed(served: Served) -> str:
    """The fingerprint the server printed before it served."""
    [told] = [line for line in served.said if line.startswith("TLS: a self-signed certificate")]
    found = FINGERPRINT.search(told)
    assert found, told
    return found[1]


def test_off_loopback_it_serves_tls_with_a_certificate_it_makes_once_and_keeps(tmp_path: Path, away: str) -> None:
    db = made(tmp_path / "ws.db")
    folder = Path(f"{db}.web")
    served = Served(db, "--listen", away, "--pair", "phone")
    try:
        assert served.address.startswith(f"https://{away}:") and served.link.startswith(f"{served.address}/pair#")
        fingerprint = printed(served)
        assert f"kept in {folder})" in served.said[0] and served_fingerprint(away, served.address) == fingerprint
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            served.client().get("/")  # a client that trusts only the public authorities
        trusting = ssl.create_default_context(cafile=folder / CERT)
        phone, _ = served.paired(verify=trusting)
        assert phone.get("/api/state").json()["device"]["name"] == "phone"
        assert all(cookie.secure for cookie in phone.cookies.jar)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(folder / KEY).st_mode) == 0o600
    finally:
        served.stop()
    again = Served(db, "--listen", away)
    try:
        assert printed(again) == fingerprint == served_fingerprint(away, again.address)  # the one accepted before
        assert not [line for line in again.said if "a new one" in line]
        with again.client(trusting) as client:
            assert client.get("/api/state").status_code == 401  # over TLS, trusted; the cookie is the other client's
    finally:
        again.stop()
    everywhere = Served(db, "--listen", "0.0.0.0", "--pair", "laptop")  # every address of this machine
    try:
        [told] = [line for line in everywhere.said if "a new one is made" in line]
        missing = told.split(f"the certificate kept in {folder} is not for ", 1)[1].split(": a new one is made")[0]
        assert "127.0.0.1" in missing.split(", ")  # (and the machine's other addresses: a bridge, a veth, ...)
        assert everywhere.address.startswith(f"https://{away}:") and "https://127.0.0.1:" in everywhere.line.split("also at")[1]
        assert printed(everywhere) != fingerprint and printed(everywhere) == served_fingerprint(away, everywhere.address)
        trusting = ssl.create_default_context(cafile=folder / CERT)
        laptop, _ = everywhere.paired(verify=trusting)
        assert laptop.get("/api/state").status_code == 200  # at the address the link names
        port = everywhere.address.rsplit(":", 1)[1]
        cookie = {"Cookie": f"procession_device={laptop.cookies['procession_device']}"}
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trusting, headers=cookie) as local:
            assert local.get("/api/state").status_code == 200  # and at another of the machine's, as the certificate
        rebound = laptop.get("/api/state", headers={"Host": f"evil.example:{port}"})
        assert rebound.status_code == 403  # a name that is none of them
    finally:
        everywhere.stop()


def test_a_certificate_given_is_served_as_is_and_plain_http_only_when_asked(tmp_path: Path, away: str) -> None:
    db = made(tmp_path / "ws.db")
    cert, key, fingerprint = self_signed(tmp_path / "own", [away], print)
    given = Served(db, "--listen", away, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert given.address.startswith("https://") and served_fingerprint(away, given.address) == fingerprint
        assert not [line for line in given.said if line.startswith("TLS:")]
    finally:
        given.stop()
    plain = Served(db, "--listen", away, "--insecure-plain-http")
    try:
        assert plain.address.startswith(f"http://{away}:")
        assert plain.client().get("/").status_code == 200
    finally:
        plain.stop()
    assert not Path(f"{db}.web").exists()  # neither made a certificate


def test_a_link_planted_at_the_key_is_refused_in_one_line_not_followed(tmp_path: Path) -> None:
    db = made(tmp_path / "ws.db")
    target = tmp_path / "elsewhere"
    target.write_text("not a key")
    os.mkdir(f"{db}.web", 0o700)
    os.symlink(target, f"{db}.web/{KEY}")
    refused = subprocess.run([sys.executable, "-m", "procession", "--db", str(db), "web", "--listen", "0.0.0.0",
                              "--port", "0"], capture_output=True, text=True, timeout=HANG_S)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"{db}.web/{KEY} is a symbolic link: it is not followed" in line
    assert target.read_text() == "not a key" and not refused.stdout


def test_loopback_is_any_loopback_address_or_localhost() -> None:
    assert all(map(loopback, ["127.0.0.1", "127.0.0.2", "127.255.0.1", "::1", "localhost"]))
    assert not any(map(loopback, ["0.0.0.0", "::", "192.0.2.2", "10.0.0.1", "fd00::1", "example.org"]))


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
