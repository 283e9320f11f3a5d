"""Following the agent CLIs' own transcripts: a session whose agent is used outside
Procession (the person kept using the CLI, or attached to it) gets what was said there.

The engine watches the transcript of every agent session of its host that has not ended (the
file, or for opencode its database and its ``-wal``) with one ``Watcher``, and on a change syncs
the session (``sync``, quiet: nothing is journaled when nothing new was read). A session running
a step is left alone: what its agent does arrives through the run, whose stored messages move
the read position with them (in the same transaction, where they name their transcript record)
and whose end settles it (``settle``), so nothing is appended twice, an engine killed mid-run
included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..calls.native import agent_ref, cli_environment, located
from ..model import hosts, transcripts
from ..model.errors import ProcessionError
from ..model.text import plural
from ..model.transcripts import Position
from ..store import rows
from .watch import Watcher

log = logging.getLogger("procession.engine")

#: How long a transcript must stay quiet before it is read (a CLI writes a turn in bursts).
DEBOUNCE_MS = 50


def settle(ref: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """What an agent reference gains once a run of its session ended: its transcript's path and
    the position read to (past everything the run stored). Read in a worker thread."""
    found = located(ref, env)
    read = transcripts.format_of(ref["cli"]).read(found, Position.of(ref.get("position")))
    return {"transcript": found.path, "position": read.position.as_json()}


class Follower:
    """The transcripts of this host's agent sessions, watched; ``busy(sid)`` says a session is
    running a step here (its transcript is the run's to read). Another host's are its engine's:
    its runs write them there (a path here, on one machine standing for two hosts, is the same
    file, and syncing it beside that host's runs was refused at every run)."""

    def __init__(self, ledger: Any, busy: Callable[[int], bool]) -> None:
        self.ledger = ledger
        self.busy = busy
        self.watcher = Watcher(self._changed)
        self.rev = 0
        self.paths: dict[int, list[str]] = {}

    async def refresh(self) -> None:
        """Take in the agent sessions changed since the last refresh."""
        async with self.ledger.store.snapshot() as tx:
            rev = await rows.last_rev(tx)
            changed = await rows.changed_agents(tx, self.rev)
        self.rev = rev
        added: list[int] = []
        here = hosts.this()
        for row in changed:
            ref = agent_ref(row)
            path = (ref.get("transcript") if ref and not ref.get("fork") and row["state"] != "terminated"
                    and row["host"] == here else None)
            paths = [path, f"{path}-wal"] if path and ref and ref["cli"] == "opencode" else [path] if path else []
            if self.paths.get(row["id"], []) != paths:
                added.append(row["id"])
                if paths:
                    self.paths[row["id"]] = paths
                else:
                    self.paths.pop(row["id"], None)
        if added:
            self.watcher.update({sid: {"paths": paths, "debounce_ms": DEBOUNCE_MS} for sid, paths in self.paths.items()})
            await self.watcher.settled()
            for sid in added:  # what its transcript gained before the watch was there: now
                if sid in self.paths:
                    await self._changed(sid, [], 0)

    async def _changed(self, sid: int, paths: list[str], more: int) -> None:
        if self.busy(sid):
            return
        try:
            synced = await self.ledger.sync(sid, quiet=True)
        except ProcessionError as exc:  # refused (running, ended), or the file is not readable now
            log.info("session %d: its transcript changed, not synced: %s", sid, exc)
            return
        if synced.messages:
            log.info("session %d: %s synced from its agent's transcript", sid, plural(synced.messages, "message"))

    async def close(self) -> None:
        await self.watcher.close()


async def settled(ledger: Any, sid: int, announced: dict[str, Any] | None) -> dict[str, Any] | None:
    """``settle`` for the session's agent reference as the run left it (``announced`` if the
    run's last events carry it), or None when it has none or its transcript cannot be read
    (a later sync may then read part of the run again: said in the log)."""
    async with ledger.store.snapshot() as tx:
        row = await rows.agent_reference(tx, sid)
    held = agent_ref(row) if row is not None else None
    ref = announced or held
    if not ref or ref.get("fork") or not transcripts.read_on(ref):
        return None  # none; the fork never started (its parent's is not its own); a transcript not read on
    if announced and held and held.get("id") == announced.get("id") and not held.get("fork"):
        ref = {**announced, "position": held.get("position")}
    try:
        return await asyncio.to_thread(settle, ref, cli_environment(row, ledger.path, cli=ref["cli"]))
    except (ProcessionError, OSError) as exc:
        log.warning("session %d: its agent's transcript could not be read after the run (%s)", sid, exc)
        return None
