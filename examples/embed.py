#!/usr/bin/env python3
"""Procession embedded in a program: no CLI, no monitor, no daemon.

Opens (or makes) a workspace, spawns a session with a ``builtin:`` runner, sends it a message,
runs the engine in this process until the session's run ends, and prints each call's outcome
record (``to_json()``); a call given the outcome record where its session id belongs is refused
with a typed error (``procession.InvalidArgument``), and a move the lifecycle table does not
allow with another (``procession.IllegalTransition``); neither changes anything.

    python examples/embed.py [WORKSPACE]     # default: embed.db in the current folder
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Protocol

from procession import Engine, IllegalTransition, InvalidArgument, Workspace


class Record(Protocol):
    """What every call returns: a frozen dataclass that says itself as JSON."""

    def to_json(self) -> dict[str, Any]: ...


def show(what: str, record: Record) -> None:
    print(f"{what}: {json.dumps(record.to_json())}")


async def main(path: Path) -> None:
    # the journal names this program as the actor of every call it makes
    async with await Workspace.open(path, actor="embed") as ws:  # closed however the block ends
        spawned = await ws.spawn("greeter", "example", runner="builtin:echo", cwd=str(path.parent))
        show("spawned", spawned)
        show("sent", await ws.send(spawned.sid, "hello from an embedding program"))
        try:
            await ws.activate(spawned)  # type: ignore[arg-type]  # the record, not its id (mypy says so too)
        except InvalidArgument as refused:
            print(f"refused: {refused}")
        show("activated", await ws.activate(spawned.sid))  # its notes say no engine runs yet

        engine = Engine(path, slots=1)
        await engine.start()  # takes the workspace's lease, or raises procession.EngineBusy
        stop = asyncio.Event()
        serving = asyncio.create_task(engine.serve(stop))
        try:
            waited = await ws.wait(spawned.sid, 60)
        finally:
            stop.set()
            await serving  # the engine stops: a step still running is interrupted, the lease released
        show("waited", waited)

        try:
            await ws.resume(spawned.sid)
        except IllegalTransition as refused:
            print(f"refused: {refused}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "embed.db").resolve()))
