"""The system-call table: every call that reads or changes sessions, in one place.

``Workspace`` wraps an open ``Store``. Each changing call is one ``BEGIN IMMEDIATE``
transaction that first checks the lifecycle table (``states.TABLE``), then writes, then
adds its journal row; any refusal raises a ``ProcessionError`` and the transaction rolls
back, so the store is exactly as it was. The CLI, the monitor and the engine all call these
methods; none of them writes to the store any other way.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from . import history, limits, runners, snapshot, states, triggers
from .errors import (
    ContextTooLarge,
    IllegalTransition,
    InvalidArgument,
    MergeConflict,
    NotFound,
    ProcessionError,
    SessionNotFound,
    SnapshotError,
)
from .merge import MISSING, Link, Resolution, canonical, common_ancestor, three_way
from .records import (
    Checkpoint,
    ContextItem,
    Fold,
    JournalEntry,
    MergeResult,
    Message,
    Resource,
    RunInfo,
    SessionDetail,
    SessionInfo,
    TriggerInfo,
)
from .states import Reason, State
from .store import Clock, Store, Tx
from .summarise import summarise

DEFAULT_WINDOW = 128_000
DEFAULT_KEEP_LAST = 8
#: A lease heartbeat older than this means no engine is running.
ENGINE_STALE_S = 5.0
#: Causes a queued session remembers; older ones are dropped as newer ones arrive.
MAX_CAUSES = 20
CHUNK = 10_000
Progress = Callable[[int, int], None]

R = TypeVar("R")

MEMORY_PUT = (
    "INSERT INTO memory (session_id, key, value, updated) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, updated = excluded.updated"
)
_SESSION_SELECT = "SELECT s.*, a.name AS agent FROM sessions s JOIN agents a ON a.id = s.agent_id"
#: The columns of ``SessionInfo``, in its field order (triggers come from their own table).
PS_COLUMNS = (
    "s.id, s.uuid, s.name, a.name, s.goal, s.state, s.reason, s.priority, s.parent_id, s.fork_seq,"
    " s.merged_into, s.runner, s.window, s.context_tokens, s.context_count, s.length, s.created, s.last_active,"
    " s.armed, s.timeout, s.cwd, s.rev, r.pid, r.cpu, r.rss, r.started"
)
_PS_SELECT = (
    f"SELECT {PS_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id"
    " LEFT JOIN runs r ON r.session_id = s.id AND r.ended IS NULL"
)
_TRIGGER_COLUMNS = "id, session_id, kind, spec, armed, last_fired, fired, pending IS NOT NULL"
_STATES = {s.value: s for s in State}


def syscall(
    call: str, *, session: str | None = "sid", other: str | None = None
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Make a method one atomic, journaled system call.

    The method receives the open transaction after ``self``. Its journal row names the
    ``session`` it acts on and the ``other`` session involved (each an argument name, or
    ``"result"`` for the SID the call returns), the arguments as passed (long texts
    shortened) and the outcome.
    """

    def wrap(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        names: list[str] = []

        @functools.wraps(fn)
        async def method(self: Workspace, *args: Any, **kwargs: Any) -> R:
            if args and not names:  # read on first use: inspect costs import time for every call
                names.extend(list(inspect.signature(fn).parameters)[2:])
            arguments = dict(zip(names, args)) | kwargs
            async with self.store.tx() as tx:
                result = await fn(self, tx, *args, **kwargs)
                named = arguments | {"result": result}
                await tx.journal(self.actor, call, named.get(session) if session else None,
                                 _journal_args(arguments), _plain(result), named.get(other) if other else None)
            return result

        method.call = call  # type: ignore[attr-defined]
        return method

    return wrap


def _journal_args(arguments: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if callable(value):
            continue
        if hasattr(value, "journal"):
            value = value.journal()
        if isinstance(value, str) and len(value) > 200:
            value = f"{value[:200]}… ({len(value)} chars)"
        elif isinstance(value, (list, tuple)) and len(value) > 20:
            value = f"<{len(value)} items>"
        elif is_dataclass(value) and not isinstance(value, type):
            value = asdict(value)
        elif isinstance(value, Path):
            value = str(value)
        out[key] = value
    return out


def _plain(result: Any) -> Any:
    if result is None:
        return "ok"
    if hasattr(result, "journal"):
        return result.journal()
    if isinstance(result, bool):
        return result
    if isinstance(result, int):
        return {"id": result}
    if is_dataclass(result) and not isinstance(result, type):
        return asdict(result)
    return result


def _info(r: Sequence[Any], trigs: Sequence[TriggerInfo] = ()) -> SessionInfo:
    """A ``SessionInfo`` from a row of ``PS_COLUMNS`` (read by position: this runs 100,000
    times when a monitor opens a big workspace)."""
    return SessionInfo(r[0], r[1], r[2], r[3], r[4], _STATES[r[5]], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
                       r[13], r[14], r[15], r[16], r[17], bool(r[18]), r[19], r[20], r[21], tuple(trigs), r[22],
                       r[23], r[24], r[25])


def _triggers_by_session(rows: Iterable[Sequence[Any]]) -> dict[int, list[TriggerInfo]]:
    by_session: dict[int, list[TriggerInfo]] = {}
    for r in rows:
        by_session.setdefault(r[1], []).append(TriggerInfo(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6], bool(r[7])))
    return by_session


class Workspace:
    """An open workspace and the calls that act on it, on behalf of one ``actor``."""

    def __init__(self, store: Store, actor: str = "cli") -> None:
        self.store = store
        self.actor = actor

    @classmethod
    async def open(
        cls, path: Path | str | None = None, *, actor: str = "cli", clock: Clock = time.time, create: bool = True
    ) -> Workspace:
        return cls(await Store.open(path, clock=clock, create=create), actor)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Workspace:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def as_actor(self, actor: str) -> Workspace:
        """The same open workspace, journaling its calls under another actor."""
        return type(self)(self.store, actor)

    @property
    def path(self) -> Path:
        return self.store.path

    @property
    def tokenizer(self) -> str:
        return self.store.tokenizer

    # ------------------------------------------------------------------ helpers

    async def _row(self, tx: Tx, sid: int) -> Any:
        row = await tx.one(f"{_SESSION_SELECT} WHERE s.id = ?", (sid,))
        if row is None:
            raise SessionNotFound(sid)
        return row

    @staticmethod
    def _check(row: Any, call: str) -> State:
        """The state ``call`` leads ``row`` to, or ``IllegalTransition``."""
        state = State(row["state"])
        prior = State(row["resume_to"]) if row["resume_to"] else None
        target = states.next_state(call, state, prior)
        if target is None:
            raise IllegalTransition(call.split("-")[0], row["id"], state, states.reason(call, state))
        return target

    async def _agent_id(self, tx: Tx, name: str) -> int:
        limits.name(name, "agent name")
        found = await tx.value("SELECT id FROM agents WHERE name = ?", (name,))
        if found is not None:
            return int(found)
        cur = await tx.execute("INSERT INTO agents (name, created) VALUES (?, ?)", (name, tx.now))
        return int(cur.lastrowid)

    async def _insert_session(self, tx: Tx, **cols: Any) -> int:
        rev = await tx.rev()
        system = cols.get("system", "")
        system_tokens = self.store.count_tokens(system) if system else 0
        base = {
            "uuid": str(uuid.uuid4()), "state": State.SLEEPING.value, "created": tx.now, "last_active": tx.now,
            "rev": rev, "system_tokens": system_tokens, "context_tokens": system_tokens,
        }
        base.update(cols)
        names = ", ".join(base)
        marks = ", ".join("?" for _ in base)
        cur = await tx.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(base.values()))
        return int(cur.lastrowid)

    async def _set(self, tx: Tx, sid: int, **cols: Any) -> None:
        """Update columns of one session and stamp it changed."""
        cols["rev"] = await tx.rev()
        cols["last_active"] = tx.now
        assignments = ", ".join(f"{k} = ?" for k in cols)
        await tx.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", [*cols.values(), sid])

    async def _append(
        self, tx: Tx, row: Any, messages: Iterable[tuple[Any, ...]],
        progress: Progress | None = None, total: int = 0,
    ) -> int:
        """Append ``(role, content, author, pinned, meta[, created])`` messages to a session's history.

        Tokens are counted here, once; the session's totals move by what was added, so no
        later listing needs to read a message. Returns how many were appended.
        """
        count = self.store.count_tokens
        seq, cum, added_tokens, n = row["length"], row["history_tokens"], 0, 0
        batch: list[tuple[Any, ...]] = []
        sid, now = row["id"], tx.now
        insert = (
            "INSERT INTO messages (session_id, seq, role, content, tokens, cum_tokens, author, pinned, meta, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        for role, content, author, pinned, meta, *when in messages:
            tokens = count(content)
            seq += 1
            cum += tokens
            added_tokens += tokens
            n += 1
            batch.append((sid, seq, role, content, tokens, cum, author, int(pinned),
                          json.dumps(meta) if meta else None, when[0] if when else now))
            if len(batch) >= CHUNK:
                await tx.many(insert, batch)
                batch.clear()
                if progress:
                    progress(n, total)
        if batch:
            await tx.many(insert, batch)
        if progress:
            progress(n, total)
        if n:
            await tx.execute(
                "UPDATE sessions SET length = ?, history_tokens = ?, context_tokens = context_tokens + ?,"
                " context_count = context_count + ?, rev = ?, last_active = ? WHERE id = ?",
                (seq, cum, added_tokens, n, await tx.rev(), now, sid),
            )
        return n

    async def _memory_texts(self, tx: Tx, sid: int) -> dict[str, str]:
        rows = await tx.all("SELECT key, value FROM memory WHERE session_id = ?", (sid,))
        return {r["key"]: r["value"] for r in rows}

    async def _ancestry(self, tx: Tx, sid: int) -> list[Link]:
        rows = await tx.all(
            """
            WITH RECURSIVE chain(id, parent_id, fork_seq, length, base_memory, base_at, depth) AS (
                SELECT id, parent_id, fork_seq, length, base_memory, coalesce(base_at, created), 0
                FROM sessions WHERE id = ?
                UNION ALL
                SELECT s.id, s.parent_id, s.fork_seq, s.length, s.base_memory, coalesce(s.base_at, s.created),
                       c.depth + 1
                FROM sessions s JOIN chain c ON s.id = c.parent_id
            )
            SELECT * FROM chain ORDER BY depth
            """,
            (sid,),
        )
        return [
            Link(r["id"], r["fork_seq"], r["length"], json.loads(r["base_memory"]) if r["base_memory"] else None,
                 r["base_at"])
            for r in rows
        ]

    # ------------------------------------------------------------------ reads

    async def ps(self, *, all: bool = False, agent: str | None = None, state: str | None = None) -> list[SessionInfo]:
        """The process table. Reads session rows and triggers only, never messages."""
        where, params = [], []
        if not all and state != State.TERMINATED:
            where.append("s.state != 'terminated'")
        if agent is not None:
            where.append("a.name = ?")
            params.append(agent)
        if state is not None:
            if state not in {s.value for s in State}:
                raise InvalidArgument(f"unknown state {state!r}; states are {', '.join(s.value for s in State)}")
            where.append("s.state = ?")
            params.append(state)
        sql = _PS_SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY s.id"
        async with self.store.snapshot() as tx:
            rows = await tx.tuples(sql, params)
            trigs = _triggers_by_session(await tx.tuples(f"SELECT {_TRIGGER_COLUMNS} FROM triggers ORDER BY id"))
        return [_info(r, trigs.get(r[0], ())) for r in rows]

    async def changes(self, since: int = 0, *, after: int = 0, limit: int = -1) -> tuple[int, list[SessionInfo]]:
        """Sessions changed after revision ``since`` (every session for 0), in SID order from
        ``after`` on, at most ``limit`` of them; and the revision they bring the reader to.
        A monitor asks for this on each tick and redraws only them; it reads a big workspace
        a page at a time, so that its first screen does not wait for the last row."""
        async with self.store.snapshot() as tx:
            rev = int(await tx.value("SELECT value FROM meta WHERE key = 'rev'"))
            rows = await tx.tuples(f"{_PS_SELECT} WHERE s.rev > ? AND s.id > ? ORDER BY s.id LIMIT ?",
                                   (since, after, limit))
            trigs = _triggers_by_session(await tx.tuples(
                f"SELECT {_TRIGGER_COLUMNS} FROM triggers WHERE session_id IN"
                " (SELECT id FROM sessions WHERE rev > ? AND id > ? ORDER BY id LIMIT ?) ORDER BY id",
                (since, after, limit))) if rows else {}
        return rev, [_info(r, trigs.get(r[0], ())) for r in rows]

    async def activity(self, window_s: float = 60.0) -> dict[str, Any]:
        """What a monitor's header shows besides its own rows: recent firings, live runs, the engine."""
        async with self.store.snapshot() as tx:
            fired = await tx.value("SELECT count(*) FROM journal WHERE call = 'wake' AND ts > ?",
                                   (tx.now - window_s,))
            live = await tx.value("SELECT count(*) FROM runs WHERE ended IS NULL")
            lease = await tx.one("SELECT pid, host, heartbeat, slots FROM lease WHERE id = 1")
        return {
            "fired": int(fired), "running": int(live),
            "engine": dict(lease) if lease is not None and tx.now - lease["heartbeat"] < ENGINE_STALE_S else None,
        }

    async def info(self, sid: int) -> SessionInfo:
        async with self.store.snapshot() as tx:
            return await self._ps_info(tx, sid)

    async def _ps_info(self, tx: Tx, sid: int) -> SessionInfo:
        rows = await tx.tuples(f"{_PS_SELECT} WHERE s.id = ?", (sid,))
        if not rows:
            raise SessionNotFound(sid)
        trigs = _triggers_by_session(await tx.tuples(
            f"SELECT {_TRIGGER_COLUMNS} FROM triggers WHERE session_id = ? ORDER BY id", (sid,)))
        return _info(rows[0], trigs.get(sid, ()))

    async def show(self, sid: int) -> SessionDetail:
        async with self.store.snapshot() as tx:
            info = await self._ps_info(tx, sid)
            system = await tx.value("SELECT system FROM sessions WHERE id = ?", (sid,))
            memory = await self._memory_texts(tx, sid)
            res = await tx.all("SELECT id, kind, uri, mode FROM resources WHERE session_id = ? ORDER BY id", (sid,))
            in_force = await history.folds(tx, sid)
            items = history.active(await history.read(tx, sid), in_force)
            cps = await tx.all("SELECT id, name, seq, created FROM checkpoints WHERE session_id = ? ORDER BY id", (sid,))
        return SessionDetail(
            info=info,
            system=system,
            memory={k: json.loads(v) for k, v in sorted(memory.items())},
            resources=tuple(Resource(*r) for r in res),
            context=tuple(items),
            folds=tuple(in_force),
            checkpoints=tuple(Checkpoint(*c) for c in cps),
            tokenizer=self.tokenizer,
        )

    async def history(self, sid: int, lo: int = 0, hi: int | None = None) -> list[Message]:
        """The whole history (archived messages included), through the fork chain."""
        async with self.store.snapshot() as tx:
            await self._row(tx, sid)
            return await history.read(tx, sid, lo, hi)

    async def context(self, sid: int) -> list[ContextItem]:
        """The active context: what a runner is given."""
        async with self.store.snapshot() as tx:
            await self._row(tx, sid)
            return history.active(await history.read(tx, sid), await history.folds(tx, sid))

    async def context_curve(self, sid: int, points: int = 60) -> list[int]:
        """Active-context tokens after each of ``points`` evenly spaced history positions
        (as the folds in force now would count them): a curve for a sparkline, read with
        one indexed lookup per point, never a scan."""
        async with self.store.snapshot() as tx:
            row = await self._row(tx, sid)
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
            await self._row(tx, sid)
            value = await tx.value("SELECT value FROM memory WHERE session_id = ? AND key = ?", (sid, key))
        if value is None:
            raise NotFound(f"session {sid} has no memory key {key!r}")
        return json.loads(value)

    async def triggers(self, sid: int) -> list[TriggerInfo]:
        return list((await self.info(sid)).triggers)

    async def journal(self, sid: int | None = None, limit: int = 50) -> list[JournalEntry]:
        """The newest ``limit`` journal rows (of one session, when ``sid`` is given), oldest first."""
        async with self.store.snapshot() as tx:
            if sid is None:
                rows = await tx.all("SELECT * FROM journal ORDER BY id DESC LIMIT ?", (limit,))
            else:
                await self._row(tx, sid)
                rows = await tx.all(
                    "SELECT * FROM (SELECT * FROM journal WHERE session_id = ? ORDER BY id DESC LIMIT ?)"
                    " UNION SELECT * FROM (SELECT * FROM journal WHERE other_id = ? ORDER BY id DESC LIMIT ?)"
                    " ORDER BY id DESC LIMIT ?",
                    (sid, limit, sid, limit, limit),
                )
        return [
            JournalEntry(r["id"], r["ts"], r["actor"], r["call"], r["session_id"], r["other_id"],
                         json.loads(r["args"]), json.loads(r["outcome"]))
            for r in reversed(rows)
        ]

    async def runs(self, sid: int | None = None, limit: int = 100) -> list[RunInfo]:
        async with self.store.snapshot() as tx:
            if sid is None:
                rows = await tx.all("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (limit,))
            else:
                await self._row(tx, sid)
                rows = await tx.all("SELECT * FROM runs WHERE session_id = ? ORDER BY id DESC LIMIT ?", (sid, limit))
        return [
            RunInfo(r["id"], r["session_id"], json.loads(r["cause"]), r["started"], r["ended"], r["outcome"],
                    r["exit_code"], r["pid"], r["tokens_in"], r["tokens_out"], r["error"])
            for r in reversed(rows)
        ]

    # ------------------------------------------------------------------ birth

    @syscall("spawn", session="result")
    async def spawn(
        self, tx: Tx, name: str, agent: str, *, system: str = "", goal: str = "", priority: int = 0,
        runner: str = runners.DEFAULT, window: int = DEFAULT_WINDOW, timeout: float | None = None,
        cwd: str | None = None,
    ) -> int:
        """A new sleeping session for ``agent`` (created on first use). Returns its SID."""
        runners.parse(runner)
        folder = cwd or os.getcwd()
        if not os.path.isabs(folder):
            raise InvalidArgument(f"the session folder must be absolute: {folder!r}")
        if not os.path.isdir(folder):
            raise InvalidArgument(f"the session folder {folder} does not exist")
        return await self._insert_session(
            tx, agent_id=await self._agent_id(tx, agent), name=limits.name(name, "session name"),
            system=limits.text(system, "system prompt"), goal=limits.text(goal, "goal"),
            priority=limits.priority(priority), runner=runner, window=limits.window(window),
            timeout=limits.positive(timeout, "timeout"), cwd=folder,
        )

    # ------------------------------------------------------------------ context

    @syscall("send", other="sender")
    async def send(
        self, tx: Tx, sid: int, text: str, *, role: str = "user", sender: int | None = None, pin: bool = False
    ) -> int:
        """Append one message; returns its position. ``sender`` is the session it comes from."""
        row = await self._row(tx, sid)
        self._check(row, "send")
        author = await self._author(tx, sid, sender)
        return await self._deliver(tx, row, [(limits.role(role), limits.text(text, "message"), author, pin, None)],
                                   author)

    async def _deliver(self, tx: Tx, row: Any, messages: Iterable[tuple[str, str, str, bool, Any]], author: str,
                       total: int = 1, progress: Progress | None = None) -> int:
        """Append messages into a session's inbox and fire its inbox triggers; returns the last seq."""
        n = await self._append(tx, row, messages, progress, total)
        for trig in await tx.all("SELECT * FROM triggers WHERE session_id = ? AND kind = 'inbox'", (row["id"],)):
            await self._wake(tx, await self._row(tx, row["id"]), trig, {"from": author, "messages": n})
        return int(row["length"]) + n

    async def _author(self, tx: Tx, sid: int, sender: int | None) -> str:
        if sender is None:
            return "user"
        if sender == sid:
            raise InvalidArgument("a session cannot send to itself")
        await self._row(tx, sender)
        return f"session:{sender}"

    @syscall("send")
    async def send_many(
        self, tx: Tx, sid: int, messages: Sequence[dict[str, Any]], *, sender: int | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Append a transcript (``{"role", "content"[, "pinned"]}`` objects) in one transaction."""
        row = await self._row(tx, sid)
        self._check(row, "send")
        author = await self._author(tx, sid, sender)

        def checked() -> Iterable[tuple[str, str, str, bool, Any]]:
            for n, m in enumerate(messages, start=1):
                if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
                    raise InvalidArgument(f"message {n}: needs a role and a content string")
                if m["role"] not in limits.ROLES:
                    raise InvalidArgument(f"message {n}: bad role {m['role']!r}; roles are {', '.join(limits.ROLES)}")
                yield m["role"], limits.text(m["content"], f"message {n}"), author, bool(m.get("pinned", False)), None

        if not messages:
            return 0
        await self._deliver(tx, row, checked(), author, len(messages), progress)
        return len(messages)

    @syscall("memory")
    async def memory_set(self, tx: Tx, sid: int, key: str, value: Any) -> None:
        row = await self._row(tx, sid)
        self._check(row, "memory")
        limits.name(key, "memory key", limits.KEY_MAX)
        try:
            text = canonical(value)
        except (TypeError, ValueError):
            raise InvalidArgument("the memory value must be JSON") from None
        await tx.execute(MEMORY_PUT, (sid, key, text, tx.now))
        await tx.touch(sid)

    @syscall("memory")
    async def memory_delete(self, tx: Tx, sid: int, key: str) -> None:
        row = await self._row(tx, sid)
        self._check(row, "memory")
        cur = await tx.execute("DELETE FROM memory WHERE session_id = ? AND key = ?", (sid, key))
        if cur.rowcount == 0:
            raise NotFound(f"session {sid} has no memory key {key!r}")
        await tx.touch(sid)

    @syscall("compress")
    async def compress(self, tx: Tx, sid: int, keep_last: int = DEFAULT_KEEP_LAST) -> Fold:
        """Fold all but the last ``keep_last`` context items behind one summary.

        System and pinned messages stay in place. The archived messages stay in the
        history; ``expand`` restores the context exactly.
        """
        row = await self._row(tx, sid)
        self._check(row, "compress")
        if keep_last < 0:
            raise InvalidArgument("--keep-last must be 0 or more")
        plan = await self._plan_fold(tx, row, keep_last)
        if plan is None:
            raise ProcessionError(
                f"nothing to compress in session {sid}: all but the last {keep_last} context items are"
                " pinned or system messages, or there are none"
            )
        return await self._write_fold(tx, row, *plan)

    async def _plan_fold(self, tx: Tx, row: Any, keep_last: int,
                         budget: int | None = None) -> tuple[history.FoldPlan, str, int] | None:
        in_force = await history.folds(tx, row["id"])
        items = history.active(await history.read(tx, row["id"]), in_force)
        plan = history.plan_fold(items, in_force, keep_last)
        if plan is None:
            return None
        archived_tokens = sum(i.tokens for i in plan.archived)
        budget = min(budget or 512, max(32, archived_tokens // 4))
        summary = summarise([(i.role, i.content) for i in plan.archived], budget, self.store.count_tokens)
        summary_tokens = self.store.count_tokens(summary)
        if summary_tokens >= archived_tokens:
            return None
        return plan, summary, summary_tokens

    async def _write_fold(self, tx: Tx, row: Any, plan: history.FoldPlan, summary: str, summary_tokens: int) -> Fold:
        archived_tokens = sum(i.tokens for i in plan.archived)
        archived_count = len(plan.archived)
        cur = await tx.execute(
            "INSERT INTO folds (session_id, lo, hi, summary, summary_tokens, archived_count, archived_tokens, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (row["id"], plan.lo, plan.hi, summary, summary_tokens, archived_count, archived_tokens, tx.now),
        )
        await self._set(
            tx, row["id"],
            context_tokens=row["context_tokens"] + summary_tokens - archived_tokens,
            context_count=row["context_count"] + 1 - archived_count,
        )
        return Fold(int(cur.lastrowid), plan.lo, plan.hi, summary, summary_tokens, archived_count, archived_tokens,
                    tx.now)

    @syscall("expand")
    async def expand(self, tx: Tx, sid: int) -> Fold:
        """Undo the newest compress: its archived items come back exactly as they were."""
        row = await self._row(tx, sid)
        self._check(row, "expand")
        in_force = await history.folds(tx, sid)
        if not in_force:
            raise ProcessionError(f"nothing to expand in session {sid}: it has no compressed range")
        fold = in_force[-1]
        await tx.execute("UPDATE folds SET expanded = ? WHERE id = ?", (tx.now, fold.id))
        await self._set(
            tx, sid,
            context_tokens=row["context_tokens"] - fold.summary_tokens + fold.archived_tokens,
            context_count=row["context_count"] - 1 + fold.archived_count,
        )
        return fold

    # ------------------------------------------------------------------ lifecycle

    @syscall("activate")
    async def activate(self, tx: Tx, sid: int, cause: dict[str, Any] | None = None) -> State:
        """Queue a run: the session becomes ready; the engine starts it when a slot is free."""
        row = await self._row(tx, sid)
        target = self._check(row, "activate")
        if not row["armed"]:
            raise ProcessionError(
                f"session {sid} came from a snapshot file and is not approved: review it (procession show {sid}),"
                f" then procession approve {sid}"
            )
        await self._queue(tx, row, [cause or {"kind": "manual", "by": self.actor}])
        return target

    async def _queue(self, tx: Tx, row: Any, causes: list[dict[str, Any]]) -> None:
        """Make the session ready with these causes; one already ready keeps its place."""
        before = json.loads(row["causes"]) if row["causes"] else []
        queued_at = row["queued_at"] if row["state"] == State.READY and row["queued_at"] else tx.now
        await self._set(tx, row["id"], state=State.READY.value, queued_at=queued_at,
                        causes=json.dumps([*before, *causes][-MAX_CAUSES:]))

    async def _wake(self, tx: Tx, row: Any, trig: Any, cause: dict[str, Any]) -> str:
        """Fire trigger ``trig`` of session ``row`` and journal it (actor ``trigger``).

        A sleeping session is queued; one already queued keeps its place and gains the
        cause; a running or suspended one keeps the cause on the trigger until its run
        ends or it is resumed, so it fires once then. Terminated, unapproved or disarmed:
        nothing happens.
        """
        state = State(row["state"])
        cause = {"kind": trig["kind"], "trigger": trig["id"], **cause}
        if state is State.TERMINATED or not row["armed"] or not trig["armed"]:
            return "ignored"
        if state in (State.SLEEPING, State.READY):
            result = "queued" if state is State.SLEEPING else "coalesced"
            await self._queue(tx, row, [cause])
        else:
            pending = json.loads(trig["pending"]) if trig["pending"] else []
            await tx.execute("UPDATE triggers SET pending = ? WHERE id = ?",
                             (json.dumps([*pending, cause][-MAX_CAUSES:]), trig["id"]))
            result = "pending"
        await tx.execute("UPDATE triggers SET fired = fired + 1, last_fired = ? WHERE id = ?", (tx.now, trig["id"]))
        await tx.touch(row["id"])
        tx.follow("trigger", "wake", row["id"], {"trigger": trig["id"], "kind": trig["kind"]},
                  {"result": result, "cause": cause})
        return result

    async def _release_pending(self, tx: Tx, sid: int) -> None:
        """Deliver causes kept while the session ran or was suspended, if it is idle now; a
        session still running (resumed with its step) keeps them for when its run ends."""
        row = await self._row(tx, sid)
        if row["state"] not in (State.SLEEPING, State.READY):
            return
        rows = await tx.all("SELECT pending FROM triggers WHERE session_id = ? AND pending IS NOT NULL", (sid,))
        if not rows:
            return
        await tx.execute("UPDATE triggers SET pending = NULL WHERE session_id = ?", (sid,))
        await self._queue(tx, row, [c for r in rows for c in json.loads(r["pending"])])

    @syscall("suspend")
    async def suspend(self, tx: Tx, sid: int) -> State:
        """Freeze: a running step is stopped in place; the session remembers where it was."""
        row = await self._row(tx, sid)
        target = self._check(row, "suspend")
        await self._set(tx, sid, state=target.value, resume_to=row["state"])
        return target

    @syscall("resume")
    async def resume(self, tx: Tx, sid: int) -> State:
        """Thaw: back to the state it was suspended in."""
        row = await self._row(tx, sid)
        target = self._check(row, "resume")
        await self._set(tx, sid, state=target.value, resume_to=None)
        await self._release_pending(tx, sid)
        return State((await self._row(tx, sid))["state"])

    @syscall("interrupt")
    async def interrupt(self, tx: Tx, sid: int) -> State:
        """Stop the current step (or take the session off the queue); it goes back to sleep."""
        row = await self._row(tx, sid)
        target = self._check(row, "interrupt")
        await self._set(tx, sid, state=target.value, queued_at=None, causes=None)
        return target

    @syscall("cancel")
    async def cancel(self, tx: Tx, sid: int) -> State:
        """Terminate: a running step is killed; the history is kept; triggers stop firing."""
        row = await self._row(tx, sid)
        target = self._check(row, "cancel")
        await self._set(tx, sid, state=target.value, reason=Reason.CANCELLED.value, resume_to=None, queued_at=None,
                        causes=None)
        return target

    @syscall("nice")
    async def nice(self, tx: Tx, sid: int, priority: int, *, relative: bool = False) -> int:
        """Set the priority (higher runs first), or move it by ``priority`` when ``relative``."""
        row = await self._row(tx, sid)
        self._check(row, "nice")
        value = limits.priority(row["priority"] + priority if relative else priority)
        await self._set(tx, sid, priority=value)
        return value

    @syscall("migrate")
    async def migrate(
        self, tx: Tx, sid: int, runner: str, *, window: int | None = None, compress: bool = False
    ) -> dict[str, Any]:
        """Move to another runner and window; refuse if the context does not fit, unless
        ``compress`` lets it fold older items (keeping as many recent ones as fit)."""
        row = await self._row(tx, sid)
        self._check(row, "migrate")
        runners.parse(runner)
        new_window = limits.window(window if window is not None else row["window"])
        tokens = row["context_tokens"]
        fold = None
        if tokens > new_window:
            if not compress:
                raise ContextTooLarge(
                    f"session {sid}'s context is {tokens} tokens, over the new window of {new_window};"
                    " compress it first or pass --compress"
                )
            for keep in (DEFAULT_KEEP_LAST, 4, 2, 1, 0):
                plan = await self._plan_fold(tx, row, keep, budget=max(32, new_window // 4))
                if plan and tokens - sum(i.tokens for i in plan[0].archived) + plan[2] <= new_window:
                    fold = await self._write_fold(tx, row, *plan)
                    break
            else:
                raise ContextTooLarge(
                    f"session {sid}'s context ({tokens} tokens) cannot be compressed under {new_window} tokens:"
                    " what must stay (the system prompt, pinned messages, a summary) is larger than that"
                )
            tokens = tokens + fold.summary_tokens - fold.archived_tokens
        await self._set(tx, sid, runner=runner, window=new_window)
        return {"runner": runner, "window": new_window, "context_tokens": tokens, "compressed": fold is not None,
                "tokenizer": self.tokenizer}

    # ------------------------------------------------------------------ lineage

    @syscall("fork", other="result")
    async def fork(self, tx: Tx, sid: int, name: str | None = None, *, at: int | None = None) -> int:
        """A new session sharing ``sid``'s history up to ``at`` (default: all of it).

        No message is copied: the child reads its parent's rows up to the fork point.
        Memory and bindings are copied, folds inside the shared range are kept, triggers are
        copied disarmed. Works on any session, an ended one included.
        """
        row = await self._row(tx, sid)
        self._check(row, "fork")
        return await self._branch(tx, row, name or f"{row['name']} fork", at, await self._memory_texts(tx, sid),
                                  await history.folds(tx, sid), tx.now)

    async def _branch(
        self, tx: Tx, row: Any, name: str, at: int | None, memory: dict[str, str], in_force: Sequence[Fold],
        memory_at: float,
    ) -> int:
        """A child of ``row`` at history position ``at``, starting from ``memory`` as it was at
        time ``memory_at`` (the merge base of this branch)."""
        sid = row["id"]
        at = row["length"] if at is None else at
        if not 0 <= at <= row["length"]:
            raise InvalidArgument(f"session {sid} has {row['length']} messages: the fork point must be 0..{row['length']}")
        inherited = [f for f in in_force if f.hi <= at]
        hist_tokens = await history.cum_tokens(tx, sid, at)
        child = await self._insert_session(
            tx, agent_id=row["agent_id"], name=limits.name(name, "session name"), goal=row["goal"],
            system=row["system"], priority=row["priority"], runner=row["runner"], window=row["window"],
            timeout=row["timeout"], cwd=row["cwd"], armed=row["armed"], parent_id=sid, fork_seq=at,
            base_memory=json.dumps(memory), base_at=memory_at, length=at, history_tokens=hist_tokens,
            context_tokens=row["system_tokens"] + hist_tokens - sum(f.archived_tokens - f.summary_tokens for f in inherited),
            context_count=at - sum(f.archived_count - 1 for f in inherited),
        )
        await tx.many(
            "INSERT INTO memory (session_id, key, value, updated) VALUES (?, ?, ?, ?)",
            [(child, k, v, tx.now) for k, v in memory.items()],
        )
        await tx.many(
            "INSERT INTO folds (session_id, lo, hi, summary, summary_tokens, archived_count, archived_tokens, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(child, f.lo, f.hi, f.summary, f.summary_tokens, f.archived_count, f.archived_tokens, f.created)
             for f in inherited],
        )
        await tx.execute(
            "INSERT INTO resources (session_id, kind, uri, mode, created)"
            " SELECT ?, kind, uri, mode, ? FROM resources WHERE session_id = ?",
            (child, tx.now, sid),
        )
        await tx.execute(
            "INSERT INTO triggers (session_id, kind, spec, armed, created)"
            " SELECT ?, kind, spec, 0, ? FROM triggers WHERE session_id = ?",
            (child, tx.now, sid),
        )
        return child

    @syscall("merge", session="target", other="source")
    async def merge(self, tx: Tx, source: int, target: int, resolution: Resolution = Resolution()) -> MergeResult:
        """Three-way merge of ``source`` into ``target``; the source ends ``terminated(merged)``.

        Refused with ``MergeConflict`` (nothing applied) while a key changed differently on
        both sides is not settled by ``resolution``.
        """
        if source == target:
            raise InvalidArgument(f"cannot merge session {source} into itself")
        src = await self._row(tx, source)
        dst = await self._row(tx, target)
        self._check(src, "merge-from")
        self._check(dst, "merge-into")
        if not src["armed"]:
            raise ProcessionError(
                f"session {source} came from a snapshot file and is not approved: review it, approve it"
                f" (procession approve {source}), then merge it"
            )
        for key, text in (resolution.values or {}).items():
            limits.name(key, "memory key", limits.KEY_MAX)
            try:
                json.loads(text)
            except ValueError:
                raise InvalidArgument(f"--set {key}: the value is not JSON") from None
        ancestor = common_ancestor(await self._ancestry(tx, source), await self._ancestry(tx, target))
        changes, conflicts, resolved = three_way(
            ancestor.memory, await self._memory_texts(tx, target), await self._memory_texts(tx, source), resolution
        )
        if conflicts:
            raise MergeConflict(source, target, conflicts)
        joining = await history.read(tx, source, ancestor.seq)
        n = await self._append(
            tx, dst,
            [(m.role, m.content, m.author, m.pinned, {**(m.meta or {}), "merged_from": source, "from_seq": m.seq})
             for m in joining],
        )
        for key, value in changes.items():
            if value is MISSING:
                await tx.execute("DELETE FROM memory WHERE session_id = ? AND key = ?", (target, key))
            else:
                await tx.execute(MEMORY_PUT, (target, key, value, tx.now))
        cur = await tx.execute(
            "INSERT OR IGNORE INTO resources (session_id, kind, uri, mode, created)"
            " SELECT ?, kind, uri, mode, ? FROM resources WHERE session_id = ?",
            (target, tx.now, source),
        )
        added = max(cur.rowcount, 0)
        await self._set(tx, source, state=State.TERMINATED.value, reason=Reason.MERGED.value, merged_into=target,
                        resume_to=None, queued_at=None, causes=None)
        await tx.touch(target)
        return MergeResult(source, target, ancestor.session, n, tuple(changes), added, resolved)

    @syscall("save")
    async def save(self, tx: Tx, sid: int, name: str) -> Checkpoint:
        """A named checkpoint in the store: the history point, memory, folds and settings."""
        row = await self._row(tx, sid)
        self._check(row, "save")
        limits.name(name, "checkpoint name")
        if await tx.value("SELECT 1 FROM checkpoints WHERE session_id = ? AND name = ?", (sid, name)):
            raise InvalidArgument(f"session {sid} already has a checkpoint named {name!r}")
        state = {
            "memory": await self._memory_texts(tx, sid),
            "folds": [f.to_json() for f in await history.folds(tx, sid)],
        }
        cur = await tx.execute(
            "INSERT INTO checkpoints (session_id, name, seq, state, created) VALUES (?, ?, ?, ?, ?)",
            (sid, name, row["length"], json.dumps(state), tx.now),
        )
        return Checkpoint(int(cur.lastrowid), name, row["length"], tx.now)

    @syscall("load", session="result", other="sid")
    async def restore(self, tx: Tx, sid: int, checkpoint: str, name: str | None = None) -> int:
        """A new session forked at ``sid``'s checkpoint, with the memory and folds it had then."""
        row = await self._row(tx, sid)
        cp = await tx.one("SELECT seq, state, created FROM checkpoints WHERE session_id = ? AND name = ?",
                          (sid, checkpoint))
        if cp is None:
            raise NotFound(f"session {sid} has no checkpoint named {checkpoint!r}")
        state = json.loads(cp["state"])
        folds = [Fold(**f) for f in state["folds"]]
        return await self._branch(tx, row, name or f"{row['name']}@{checkpoint}", cp["seq"], state["memory"], folds,
                                  cp["created"])

    async def export(self, sid: int, file: str) -> dict[str, Any]:
        """Write a portable snapshot file (owner-only, written whole or not at all), journaled
        as a ``save``. The session is read in one read transaction; the file is written after
        it, so no lock is held while the disk works."""
        async with self.store.snapshot() as tx:
            row = await self._row(tx, sid)
            self._check(row, "save")
            msgs = await history.read(tx, sid)
            payload = {
                "session": {
                    "uuid": row["uuid"], "name": row["name"], "agent": row["agent"], "goal": row["goal"],
                    "system": row["system"], "priority": row["priority"], "runner": row["runner"],
                    "window": row["window"], "timeout": row["timeout"], "created": row["created"],
                },
                "messages": [
                    {"seq": m.seq, "role": m.role, "content": m.content, "author": m.author, "pinned": m.pinned,
                     "created": m.created, "meta": m.meta}
                    for m in msgs
                ],
                "folds": [{"lo": f.lo, "hi": f.hi, "summary": f.summary} for f in await history.folds(tx, sid)],
                "memory": {k: json.loads(v) for k, v in (await self._memory_texts(tx, sid)).items()},
                "resources": [
                    {"kind": r["kind"], "uri": r["uri"], "mode": r["mode"]}
                    for r in await tx.all("SELECT kind, uri, mode FROM resources WHERE session_id = ? ORDER BY id",
                                          (sid,))
                ],
                "triggers": [
                    {"kind": t["kind"], "spec": json.loads(t["spec"])}
                    for t in await tx.all("SELECT kind, spec FROM triggers WHERE session_id = ? ORDER BY id", (sid,))
                ],
            }
        data = snapshot.dump(payload)
        _write_private(Path(file), data)
        out = {"file": str(Path(file).resolve()), "messages": len(msgs), "bytes": len(data),
               "sha256": hashlib.sha256(snapshot.canonical_bytes(payload)).hexdigest()}
        async with self.store.tx() as tx:
            await tx.journal(self.actor, "save", sid, {"sid": sid, "file": file}, out)
        return out

    async def load(self, file: str, *, progress: Progress | None = None) -> int:
        """A new session from a snapshot file. Its runner and triggers arrive disarmed
        (``approve`` arms them): a file from elsewhere never runs anything by itself. ``after``
        triggers are left out: they name sessions of the workspace the file came from. The
        file is read and checked before the store is opened for writing."""
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise SnapshotError(f"cannot read {file}: {exc.strerror}") from None
        snap = snapshot.parse(data, file)
        trig_specs = []
        for t in snap.triggers:
            if t["kind"] == "after":
                continue
            try:
                trig_specs.append((t["kind"], triggers.revalidate(t["kind"], t["spec"])))
            except InvalidArgument as exc:
                raise SnapshotError(f"{file} is not a valid snapshot: {exc}") from None
        msgs = [(m["role"], m["content"], m["author"], m["pinned"], m.get("meta"), m["created"])
                for m in snap.messages]
        history_items = [ContextItem(i, m[0], m[1], self.store.count_tokens(m[1]), m[2], m[3])
                         for i, m in enumerate(msgs, start=1)]
        folds = _refold(history_items, snap.folds, self.store.count_tokens, file)
        return await self._load(file, _Prepared(snap, msgs, folds, trig_specs), progress=progress)

    @syscall("load", session="result")
    async def _load(self, tx: Tx, file: str, prepared: _Prepared, *, progress: Progress | None = None) -> int:
        snap, msgs = prepared.snapshot, prepared.messages
        s = snap.session
        sid = await self._insert_session(
            tx, agent_id=await self._agent_id(tx, s["agent"]), name=s["name"], goal=s["goal"], system=s["system"],
            priority=s["priority"], runner=s["runner"], window=s["window"], timeout=s["timeout"], cwd=os.getcwd(),
            armed=0,
        )
        row = await self._row(tx, sid)
        await self._append(tx, row, msgs, progress, len(msgs))
        row = await self._row(tx, sid)
        for f in prepared.folds:
            await self._write_fold(tx, row, *f)
            row = await self._row(tx, sid)
        await tx.many(
            "INSERT INTO memory (session_id, key, value, updated) VALUES (?, ?, ?, ?)",
            [(sid, k, canonical(v), tx.now) for k, v in snap.memory.items()],
        )
        await tx.many(
            "INSERT OR IGNORE INTO resources (session_id, kind, uri, mode, created) VALUES (?, ?, ?, ?, ?)",
            [(sid, r["kind"], r["uri"], r["mode"], tx.now) for r in snap.resources],
        )
        await tx.many(
            "INSERT INTO triggers (session_id, kind, spec, armed, created) VALUES (?, ?, ?, 0, ?)",
            [(sid, kind, json.dumps(spec), tx.now) for kind, spec in prepared.triggers],
        )
        return sid

    @syscall("approve")
    async def approve(self, tx: Tx, sid: int) -> None:
        """Arm a session's runner and all its triggers, after the user has looked at them: a
        session loaded from a file, or a fork (whose copied triggers arrive disarmed)."""
        row = await self._row(tx, sid)
        self._check(row, "approve")
        disarmed = await tx.value("SELECT count(*) FROM triggers WHERE session_id = ? AND armed = 0", (sid,))
        if row["armed"] and not disarmed:
            raise ProcessionError(f"session {sid} is already approved and all its triggers are armed")
        await tx.execute("UPDATE triggers SET armed = 1 WHERE session_id = ?", (sid,))
        await self._set(tx, sid, armed=1)

    # ------------------------------------------------------------------ resources and triggers

    @syscall("bind")
    async def bind(self, tx: Tx, sid: int, kind: str, uri: str, *, mode: str = "rw") -> int:
        """Bind a resource (file, folder, db, mcp, tool, url); paths are stored absolute."""
        row = await self._row(tx, sid)
        self._check(row, "bind")
        if kind not in limits.RESOURCE_KINDS:
            raise InvalidArgument(f"unknown resource kind {kind!r}; kinds are {', '.join(limits.RESOURCE_KINDS)}")
        if mode not in limits.RESOURCE_MODES:
            raise InvalidArgument("the mode must be ro or rw")
        if kind in ("file", "folder", "db"):
            uri = triggers.absolute(uri, row["cwd"])
        else:
            limits.name(uri, "resource", 4096)
        if await tx.value("SELECT 1 FROM resources WHERE session_id = ? AND kind = ? AND uri = ?", (sid, kind, uri)):
            raise InvalidArgument(f"session {sid} already has {kind} {uri} bound")
        cur = await tx.execute(
            "INSERT INTO resources (session_id, kind, uri, mode, created) VALUES (?, ?, ?, ?, ?)",
            (sid, kind, uri, mode, tx.now),
        )
        await tx.touch(sid)
        return int(cur.lastrowid)

    @syscall("unbind")
    async def unbind(self, tx: Tx, sid: int, resource: str) -> None:
        """Unbind a resource given by its id or its URI."""
        row = await self._row(tx, sid)
        self._check(row, "unbind")
        if resource.isdigit():
            cur = await tx.execute("DELETE FROM resources WHERE session_id = ? AND id = ?", (sid, int(resource)))
        else:
            cur = await tx.execute(
                "DELETE FROM resources WHERE session_id = ? AND (uri = ? OR uri = ?)",
                (sid, resource, triggers.absolute(resource, row["cwd"])),
            )
        if cur.rowcount == 0:
            raise NotFound(f"session {sid} has no resource {resource}")
        await tx.touch(sid)

    @syscall("trigger")
    async def trigger_add(
        self, tx: Tx, sid: int, kind: str, args: Sequence[str] = (), *, debounce_ms: int | None = None
    ) -> int:
        """Add a trigger (watch, cron, every, inbox, after); returns its id."""
        row = await self._row(tx, sid)
        self._check(row, "trigger")
        spec = triggers.parse(kind, list(args), cwd=row["cwd"], debounce_ms=debounce_ms)
        if kind == "after":
            if spec["session"] == sid:
                raise InvalidArgument("a session cannot wake after itself")
            await self._row(tx, spec["session"])
            loop = await self._after_path(tx, sid, spec["session"])
            if loop:
                raise InvalidArgument(
                    f"session {sid} would wake after {spec['session']}, but {spec['session']} already wakes when"
                    f" {sid} runs ({' -> '.join(map(str, loop))}): they would wake each other forever")
        state = None
        if kind == "watch":
            from .watch import scan

            state = json.dumps(scan(spec["paths"]))
        cur = await tx.execute(
            "INSERT INTO triggers (session_id, kind, spec, armed, created, state) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, kind, json.dumps(spec), row["armed"], tx.now, state),
        )
        await tx.touch(sid)
        return int(cur.lastrowid)

    async def _after_path(self, tx: Tx, start: int, goal: int) -> list[int]:
        """A chain of ``after`` triggers by which ``goal`` already wakes when ``start`` runs
        (``start``, ..., ``goal``), or [] when there is none."""
        came_from: dict[int, int | None] = {start: None}
        frontier = [start]
        while frontier:
            rows = await tx.all(
                "SELECT session_id, json_extract(spec, '$.session') AS waker FROM triggers"
                f" WHERE kind = 'after' AND json_extract(spec, '$.session') IN ({','.join('?' * len(frontier))})",
                frontier,
            )
            frontier = []
            for row in rows:
                if row["session_id"] not in came_from:
                    came_from[row["session_id"]] = row["waker"]
                    frontier.append(row["session_id"])
            if goal in came_from:
                path, node = [], goal
                while node is not None:
                    path.append(node)
                    node = came_from[node]
                return path[::-1]
        return []

    @syscall("trigger")
    async def trigger_remove(self, tx: Tx, sid: int, trigger: int) -> None:
        row = await self._row(tx, sid)
        self._check(row, "trigger")
        cur = await tx.execute("DELETE FROM triggers WHERE session_id = ? AND id = ?", (sid, trigger))
        if cur.rowcount == 0:
            raise NotFound(f"session {sid} has no trigger {trigger}")
        await tx.touch(sid)


@dataclass(slots=True, frozen=True)
class _Prepared:
    """A snapshot read, checked and counted before its transaction."""

    snapshot: snapshot.Snapshot
    messages: list[tuple[Any, ...]]
    folds: list[tuple[history.FoldPlan, str, int]]
    triggers: list[tuple[str, dict[str, Any]]]

    def journal(self) -> dict[str, Any]:
        return {"messages": len(self.messages), "folds": len(self.folds), "triggers": len(self.triggers)}


def _refold(
    items: list[ContextItem], specs: list[dict[str, Any]], count: Callable[[str], int], source: str
) -> list[tuple[history.FoldPlan, str, int]]:
    """Rebuild a snapshot's folds against its history, checking that they nest."""
    plans: list[tuple[history.FoldPlan, str, int]] = []
    made: list[Fold] = []
    for n, spec in enumerate(specs, start=1):
        lo, hi = spec["lo"], spec["hi"]
        for f in made:
            if not (f.hi < lo or f.lo > hi or (lo <= f.lo and f.hi <= hi)):
                raise SnapshotError(f"{source} is not a valid snapshot: fold {n} overlaps an earlier one")
        archived = tuple(i for i in items if lo <= i.seq <= hi and not i.protected)
        if not archived:
            raise SnapshotError(f"{source} is not a valid snapshot: fold {n} hides nothing")
        fold = Fold(-n, lo, hi, spec["summary"], count(spec["summary"]), len(archived),
                    sum(i.tokens for i in archived), 0.0)
        plans.append((history.FoldPlan(lo, hi, archived), fold.summary, fold.summary_tokens))
        made.append(fold)
        items = history.apply_fold(items, fold)
    return plans


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ProcessionError(f"cannot write {path}: {exc.strerror}") from None
