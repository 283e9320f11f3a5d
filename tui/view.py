"""Which sessions the table shows, in which order: filter, sort, tree.

Pure functions of the sessions and a ``ViewSpec``, kept apart from the widgets so that
they can be tested and measured on their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from procession.records import SessionInfo
from procession.states import State

from .columns import BY_KEY
from .table import Row


@dataclass(slots=True)
class ViewSpec:
    sort: str = "sid"
    reverse: bool = False
    tree: bool = False
    show_terminated: bool = True
    filter: str = ""


def matches(session: SessionInfo, query: str) -> bool:
    """A search or filter matches the name, the agent or the state (word or letter), any case."""
    q = query.strip().lower()
    if not q:
        return True
    return (q in session.name.lower() or q in session.agent.lower() or q == session.state.value
            or (len(q) == 1 and q == session.state.letter.lower()))


def visible(sessions: Iterable[SessionInfo], spec: ViewSpec) -> list[SessionInfo]:
    return [s for s in sessions
            if (spec.show_terminated or s.state is not State.TERMINATED) and matches(s, spec.filter)]


def build(sessions: Mapping[int, SessionInfo], spec: ViewSpec) -> list[Row]:
    """The rows to show."""
    shown = visible(sessions.values(), spec)
    shown.sort(key=BY_KEY[spec.sort].sort, reverse=spec.reverse)
    if not spec.tree:
        return [Row(s.id, s) for s in shown]
    return _tree(shown)


def _tree(shown: list[SessionInfo]) -> list[Row]:
    """Agents, their sessions, forks under their parents (siblings in the sort order)."""
    ids = {s.id for s in shown}
    children: dict[int | None, list[SessionInfo]] = {}
    by_agent: dict[str, list[SessionInfo]] = {}
    for s in shown:
        parent = s.parent if s.parent in ids else None
        children.setdefault(parent, []).append(s)
        by_agent.setdefault(s.agent, [])
        if parent is None:
            by_agent[s.agent].append(s)
    rows: list[Row] = []
    for agent in sorted(by_agent):
        members = [s for s in shown if s.agent == agent]
        rows.append(Row(f"agent:{agent}", None, agent, "", len(members), sum(s.context_tokens for s in members)))
        roots = by_agent[agent]
        for i, root in enumerate(roots):
            _walk(root, children, "", i == len(roots) - 1, rows)
    return rows


def _walk(session: SessionInfo, children: dict[int | None, list[SessionInfo]], indent: str, last: bool,
          rows: list[Row]) -> None:
    rows.append(Row(session.id, session, prefix=indent + ("└─ " if last else "├─ ")))
    kids = children.get(session.id, [])
    for i, kid in enumerate(kids):
        _walk(kid, children, indent + ("   " if last else "│  "), i == len(kids) - 1, rows)
