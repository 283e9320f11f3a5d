"""A stdio MCP server that is a relay: standard input and output joined to a unix socket.

Run as a script (``python -I -S mcp_relay.py SOCKET``), with nothing of ``procession``
imported, by an agent CLI (or a step) inside a confined run, where Procession's own MCP
server cannot run (it writes the workspace): the engine serves it on ``SOCKET``, in the
run's own folder (``own_mcp``). It first sends the socket's key, read from the file beside
the socket (``key_file``: the run's bounds reach it, another run's do not), then bytes go
through unread, both ways, until either side ends.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

#: The length of a socket's key (hexadecimal characters).
KEY_BYTES = 32


def key_file(path: str) -> str:
    """The file holding the key of the socket at ``path``."""
    return path + ".key"


def main(path: str) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with open(key_file(path), "rb") as fh:
            key = fh.read(KEY_BYTES)
        conn.connect(path)
        conn.sendall(key)
    except OSError as exc:
        sys.stderr.write(f"procession: cannot reach the session's MCP server at {path}: {exc.strerror}\n")
        raise SystemExit(1) from None

    def up() -> None:
        try:
            while data := os.read(0, 65536):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    threading.Thread(target=up, daemon=True).start()
    try:
        while data := conn.recv(65536):
            os.write(1, data)
    except OSError:
        pass


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: mcp_relay.py SOCKET\n")
        raise SystemExit(2)
    main(sys.argv[1])
