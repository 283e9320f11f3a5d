"""The engine the monitor runs in its own process, when no other process runs one, and
whether it runs one at all (``runs_engine``).

No screen in it: the app starts it after opening, asks it how many steps it is running (to
ask before quitting), and stops it on the way out. Its steps are child processes; the
engine works beside the event loop and never blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from procession.model.errors import EngineBusy, ProcessionError

if TYPE_CHECKING:
    from procession.engine import Engine


def runs_engine(shared: bool, asked: bool | None) -> bool:
    """Whether a monitor runs its host's engine: as ``asked`` (True: ``--engine``), else (None)
    unless the workspace is ``shared``.

    A workspace file is this machine's own: its sessions run where it is, and a person who opens
    the monitor on it expects what they activate to run, so the monitor runs the engine (unless
    another process does). A monitor that only watches is ``--readonly``; no ``--no-engine`` is
    needed. A shared (PostgreSQL) workspace is watched from any machine: a laptop opened on it to
    look would become the engine of its host, running that host's sessions until its lid
    closes. There a monitor runs one only when asked (``--engine``), and its header says how
    to start one when none runs."""
    return asked if asked is not None else not shared


class EngineHost:
    def __init__(self, path: Path | str, slots: int = 2) -> None:
        self.path = path
        self.slots = slots
        self.engine: Engine | None = None
        self.problem = ""  # why it could not start, when it could not
        self.took_over = ""  # the engine this one replaced when it died, if it did
        self.watched: str = ""  # the other engine seen running, which this one stands in for if it dies
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> bool:
        """Run the engine here unless another process holds the workspace's lease."""
        from procession.engine import Engine

        engine = Engine(self.path, slots=self.slots)
        try:
            await engine.start()
        except EngineBusy:
            return False
        except ProcessionError as exc:
            self.problem = f"cannot run the engine here: {exc}"
            return False
        self.engine = engine
        self._task = asyncio.ensure_future(engine.serve(self._stop))
        return True

    async def take_over(self) -> bool:
        """When the engine another process ran has died, run it here: the monitor is the
        engine then (says so in its header), and its steps go on being run. Called when the
        header finds no live engine; True when this monitor has just become the engine."""
        if self.running or not self.watched:
            return False
        if await self.start():
            self.took_over, self.watched = self.watched, ""
            return True
        return False

    def saw(self, engine: dict[str, object] | None) -> None:
        """The engine the header shows (another process's), remembered to stand in for it."""
        if engine and not self.running:
            self.watched = f"the engine of pid {engine['pid']} on {engine['host']}"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def live_steps(self) -> int:
        """Steps this process's engine is running (quitting interrupts them)."""
        return len(self.engine.live) if self.running and self.engine is not None else 0

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
