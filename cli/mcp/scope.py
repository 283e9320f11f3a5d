"""Who an MCP server acts as, and what it may touch: the rules every tool goes through.

A server started for a session (``--session SID``) acts as that session: its calls are
journaled by the actor ``mcp`` with that session as their ``other``, and it reaches the
sessions of its agent, the sessions spawned as one of those, and their forks
(``Workspace.reaches``). One started for an agent (``--agent NAME``) reaches the same
without a session of its own, and so spawns for its own agent only (a spawn for another
agent would be reached by nobody). One started with neither acts for the person who
started it, on every session. ``send`` reaches any session: it is how an agent talks to
another agent's sessions (a user message; another role only in reach). A scoped server
spawns only into the folders its scope reaches, and what it brings that no person approved
(a new runner, settings, looser bounds or permissions) arrives disarmed; a trigger it adds
watches only the session's own folders. It answers what the sessions in reach ask
(``check_answer``), never what its own session asked. ``--allow`` narrows the tools offered, ``--readonly`` leaves the
reads; a refusal is a ``NotAllowed`` with one line saying why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from procession.calls import Workspace
from procession.model import bounds, runner_spec
from procession.model.errors import NotAllowed


@dataclass(slots=True, frozen=True)
class Scope:
    agent: str | None = None
    session: int | None = None
    allow: frozenset[str] | None = None  # tool names; None: every tool
    readonly: bool = False

    @property
    def everything(self) -> bool:
        """Started with neither a session nor an agent: acts for the person, on every session."""
        return self.agent is None and self.session is None

    @property
    def who(self) -> str:
        if self.session is not None:
            return f"session {self.session} (agent {self.agent})"
        return f"agent {self.agent}" if self.agent is not None else "this server"

    def offers(self, tool: str, *, reads: bool) -> bool:
        return (reads or not self.readonly) and (self.allow is None or tool in self.allow)

    def check_tool(self, tool: str, *, reads: bool) -> None:
        if self.offers(tool, reads=reads):
            return
        if not reads and self.readonly:
            raise NotAllowed(f"{tool} is not allowed: this server is read-only (--readonly)")
        allowed = ", ".join(sorted(self.allow or ())) or "nothing"
        raise NotAllowed(f"{tool} is not allowed: this server allows {allowed} (--allow)")

    async def check(self, ws: Workspace, sid: int) -> None:
        """Refuse a session out of reach (an unknown one is ``SessionNotFound``, as anywhere)."""
        if self.everything:
            await ws.info(sid)
        elif not await ws.reaches(sid, agent=self.agent, session=self.session):
            raise NotAllowed(f"session {sid} is out of reach: {self.who} acts on its agent's sessions and those"
                             " spawned from them (send reaches any session)")

    async def reach(self, ws: Workspace) -> set[int] | None:
        """Every session in reach (None: all of them)."""
        return None if self.everything else await ws.reach(agent=self.agent, session=self.session)

    async def check_spawn(self, ws: Workspace, agent: str, cwd: str, *, runner: str, env: dict[str, str],
                          passed: list[str], confine: str, net: str, permissions: str) -> bool:
        """A spawn for ``agent`` working in ``cwd``: refused out of scope (an agent's server
        spawns for its own agent only, and only into the folders its scope reaches); True when
        it brings nothing a person has not approved, so that it may run at once: a runner
        already armed on a session in reach (or a ``builtin:``), no setting or passed name of
        its own, bounds no looser than the scope's. Anything else arrives disarmed, waiting for
        ``approve``: what a step executes, and with what, is chosen by a person."""
        if self.everything:
            return True
        if self.session is None and agent != self.agent:
            raise NotAllowed(f"agent {self.agent} spawns only its own sessions here; a server started for one of"
                             " its sessions (--session SID) spawns for other agents")
        reach = await ws.reach(agent=self.agent, session=self.session)
        folders = await ws.folders(reach)
        if not any(within(os.path.realpath(cwd), os.path.realpath(f)) for f in folders):
            raise NotAllowed(f"{cwd} is outside the folders {self.who} reaches ({', '.join(folders) or 'none'}):"
                             " a session spawned here works in one of them")
        armed = {s.runner for s in await ws.ps(all=True) if s.id in reach and s.armed}
        own = await ws.info(self.session) if self.session is not None else None
        looser = (CONFINE_ORDER.index(confine) > CONFINE_ORDER.index(own.confine if own else bounds.BOUND)
                  or NET_ORDER.index(net) > NET_ORDER.index(own.net if own else bounds.ANY)
                  or bounds.PERMISSIONS.index(permissions) > bounds.PERMISSIONS.index(own.permissions if own
                                                                                     else bounds.BOUND))
        known = runner_spec.parse(runner).kind == "builtin" or runner in armed
        return known and not env and not passed and not looser

    async def check_answer(self, ws: Workspace, sid: int, *, allow: bool) -> None:
        """An answer to what session ``sid``'s agent asked: in reach, never the scope's own
        session (an agent does not answer itself). A session's server allows only what a session
        it spawned asked (or a fork of one), and only when its own session may do anything
        unasked: an agent does not grant, through a sibling, a fork or a session it spawned,
        what it could not do itself."""
        await self.check(ws, sid)
        if self.session is None:
            return
        if sid == self.session:
            raise NotAllowed(f"session {sid} asked this: a person (or a supervisor in reach of it) answers it,"
                             " not the session itself")
        if not allow:
            return
        if (await ws.info(self.session)).permissions != bounds.ALL:
            raise NotAllowed(f"{self.who} may not allow what session {sid} asked: it could not do it unasked itself"
                             " (its --permissions are not all); deny it, or leave it to a person")
        if not await ws.spawned_by(sid, self.session):
            raise NotAllowed(f"{self.who} may allow only what the sessions it spawned ask; session {sid} was not"
                             " spawned by it: deny it, or leave it to a person")

    async def check_send(self, ws: Workspace, sid: int, role: str) -> None:
        """``send`` reaches any session, as the scope's own words (a user message from it);
        another role only where its scope reaches (a system message into another agent's
        session would speak for that session's owner)."""
        if role != "user" and not self.everything and not await ws.reaches(sid, agent=self.agent,
                                                                              session=self.session):
            raise NotAllowed(f"a {role} message goes only to the sessions {self.who} reaches; session {sid}"
                             " is another agent's: send it a user message")

    async def check_watch(self, ws: Workspace, sid: int, paths: list[str]) -> None:
        """What a trigger of session ``sid`` (in reach) watches must be in its own folders."""
        if self.everything:
            return
        folders = await ws.folders({sid})
        for path in paths:
            if not any(within(os.path.realpath(path), os.path.realpath(f)) for f in folders):
                raise NotAllowed(f"{path} is outside session {sid}'s folders ({', '.join(folders)}): a trigger"
                                 " added here watches only what the session works with")


#: From the tightest to the loosest.
CONFINE_ORDER = (bounds.STRICT, bounds.BOUND, bounds.OFF)
NET_ORDER = (bounds.NONE, bounds.MODEL, bounds.ANY)


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
