"""What an agent that acts as one of its sessions needs besides the calls: which sessions it
reaches, and a wait for another session's answer. Both are reads: nothing is written, nothing
journaled.

An agent reaches its own sessions and what they made: a session spawned as one of them (the
spawn's journal row names it as its ``other`` session, ``Calls.acting``), and every fork of a
session it reaches, at any depth, as a process reaches its children.
"""

from __future__ import annotations

import asyncio

from ..model.errors import InvalidArgument
from ..model.records import Waited
from ..model.states import State
from ..store import Tx, journal, messages, rows, sessions
from ..store.agents import agent_sessions
from . import history
from .base import Calls
from .reads import run_info

#: How often a wait looks at the data version, and every how many looks it reads anyway (this
#: process's own commits do not move the data version of its connection).
WAIT_POLL_S = 0.05
WAIT_FORCED = 10
#: The newest messages a wait returns (a transcript sent in one call may be long).
WAIT_MESSAGES = 50
#: The longest wait, in seconds.
WAIT_MAX = 86_400.0


class AgentCalls(Calls):
    async def reaches(self, sid: int, *, agent: str | None, session: int | None = None) -> bool:
        """Whether ``sid`` is ``agent``'s or ``session`` itself, or was spawned as one of those,
        or forked from one (``SessionNotFound`` for an unknown ``sid``)."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            seen: set[int] = set()
            frontier = [sid]
            while frontier:
                up: list[int] = []
                for node in frontier:
                    if node in seen:
                        continue
                    seen.add(node)
                    row = await sessions.parent_and_agent(tx, node)
                    if row is None:
                        continue
                    if node == session or (agent is not None and row["name"] == agent):
                        return True
                    if row["parent_id"] is not None:
                        up.append(row["parent_id"])
                    up += await journal.spawned_as(tx, node)
                frontier = up
        return False

    async def reach(self, *, agent: str | None, session: int | None = None) -> set[int]:
        """Every session ``reaches`` says yes to, found downwards from the agent's own."""
        async with self.store.snapshot() as tx:
            found = set() if agent is None else await agent_sessions(tx, agent)
            if session is not None:
                found.add(session)
            frontier = list(found)
            while frontier:
                down = [sid for sid in await sessions.offspring(tx, frontier) if sid not in found]
                found.update(down)
                frontier = down
        return found

    async def spawned_by(self, sid: int, session: int) -> bool:
        """Whether ``sid``, or a session it was forked from, was spawned by ``session``."""
        async with self.store.snapshot() as tx:
            node: int | None = sid
            seen: set[int] = set()
            while node is not None and node not in seen:
                seen.add(node)
                row = await sessions.parent_and_spawner(tx, node)
                if row is None:
                    return False
                if row["spawned_by"] == session:
                    return True
                node = row["parent_id"]
        return False

    async def folders(self, sids: set[int]) -> list[str]:
        """The folders sessions ``sids`` work in: each one's own and every file or folder bound
        to it (what a scoped MCP client may spawn into, or watch)."""
        async with self.store.snapshot() as tx:
            found = await sessions.folders(tx, sorted(sids))
        return sorted(found)

    async def wait(self, sid: int, timeout: float, *, since: int | None = None) -> Waited:
        """Wait until, after journal row ``since`` (default: now), a run of ``sid`` ends, a
        message arrives in its inbox (a ``send``), it waits for a person's answer (``pending``),
        or it is terminated; at most ``timeout`` seconds. What happened already returns at once:
        a run that ended between the call that started it (its outcome's ``at``) and the wait is
        not missed. Holds no lock while it waits."""
        if not 0 <= timeout <= WAIT_MAX:
            raise InvalidArgument(f"a wait's timeout must be 0 to {WAIT_MAX:.0f} seconds")
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            tip = await journal.tip(tx)
            if since is not None and not 0 <= since <= tip:
                raise InvalidArgument(f"the journal has no row {since} yet (its last is {tip})")
            mark = tip if since is None else since
            length = await _length_at(tx, sid, mark)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        version, looks = None, 0
        while True:
            now_version = await self.store.data_version()
            if now_version != version or looks % WAIT_FORCED == 0:
                version = now_version
                async with self.store.snapshot() as tx:
                    found = await _woken(tx, sid, mark, length, final=loop.time() >= deadline)
                if found is not None:
                    return found
            looks += 1
            await asyncio.sleep(max(0.0, min(WAIT_POLL_S, deadline - loop.time())))


async def _length_at(tx: Tx, sid: int, mark: int) -> int:
    """How many messages session ``sid``'s history held at journal row ``mark`` (those made
    since are what a wait shows)."""
    when = await journal.written_at(tx, mark)
    if when is None:
        return 0
    held = await messages.held_at(tx, sid, when)
    if held is not None:
        return held
    return int((await rows.session(tx, sid))["fork_seq"])  # none of its own: a fork's are its parent's


async def _woken(tx: Tx, sid: int, mark: int, length: int, *, final: bool) -> Waited | None:
    """What woke a wait from journal row ``mark``, or None (``final``: the time is up)."""
    row = await rows.session(tx, sid)
    run = await journal.finished_run(tx, sid, mark)
    sent = None if run is not None else await journal.first_send(tx, sid, mark)
    at = run["journal_row"] if run is not None else sent
    if run is not None:
        woke = "run"
    elif sent is not None:
        woke = "message"
    elif row["state"] == State.TERMINATED:
        woke = "ended"
    elif row["state"] == State.WAITING:  # its run goes on only once a person answers: say so now
        woke = "waiting"
    elif final:
        woke = "timeout"
    else:
        return None
    new = int(row["length"])
    said = await history.read(tx, sid, max(length, new - WAIT_MESSAGES)) if new > length else []
    if at is None:
        at = await journal.tip(tx)
    return Waited(sid, woke, State(row["state"]), run_info(run) if run is not None else None, tuple(said),
                  int(at))
