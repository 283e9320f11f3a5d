"""The engine's own system calls: the lease, starting and finishing runs, firing triggers,
recovering from a dead engine.

``Ledger`` is the ``Workspace`` the engine acts through. Like every call, each of these is
one transaction that checks the lifecycle table and is journaled (actor ``engine``, or
``trigger`` for a firing), so the journal tells the whole story of a run.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from . import history
from .errors import EngineBusy, IllegalTransition, NotFound
from .runners import protocol
from .runners.protocol import Events
from .states import Reason, State
from .store import Tx
from .merge import canonical
from .workspace import ENGINE_STALE_S, MEMORY_PUT, Workspace, syscall

#: A lease whose heartbeat is older than this is dead, whoever held it.
LEASE_TTL_S = ENGINE_STALE_S
#: Outcomes of a run.
OK, FAILED, INTERRUPTED, CANCELLED, TIMEOUT, LOST = "ok", "failed", "interrupted", "cancelled", "timeout", "lost"


@dataclass(slots=True, frozen=True)
class Holder:
    token: str
    pid: int
    host: str
    started: float
    heartbeat: float
    slots: int


@dataclass(slots=True, frozen=True)
class Start:
    """What the engine needs to launch a claimed run."""

    run: int
    document: bytes

    def journal(self) -> dict[str, Any]:
        return {"run": self.run, "bytes": len(self.document)}


@dataclass(slots=True, frozen=True)
class Orphan:
    run: int
    session: int
    pid: int | None
    proc_start: float | None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Ledger(Workspace):
    """A workspace with the calls only an engine makes."""

    # ------------------------------------------------------------------ the lease

    async def holder(self) -> Holder | None:
        """The engine holding this workspace, if its lease is alive."""
        async with self.store.snapshot() as tx:
            return await self._live_holder(tx)

    async def _live_holder(self, tx: Tx) -> Holder | None:
        row = await tx.one("SELECT token, pid, host, started, heartbeat, slots FROM lease WHERE id = 1")
        if row is None:
            return None
        holder = Holder(*row)
        if tx.now - holder.heartbeat > LEASE_TTL_S:
            return None
        if holder.host == socket.gethostname() and not _alive(holder.pid):
            return None
        return holder

    @syscall("engine", session=None)
    async def acquire(self, tx: Tx, token: str, slots: int) -> dict[str, Any]:
        """Take the lease, or refuse naming the live holder. Returns the dead holder taken over."""
        holder = await self._live_holder(tx)
        if holder is not None and holder.token != token:
            raise EngineBusy(
                f"an engine already runs on {self.path}: pid {holder.pid} on {holder.host}"
                f" (heartbeat {tx.now - holder.heartbeat:.1f}s ago)"
            )
        before = await tx.one("SELECT token, pid FROM lease WHERE id = 1")
        await tx.execute(
            "INSERT INTO lease (id, token, pid, host, started, heartbeat, slots) VALUES (1, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET token = excluded.token, pid = excluded.pid, host = excluded.host,"
            " started = excluded.started, heartbeat = excluded.heartbeat, slots = excluded.slots",
            (token, os.getpid(), socket.gethostname(), tx.now, tx.now, slots),
        )
        return {"pid": os.getpid(), "slots": slots, "took_over": dict(before) if before else None}

    async def heartbeat(self, token: str) -> bool:
        """Renew the lease; False when another engine has taken it."""
        async with self.store.tx() as tx:
            cur = await tx.execute("UPDATE lease SET heartbeat = ? WHERE id = 1 AND token = ?", (tx.now, token))
            return cur.rowcount == 1

    @syscall("engine", session=None)
    async def release(self, tx: Tx, token: str) -> None:
        await tx.execute("DELETE FROM lease WHERE id = 1 AND token = ?", (token,))

    # ------------------------------------------------------------------ runs

    async def ready(self, limit: int, only: set[int] | None = None) -> list[Any]:
        """Sessions waiting for a slot (of ``only``, when given): highest priority first,
        oldest first within one."""
        among = f" AND id IN ({','.join(str(int(s)) for s in only)})" if only is not None else ""
        async with self.store.snapshot() as tx:
            return await tx.all(
                "SELECT id, runner, cwd, timeout, context_tokens, window FROM sessions"
                f" WHERE state = 'ready' AND armed = 1{among}"
                " ORDER BY priority DESC, queued_at ASC, id ASC LIMIT ?",
                (limit,),
            )

    async def workdir(self, sid: int) -> str:
        """Where a step runs: the first bound folder, else the folder the session was spawned in."""
        async with self.store.snapshot() as tx:
            row = await self._row(tx, sid)
            folder = await tx.value(
                "SELECT uri FROM resources WHERE session_id = ? AND kind = 'folder' ORDER BY id LIMIT 1", (sid,)
            )
        return folder or row["cwd"]

    @syscall("start")
    async def start_run(self, tx: Tx, sid: int, *, runner: str, engine: str, pid: int | None,
                        proc_start: float | None) -> Start:
        """Claim a ready session for a step already launched with ``runner``; returns its input.

        Refused (and the caller kills the step) if the session left the queue or changed
        runner since the engine looked.
        """
        row = await self._row(tx, sid)
        self._check(row, "start")
        if not row["armed"] or row["runner"] != runner:
            raise IllegalTransition("start", sid, State(row["state"]), "its runner changed or is not approved")
        causes = json.loads(row["causes"]) if row["causes"] else [{"kind": "manual"}]
        cur = await tx.execute(
            "INSERT INTO runs (session_id, cause, started, pid, proc_start, engine) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, json.dumps(causes), tx.now, pid, proc_start, engine),
        )
        run = int(cur.lastrowid)
        await self._set(tx, sid, state=State.RUNNING.value, queued_at=None, causes=None)
        context = history.active(await history.read(tx, sid), await history.folds(tx, sid))
        memory = {k: json.loads(v) for k, v in (await self._memory_texts(tx, sid)).items()}
        resources = [dict(r) for r in await tx.all(
            "SELECT kind, uri, mode FROM resources WHERE session_id = ? ORDER BY id", (sid,))]
        document = protocol.document(
            {"id": sid, "uuid": row["uuid"], "name": row["name"], "agent": row["agent"], "goal": row["goal"]},
            {"id": run, "cause": causes}, row["system"], context, memory, resources,
        )
        return Start(run, document)

    @syscall("finish")
    async def finish_run(self, tx: Tx, sid: int, run: int, outcome: str, *, exit_code: int | None,
                         events: Events, error: str = "", requeue: bool = False) -> State:
        """Record how a run ended and apply what its output asks for.

        ``ok`` applies messages, memory changes and sends, and ends the session if the step
        said ``done``; ``interrupted`` and ``timeout`` keep the partial messages, marked;
        ``failed``, ``cancelled`` and ``lost`` apply nothing but the record. The session
        goes back to sleep unless the user moved it meanwhile (interrupt, cancel, suspend);
        ``requeue`` makes a suspended session run again on resume (an HTTP step cannot be
        frozen, so suspending it interrupted it).
        """
        live = await tx.one("SELECT id FROM runs WHERE id = ? AND session_id = ? AND ended IS NULL", (run, sid))
        if live is None:
            raise NotFound(f"run {run} of session {sid} is not live")
        row = await self._row(tx, sid)
        state = State(row["state"])
        ended = state is State.TERMINATED  # cancelled or merged away while the step ran: apply nothing
        problems = list(events.problems)
        if state is State.RUNNING and requeue:
            state = State.READY  # interrupted by a suspend the user has undone since: run it again
        elif state is State.RUNNING:
            state = self._check(row, "done" if outcome == OK and events.done else "finish")
        if outcome in (OK, INTERRUPTED, TIMEOUT) and events.messages and not ended:
            meta = None if outcome == OK else {"outcome": outcome, "run": run}
            await self._append(tx, row, [(role, text, "runner", False, meta) for role, text in events.messages])
        if outcome == OK and not ended:
            problems += await self._apply_events(tx, sid, events)
        if problems:
            error = "\n".join(filter(None, [error, *problems]))
        await tx.execute(
            "UPDATE runs SET ended = ?, outcome = ?, exit_code = ?, tokens_in = ?, tokens_out = ?, error = ?,"
            " cpu = NULL WHERE id = ?",
            (tx.now, outcome, exit_code, events.tokens_in, events.tokens_out, error[-4096:] or None, run),
        )
        if state is State.READY and row["state"] == State.RUNNING:
            await self._queue(tx, row, [{"kind": "resume", "run": run}])
        else:
            changes: dict[str, Any] = {"state": state.value}
            if state is State.TERMINATED and row["state"] == State.RUNNING:
                changes["reason"] = Reason.DONE.value
            if state is State.SUSPENDED:
                changes["resume_to"] = State.READY.value if requeue else State.SLEEPING.value
            await self._set(tx, sid, **changes)
        await self._release_pending(tx, sid)
        if outcome not in (CANCELLED, LOST) and not ended:
            for trig in await tx.all(
                "SELECT t.*, s.id AS sid FROM triggers t JOIN sessions s ON s.id = t.session_id"
                " WHERE t.kind = 'after' AND json_extract(t.spec, '$.session') = ?",
                (sid,),
            ):
                await self._wake(tx, await self._row(tx, trig["sid"]), trig,
                                 {"session": sid, "run": run, "outcome": outcome})
        return state

    async def _apply_events(self, tx: Tx, sid: int, events: Events) -> list[str]:
        """Memory changes and sends of a successful step; returns what could not be done."""
        problems = []
        for key, value in events.memory_set.items():
            try:
                text = canonical(value)
            except (TypeError, ValueError):
                problems.append(f"memory {key!r}: not JSON")
                continue
            await tx.execute(MEMORY_PUT, (sid, key, text, tx.now))
        for key in events.memory_delete:
            await tx.execute("DELETE FROM memory WHERE session_id = ? AND key = ?", (sid, key))
        for to, text in events.sends:
            target = await tx.one("SELECT s.*, a.name AS agent FROM sessions s JOIN agents a ON a.id = s.agent_id"
                                  " WHERE s.id = ?", (to,))
            if target is None or target["state"] == State.TERMINATED or to == sid:
                problems.append(f"send to {to}: no such live session")
                continue
            await self._deliver(tx, target, [("user", text, f"session:{sid}", False, None)], f"session:{sid}")
        return problems

    async def sample(self, stats: list[tuple[float, int, int]]) -> None:
        """Store CPU% and RSS of live steps: ``(cpu, rss, run)`` rows. Not a call: not journaled,
        but the sessions are stamped changed so that monitors redraw their rows."""
        async with self.store.tx() as tx:
            await tx.many("UPDATE runs SET cpu = ?, rss = ? WHERE id = ? AND ended IS NULL", stats)
            rev = await tx.rev()
            await tx.many("UPDATE sessions SET rev = ? WHERE id = (SELECT session_id FROM runs WHERE id = ?)",
                          [(rev, run) for _, _, run in stats])

    # ------------------------------------------------------------------ triggers

    async def fire(self, trigger: int, cause: dict[str, Any], state: dict[str, Any] | None = None) -> str:
        """Fire one trigger (journaled by ``_wake``); ``state`` replaces its stored fingerprint."""
        async with self.store.tx() as tx:
            trig = await tx.one("SELECT * FROM triggers WHERE id = ?", (trigger,))
            if trig is None:
                return "gone"
            if state is not None:
                await tx.execute("UPDATE triggers SET state = ? WHERE id = ?", (json.dumps(state), trigger))
            return await self._wake(tx, await self._row(tx, trig["session_id"]), trig, cause)

    async def armed_triggers(self) -> list[Any]:
        """Triggers that may fire: armed, of approved sessions that have not ended."""
        async with self.store.snapshot() as tx:
            return await tx.all(
                "SELECT t.id, t.session_id, t.kind, t.spec, t.created, t.last_fired, t.state FROM triggers t"
                " JOIN sessions s ON s.id = t.session_id"
                " WHERE t.armed = 1 AND s.armed = 1 AND s.state != 'terminated' ORDER BY t.id"
            )

    async def remember(self, trigger: int, state: dict[str, Any]) -> None:
        """Store a watch trigger's fingerprint (not a call: nothing the user sees changes)."""
        async with self.store.tx() as tx:
            await tx.execute("UPDATE triggers SET state = ? WHERE id = ?", (json.dumps(state), trigger))

    # ------------------------------------------------------------------ recovery

    async def orphans(self, token: str) -> list[Orphan]:
        """Runs left live by another engine (dead, since we hold the lease)."""
        async with self.store.snapshot() as tx:
            rows = await tx.all(
                "SELECT id, session_id, pid, proc_start FROM runs WHERE ended IS NULL AND (engine IS NULL OR engine != ?)",
                (token,),
            )
        return [Orphan(*r) for r in rows]

    @syscall("recover", session=None)
    async def recover(self, tx: Tx, token: str) -> dict[str, Any]:
        """Close the runs of a dead engine as ``lost`` and put their sessions back to sleep."""
        rows = await tx.all(
            "SELECT id, session_id FROM runs WHERE ended IS NULL AND (engine IS NULL OR engine != ?)", (token,)
        )
        sessions = []
        for run in rows:
            await tx.execute("UPDATE runs SET ended = ?, outcome = ?, cpu = NULL WHERE id = ?",
                             (tx.now, LOST, run["id"]))
            row = await self._row(tx, run["session_id"])
            state = State(row["state"])
            if state is State.RUNNING:
                await self._set(tx, row["id"], state=self._check(row, "recover").value)
                await self._release_pending(tx, row["id"])
            elif state is State.SUSPENDED and row["resume_to"] == State.RUNNING:
                await self._set(tx, row["id"], resume_to=State.SLEEPING.value)
            sessions.append(row["id"])
        stray = await tx.all(
            "SELECT id FROM sessions s WHERE state = 'running'"
            " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id AND r.ended IS NULL)"
        )
        for r in stray:
            await self._set(tx, r["id"], state=State.SLEEPING.value)
            sessions.append(r["id"])
        return {"lost_runs": [r["id"] for r in rows], "sessions": sessions}
