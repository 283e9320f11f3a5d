"""The reads: what faces show. Each is one read transaction (a consistent view of every
table it looks at); none writes, none is journaled."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final, cast

from ..model import agent_homes, allowed, hosts, limits, runner_spec
from ..model.errors import InvalidArgument, NotFound, SessionNotFound
from ..model.records import (
    AgentHome,
    Checkpoint,
    Fold,
    Holder,
    ContextItem,
    JournalEntry,
    LogChunk,
    Message,
    MoveInfo,
    Resource,
    RunInfo,
    SessionDetail,
    SessionInfo,
    TriggerInfo,
    Worktree,
)
from ..model.allowed import ToolUse
from ..model.traces import FORKED, MERGED, Link, RunTrace
from ..model.search import Found, Query
from ..model.states import State
from ..store import Tx, checkpoints, journal, messages, requests, rows, runlog, search, sessions, tokens
from ..store.sessions import PS_SORTS as PS_SORTS  # the columns ``ps`` sorts by: what faces offer
from . import history
from .base import Calls
from .budgets import spends
from .budgets import spent as budget_reads

_STATES = {s.value: s for s in State}


@dataclass(slots=True, frozen=True)
class Whereabouts:
    """What a host cell shows besides the host, read once for a page of rows: the hosts whose
    engine died (``lost_hosts``), and the sessions on their way to another host, to which."""

    lost: frozenset[str] = frozenset()
    moving: Mapping[int, str] = field(default_factory=dict)


NOWHERE: Final = Whereabouts()


async def whereabouts(tx: Tx) -> Whereabouts:
    return Whereabouts(await lost_hosts(tx), await sessions.moving(tx))


def _info(r: Sequence[Any], trigs: Sequence[TriggerInfo] = (), worktree: Worktree | None = None,
          spend: float | None = None, where: Whereabouts = NOWHERE) -> SessionInfo:
    """A ``SessionInfo`` from a row of ``rows.PS_COLUMNS`` (read by position: this runs 100,000
    times when a monitor opens a big workspace)."""
    return SessionInfo(r[0], r[1], r[2], r[3], r[4], _STATES[r[5]], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
                       r[13], r[14], r[15], r[16], r[17], bool(r[18]), r[19], r[20], r[21], r[22], r[23],
                       tuple(trigs), r[24], r[25], r[26], r[27], "agent" if r[28] else "procession", r[29], r[30],
                       bool(r[31]), r[32], r[33], r[34], r[35], r[36], r[36] in where.lost, worktree, spend=spend,
                       moving=where.moving.get(r[0]))


#: Sessions read from SQLite at a time by ``ps``.
PS_BATCH = 2000
#: How far back (journal rows) a face first looks for the restarts of the engine running now.
RESTARTS_LOOKED = 2000
#: How many messages ``grep`` shows unless told.
GREP_LIMIT = 20


_HEAD = SessionInfo.__slots__[:24]
_TAIL = SessionInfo.__slots__[25:29]
_LAST = SessionInfo.__slots__[30:]  # after context_source: the rest of the row, as it stands


def _info_json(r: Sequence[Any], trigs: Sequence[TriggerInfo] = (), worktree: Worktree | None = None,
               spend: float | None = None, where: Whereabouts = NOWHERE) -> dict[str, Any]:
    """``_info(r, trigs, worktree).to_json()``, in a third of the time (the state is stored as
    its value)."""
    data = {"sid": r[0]}  # and "id", its old name, for one release (``SessionInfo.to_json``)
    data.update(zip(_HEAD, r))
    data["armed"] = bool(r[18])
    data["triggers"] = [t.to_json() for t in trigs]
    data.update(zip(_TAIL, r[24:28]))
    data["context_source"] = "agent" if r[28] else "procession"
    data.update(zip(_LAST, r[29:]))
    data["adopted"] = bool(r[31])
    data["host_lost"] = r[36] in where.lost
    data["worktree"] = worktree.to_json() if worktree else None
    data["outside"] = None
    data["spend"] = spend
    data["moving"] = where.moving.get(r[0])
    return data


class ReadCalls(Calls):
    async def ps(self, *, all: bool = False, agent: str | None = None, state: str | None = None,
                 sort: str | None = None, reverse: bool = False, limit: int | None = None) -> list[SessionInfo]:
        """The process table. Reads session rows and triggers only, never messages."""
        return [s async for batch in self.ps_batches(all=all, agent=agent, state=state, sort=sort, reverse=reverse,
                                                      limit=limit) for s in batch]

    async def ps_batches(self, *, all: bool = False, agent: str | None = None, state: str | None = None,
                         sort: str | None = None, reverse: bool = False, limit: int | None = None,
                         size: int = PS_BATCH) -> AsyncGenerator[list[SessionInfo], None]:
        """The process table a batch at a time, from one consistent read, sorted by ``sort``
        (a column of ``PS_SORTS``; SID by default, ties by SID) and cut at ``limit`` rows in
        SQL: memory flat in the number of sessions, and the cost of ``--limit 50`` that of 50
        rows plus the sort. Each batch reads the triggers of its own sessions only."""
        async with aclosing(self._ps_rows(all, agent, state, sort, reverse, limit, size)) as pages:
            async for found, trigs, wts, spends, where in pages:
                yield [_info(r, trigs.get(r[0], ()), wts.get(r[0]), spends.get(r[0]), where) for r in found]

    async def ps_json_batches(self, *, all: bool = False, agent: str | None = None, state: str | None = None,
                              sort: str | None = None, reverse: bool = False, limit: int | None = None,
                              size: int = PS_BATCH) -> AsyncGenerator[list[dict[str, Any]], None]:
        """``ps_batches`` as ``SessionInfo.to_json`` dicts, made from the rows directly (no
        record in between): what ``ps --json`` prints for 100,000 sessions."""
        async with aclosing(self._ps_rows(all, agent, state, sort, reverse, limit, size)) as pages:
            async for found, trigs, wts, spends, where in pages:
                yield [_info_json(r, trigs.get(r[0], ()), wts.get(r[0]), spends.get(r[0]), where) for r in found]

    async def _ps_rows(self, all: bool, agent: str | None, state: str | None, sort: str | None, reverse: bool,
                       limit: int | None, size: int,
                       ) -> AsyncGenerator[tuple[list[tuple[Any, ...]], dict[int, list[TriggerInfo]],
                                             dict[int, Worktree], dict[int, float], Whereabouts], None]:
        if state is not None and state not in _STATES:
            raise InvalidArgument(f"unknown state {state!r}; states are {', '.join(_STATES)}")
        if sort is not None and sort not in PS_SORTS:
            raise InvalidArgument(f"cannot sort by {sort!r}; columns are {', '.join(PS_SORTS)}")
        async with self.store.snapshot() as tx:
            around = await whereabouts(tx)
            async with aclosing(sessions.listed(tx, terminated=all or state == State.TERMINATED, agent=agent,
                                                state=state, sort=sort or "sid", reverse=reverse, limit=limit,
                                                size=size)) as batches:
                async for found in batches:
                    ids = [r[0] for r in found]
                    yield (found, await sessions.triggers_of(tx, ids), await sessions.worktrees_of(tx, ids),
                           await spends(tx, ids), around)

    async def changes(self, since: int = 0, *, after: int = 0, limit: int = -1) -> tuple[int, list[SessionInfo]]:
        """Sessions changed after revision ``since`` (every session for 0), in SID order from
        ``after`` on, at most ``limit`` of them; and the revision they bring the reader to.
        A monitor asks for this on each tick and redraws only them; it reads a big workspace
        a page at a time, so that its first screen does not wait for the last row."""
        async with self.store.snapshot() as tx:
            rev = await sessions.revision(tx)
            found, trigs, wts = await sessions.changed(tx, since, after, limit)
            spent = await spends(tx, [r[0] for r in found])
            where = await whereabouts(tx) if found else NOWHERE
        return rev, [_info(r, trigs.get(r[0], ()), wts.get(r[0]), spent.get(r[0]), where) for r in found]

    async def activity(self, window_s: float = 60.0) -> dict[str, Any]:
        """What a monitor's header shows besides its own rows: recent firings, live runs, this
        host's engine and every host's, whether the sessions live on more than one host."""
        async with self.store.snapshot() as tx:
            fired = await journal.wakes_since(tx, tx.now - window_s)
            running, frozen = await runlog.live_counts(tx)
            now = await tx.clock()
            engines = [(holder, _alive(now, holder)) for holder in (Holder(*r) for r in await rows.leases(tx))]
            here = hosts.this()
            several = await sessions.several_hosts(tx, here)
        return {
            "fired": fired, "running": running, "frozen": frozen,
            "engine": next(({"pid": h.pid, "host": h.host, "slots": h.slots} for h, alive in engines
                            if alive and h.host == here), None),
            "engines": [{"host": h.host, "pid": h.pid, "machine": h.machine, "slots": h.slots, "alive": alive,
                         "silent": max(0.0, now - h.heartbeat)} for h, alive in engines],
            "several_hosts": several or any(h.host != here for h, _ in engines),
        }

    async def info(self, sid: int) -> SessionInfo:
        """One row of the process table."""
        async with self.store.snapshot() as tx:
            return await _ps_info(tx, sid)

    async def show(self, sid: int, *, last: int | None = None) -> SessionDetail:
        """Everything about one session, its active context included (only its ``last`` items,
        when given: what they cost, not what the whole history does)."""
        async with self.store.snapshot() as tx:
            in_force = await history.folds(tx, sid)  # none for no session: _detail says it is not found
            return await self._detail(tx, sid, in_force, await history.context(tx, sid, in_force, last=last))

    async def show_batches(self, sid: int) -> AsyncGenerator[SessionDetail, None]:
        """``show(sid)`` from one consistent read, its context a batch at a time: the first
        detail yielded carries everything and the first batch, each later one (the same detail
        otherwise) the next batch. A history no fold hides is streamed, memory flat in its
        length; a compressed one is read as its context (outside the folds, their summaries
        and what they protect) and comes in one batch."""
        async with self.store.snapshot() as tx:
            await _ps_info(tx, sid)
            in_force = await history.folds(tx, sid)
            if in_force:
                yield await self._detail(tx, sid, in_force, await history.context(tx, sid, in_force))
                return
            detail = await self._detail(tx, sid, in_force, [])
            sent = False
            async with aclosing(history.batches(tx, sid)) as pages:
                async for batch in pages:
                    yield dataclasses.replace(detail, context=tuple(history.active(batch, ())))
                    sent = True
            if not sent:
                yield detail

    async def _detail(self, tx: Tx, sid: int, in_force: Sequence[Fold], items: Sequence[ContextItem]) -> SessionDetail:
        info = await _ps_info(tx, sid)
        system, fail_limit, restart, quiet, agent_quiet, env, passed, ref, tokenizer, scale, samples = (
            await sessions.settings(tx, sid))
        memory = await rows.memory(tx, sid)
        res = await rows.resources(tx, sid)
        cps = await checkpoints.checkpoints(tx, sid)
        return SessionDetail(
            info=info,
            system=system,
            memory={k: json.loads(v) for k, v in sorted(memory.items())},
            resources=tuple(Resource(*r) for r in res),
            context=tuple(items),
            folds=tuple(in_force),
            checkpoints=tuple(Checkpoint(*c) for c in cps),
            tokenizer=tokens.describe(self.tokenizer, tokenizer, scale, samples),
            token_scale=scale,
            fail_limit=fail_limit,
            restart=restart,
            quiet=bool(quiet),
            agent_quiet=bool(agent_quiet),
            budgets=tuple(await budget_reads(tx, sid, None, tx.now)),
            env=json.loads(env) if env else {},
            passed=tuple(json.loads(passed)) if passed else (),
            agent_ref=json.loads(ref) if ref else None,
            move=await last_move(tx, sid),
            agent_home=await self._agent_home(info, json.loads(ref) if ref else None),
        )

    async def _agent_home(self, info: SessionInfo, ref: dict[str, Any] | None) -> AgentHome | None:
        """The state folder of the session's agent CLI (its agent session's, else its runner's), if it has one."""
        cli = str(ref["cli"]) if ref else runner_spec.parse(info.runner).cli
        if cli not in agent_homes.VARIABLES:
            return None
        return await asyncio.to_thread(agent_homes.shown, self.path, info.uuid, cli)

    async def history(self, sid: int, lo: int = 0, hi: int | None = None) -> list[Message]:
        """The whole history (archived messages included), through the fork chain."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            return await history.read(tx, sid, lo, hi)

    async def history_batches(self, sid: int, lo: int = 0, hi: int | None = None, *,
                              tail: int | None = None) -> AsyncGenerator[list[Message], None]:
        """Positions ``lo < seq <= hi`` of the history (the last ``tail`` of them, when given),
        in order, a batch at a time, all from one consistent read: memory flat in the history
        length. The store is held until the iteration ends (or the iterator is closed)."""
        async with self.store.snapshot() as tx:
            row = await rows.session(tx, sid)
            if tail is not None:
                hi = row["length"] if hi is None else min(hi, row["length"])
                lo = max(lo, hi - tail)
            async with aclosing(history.batches(tx, sid, lo, hi)) as pages:
                async for batch in pages:
                    yield batch

    async def context(self, sid: int) -> list[ContextItem]:
        """The active context: what a runner is given."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            return await history.context(tx, sid)

    async def context_curve(self, sid: int, points: int = 60) -> list[int]:
        """Active-context tokens after each of ``points`` evenly spaced history positions
        (as the folds in force now would count them): a curve for a sparkline, read with
        one indexed lookup per point, never a scan."""
        async with self.store.snapshot() as tx:
            row = await rows.session(tx, sid)
            length = row["length"]
            if length == 0:
                return [row["system_tokens"]]
            in_force = await history.folds(tx, sid)
            marks = sorted({max(1, round(length * (i + 1) / points)) for i in range(points)})
            curve = []
            for seq in marks:
                saved = sum(f.archived_tokens - f.summary_tokens for f in in_force if f.hi <= seq)
                curve.append(row["system_tokens"] + await history.cum_tokens(tx, sid, seq) - saved)
        return curve

    async def memory_get(self, sid: int, key: str) -> Any:
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            value = await rows.memory_value(tx, sid, key)
        if value is None:
            raise NotFound(f"session {sid} has no memory key {key!r}")
        return json.loads(value)

    async def triggers(self, sid: int) -> list[TriggerInfo]:
        return list((await self.info(sid)).triggers)

    async def restarts(self, after: int | None = None) -> tuple[int, list[JournalEntry]]:
        """What the engine did by itself that faces tell the user of: the runs it started again
        by a session's restart policy (``set --restart``), and the notifications it could not
        send (``engine.notify``: said once an engine runs, where a log line would reach no
        one under the monitor); journaled after row ``after`` (None: since the engines running
        now started, among the last ``RESTARTS_LOOKED`` rows); and the journal's last row, to go on from."""
        async with self.store.snapshot() as tx:
            tip = await journal.tip(tx)
            found = await journal.told(tx, tip, after, RESTARTS_LOOKED)
        return tip, [_entry(r) for r in found]

    async def grep(self, text: str, *, agent: str | None = None, host: str | None = None,
                   since: float | None = None, role: str | None = None, limit: int = GREP_LIMIT) -> list[Found]:
        """The messages of every session holding each word and "quoted phrase" of ``text``,
        best first, from the store's full-text index (never a scan); a message a fork shares
        with its parent is found once, in the session that holds it, with the forks that share
        it; a compressed-away one is found too, marked archived."""
        query = Query.parse(text)
        if role is not None and role not in limits.ROLES:
            raise InvalidArgument(f"bad role {role!r}; roles are {', '.join(limits.ROLES)}")
        if limit < 1:
            raise InvalidArgument("a search shows at least one message (--limit 1 or more)")
        async with self.store.snapshot() as tx:
            hits = await search.find(tx, query, agent=agent, host=host, since=since, role=role, limit=limit)
            forks = await search.forks_holding(tx, [(r[0], r[4]) for r in hits])
        return [Found(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], float(r[9]), bool(r[10]),
                      tuple(forks[(r[0], r[4])])) for r in hits]

    async def journal(self, sid: int | None = None, limit: int = 50) -> list[JournalEntry]:
        """The newest ``limit`` journal rows (of one session, when ``sid`` is given), oldest first."""
        async with self.store.snapshot() as tx:
            if sid is not None:
                await rows.session(tx, sid)
            found = await journal.newest(tx, limit, sid)
        return [_entry(r) for r in found]

    async def run_log(self, sid: int, run: int | None = None, *, after: int = 0,
                      last: int | None = None) -> tuple[RunInfo, list[LogChunk]]:
        """What a run's step printed (the session's last run by default), from log row ``after``
        on (only its ``last`` rows, when given: a page's tail costs that, whatever the run
        printed): for ``procession logs`` and the detail view, which follow a live run this way."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            found = await runlog.run_of(tx, sid, run)
            if found is None:
                raise NotFound(f"session {sid} has no run {run}" if run else f"session {sid} has had no run yet")
            chunks = await runlog.output(tx, found["id"], after, last)
        return run_info(found), [LogChunk(*c) for c in chunks]

    async def runs(self, sid: int | None = None, limit: int = 100) -> list[RunInfo]:
        async with self.store.snapshot() as tx:
            if sid is not None:
                await rows.session(tx, sid)
            found = await runlog.newest(tx, limit, sid)
        return [run_info(r) for r in found]

    async def tool_uses(self, sid: int, runs: Sequence[int]) -> list[ToolUse]:
        """The tool calls session ``sid``'s runs ``runs`` made, in order, each with how it came
        to run (``model.allowed``): unasked, by the session's permissions, a rule, a person (who),
        an answer carried over, refused, or withdrawn; and what the kernel refused it."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            return (await _tool_uses(tx, sid, runs))[0]

    async def traced_runs(self, engine: str, since: float, limit: int = 100) -> list[RunTrace]:
        """The runs engine ``engine`` (its lease's token) ran that ended at ``since`` or later,
        oldest end first, each as its trace holds it (``model.traces``): for the engine's
        OpenTelemetry export, read from the store alone."""
        async with self.store.snapshot() as tx:
            return [await _trace(tx, r) for r in await runlog.ended_by(tx, engine, since, limit)]

    async def ended_runs(self, after: float, limit: int = 20) -> list[RunInfo]:
        """The runs of any session that ended after ``after``, newest first, at most ``limit``
        (found by the index of their ends, whatever the runs)."""
        async with self.store.snapshot() as tx:
            return [run_info(r) for r in await runlog.ended_after(tx, after, limit)]


