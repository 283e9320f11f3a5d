"""Budgets: ``limit`` sets what a session, or an agent's sessions together, may spend in a
period (``model.budgets``); ``budgets`` reads the spend against each limit. The engine checks
them before it starts a run (``verdict``): over a cap, the session is suspended with reason
``budget`` instead (a run under way finishes); raising the limit (or a new period) resumes it.

A limit follows its lineage, whichever face forks or spawns: it holds its own sessions and
every session forked from one of them or spawned by one (through a session's MCP server,
``spawned_by``), at any depth, whatever agent that names; and their spend counts against it
together. So a fork of a capped session is capped by the same limit, sharing what is left of
it, and a spawn cannot leave its spawner's agent's cap behind: neither can multiply a budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import budgets
from ..model.budgets import Spend
from ..model.calls import Call
from ..model.errors import InvalidArgument
from ..model.outcomes import Limited
from ..model.records import Budget
from ..model.states import State
from ..store import Row, Tx, limits, rows
from .base import Calls
from .syscall import Act, syscall

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
        before = await limits.limit_of(act.tx, owner)
        if clear:
            if before is None:
                raise InvalidArgument(f"{_who(sid, agent)} has no limit")
            await limits.drop_limit(act.tx, before["id"])
        else:
            if all(v is None for v in caps.values()) and per is None:
                raise InvalidArgument("give a cap (--tokens, --cost, --time, --runs), --per, or --clear")
            merged = {k: caps[k] if caps[k] is not None else (before[k] if before is not None else None) for k in caps}
            when = budgets.period(per or (before["per"] if before is not None else "day"))
            await limits.put_limit(act.tx, owner, merged, when)
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
                found = await limits.agent_named(tx, agent)
                if found is None:
                    raise InvalidArgument(f"no agent {agent}")
                owner = ("agent_id", found)
            return await spent(tx, sid, owner, tx.now)


@dataclass(slots=True, frozen=True)
class Verdict:
    """What the engine makes of a session's budgets before a run: ``over`` (why it may not run),
    ``warn`` (caps past ``budgets.WARN`` not told of yet this period: the limits' ids)."""

    over: str | None
    warn: list[tuple[int, str]]


async def verdict(tx: Tx, sid: int, now: float) -> Verdict:
    over, warn = None, []
    row = await rows.session(tx, sid)
    own = {("session", str(sid)), ("agent", row["agent"])}
    for b in await spent(tx, sid, None, now):
        whose = f"its {b.scope} budget" if (b.scope, b.name) in own else f"the budget of {b.scope} {b.name}"
        for cap, part in b.used.items():
            if part >= 1 and over is None:
                over = f"{whose}: {cap} {_figure(cap, b.spend[cap])} of {_figure(cap, b.caps[cap])}" \
                       f" {'in total' if b.per == 'total' else 'this ' + b.per}"
            elif part >= budgets.WARN and b.warned != budgets.period_start(b.per, now):
                warn.append((b.id, f"{int(part * 100)}% of {whose}'s {cap}"
                                   f" ({_figure(cap, b.spend[cap])} of {_figure(cap, b.caps[cap])})"))
    return Verdict(over, warn)


async def release(tx: Tx) -> list[int]:
    """Resume the sessions the budget suspended that are under it now (a raised limit, a new
    period); returns them."""
    resumed = []
    for r in await limits.budget_suspended(tx):
        if (await verdict(tx, r["id"], tx.now)).over is None:
            await rows.update_session(tx, r["id"], state=r["resume_to"] or State.SLEEPING.value, resume_to=None,
                                      reason=None)
            resumed.append(r["id"])
    return resumed


async def spends(tx: Tx, sids: list[int]) -> dict[int, float]:
    """Each of ``sids``' largest part of a cap spent, of the budgets that hold it (its own, its
    agent's, its lineage's); sessions with none are left out. One read when no limit exists at
    all (most workspaces); else two a limit, whatever the number of sessions."""
    found = await limits.every_limit(tx)
    if not found or not sids:
        return {}
    wanted = set(sids)
    out: dict[int, float] = {}
    for r in found:
        owner = _owner(r)
        part = max((await _budget(tx, r, tx.now)).used.values(), default=0.0)
        for sid in await limits.held(tx, owner):
            if sid in wanted:
                out[sid] = max(out.get(sid, 0.0), part)
    return out


async def spent(tx: Tx, sid: int | None, owner: tuple[str, int] | None, now: float) -> list[Budget]:
    """The limits that hold session ``sid`` (its own first, then its lineage's: the sessions it
    was forked from or spawned by, at any depth, then their agents'), or ``owner``'s, or all;
    each with what was spent in its period."""
    if sid is not None:
        sessions, agents = await limits.lineage(tx, sid)
        found = sorted(await limits.limits_over(tx, sessions, agents),
                       key=lambda r: (r["session_id"] is None, r["session_id"] != sid, r["id"]))
    elif owner is not None:
        found = [] if (mine := await limits.limit_of(tx, owner)) is None else [mine]
    else:
        found = await limits.every_limit(tx)
    return [await _budget(tx, row, now) for row in found]


def _owner(row: Row) -> tuple[str, int]:
    """Whose limit ``row`` is: ``("session_id", SID)`` or ``("agent_id", AGENT_ID)``."""
    return ("session_id", row["session_id"]) if row["session_id"] is not None else ("agent_id", row["agent_id"])


async def _budget(tx: Tx, row: Row, now: float) -> Budget:
    start = budgets.period_start(row["per"], now)
    owner = _owner(row)
    if owner[0] == "session_id":
        scope, name = "session", str(owner[1])
    else:
        scope, name = "agent", await limits.agent_name(tx, owner[1])
    tokens, cost, secs, runs = await limits.spend(tx, owner, now, start)
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
