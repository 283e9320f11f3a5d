"""A shared workspace over TLS, as the operator's guide sets it up: the server given a certificate
signed by the team's own authority (``ssl=on``), each machine's address saying
``sslmode=verify-full`` and that authority (``sslrootcert``). The right one is used for every
connection, the engine's heartbeat's too; a server whose certificate another authority signed,
or whose name is not the one in the address, is refused in one line, at once (never waited for
as a server that cannot be reached)."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conftest import HANG_S, until
from procession import Workspace
from support.postgres import Server


def _authority(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _served_by(authority: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> tuple[bytes, bytes]:
    """A server certificate for localhost (and 127.0.0.1) that ``authority`` signs, and its key."""
    ca_key, ca = authority
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def tls_server() -> Iterator[tuple[Server, x509.Certificate]]:
    from support.postgres import binaries

    if binaries() is None:
        pytest.skip("PostgreSQL's server is not installed (Debian: apt-get install postgresql)")
    server = Server()
    try:
        authority = _authority("team authority")
        cert, key = _served_by(authority)
        crt, pem = server.own("server.crt", cert, 0o644), server.own("server.key", key)
        server.down()
        server.settings = {"ssl": "on", "ssl_cert_file": str(crt), "ssl_key_file": str(pem)}
        server.up()
        yield server, authority[1]
    finally:
        server.stop()


def procession(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "procession", "--db", url, *args], capture_output=True, text=True,
                          timeout=HANG_S)


async def test_a_workspace_over_verified_tls_and_a_wrong_certificate_refused_at_once(
        tls_server: tuple[Server, x509.Certificate], tmp_path: Path) -> None:
    server, authority = tls_server
    ours = tmp_path / "team-ca.pem"
    ours.write_bytes(_pem(authority))
    url = f"postgresql://procession@localhost:{server.port}/procession?sslmode=verify-full&sslrootcert={ours}"
    spawned = procession(url, "spawn", "over-tls", "--agent", "ops", "--runner", "command:true")
    assert spawned.returncode == 0, spawned.stderr
    engine = subprocess.Popen([sys.executable, "-m", "procession", "--db", url, "run"], stderr=subprocess.PIPE,
                              text=True)
    ws = await Workspace.open(url)
    try:
        await until(lambda: _heard(ws))  # its heartbeat's connection too
        await ws.activate(1)
        await until(lambda: _ran(ws))
        encrypted = server_query(server, "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)"
                                         " WHERE a.application_name LIKE 'procession%' AND NOT s.ssl")
        assert encrypted == "0"  # no connection of ours in the clear
    finally:
        await ws.close()
        engine.terminate()
        engine.wait(timeout=HANG_S)

    other = tmp_path / "other-ca.pem"
    other.write_bytes(_pem(_authority("someone else")[1]))
    for wrong, why in ((url.replace(str(ours), str(other)), "certificate verify failed"),
                       # the same server, by a name its certificate does not hold
                       (url.replace("@localhost:", "@elsewhere.example:") + "&hostaddr=127.0.0.1", "does not match")):
        for args in (("ps",), ("run",)):  # `run` waits for a server that cannot be reached: not for this one
            refused = procession(wrong, *args)
            assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1 and "certificate" in refused.stderr
            assert why in refused.stderr


def server_query(server: Server, sql: str) -> str:
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    return str(row[0]) if row else ""


async def _heard(ws: Workspace) -> bool:
    return any(e["alive"] for e in (await ws.activity())["engines"])


async def _ran(ws: Workspace) -> bool:
    runs = await ws.runs(1)
    return bool(runs) and runs[-1].outcome == "ok"
