"""Who an MCP server acts as, and what it may touch: the rules every tool goes through.

A server started for a session (``--session SID``) acts as that session: its calls are
journaled by the actor ``mcp`` with that session as their ``other``, and it reaches the
sessions of its agent, the sessions spawned as one of those, and their forks
(``Workspace.reaches``). One started for an agent (``--agent NAME``) reaches the same
without a session of its own, and so spawns for its own agent only (a spawn for another
agent would be reached by nobody). One started with neither acts for the person who
started it, on every session. ``send`` reaches any session: it is how an agent talks to
another agent's sessions. ``--allow`` narrows the tools offered, ``--readonly`` leaves the
reads; a refusal is a ``NotAllowed`` with one line saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

from procession.calls import Workspace
from procession.model import runner_spec
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

    async def check_spawn(self, ws: Workspace, agent: str, runner: str) -> None:
        """A spawn for ``agent`` with ``runner``: an agent's server spawns for its own agent
        only, and no server of an agent brings in a runner that no session it reaches has
        armed already (nor may it choose what a step executes: the user did, once)."""
        if self.everything:
            return
        if self.session is None and agent != self.agent:
            raise NotAllowed(f"agent {self.agent} spawns only its own sessions here; a server started for one of"
                             " its sessions (--session SID) spawns for other agents")
        if runner_spec.parse(runner).kind == "builtin":
            return
        reach = await ws.reach(agent=self.agent, session=self.session)
        armed = {s.runner for s in await ws.ps(all=True) if s.id in reach and s.armed}
        if runner not in armed:
            raise NotAllowed(f"runner {runner!r} is armed on no session {self.who} reaches: a person spawns"
                             " the first session with a new runner")
