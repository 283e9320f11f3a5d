"""The columns of the process table, for every face: title, width, how a cell reads, how
it sorts.

A cell is a list of ``(text, style)`` parts. A style is a name, not a colour (``state--R``,
``bar--high``, ``cell--muted``): the monitor maps it to a component class of its table, so
themes colour it, and ``ps`` on a terminal ignores it. Everything here is a pure function
of a ``SessionInfo`` and the time, which is what lets the monitor format only the rows on
screen and ``ps`` print the very same cells.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.records import SessionInfo
from ..model.states import State
from . import words
from .lines import open_outside, trigger_kinds
from .words import printable

Parts = list[tuple[str, str]]
STATE_ORDER = {State.WAITING: 0, State.RUNNING: 1, State.READY: 2, State.SUSPENDED: 3, State.SLEEPING: 4,
               State.TERMINATED: 5}
BAR_CELLS = 6
_BLOCKS = " ▏▎▍▌▋▊▉█"


@dataclass(slots=True, frozen=True)
class Column:
    key: str
    title: str
    width: int  # 0: takes the width left over
    right: bool
    sort: Callable[[SessionInfo], Any]
    cell: Callable[[SessionInfo, float], Parts]
    help: str
    grow: bool = False  # takes the width the flexible column has beyond what it needs
    #: the row's identity: it stays at the left while the other columns scroll sideways
    frozen: bool = False


def bar(fraction: float, cells: int = BAR_CELLS) -> Parts:
    """A horizontal bar in eighths of a cell, styled by how full it is."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * cells * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_BLOCKS[part] if part and full < cells else "")
    level = "bar--high" if fraction >= 0.85 else "bar--mid" if fraction >= 0.6 else "bar--low"
    return [(filled, level), (" " * (cells - len(filled)), "bar--empty")]


def _context(s: SessionInfo, now: float) -> Parts:
    fraction = s.context_tokens / s.context_window if s.context_window else 0.0
    return [(f"{words.count(s.context_tokens):>6} ", "")] + bar(fraction)


def _triggers(s: SessionInfo, now: float) -> Parts:
    if not s.triggers:
        return [("-", "cell--muted")]
    kinds = trigger_kinds(s)
    parts = [(kinds, "cell--warning" if "(!)" in kinds else "cell--muted" if "(off)" in kinds else "")]
    if s.last_fired:
        parts.append((f" {words.age(s.last_fired, now)}", "cell--muted"))
    return parts


def _name(s: SessionInfo, now: float) -> Parts:
    parts = [(printable(s.name).replace("\n", " "), "")]
    if not s.armed:
        parts.append((" [unapproved]", "cell--warning"))
    if s.adopted:  # made from an agent CLI's own session
        parts.append((" [adopted]", "cell--muted"))
    if s.worktree is not None:  # forked into a folder of its own: its branch, or a copy
        parts.append((f" [{printable(s.worktree.branch or 'copy').replace(chr(10), ' ')}]", "cell--muted"))
    if s.state is State.TERMINATED and s.reason:
        parts.append((f" ({s.reason}{f' into {s.merged_into}' if s.merged_into else ''})", "cell--muted"))
    elif s.state is State.SUSPENDED and s.reason:  # suspended by the engine: failing
        parts.append((f" ({s.reason})", "cell--warning"))
    if s.status and s.state is State.RUNNING:  # what a running agent is doing, as it happens
        parts.append((f"  ▸ {printable(s.status)}".replace("\n", " "), "cell--muted"))
    elif s.outside is not None:  # its agent's own CLI has it open, outside Procession
        parts.append((f"  ▸ {open_outside(s.outside)}", "cell--warning"))
    return parts


#: How the last run's outcome reads in the table, and its style (failures stand out).
_OUTCOMES = {"ok": ("ok", "outcome--ok"), "failed": ("failed", "outcome--bad"), "timeout": ("timeout", "outcome--bad"),
             "lost": ("lost", "outcome--bad"), "interrupted": ("intr", "outcome--stopped"),
             "cancelled": ("cancel", "outcome--stopped")}


def _last(s: SessionInfo, now: float) -> Parts:
    if s.last_outcome is None:
        return [("-", "cell--muted")]
    text, style = _OUTCOMES.get(s.last_outcome, (s.last_outcome, ""))
    if s.failures > 1:
        text = f"{text}×{s.failures}"
    return [(text, style)]


def _host(s: SessionInfo, now: float) -> Parts:
    return ([(printable(s.host), "")] + ([(" lost", "outcome--bad")] if s.host_lost else [])
            + ([(f"→{printable(s.moving)}", "state--Q")] if s.moving else []))


def _spend(s: SessionInfo, now: float) -> list[tuple[str, str]]:
    if s.spend is None:
        return [("-", "cell--muted")]
    return [(f"{min(s.spend, 9.99) * 100:.0f}%", "bar--high" if s.spend >= 1 else "bar--mid" if s.spend >= 0.8 else "")]


