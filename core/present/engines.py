"""Which engines run where, as the monitor's header says it.

Each host of a workspace has an engine of its own: the one that runs that host's sessions,
watches their folders and recovers their runs. The header names this host's first (the
monitor's own, another process's, or none), then every other host's, up or LOST, and the hosts
whose sessions have none, so that a person watching a shared workspace sees where runs can
start and where they wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .words import printable

#: An engine as ``activity()`` reads it: its host, pid and slots, and whether it is alive.
Engine = Mapping[str, Any]


def header(engine: Engine | None, engines: Sequence[Engine], sessions_by_host: Mapping[str, int], *, here: str,
           several_hosts: bool, mine: bool, after: str = "", readonly: bool = False, shared: bool = False) -> str:
    """What follows ``Engine`` in the header. ``engine``: this host's live one, if any;
    ``engines``: every host's; ``sessions_by_host``: each host's sessions not terminated;
    ``mine``: the monitor runs this host's (``after`` the one it stood in for, when it did);
    ``shared``: a workspace several machines share, where a monitor runs no engine unless asked."""
    said = _this_host(engine, here, mine=mine, after=after, readonly=readonly, shared=shared)
    others = _other_hosts(engine, engines, sessions_by_host, here=here, several_hosts=several_hosts)
    return f"{said}; {others}" if others else said


def _this_host(engine: Engine | None, here: str, *, mine: bool, after: str, readonly: bool, shared: bool) -> str:
    """None running is said with how to start one where the monitor did not start it by itself
    (a shared workspace); on a workspace file the monitor runs one unless it is read-only, so
    ``none`` there means it could not (and the error it notified said why)."""
    if mine:
        label = f"this process (pid {engine['pid']})" if engine else "this process"
        return f"{label}, after {after}" if after else label
    if engine:
        return f"pid {engine['pid']} on {printable(engine['host'], lines=False)}"
    if shared:
        start = "procession run starts one" + ("" if readonly else ", or the monitor with --engine")
        return f"none for host {printable(here, lines=False)}: {start}"
    return "none (read-only)" if readonly else "none"


def _other_hosts(engine: Engine | None, engines: Sequence[Engine], sessions_by_host: Mapping[str, int], *,
                 here: str, several_hosts: bool) -> str:
    """``laptop up (pid 12), devbox LOST (pid 40)`` (LOST: its process is gone or its heartbeat
    stopped; its sessions wait for it), then, where sessions live on several hosts, each host
    that has some and no engine, ``nas none``; "" when there is no other host to name. A dead
    engine of this host is named here too: the part before says none runs."""
    others = [e for e in engines if engine is None or e["host"] != engine["host"]]
    running = {e["host"] for e in engines} | {here}
    idle = sorted(h for h, n in sessions_by_host.items() if n > 0 and h not in running) if several_hosts else []
    return ", ".join([*(f"{printable(e['host'], lines=False)} {'up' if e['alive'] else 'LOST'} (pid {e['pid']})"
                        for e in others), *(f"{printable(h, lines=False)} none" for h in idle)])
