"""Reading runs and processes back in engine tests."""

from __future__ import annotations

from typing import Any

from procession import State, Workspace


async def state_of(ws: Workspace, sid: int) -> State:
    return (await ws.info(sid)).state


async def last_run(ws: Workspace, sid: int) -> Any:
    runs = await ws.runs(sid)
    return runs[-1] if runs else None


async def finished(ws: Workspace, sid: int, n: int = 1) -> Any:
    """The last run once ``n`` runs have ended (and none is open), else a false value."""
    runs = await ws.runs(sid)
    return len(runs) >= n and all(r.ended for r in runs) and runs[-1]


async def running_pid(ws: Workspace, sid: int) -> int | None:
    info = await ws.info(sid)
    return info.pid if info.state is State.RUNNING else None


def proc_state(pid: int) -> str | None:
    """The one-letter state of a process in /proc (T stopped, S sleeping, Z zombie), None if gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("State:"):
                    return line.split()[1]
    except FileNotFoundError:
        return None
    return None


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


def pid_in(path: Any) -> int | None:
    """A pid a step wrote to a file, once it is there."""
    try:
        text = open(path).read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


