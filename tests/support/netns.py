"""A host on a network link of its own, which a test can cut: a network namespace joined to this
one by a veth pair, the test's PostgreSQL server reached from it through a forwarder on this
side (``socat``, listening on the link's address, as a server on another machine listens on
its own). Cutting the link (``cut``: its end here set down) drops every packet as a pulled cable
does: nothing is refused or reset, connections just hear nothing, which is what a host's
keepalives and timeouts must find out by themselves.

Needs root, ``ip`` (iproute2) and ``socat``; ``available`` says why not where they are missing,
so that the tests skip, saying so (or fail, where ``PROCESSION_REQUIRE_NETNS=1``)."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
from types import TracebackType

_NUMBERS = itertools.count(1)


def available() -> str | None:
    """Why a link cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "socat") if shutil.which(tool) is None]
    if missing:
        return f"network namespaces need {' and '.join(missing)} (Debian: apt-get install iproute2 socat)"
    probe = f"pprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    command = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    subprocess.run(command, check=True, capture_output=True, text=True)


class Link:
    """The namespace ``ns``, whose processes reach the server on ``127.0.0.1:server_port`` at
    ``address``:``port`` (this side's end of the link)."""

    def __init__(self, server_port: int) -> None:
        n = (os.getpid() * 7 + next(_NUMBERS)) % 250 + 1
        self.ns, self.here, self.there = f"pcut{os.getpid()}_{n}", f"vh{os.getpid() % 100000}_{n}", f"ve{n}"
        self.address, peer = f"10.{200 + n % 50}.{n}.1", f"10.{200 + n % 50}.{n}.2"
        _ip("netns", "add", self.ns)
        try:
            _ip("link", "add", self.here, "type", "veth", "peer", "name", self.there)
            _ip("link", "set", self.there, "netns", self.ns)
            _ip("addr", "add", f"{self.address}/30", "dev", self.here)
            _ip("link", "set", self.here, "up")
            _ip("addr", "add", f"{peer}/30", "dev", self.there, ns=self.ns)
            _ip("link", "set", self.there, "up", ns=self.ns)
            _ip("link", "set", "lo", "up", ns=self.ns)
            with socket.socket() as probe:
                probe.bind((self.address, 0))
                self.port = probe.getsockname()[1]
            self.forwarder = subprocess.Popen(
                ["socat", f"TCP-LISTEN:{self.port},bind={self.address},fork,reuseaddr", f"TCP:127.0.0.1:{server_port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except BaseException:
            self.close()
            raise

    def prefix(self) -> list[str]:
        """What runs a command in the namespace, before the command."""
        return ["ip", "netns", "exec", self.ns]

    def cut(self) -> None:
        _ip("link", "set", self.here, "down")

    def mend(self) -> None:
        _ip("link", "set", self.here, "up")

    def close(self) -> None:
        forwarder = getattr(self, "forwarder", None)
        if forwarder is not None:
            forwarder.kill()
            forwarder.wait()
        subprocess.run(["ip", "link", "del", self.here], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def __enter__(self) -> Link:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class Network:
    """A network namespace of its own, its links made inside it (``ip``): a machine's own set of
    addresses and routes, which a test arranges without touching this one's."""

    def __init__(self) -> None:
        self.ns = f"pnet{os.getpid()}_{next(_NUMBERS)}"
        _ip("netns", "add", self.ns)
        self.ip("link", "set", "lo", "up")

    def ip(self, *args: str) -> None:
        _ip(*args, ns=self.ns)

    def prefix(self) -> list[str]:
        """What runs a command in the namespace, before the command."""
        return ["ip", "netns", "exec", self.ns]

    def __enter__(self) -> Network:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
