"""Reading runs and processes back in engine tests."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil

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
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return None
    return None


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


#: What a shell step writes after a pid for ``pid_in`` to find that process: its PID namespace
#: (a confined run's world numbers its processes its own way).
PID_NS = "$(readlink /proc/self/ns/pid)"
#: A pid no process has (above the kernel's largest): what ``pid_in`` gives for a process
#: of a world that is gone, so that ``alive`` says no.
GONE = 2**22 + 1


def pid_in(path: Any) -> int | None:
    """The machine's pid of the process a step wrote to a file as ``PID [PID_NS]`` (the pid
    as its world knows it, and that world), once it is there: the process of that namespace
    whose own pid it is (``GONE`` if none is left)."""
    try:
        words = open(path).read().split()
    except OSError:
        return None
    if not words or not words[0].isdigit() or len(words) > 2:
        return None
    inner = int(words[0])
    if len(words) == 1 or words[1] == os.readlink("/proc/self/ns/pid"):
        return inner
    for entry in os.listdir("/proc"):
        try:
            if not entry.isdigit() or os.readlink(f"/proc/{entry}/ns/pid") != words[1]:
                continue
            with open(f"/proc/{entry}/status") as fh:
                nspid = next(line.split()[1:] for line in fh if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if nspid and int(nspid[-1]) == inner:
            return int(entry)
    return GONE




async def reach_from_another_run(ws: Workspace, sock: str, folder: str) -> str:
    """What a confined run of another session gets trying a run's socket ``sock`` and the key
    beside it (``mcp_relay.key_file``): ``key ...`` then ``socket ...`` (each ``connected``/read,
    or its error)."""
    import sys

    from procession.engine.mcp_relay import key_file

    from .wait import until

    step = (f"command:{sys.executable} -c \"import socket\ntry:\n    open('{key_file(sock)}').read(); print('key read')\n"
            f"except OSError as e: print('key', e.strerror)\ns = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect('{sock}'); print('socket connected')\nexcept OSError as e: print('socket', e.strerror)\"")
    sid = (await ws.spawn("attacker", "other", runner=step, cwd=folder)).sid
    await ws.activate(sid)
    run = await until(lambda: finished(ws, sid))
    assert run.outcome == "ok", run.error
    said: str = (await ws.history(sid))[-1].content
    return said


def start_engine_process(db: Any, *extra: str) -> Any:
    """``procession run`` on ``db`` as a process of its own (its stderr piped): an engine that
    is not this process (which may also start what a step would, that an engine in this
    process would take for its steps' orphans, as an MCP client's server in a session of its
    own)."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "run", "--grace", "0.3", *extra],
                            stderr=subprocess.PIPE, text=True)


@contextlib.asynccontextmanager
async def engine_process(db: Any) -> AsyncIterator[Any]:
    """An engine in a process of its own (``start_engine_process``) for the block, once it holds
    the workspace; stopped after it."""
    from .wait import until

    engine = start_engine_process(db)
    try:
        async with await Workspace.open(db) as ws:
            await until(lambda: _engine_of(ws, engine.pid))
        yield engine
    finally:
        engine.terminate()
        engine.communicate(timeout=60)


async def _engine_of(ws: Workspace, pid: int) -> bool:
    engine = (await ws.activity())["engine"]
    return bool(engine) and engine["pid"] == pid


def marked(db: Path, sid: int) -> list[psutil.Process]:
    """The processes that carry session ``sid``'s marks in their environment (a run's, left or not)."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("PROCESSION_SESSION") == str(sid) and Path(env.get("PROCESSION_DB", "")) == db:
            found.append(proc)
    return found