def _entry(r: Any) -> JournalEntry:
    return JournalEntry(r["id"], r["ts"], r["actor"], r["call"], r["session_id"], r["other_id"], json.loads(r["args"]),
                        json.loads(r["outcome"]), r["who"])


async def _tool_uses(tx: Tx, sid: int, runs: Sequence[int]) -> tuple[list[ToolUse], list[Any], dict[float, str]]:
    """The tool calls of ``runs`` with how each came to run; what the runs asked, and who
    answered at each time (``model.allowed``)."""
    calls = await messages.tool_calls(tx, sid, runs)
    asked = await requests.of_runs(tx, sid, runs)
    who = await journal.answerers(tx, sid, [a["answered"] for a in asked if a["answered"] is not None])
    return allowed.uses([(seq, json.loads(meta), created) for seq, meta, created in calls], asked, who), asked, who


async def _trace(tx: Tx, r: Any) -> RunTrace:
    """Run ``r`` as its trace holds it: its tool calls and what let each run, what it asked
    that no call answers to, and the runs of other sessions it follows from (its session's
    parent, for a fork's first run; the forks merged into its session since its last run)."""
    sid, run = r["session_id"], r["id"]
    row = await rows.session(tx, sid)
    tools, asked, who = await _tool_uses(tx, sid, [run])
    answered = {u.request for u in tools}
    unmatched = tuple({"request": a["id"], "tool": a["tool"], "asked": a["asked"], "answer": a["answer"],
                       "answered": a["answered"], "by": who.get(a["answered"], a["answered_by"])}
                      for a in asked if a["id"] not in answered)
    links = []
    before = await runlog.previous(tx, sid, run)
    if before is None and row["parent_id"] is not None:
        parent = await rows.session(tx, row["parent_id"])
        links.append(Link(FORKED, parent["uuid"], parent["id"], await runlog.before(tx, parent["id"], row["created"]),
                          row["fork_seq"]))
    for source, when in await journal.merged_into(tx, sid, before["started"] if before else 0.0, r["started"]):
        merged = await rows.session(tx, source)
        links.append(Link(MERGED, merged["uuid"], source, await runlog.before(tx, source, when)))
    return RunTrace(run_info(r), row["uuid"], row["name"], row["agent"], row["host"], row["runner"], tuple(tools),
                    unmatched, tuple(links))


