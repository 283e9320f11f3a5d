"""Budgets: ``limit`` sets what a session, or an agent's sessions together, may spend in a
period (``model.budgets``); ``budgets`` reads the spend against each limit. The engine checks
them before it starts a run (``verdict``): over a cap, the session is suspended with reason
``budget`` instead (a run under way finishes); raising the limit (or a new period) resumes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import budgets, limits
from ..model.budgets import Spend
from ..model.calls import Call
from ..model.errors import InvalidArgument
from ..model.outcomes import Limited
from ..model.records import Budget
from ..model.states import Reason, State
from ..store import Row, Tx, rows
from .base import Calls
from .syscall import Act, syscall

#: The spend of runs started since ``?`` (the period's start), of the sessions ``WHERE`` names.
_SPEND = ("SELECT COALESCE(SUM(tokens_in + tokens_out), 0), COALESCE(SUM(cost), 0),"
          " COALESCE(SUM(MAX(0, COALESCE(ended, ?) - started - frozen_s)), 0), COUNT(*) FROM runs"
          " WHERE started >= ? AND outcome IS NOT 'outside' AND session_id IN ")


class BudgetCalls(Calls):
    @syscall(Call.LIMIT, session="sid", check=None)
    async def limit(self, act: Act, sid: int | None = None, *, agent: str | None = None, tokens: float | None = None,
                    cost: float | None = None, seconds: float | None = None, runs: int | None = None,
                    per: str | None = None, clear: bool = False) -> Limited:
        """Set the caps given of session ``sid``'s limit (or agent ``agent``'s: all its sessions
        together), ``per`` day, week, month or in total; ``clear`` removes the limit. Sessions
        the budget had suspended and that are under it now are resumed."""
        if (sid is None) == (agent is None):
            raise InvalidArgument("limit takes a session, or --agent NAME")
        if sid is not None:
            act.row = await rows.session(act.tx, sid)
            owner: tuple[str, int] = ("session_id", sid)
        else:
            owner = ("agent_id", await rows.known_agent(act.tx, str(agent)))
        caps = {"tokens": tokens, "cost": cost, "seconds": seconds, "runs": runs}
        for key, value in caps.items():
            if value is not None and (value < 0 or value != value):
                raise InvalidArgument(f"the {key} limit must be 0 or more")
        before = await act.tx.one(f"SELECT * FROM limits WHERE {owner[0]} = ?", (owner[1],))
        if clear:
            if before is None:
                raise InvalidArgument(f"{_who(sid, agent)} has no limit")
            await act.tx.execute("DELETE FROM limits WHERE id = ?", (before["id"],))
        else:
            if all(v is None for v in caps.values()) and per is None:
                raise InvalidArgument("give a cap (--tokens, --cost, --time, --runs), --per, or --clear")
            merged = {k: caps[k] if caps[k] is not None else (before[k] if before is not None else None) for k in caps}
            when = budgets.period(per or (before["per"] if before is not None else "day"))
            await act.tx.execute(
                f"INSERT INTO limits ({owner[0]}, tokens, cost, seconds, runs, per, made) VALUES (?, ?, ?, ?, ?, ?, ?)"
                f" ON CONFLICT ({owner[0]}) DO UPDATE SET tokens = excluded.tokens, cost = excluded.cost,"
                " seconds = excluded.seconds, runs = excluded.runs, per = excluded.per, warned = NULL",
                (owner[1], *merged.values(), when, act.now))
        resumed = await release(act.tx)
        if sid is not None:
            await act.tx.touch(sid)
        found = await spent(act.tx, sid, owner if sid is None else None, act.now)
        return Limited(sid or 0, agent, tuple(found), tuple(resumed), cleared=clear)

    async def budgets(self, sid: int | None = None, *, agent: str | None = None) -> list[Budget]:
        """The limits over session ``sid`` (its own and its agent's), or agent ``agent``'s, or
        every limit; with what was spent in each one's period."""
        async with self.store.snapshot() as tx:
            if sid is not None:
                await rows.session(tx, sid)
            owner = None
            if agent is not None:
                found = await tx.value("SELECT id FROM agents WHERE name = ?", (agent,))
                if found is None:
                    raise InvalidArgument(f"no agent {agent}")
                owner = ("agent_id", int(found))
            return await spent(tx, sid, owner, tx.now)


@dataclass(slots=True, frozen=True)
class Verdict:
    """What the engine makes of a session's budgets before a run: ``over`` (why it may not run),
    ``warn`` (caps past ``budgets.WARN`` not told of yet this period: the limits' ids)."""

    over: str | None
    warn: list[tuple[int, str]]


async def verdict(tx: Tx, sid: int, now: float) -> Verdict:
    over, warn = None, []
    for b in await spent(tx, sid, None, now):
        for cap, part in b.used.items():
            if part >= 1 and over is None:
                over = f"its {b.scope} budget: {cap} {_figure(cap, b.spend[cap])} of {_figure(cap, b.caps[cap])}" \
                       f" {'in total' if b.per == 'total' else 'this ' + b.per}"
            elif part >= budgets.WARN and b.warned != budgets.period_start(b.per, now):
                warn.append((b.id, f"{int(part * 100)}% of its {b.scope} budget's {cap}"
                                   f" ({_figure(cap, b.spend[cap])} of {_figure(cap, b.caps[cap])})"))
    return Verdict(over, warn)


async def release(tx: Tx) -> list[int]:
    """Resume the sessions the budget suspended that are under it now (a raised limit, a new
    period); returns them."""
    resumed = []
    for r in await tx.all("SELECT id, resume_to FROM sessions WHERE state = 'suspended' AND reason = ?",
                          (Reason.BUDGET.value,)):
        if (await verdict(tx, r["id"], tx.now)).over is None:
            await rows.update_session(tx, r["id"], state=r["resume_to"] or State.SLEEPING.value, resume_to=None,
                                      reason=None)
            resumed.append(r["id"])
    return resumed


async def spends(tx: Tx, sids: list[int]) -> dict[int, float]:
    """Each of ``sids``' largest part of a cap spent, of its budgets (its own, its agent's);
    sessions with none are left out. One read when no limit exists at all (most workspaces)."""
    found = await tx.all("SELECT * FROM limits")
    if not found or not sids:
        return {}
    marks = ",".join("?" * len(sids))
    agents = {sid: agent for sid, agent in await tx.tuples(f"SELECT id, agent_id FROM sessions WHERE id IN ({marks})",
                                                            sids)}
    by_session = {r["session_id"]: r for r in found if r["session_id"] is not None}
    by_agent = {r["agent_id"]: r for r in found if r["agent_id"] is not None}
    parts: dict[int, float] = {}
    out = {}
    for sid in sids:
        over = [r for r in (by_session.get(sid), by_agent.get(agents.get(sid))) if r is not None]
        for r in over:
            if r["id"] not in parts:
                parts[r["id"]] = max((await _budget(tx, r, tx.now)).used.values(), default=0.0)
        if over:
            out[sid] = max(parts[r["id"]] for r in over)
    return out


async def spent(tx: Tx, sid: int | None, owner: tuple[str, int] | None, now: float) -> list[Budget]:
    """The limits over session ``sid`` (its own, its agent's), or ``owner``'s, or all; each
    with what was spent in its period."""
    if sid is not None:
        agent_id = (await rows.session(tx, sid))["agent_id"]
        found = await tx.all("SELECT * FROM limits WHERE session_id = ? OR agent_id = ? ORDER BY agent_id IS NULL DESC",
                             (sid, agent_id))
    elif owner is not None:
        found = await tx.all(f"SELECT * FROM limits WHERE {owner[0]} = ?", (owner[1],))
    else:
        found = await tx.all("SELECT * FROM limits ORDER BY id")
    return [await _budget(tx, row, now) for row in found]


async def _budget(tx: Tx, row: Row, now: float) -> Budget:
    start = budgets.period_start(row["per"], now)
    if row["session_id"] is not None:
        scope, where, arg = "session", "(?)", row["session_id"]
        name = str(row["session_id"])
    else:
        scope, where, arg = "agent", "(SELECT id FROM sessions WHERE agent_id = ?)", row["agent_id"]
        name = str(await tx.value("SELECT name FROM agents WHERE id = ?", (row["agent_id"],)))
    tokens, cost, secs, runs = (await tx.tuples(_SPEND + where, (now, start, arg)))[0]
    spend = Spend(int(tokens), float(cost), float(secs), int(runs))
    caps = {k: row[k] for k in budgets.CAPS}
    return Budget(row["id"], scope, name, row["per"], {k: v for k, v in caps.items() if v is not None},
                  {k: getattr(spend, k) for k in budgets.CAPS}, spend.used(caps), row["warned"],
                  budgets.period_end(row["per"], now))


def _figure(cap: str, value: Any) -> str:
    if cap == "cost":
        return f"${value:.2f}"
    if cap == "seconds":
        return f"{value / 60:.0f} min" if value >= 60 else f"{value:.0f} s"
    return f"{value:,.0f}"


def _who(sid: int | None, agent: str | None) -> str:
    return f"session {sid}" if sid is not None else f"agent {agent}"
