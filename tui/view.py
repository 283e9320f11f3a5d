"""Which sessions the table shows, in which order: filter, sort, tree — kept up to date
incrementally.

A refresh usually changes a few sessions out of many, and most changes (tokens, ages, CPU)
do not move a row in the default order. ``View.update`` therefore finds the sessions whose
place or visibility really changed and moves only those: out and back in by bisection, the
rest of the order copied across in slices. Sort keys are computed once per changed session,
never for all. With 100,000 sessions and 1% of
them changed, a refresh in the default view moves nothing and costs a dictionary lookup
per changed session.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from procession.model.records import SessionInfo
from procession.model.states import State

from procession.present.cells import BY_KEY

_LETTERS = {s.letter: s for s in State}
#: The levels of the tree a row's prefix draws; those above are one ``…`` (no name column is
#: wider, and a fork chain thousands deep would draw thousands).
LEVELS: Final = 16


@dataclass(slots=True, frozen=True)
class Branch:
    """Where a row hangs in the tree: below the row of ``up`` (None: an agent's top row), the
    last of its siblings or not. A prefix is drawn from it when its row is (``text``), so a
    chain ``depth`` deep holds ``depth`` of these, not ``depth`` strings as long as itself."""

    up: Branch | None
    last: bool

    def text(self) -> str:
        """``│  └─ ``: the ancestors' continuation lines (the last ``LEVELS``), then its branch."""
        pieces = ["└─ " if self.last else "├─ "]
        node = self.up
        while node is not None and len(pieces) < LEVELS:
            pieces.append("   " if node.last else "│  ")
            node = node.up
        if node is not None:
            pieces.append("… ")
        return "".join(reversed(pieces))


class Prefixes(dict[int, Branch]):
    """The rows' branches, by SID; ``get`` gives a row's prefix as drawn."""

    def get(self, sid: int, default: str = "") -> str:  # type: ignore[override]
        branch = dict.get(self, sid)
        return default if branch is None else branch.text()


@dataclass(slots=True)
class ViewSpec:
    sort: str = "sid"
    reverse: bool = False
    tree: bool = False
    show_terminated: bool = True
    filter: str = ""


@dataclass(slots=True)
class Heading:
    """An agent's line in the tree view."""

    agent: str
    count: int
    tokens: int
    #: its sessions' parts of a cap spent (of those with a budget: ``SessionInfo.spend``)
    spends: dict[int, float] = field(default_factory=dict)

    @property
    def spend(self) -> float | None:
        """The largest part of a cap its sessions have spent (an agent's budget counts in each)."""
        return max(self.spends.values()) if self.spends else None


def matches(session: SessionInfo, query: str) -> bool:
    """A search or filter matches the name, the agent or the state word, any case; a single
    capital state letter (R, Q, S, T, Z) matches that state only."""
    if not query.strip():
        return True
    if query.strip() in _LETTERS:
        return session.state is _LETTERS[query.strip()]
    q = query.strip().lower()
    return q in session.name.lower() or q in session.agent.lower() or q == session.state.value


@dataclass(slots=True)
class View:
    """The rows to show: ``keys`` (SIDs, and ``agent:NAME`` headings in the tree view)."""

    spec: ViewSpec = field(default_factory=ViewSpec)
    keys: list[int | str] = field(default_factory=list)
    headings: dict[str, Heading] = field(default_factory=dict)
    prefixes: Prefixes = field(default_factory=Prefixes)
    #: the sort key of every shown session; the shown sessions and their keys, ascending
    shown: dict[int, Any] = field(default_factory=dict)
    ascending: list[int] = field(default_factory=list)
    ordered: list[Any] = field(default_factory=list)

    def visible(self, session: SessionInfo) -> bool:
        return ((self.spec.show_terminated or session.state is not State.TERMINATED)
                and matches(session, self.spec.filter))

    def rebuild(self, sessions: Mapping[int, SessionInfo]) -> None:
        key_of = BY_KEY[self.spec.sort].sort
        pairs = sorted((key_of(s), s.id) for s in sessions.values() if self.visible(s))
        self.shown = dict((sid, key) for key, sid in pairs)
        self._set(pairs, sessions)

    def _set(self, pairs: list[tuple[Any, int]], sessions: Mapping[int, SessionInfo]) -> None:
        """Take a new ascending order of ``(sort key, sid)``."""
        self.ordered = [key for key, _ in pairs]
        self.ascending = [sid for _, sid in pairs]
        if self.spec.tree:
            self._tree(sessions, [sessions[sid] for sid in self.ascending])
            return
        self.headings, self.prefixes = {}, Prefixes()
        self.keys = cast(list[int | str], self.ascending[::-1] if self.spec.reverse else self.ascending)

    def update(self, sessions: Mapping[int, SessionInfo], changed: Iterable[int],
               before: Mapping[int, SessionInfo | None]) -> bool:
        """Take changed sessions into account; True when the order of rows changed."""
        key_of = BY_KEY[self.spec.sort].sort
        moves = []
        for sid in changed:
            session = sessions[sid]
            new = key_of(session) if self.visible(session) else None
            old = self.shown.get(sid)
            if old != new or (self.spec.tree and _tree_moved(before.get(sid), session)):
                moves.append((sid, old, new))
            elif self.spec.tree and new is not None:
                self._retotal(before.get(sid), session)
        if not moves:
            return False
        self._move(moves)
        if self.spec.tree:
            self._tree(sessions, [sessions[sid] for sid in self.ascending])
        else:
            self.keys = cast(list[int | str], self.ascending[::-1] if self.spec.reverse else self.ascending)
        return True

    def _move(self, moves: list[tuple[int, Any, Any]]) -> None:
        """Take the moved rows out and put them back in place, in a few list slices: the
        cost is a copy of the order (C speed) plus a bisection per moved row."""
        gone = sorted(bisect.bisect_left(self.ordered, old) for _, old, _ in moves if old is not None)
        ordered: list[Any] = []
        ascending: list[int] = []
        start = 0
        for i in gone:
            ordered += self.ordered[start:i]
            ascending += self.ascending[start:i]
            start = i + 1
        ordered += self.ordered[start:]
        ascending += self.ascending[start:]
        arriving = sorted((new, sid) for sid, _, new in moves if new is not None)
        self.ordered, self.ascending, start = [], [], 0
        for key, sid in arriving:
            i = bisect.bisect_left(ordered, key, start)
            self.ordered += ordered[start:i]
            self.ascending += ascending[start:i]
            self.ordered.append(key)
            self.ascending.append(sid)
            start = i
        self.ordered += ordered[start:]
        self.ascending += ascending[start:]
        for sid, _, new in moves:
            if new is None:
                self.shown.pop(sid, None)
            else:
                self.shown[sid] = new

    def _retotal(self, before: SessionInfo | None, session: SessionInfo) -> None:
        heading = self.headings.get(f"agent:{session.agent}")
        if heading is not None and before is not None:
            heading.tokens += session.context_tokens - before.context_tokens
        if heading is not None:
            if session.spend is None:
                heading.spends.pop(session.id, None)
            else:
                heading.spends[session.id] = session.spend

    def _tree(self, sessions: Mapping[int, SessionInfo], shown: list[SessionInfo]) -> None:
        """Agents, their sessions, forks under their parents and sessions under the session of
        the same agent that spawned them (siblings in the sort order)."""
        children: dict[int | None, list[SessionInfo]] = {}
        by_agent: dict[str, list[SessionInfo]] = {}
        roots: dict[str, list[SessionInfo]] = {}
        for s in shown:
            parent = s.parent if s.parent in self.shown else None
            if parent is None and s.spawned_by in self.shown and sessions[s.spawned_by].agent == s.agent:
                parent = s.spawned_by
            children.setdefault(parent, []).append(s)
            by_agent.setdefault(s.agent, []).append(s)
            if parent is None:
                roots.setdefault(s.agent, []).append(s)
        if self.spec.reverse:
            for kids in (*children.values(), *roots.values()):
                kids.reverse()
        self.keys, self.prefixes, self.headings = [], Prefixes(), {}
        for agent in sorted(by_agent):
            members = by_agent[agent]
            key = f"agent:{agent}"
            self.headings[key] = Heading(agent, len(members), sum(s.context_tokens for s in members),
                                         {s.id: s.spend for s in members if s.spend is not None})
            self.keys.append(key)
            tops = roots.get(agent, [])
            for i, root in enumerate(tops):
                self._walk(root, children, i == len(tops) - 1)

    def _walk(self, root: SessionInfo, children: dict[int | None, list[SessionInfo]], last: bool) -> None:
        """Rows of ``root``'s subtree, depth first, with an explicit stack: a fork chain
        thousands of levels deep is as good a tree as a shallow one, in time and memory
        linear in its rows."""
        stack: list[tuple[SessionInfo, Branch | None, bool]] = [(root, None, last)]
        while stack:
            session, up, last = stack.pop()
            self.keys.append(session.id)
            branch = self.prefixes[session.id] = Branch(up, last)
            kids = children.get(session.id, [])
            stack.extend((kid, branch, i == len(kids) - 1) for i, kid in reversed(list(enumerate(kids))))


def _tree_moved(before: SessionInfo | None, after: SessionInfo) -> bool:
    return (before is None or before.parent != after.parent or before.agent != after.agent
            or before.spawned_by != after.spawned_by)
