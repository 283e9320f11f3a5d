"""``procession web``: the web face, a page for a phone first (what needs you, the sessions, the
safe calls) served beside the workspace to paired devices only (``app``). It runs no engine:
what it changes, the engine of each host does, as for the CLI.

``serve`` binds before it says anything (so that ``--port 0`` says the port it got), on
loopback unless told otherwise; off loopback it serves TLS (a certificate given, or the
self-signed one ``tls`` makes and keeps) unless its caller says, loudly, that it accepts plain
HTTP there.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable

from procession.calls import Workspace

#: How long a stopped server waits for its open streams (a page's never end by themselves).
GRACE_S = 1


def loopback(host: str) -> bool:
    """Whether ``host`` is reached from this machine only: ``localhost``, or a loopback address
    (any of 127.0.0.0/8, ``::1``)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listening(host: str, port: int) -> socket.socket:
    """A socket bound and listening at ``host``:``port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def reached_at(host: str) -> list[str]:
    """The addresses a page served on ``host`` is reached at: ``host`` itself; for every address
    of a family (``0.0.0.0``, ``::``), this machine's own addresses of it now, those off loopback
    first, link-local ones left out (a request naming any other is refused: ``app``)."""
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    if not wildcard:
        return [host]
    import psutil

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    found = {ipaddress.ip_address(a.address) for nic in psutil.net_if_addrs().values() for a in nic
             if a.family == family and "%" not in a.address}
    routed = _routed(family)
    return [str(a) for a in sorted(found, key=lambda a: (a != routed, a.is_loopback, a)) if not a.is_link_local]


def _routed(family: socket.AddressFamily) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address this machine's default route leaves from: where a phone on its network
    reaches it, named first (a container bridge's or a VPN's address may sort before it). The
    kernel's own choice of source for a datagram to an address no other route covers, asked by
    connecting a UDP socket, which sends nothing; None without such a route."""
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("2001:db8::1" if family == socket.AF_INET6 else "192.0.2.1", 9))  # documentation's own
        except OSError:
            return None
        return ipaddress.ip_address(probe.getsockname()[0])


def origins(sock: socket.socket, hosts: list[str], tls: bool) -> list[str]:
    """The origins the page is served at, one per address (``reached_at``): every request's
    ``Host`` must name one of them, and a change come from the page of one."""
    port = sock.getsockname()[1]
    return [f"{'https' if tls else 'http'}://{f'[{h}]' if ':' in h else h}:{port}" for h in hosts]


async def serve(ws: Workspace, sock: socket.socket, served: list[str], *, cert: str | None = None,
                key: str | None = None, started: Callable[[], None] | None = None) -> None:
    """Serve the web face of ``ws`` on ``sock`` at the origins ``served`` until cancelled
    (SIGINT, SIGTERM)."""
    import uvicorn

    from .app import create

    if cert:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)  # a bad pair: said now
    config = uvicorn.Config(create(ws, served, secure=bool(cert)), log_level="warning", ssl_certfile=cert,
                            ssl_keyfile=key, lifespan="off", proxy_headers=False, server_header=False,
                            timeout_graceful_shutdown=GRACE_S)
    server = uvicorn.Server(config)
    if started is not None:
        started()
    await server.serve(sockets=[sock])
