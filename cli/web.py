"""``procession web``: serve the web face (``procession.web``), pair devices, list and revoke them."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from procession.calls import Workspace
from procession.model.errors import InvalidArgument

from .registry import arg, command
from .terminal import emit


@command("web", "serve the page that shows what needs you to paired devices (a phone); pair, list and revoke"
         " devices", args=[
    arg("--listen", default="127.0.0.1", metavar="ADDRESS",
        help="the address to listen on (default: loopback only; off loopback it serves TLS)"),
    arg("--port", type=int, default=8767, help="the port (0: any free one)"),
    arg("--pair", metavar="NAME", help="print a one-time link (and its QR code) that pairs the device NAME"),
    arg("--read-only", action="store_true", help="the device --pair makes may only look"),
    arg("--minutes", type=float, default=10.0, help="how long the pairing link may be used"),
    arg("--devices", action="store_true", help="list the paired devices, and exit"),
    arg("--revoke", type=int, metavar="DEVICE", help="revoke a device (its next request is refused), and exit"),
    arg("--tls-cert", metavar="FILE", help="serve over TLS with this certificate (PEM) ... (without them, off"
        " loopback: a self-signed one, made once and kept beside the workspace)"),
    arg("--tls-key", metavar="FILE", help="... and this key"),
    arg("--insecure-plain-http", action="store_true",
        help="serve plain HTTP off loopback, not TLS (anyone on the path reads the page and its cookie)"),
])
async def web(ws: Workspace, args: argparse.Namespace) -> int:
    from procession.web import listening, loopback, origins, reached_at, serve

    if args.devices:
        found = await ws.devices()
        emit(args, [d.to_json() for d in found], lambda: "\n".join([
            f"{d.id:>3}  {d.name}{'  (read only)' if d.read_only else ''}  paired {_when(d.created)}"
            + (f"  revoked {_when(d.revoked)}" if d.revoked else "")
            for d in found] or ["no device is paired: procession web --pair NAME"]))
        return 0
    if args.revoke is not None:
        done = await ws.revoke(args.revoke)
        emit(args, done.to_json(), f"device {done.device} ({done.name}) is revoked")
        return 0
    if bool(args.tls_cert) != bool(args.tls_key):
        raise InvalidArgument("TLS needs both --tls-cert and --tls-key")
    try:
        sock = listening(args.listen, args.port)
    except OSError as exc:
        raise InvalidArgument(f"cannot listen on {args.listen}:{args.port}: {exc.strerror or exc}") from None
    hosts = reached_at(args.listen)
    if not hosts:
        raise InvalidArgument(f"this machine has no address that {args.listen} listens on")
    cert, key = args.tls_cert, args.tls_key
    if not cert and not args.insecure_plain_http and not all(map(loopback, hosts)):
        cert, key = _self_signed(ws, hosts)
    served = origins(sock, hosts, bool(cert))
    address = served[0]
    ws.actor = "web"
    if args.pair:
        pairing = await ws.pair(args.pair, read_only=args.read_only, minutes=args.minutes)
        link = f"{address}/pair#{pairing.secret}"
        print(f"pair {pairing.name}{' (read only)' if pairing.read_only else ''}: open this link on it within"
              f" {args.minutes:g} minutes (once):\n{link}")
        import segno

        segno.make(link, error="m").terminal(out=sys.stdout, compact=True)
    print(f"procession web: serving {address} (Ctrl+C stops)"
          + (f"; also at {', '.join(served[1:])}" if served[1:] else ""), flush=True)
    await serve(ws, sock, served, cert=cert, key=key)
    return 0


def _self_signed(ws: Workspace, hosts: list[str]) -> tuple[str, str]:
    """The self-signed certificate and key kept for ``ws`` (made, or made anew, for ``hosts``),
    its fingerprint said for the user to compare with the one their browser shows."""
    from procession.web.tls import kept_in, self_signed

    folder = kept_in(ws.path)
    cert, key, fingerprint = self_signed(folder, hosts, say=print)
    print(f"TLS: a self-signed certificate (kept in {folder}); its SHA-256 fingerprint is {fingerprint}: check your"
          " browser shows the same before you accept it")
    return str(cert), str(key)


def _when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "-"