def run_info(r: Any) -> RunInfo:
    return RunInfo(r["id"], r["session_id"], json.loads(r["cause"]), r["started"], r["ended"], r["outcome"],
                   r["exit_code"], r["pid"], r["tokens_in"], r["tokens_out"], r["error"], r["cache_read"],
                   r["cache_write"], r["status"], r["cost"] or 0.0)


async def _ps_info(tx: Tx, sid: int) -> SessionInfo:
    found = await sessions.listed_row(tx, sid)
    if found is None:
        raise SessionNotFound(sid)
    trigs = await sessions.triggers_of(tx, [sid])
    wts = await sessions.worktrees_of(tx, [sid])
    return _info(found, trigs.get(sid, ()), wts.get(sid), (await spends(tx, [sid])).get(sid), await whereabouts(tx))


async def last_move(tx: Tx, sid: int) -> MoveInfo | None:
    """``sid``'s last move to another host (``calls.moving``), None if it never moved."""
    row = await sessions.last_move(tx, sid)
    if row is None:
        return None
    return MoveInfo(row["session_id"], row["source"], row["target"], row["was"], row["folder"], bool(row["files"]),
                    row["stage"], row["problem"], tuple(json.loads(row["said"])), row["created"], row["updated"])


async def live_holder(tx: Tx, host: str | None = None) -> Holder | None:
    """The engine of ``host`` (default: the host this process is), if it is alive."""
    row = await rows.lease(tx, host or hosts.this())
    if row is None:
        return None
    holder = Holder(*row)
    return holder if _alive(await tx.clock(), holder) else None


async def lost_hosts(tx: Tx) -> frozenset[str]:
    """The hosts whose engine died holding its lease (an engine that stopped gave it back):
    their sessions wait for them, never run elsewhere, until an engine there starts again."""
    found = [Holder(*r) for r in await rows.leases(tx)]
    now = await tx.clock() if found else 0.0
    return frozenset(h.host for h in found if not _alive(now, h))


def _alive(now: float, holder: Holder) -> bool:
    """On the machine its process runs on, an engine is alive while its process is (the same
    pid *and* the same start time: pids are reused), whatever its heartbeat says: a busy
    engine that missed beats is not dead, and its steps must not be taken over. Seen from
    another machine it is alive while its heartbeat is fresh by the workspace's clock
    (``now``, ``Tx.clock``: the one that stamped the beat, whatever this machine's says)."""
    if holder.machine == hosts.machine():
        return process_alive(holder.pid, holder.proc_start)
    return now - holder.heartbeat <= hosts.ENGINE_STALE_S


def process_alive(pid: int, started: float | None) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (None: any process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started is None:
        return True
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.Error:
        return False
