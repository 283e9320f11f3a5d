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
    arg("--listen", default="127.0.0.1", metavar="ADDRESS", help="the address to listen on (default: loopback only)"),
    arg("--port", type=int, default=8767, help="the port (0: any free one)"),
    arg("--pair", metavar="NAME", help="print a one-time link (and its QR code) that pairs the device NAME"),
    arg("--read-only", action="store_true", help="the device --pair makes may only look"),
    arg("--minutes", type=float, default=10.0, help="how long the pairing link may be used"),
    arg("--devices", action="store_true", help="list the paired devices, and exit"),
    arg("--revoke", type=int, metavar="DEVICE", help="revoke a device (its next request is refused), and exit"),
    arg("--tls-cert", metavar="FILE", help="serve over TLS with this certificate (PEM) ..."),
    arg("--tls-key", metavar="FILE", help="... and this key"),
    arg("--insecure-plain-http", action="store_true",
        help="serve plain HTTP off loopback (anyone on the path reads the page and its cookie)"),
])
async def web(ws: Workspace, args: argparse.Namespace) -> int:
    from procession.web import LOOPBACK, listening, origin, serve

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
    if args.listen not in LOOPBACK and not args.tls_cert and not args.insecure_plain_http:
        raise InvalidArgument(f"{args.listen} is not loopback: serve it over TLS (--tls-cert, --tls-key), or reach"
                              " a loopback one through an SSH tunnel or a private network")
    try:
        sock = listening(args.listen, args.port)
    except OSError as exc:
        raise InvalidArgument(f"cannot listen on {args.listen}:{args.port}: {exc.strerror or exc}") from None
    address = origin(sock, args.listen, bool(args.tls_cert))
    ws.actor = "web"
    if args.pair:
        pairing = await ws.pair(args.pair, read_only=args.read_only, minutes=args.minutes)
        link = f"{address}/pair#{pairing.secret}"
        print(f"pair {pairing.name}{' (read only)' if pairing.read_only else ''}: open this link on it within"
              f" {args.minutes:g} minutes (once):\n{link}")
        import segno

        segno.make(link, error="m").terminal(out=sys.stdout, compact=True)
    print(f"procession web: serving {address} (Ctrl+C stops)", flush=True)
    await serve(ws, sock, address, cert=args.tls_cert, key=args.tls_key)
    return 0


def _when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "-"