COLUMNS: tuple[Column, ...] = (
    Column("sid", "SID", 5, True, lambda s: s.id, lambda s, n: [(str(s.id), "")], "session id", frozen=True),
    Column("agent", "AGENT", 10, False, lambda s: (s.agent, s.id),
           lambda s, n: [(printable(s.agent), "cell--agent")], "owning agent"),
    Column("host", "HOST", 12, False, lambda s: (s.host, s.id), _host,
           "the host its folder is on, whose engine runs it (lost: that engine died; its runs wait for it; →B: on its"
           " way to host B)"),
    Column("name", "NAME", 0, False, lambda s: (s.name.lower(), s.id), _name,
           "session name (and what a running agent is doing)", frozen=True),
    Column("state", "S", 1, False, lambda s: (STATE_ORDER[s.state], s.id),
           lambda s, n: [(s.state.letter, f"state--{s.state.letter}")],
           "state: R running, W waiting for you, Q ready, S sleeping, T suspended, Z terminated", frozen=True),
    Column("last", "LAST", 9, False, lambda s: (s.failures, s.last_outcome or "", s.id), _last,
           "how the last run ended (×N: failed N times in a row)"),
    Column("priority", "PRI", 4, True, lambda s: (s.priority, s.id), lambda s, n: [(str(s.priority), "")],
           "priority (higher runs first)"),
    Column("context", "CONTEXT", 6 + 1 + BAR_CELLS, False, lambda s: (s.context_tokens, s.id), _context,
           "active-context tokens, and a bar against the window"),
    Column("spend", "SPEND", 5, True, lambda s: (s.spend if s.spend is not None else -1.0, s.id), _spend,
           "the largest part of a cap its budgets (its own, its agent's) have spent this period"),
    Column("messages", "MSGS", 6, True, lambda s: (s.messages, s.id), lambda s, n: [(str(s.messages), "")],
           "items in the active context"),
    Column("triggers", "TRIGGERS", 16, False,
           lambda s: (s.last_fired or -1.0, s.id), _triggers,
           "trigger kinds and when one last fired"),
    Column("active", "ACTIVE", 6, True, lambda s: (s.last_active, s.id),
           lambda s, n: [(words.age(s.last_active, n), "")], "time since last activity"),
    Column("cpu", "CPU%", 5, True, lambda s: (s.cpu or -1.0, s.id),
           lambda s, n: [("-", "cell--muted")] if s.cpu is None else [(f"{s.cpu:.0f}", "")],
           "CPU of a running step (or of the agent's own CLI running it outside)"),
    Column("rss", "RSS", 6, True, lambda s: (s.rss or -1, s.id),
           lambda s, n: [("-", "cell--muted")] if s.rss is None else [(words.size(s.rss), "")],
           "memory of a running step"),
    Column("runner", "RUNNER", 18, False, lambda s: (s.runner, s.id),
           lambda s, n: [(printable(s.runner), "cell--muted")], "runner / model", grow=True),
)
BY_KEY = {c.key: c for c in COLUMNS}
#: HOST is shown where sessions live on more than one host (``shown``), or when asked for
DEFAULT = tuple(c.key for c in COLUMNS if c.key != "host")


def shown(keys: Sequence[str], several_hosts: bool) -> list[str]:
    """The columns ``keys``, with HOST after AGENT when the sessions live on several hosts."""
    if not several_hosts or "host" in keys:
        return list(keys)
    at = keys.index("agent") + 1 if "agent" in keys else 1
    return [*keys[:at], "host", *keys[at:]]


#: The widest a cell of ``ps`` grows before it is cut with ``…`` (the rest take what they need).
TEXT_WIDTHS = {"agent": 12, "host": 16, "name": 28, "runner": 28}


def text_table(rows: Sequence[SessionInfo], now: float) -> str:
    """The process table as the monitor draws it, in plain text (``ps``): the same columns and
    cells (HOST among them where the sessions live on several hosts, or one's host was lost),
    each column as wide as its widest cell counted in terminal cells, so that a name in
    Chinese or with an emoji (two cells a character) keeps the columns after it in line."""
    several = len({s.host for s in rows}) > 1 or any(s.host_lost for s in rows)
    columns = [BY_KEY[k] for k in shown(DEFAULT, several)]
    table = [[c.title for c in columns]]
    for s in rows:
        cells = []
        for c in columns:
            text = "".join(part for part, _ in c.cell(s, now)).replace("\n", " ")
            limit = TEXT_WIDTHS.get(c.key)
            cells.append(words.one_line(text, limit) if limit else text.rstrip())
        table.append(cells)
    widths = [max(words.cell_len(r[i]) for r in table) for i in range(len(columns))]
    return "\n".join("  ".join(words.pad(cell, widths[i], columns[i].right) for i, cell in enumerate(r)).rstrip()
                     for r in table)
