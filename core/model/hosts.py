"""Hosts: the machines a shared workspace's sessions live on, and who makes a call.

A session belongs to the host its folder is on (the host that spawned it): only that host's
engine runs it and watches its folder. A host is named by ``PROCESSION_HOST`` (which
``--host NAME`` sets, so that one machine can stand for several, as the tests make it), else
by the machine's own name. Each journal row names who made its call, ``user@host``.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import socket

from .errors import InvalidArgument

ENV = "PROCESSION_HOST"
#: An engine of another machine not heard for longer than this (its heartbeat, by the
#: workspace's clock) is not running, as far as anyone here can tell.
ENGINE_STALE_S = 5.0
#: A host's name: what a machine's name may be (letters, digits, dots, dashes, underscores)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def check(name: str) -> str:
    """``name`` if it can name a host, else a one-line refusal."""
    if not _NAME.fullmatch(name):
        raise InvalidArgument(f"{name[:80]!r} cannot name a host: use up to 63 letters, digits, dots, dashes and"
                              " underscores, beginning with a letter or a digit")
    return name


def this() -> str:
    """The host this process acts as: ``$PROCESSION_HOST``, else the machine's name."""
    named = os.environ.get(ENV)
    return check(named) if named else _named()


def refuse_elsewhere(host: str, what: str) -> None:
    """File work (making a fork's own folder, merging its files, removing it) is done by the
    process that makes the call, on its own machine: refused in one line when ``what`` (a
    folder of a session on ``host``) is on another host, where the same path names other files."""
    if host != (here := this()):
        raise InvalidArgument(f"{what} is on host {host}, and this is host {here}: make the call there"
                              f" (procession --host {host} ..., on that machine)")


def machine() -> str:
    """This machine's own name, whatever host it stands for: where a pid means a process."""
    return socket.gethostname()


@functools.cache
def _named() -> str:
    """The machine's name as a host's: its first label, or localhost when it cannot name one."""
    name = socket.gethostname().split(".")[0] or "localhost"
    return name if _NAME.fullmatch(name) else "localhost"


@functools.cache
def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return str(os.getuid())


def who() -> str:
    """``user@host``: who makes a call from this process, as its journal row names them."""
    return f"{_user()}@{this()}"
