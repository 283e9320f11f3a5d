"""The monitor's data, with no screen in it: every session's row, kept up to date from the
store by revision, the header's figures, and the order the table shows.

``Feed`` reads the first screenful before anything else (``load_first``), then the rest a page
at a time (``load_more``), then on each tick only the sessions whose revision moved
(``refresh``). Totals by state and of context are kept by difference, so no tick walks all
rows. It is driven by the app and tested on its own, without Textual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from procession.calls import Workspace
from procession.calls.outside import Live, Looker, marked
from procession.model.records import JournalEntry, SessionInfo
from procession.model.states import Reason, State

from .view import View

#: Sessions read before the first paint, then per page while the rest loads.
FIRST_PAGE = 200
PAGE = 5_000
HIGHLIGHT_S = 3.0
Before = dict[int, SessionInfo | None]
#: The states of a session whose run is under way: leaving them, its run finished.
ACTIVE = (State.RUNNING, State.WAITING)


@dataclass(slots=True)
class Header:
    """What the meters show."""

    states: dict[str, int]
    context_tokens: int
    context_windows: int
    fired: int
    running: int
    engine: dict[str, Any] | None
    #: every host's engine ({host, pid, slots, alive}), and whether sessions live on several hosts
    engines: list[dict[str, Any]] = field(default_factory=list)
    several_hosts: bool = False
    #: live sessions by who counted their context: "procession" (the workspace's counter) or "agent"
    counted: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Feed:
    ws: Workspace
    clock: Callable[[], float]
    sessions: dict[int, SessionInfo] = field(default_factory=dict)
    view: View = field(default_factory=View)
    by_state: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in State})
    #: host -> its sessions not terminated (the header names a host that has some and no engine)
    by_host: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    windows: int = 0
    counted: dict[str, int] = field(default_factory=dict)
    rev: int = 0
    loaded: bool = False
    #: sid -> (kind, until): rows just made ("new") or just ended ("ended")
    highlights: dict[int, tuple[str, float]] = field(default_factory=dict)
    #: sessions the engine has just suspended for failing, to tell the user of
    failing: list[SessionInfo] = field(default_factory=list)
    #: sessions that have just begun to wait for a person (W), to ring and tell the user of
    asking: list[SessionInfo] = field(default_factory=list)
    #: runs the engine started again by a restart policy (since it started), to tell the user of
    restarted: list[JournalEntry] = field(default_factory=list)
    #: sessions whose move to another host ended since the last refresh (placed, failed, taken back)
    moves_over: list[int] = field(default_factory=list)
    journal_tip: int | None = None  # the journal row read to for ``restarted`` (None: not yet)
    #: sid -> when: sessions whose run ended since the monitor opened, not looked at since
    finished: dict[int, float] = field(default_factory=dict)
    #: sessions an agent CLI runs outside Procession (``look_outside``), and the looker
    outside: dict[int, Live] = field(default_factory=dict)
    looker: Looker = field(default_factory=Looker)
    #: the hosts whose engine died, as the sessions' rows show them (``host_lost``)
    lost: frozenset[str] = frozenset()

    async def load_first(self) -> int:
        """The first screenful; returns the SID to go on from (0: everything is read)."""
        self.rev, page = await self.ws.changes(0, limit=FIRST_PAGE)
        self.absorb(page, highlight=False)
        self.view.rebuild(self.sessions)
        if len(page) < FIRST_PAGE:
            self.loaded = True
            return 0
        return page[-1].id

    async def load_more(self, after: int) -> tuple[int, bool]:
        """The next page after SID ``after``; returns where to go on from (0: done) and whether
        the order shown changed."""
        _, page = await self.ws.changes(0, after=after, limit=PAGE)
        before = self.absorb(page, highlight=False)
        moved = self.view.update(self.sessions, [s.id for s in page], before)
        if len(page) < PAGE:
            self.loaded = True
            return 0, moved
        return page[-1].id, moved

    async def refresh(self) -> tuple[Before, bool]:
        """Sessions changed since the last refresh: their old records, and whether the order moved."""
        rev, changed = await self.ws.changes(self.rev)
        before = self.absorb(changed, highlight=True)
        self.rev = max(self.rev, rev)
        self.journal_tip, restarted = await self.ws.restarts(self.journal_tip)
        self.restarted += restarted
        moved = bool(changed) and self.view.update(self.sessions, list(before), before)
        return before, moved

    def absorb(self, changed: list[SessionInfo], *, highlight: bool) -> Before:
        """Take fresh records in; keep the totals by difference; return the old ones."""
        now = self.clock()
        before: Before = {}
        for info in changed:
            old = self.sessions.get(info.id)
            before[info.id] = old
            if old is not None:
                self._count(old, -1)
                if highlight and old.state is not State.TERMINATED and info.state is State.TERMINATED:
                    self.highlights[info.id] = ("ended", now + HIGHLIGHT_S)
                if highlight and info.reason == Reason.FAILING and (old.state, old.reason) != (info.state, info.reason):
                    self.failing.append(info)
                if highlight and info.state is State.WAITING and old.state is not State.WAITING:
                    self.asking.append(info)
                if highlight and old.state in ACTIVE and info.state in (State.SLEEPING, State.TERMINATED):
                    self.finished[info.id] = now
                if highlight and old.moving and not info.moving:
                    self.moves_over.append(info.id)
            elif highlight:
                self.highlights[info.id] = ("new", now + HIGHLIGHT_S)
            info = self._marked(info)
            self._count(info, 1)
            self.sessions[info.id] = info
        return before

    async def look_outside(self) -> list[int]:
        """Which sessions their agent's own CLI runs now, outside Procession (their rows show
        its pid, CPU and RSS); returns the sessions whose rows changed."""
        refs = await self.ws.agent_refs()
        found = await asyncio.to_thread(self.looker.look, refs)
        changed = [sid for sid in set(found) | set(self.outside) if found.get(sid) != self.outside.get(sid)]
        self.outside = found
        for sid in changed:
            if sid in self.sessions:
                self.sessions[sid] = self._marked(self.sessions[sid])
        return changed

    def mark_lost(self, engines: list[dict[str, Any]]) -> list[int]:
        """A host's engine died, or came back: no session row changed in the store for it (it is
        read from the engines' leases), so the rows of that host's sessions are marked here;
        returns those whose rows changed."""
        lost = frozenset(e["host"] for e in engines if not e["alive"])
        if lost == self.lost:
            return []
        flipped, self.lost = lost ^ self.lost, lost
        changed = [s.id for s in self.sessions.values() if s.host in flipped]
        for sid in changed:
            info = self.sessions[sid]
            self.sessions[sid] = replace(info, host_lost=info.host in lost)
        return changed

    def _marked(self, info: SessionInfo) -> SessionInfo:
        return marked(info, self.outside.get(info.id))

    def _count(self, info: SessionInfo, sign: int) -> None:
        self.by_state[info.state.value] += sign
        if info.state is not State.TERMINATED:
            self.by_host[info.host] = self.by_host.get(info.host, 0) + sign
            self.tokens += sign * info.context_tokens
            self.windows += sign * info.context_window
            self.counted[info.context_source] = self.counted.get(info.context_source, 0) + sign

    def expire_highlights(self) -> list[int]:
        """Rows whose highlight is over (to redraw)."""
        now = self.clock()
        done = [sid for sid, (_, until) in self.highlights.items() if until <= now]
        for sid in done:
            del self.highlights[sid]
        return done

    async def header(self) -> Header:
        stats = await self.ws.activity()
        return Header(dict(self.by_state), self.tokens, self.windows, stats["fired"], stats["running"],
                      stats["engine"], stats["engines"], stats["several_hosts"],
                      {k: n for k, n in self.counted.items() if n})

    def attention(self) -> tuple[list[SessionInfo], list[SessionInfo]]:
        """What needs a look besides the requests: sessions failing (suspended by the engine for
        it, or whose last run failed), and those whose run finished since the monitor opened
        and nobody looked at (``seen``), newest first."""
        failing = [s for s in self.sessions.values()
                   if s.reason == Reason.FAILING or s.state is State.SLEEPING and s.failures
                   and s.last_outcome in ("failed", "timeout")]
        finished = [self.sessions[sid] for sid, _ in sorted(self.finished.items(), key=lambda kv: -kv[1])
                    if sid in self.sessions and self.sessions[sid] not in failing]
        return sorted(failing, key=lambda s: s.id), finished

    def seen(self, sid: int) -> None:
        """The user looked at session ``sid``: its finished run is read."""
        self.finished.pop(sid, None)

    def agent_sessions(self, agent: str) -> list[SessionInfo]:
        """The live sessions of an agent (a tree heading's), in SID order."""
        return [s for s in self.sessions.values() if s.agent == agent and s.state is not State.TERMINATED]
