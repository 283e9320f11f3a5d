"""The engine's own system calls: the lease, starting and finishing runs, firing triggers,
recovering from a dead engine.

``Ledger`` is the ``Workspace`` the engine acts through. Like every call, each of these is
one transaction that checks the lifecycle table and is journaled (actor ``engine``, or
``trigger`` for a firing), so the journal tells the whole story of a run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Final

from ..calls import Workspace, budgets, history, native, waking
from ..calls.budgets import Verdict
from ..calls.context import deliver
from ..calls.merge import canonical
from ..calls.moving import MoveSteps
from ..calls.native import PROMPTED
from ..calls.reads import live_holder
from ..calls.syscall import Act, syscall
from ..model.calls import Call
from ..model.errors import EngineBusy, IllegalTransition, NotFound, SessionNotFound
from ..model import budgets as budget_model
from ..model.outcomes import Moved
from ..model.records import Holder
from ..model.states import Reason, Restart, State
from ..store import Row, Tx, engines, rows, runs, triggers
from ..store.tokens import calibrate
from ..model import hosts, mcp_binding, runner_spec
from ..model.runner_spec import RunnerSpec
from ..model.transcripts import Position
from .runners import protocol
from .runners.agents import McpServer, Turn
from .runners.protocol import Events

#: Outcomes of a run.
OK, FAILED, INTERRUPTED, CANCELLED, TIMEOUT, LOST = "ok", "failed", "interrupted", "cancelled", "timeout", "lost"
#: Back-off of trigger-fired runs after failures: 10 s, 20 s, 40 s... at most 15 minutes.
BACKOFF_S, BACKOFF_MAX_S = 10.0, 900.0


@dataclass(slots=True, frozen=True)
class Leased:
    """The lease taken, and the dead holder it was taken over from (if any)."""

    pid: int
    slots: int
    took_over: dict[str, Any] | None

    def journal(self) -> dict[str, Any]:
        return {"pid": self.pid, "slots": self.slots, "took_over": self.took_over}


@dataclass(slots=True, frozen=True)
class Released:
    def journal(self) -> str:
        return "ok"


@dataclass(slots=True, frozen=True)
class Start:
    """What the engine needs to launch a claimed run."""

    sid: int
    run: int
    document: bytes

    def journal(self) -> dict[str, Any]:
        return {"run": self.run, "bytes": len(self.document)}


@dataclass(slots=True, frozen=True)
class Launched:
    """A claimed run's process recorded (False: the run was over already, its process is not)."""

    recorded: bool

    def journal(self) -> str:
        return "ok" if self.recorded else "over"


@dataclass(slots=True, frozen=True)
class Emitted:
    sid: int
    run: int
    messages: int
    problems: list[str]

    def journal(self) -> dict[str, Any]:
        return {"run": self.run, "messages": self.messages, "problems": len(self.problems)}


@dataclass(slots=True, frozen=True)
class Finish:
    sid: int
    state: State

    def journal(self) -> dict[str, Any]:
        return {"state": self.state.value}


@dataclass(slots=True, frozen=True)
class Warned:
    sid: int
    warned: list[str]

    def journal(self) -> dict[str, Any]:
        return {"warned": self.warned}


@dataclass(slots=True, frozen=True)
class Resumed:
    sessions: list[int]

    def journal(self) -> dict[str, Any]:
        return {"sessions": self.sessions}


@dataclass(slots=True, frozen=True)
class Recovered:
    lost_runs: list[int]
    sessions: list[int]

    def journal(self) -> dict[str, Any]:
        return {"lost_runs": self.lost_runs, "sessions": self.sessions}


@dataclass(slots=True, frozen=True)
class Orphan:
    run: int
    session: int
    pid: int | None
    proc_start: float | None
    tracker: str | None


class Ledger(MoveSteps, Workspace):
    """A workspace with the calls only an engine makes."""

    # ------------------------------------------------------------------ the lease

    async def holder(self) -> Holder | None:
        """The engine holding this workspace, if its lease is alive."""
        async with self.store.snapshot() as tx:
            return await live_holder(tx)

    @syscall(Call.LEASE, session=None, check=None)
    async def acquire(self, act: Act, token: str, slots: int, proc_start: float | None) -> Leased:
        """Take the lease, or refuse naming the live holder: one whose process is alive is
        never taken over, however late its heartbeat (it may only be busy)."""
        holder = await live_holder(act.tx)
        if holder is not None and holder.token != token:
            raise EngineBusy(
                f"an engine already runs on {self.path} for host {holder.host}: pid {holder.pid} on {holder.machine}"
                f" (heartbeat {await act.tx.clock() - holder.heartbeat:.1f}s ago)"
            )
        before = await rows.lease(act.tx, hosts.this())
        if before is not None and before["token"] != token and before["machine"] != hosts.machine():
            raise EngineBusy(
                f"host {hosts.this()}'s engine (pid {before['pid']} on machine {before['machine']}) has not been heard"
                f" for {await act.tx.clock() - before['heartbeat']:.0f}s, but from here it cannot be told dead from"
                f" cut off (its runs may be going on there): if it is dead, say so with procession host"
                f" {hosts.this()} --dead, then start this one again"
            )
        await engines.put_lease(act.tx, token, os.getpid(), hosts.this(), slots, proc_start, hosts.machine())
        return Leased(os.getpid(), slots, {"token": before["token"], "pid": before["pid"]} if before else None)

    @syscall(Call.LEASE, session=None, check=None)
    async def release(self, act: Act, token: str) -> Released:
        await engines.drop_lease(act.tx, token)
        return Released()

    # ------------------------------------------------------------------ runs

    async def ready(self, limit: int, only: set[int] | None = None) -> list[Row]:
        """Sessions waiting for a slot (of ``only``, when given): highest priority first,
        oldest first within one."""
        async with self.store.snapshot() as tx:
            return await rows.ready_sessions(tx, hosts.this(), limit, only)

    async def held(self) -> float | None:
        """When the next session held back after failed runs may take the wakes it was kept (its
        triggers', or its own restart)."""
        async with self.store.snapshot() as tx:
            return await rows.held_until(tx, hosts.this())

    @syscall(Call.WAKE, session=None, check=None)
    async def release_held(self, act: Act) -> Released:
        """The back-off of failed runs is over: the wakes kept meanwhile queue their sessions."""
        for sid in await rows.held_over(act.tx, hosts.this(), act.now):
            await rows.update_session(act.tx, sid, not_before=None)
            await waking.release_pending(act.tx, sid)
        return Released()

    # ------------------------------------------------------------------ budgets

    async def budget(self, sid: int) -> Verdict:
        async with self.store.snapshot() as tx:
            return await budgets.verdict(tx, sid, tx.now)

    @syscall(Call.SUSPEND, check=None)
    async def hold_over_budget(self, act: Act, sid: int, why: str) -> Moved:
        """Suspend a session a run would take over its budget; its queued run runs on resume."""
        row = await rows.session(act.tx, sid)
        if row["state"] != State.READY:
            raise IllegalTransition(Call.SUSPEND, sid, State(row["state"]), "it is not waiting for a slot")
        await rows.update_session(act.tx, sid, state=State.SUSPENDED.value, reason=Reason.BUDGET.value,
                                  resume_to=State.READY.value)
        act.note(f"over {why}: raise its limit (procession limit) or wait for the next period")
        return Moved(sid, State.SUSPENDED)

    @syscall(Call.SUSPEND, check=None)
    async def hold_absent(self, act: Act, sid: int, folder: str) -> Moved:
        """Suspend a session whose folder is not on this machine instead of failing its run (an
        engine that took its host over from another machine, say): nothing of it runs here,
        and its queued run runs on resume, once the folder is there or it moved where it is."""
        row = await rows.session(act.tx, sid)
        if row["state"] != State.READY:
            raise IllegalTransition(Call.SUSPEND, sid, State(row["state"]), "it is not waiting for a slot")
        await rows.update_session(act.tx, sid, state=State.SUSPENDED.value, reason=Reason.ABSENT.value,
                                  resume_to=State.READY.value)
        act.note(f"its folder {folder} is not on this machine ({hosts.machine()}): move it to the host where it is"
                 f" (procession move {sid} --to HOST), or resume it once the folder is here")
        return Moved(sid, State.SUSPENDED)

    @syscall(Call.LIMIT, check=None)
    async def warn_budget(self, act: Act, sid: int, warned: list[tuple[int, str]]) -> Warned:
        """Tell once a period that a session's spend passed 80% of a cap."""
        for limit_id, _ in warned:
            per = await rows.limit_period(act.tx, limit_id)
            await rows.set_warned(act.tx, limit_id, budget_model.period_start(per, act.now))
        return Warned(sid, [text for _, text in warned])

    async def budget_held(self) -> list[int]:
        """The sessions a budget holds suspended."""
        async with self.store.snapshot() as tx:
            return await rows.suspended_for(tx, Reason.BUDGET.value)

    async def budget_releasable(self, held: list[int]) -> bool:
        """Whether one of ``held`` is under its budgets again (then, and only then, a call)."""
        async with self.store.snapshot() as tx:
            for sid in held:
                if (await budgets.verdict(tx, sid, tx.now)).over is None:
                    return True
        return False

    @syscall(Call.RESUME, session=None, check=None)
    async def release_budgets(self, act: Act) -> Resumed:
        """Resume the sessions under their budgets again (a new period, a raised limit)."""
        return Resumed(await budgets.release(act.tx))

    async def workdir(self, sid: int) -> tuple[str, list[dict[str, Any]], tuple[str, str] | None]:
        """Where a step runs (the first bound folder, else the folder the session was spawned
        in), what the session has bound (the bounds of its run), and its own git worktree (a
        fork's: the repository's common git folder and the worktree's top), as made by ``fork``."""
        async with self.store.snapshot() as tx:
            tree = await rows.worktree(tx, sid)
            return await rows.workdir(tx, sid), [{"kind": r["kind"], "uri": r["uri"], "mode": r["mode"]}
                                                 for r in await rows.resources(tx, sid)], \
                (tree["repo"], tree["path"]) if tree is not None and tree["kind"] == "git" else None

    async def agent_turn(self, sid: int, spec: RunnerSpec, cwd: str, env: dict[str, str]) -> Turn:
        """What an agent CLI is given by the run about to start: the messages it has not seen
        (since ``agent_seen``; not its own, which it keeps itself, unless it has no session of
        its own yet and the history came from another runner), and why it was woken. Read
        before the CLI starts; ``start_run`` records how far the prompt went (``prompt_upto``)."""
        async with self.store.snapshot() as tx:
            row = await rows.session(tx, sid)
            ref = native.agent_ref(row)
            unseen = [m for m in await history.read(tx, sid, row["agent_seen"])
                      if not (ref and m.author in ("runner", ref["cli"])) and m.role != "system"]
            mcp = [McpServer(mcp_binding.NAME, tuple(mcp_binding.server_command(self.path, sid, uri=r["uri"],
                                                                                mode=r["mode"], env=env)))
                   if mcp_binding.is_procession(r["kind"], r["uri"]) else McpServer.parse(r["uri"])
                   for r in await rows.resources(tx, sid) if r["kind"] == "mcp"]
            # an ACP agent that cannot take its session up again is given the whole conversation,
            # as its active context (a compressed part as its summary)
            said = ([m._replace(role="summary of the earlier conversation") if m.fold is not None else m
                     for m in await history.context(tx, sid) if m.role != "system" or m.fold is not None]
                    if ref and spec.kind == runner_spec.ACP else [])
        causes = json.loads(row["causes"]) if row["causes"] else []
        woken = [cause_text(c) for c in causes if c.get("kind") not in (None, "manual", "resume", "answer")]
        turn = Turn(sid, _prompt(row["goal"] if not ref and not row["agent_seen"] else "", unseen, woken), row["length"],
                    row["system"], spec.target, cwd, ref, mcp, env, permissions=row["permissions"], net=row["net"])
        turn.whole = _prompt(row["goal"], said, woken) if said else ""
        return turn

    @syscall(Call.START)
    async def start_run(self, act: Act, sid: int, *, runner: str, engine: str, tracker: str | None = None,
                        prompt_upto: int | None = None, confinement: str | None = None) -> Start:
        """Claim a ready session for a run of ``runner``, before its step is launched; returns
        its input. What runs is recorded before it runs: an engine killed as it launches the
        step leaves a run whose ``tracker`` the next engine finds its processes by (``recover``),
        never a process nothing names; the process is recorded once started (``launch_run``).

        Refused (and nothing is launched) if this engine no longer holds the lease, or the
        session left the queue or changed runner since the engine looked.
        """
        tx, row = act.tx, act.row
        lease = await rows.lease(tx, hosts.this())
        if lease is None or lease["token"] != engine:
            raise EngineBusy("this engine no longer holds its host's lease")
        if row["host"] != hosts.this():
            raise IllegalTransition(Call.START, sid, State(row["state"]), f"it belongs to host {row['host']}")
        if not row["armed"] or row["runner"] != runner:
            raise IllegalTransition(Call.START, sid, State(row["state"]), "its runner changed or is not approved")
        if await rows.moving(tx, sid):
            raise IllegalTransition(Call.START, sid, State(row["state"]), "it is moving to another host")
        causes = json.loads(row["causes"]) if row["causes"] else [{"kind": "manual"}]
        run = await runs.insert_run(tx, sid, causes, None, None, engine, tracker)
        await runs.record_prompt(tx, run, prompt_upto, confinement)
        await rows.update_session(tx, sid, state=State.RUNNING.value, queued_at=None, causes=None,
                                  **({"confinement": confinement} if confinement is not None else {}))
        context = await history.context(tx, sid)
        memory = {k: json.loads(v) for k, v in (await rows.memory(tx, sid)).items()}
        resources = [{"kind": r["kind"], "uri": r["uri"], "mode": r["mode"]} for r in await rows.resources(tx, sid)]
        document = protocol.document(
            {"id": sid, "uuid": row["uuid"], "name": row["name"], "agent": row["agent"], "goal": row["goal"]},
            {"id": run, "cause": causes}, row["system"], context, memory, resources,
        )
        return Start(sid, run, document)

    @syscall(Call.LAUNCH, check=None)
    async def launch_run(self, act: Act, sid: int, run: int, *, pid: int, proc_start: float | None) -> Launched:
        """The process of a claimed run, started: its pid (``ps``, the process stats) and its
        start time (so that a later engine never kills a reused pid)."""
        return Launched(await runs.launched(act.tx, sid, run, pid, proc_start))

    @syscall(Call.EMIT, check=None)
    async def emit(self, act: Act, sid: int, run: int, events: Events) -> Emitted:
        """Apply what a running step has said and done so far: its messages join the history,
        its memory changes and sends are made, its usage is counted. Refused for a run that is
        over, and ignored for a session cancelled or merged away meanwhile."""
        if not await rows.live_run(act.tx, sid, run):
            raise NotFound(f"run {run} of session {sid} is not live")
        row = await rows.session(act.tx, sid)
        problems = [] if row["state"] == State.TERMINATED else await _apply(act.tx, row, run, events,
                                                                            self.store.count_tokens)
        return Emitted(sid, run, len(events.messages), problems)

    @syscall(Call.FINISH, check=None)
    async def finish_run(self, act: Act, sid: int, run: int, outcome: str, *, exit_code: int | None,
                         events: Events, error: str = "", requeue: bool = False, frozen_s: float = 0.0,
                         stopping: bool = False) -> Finish:
        """Record how a run ended, with the last of what its step said (``events``).

        What the step said and did while it ran is already in the store (``emit``); the last
        events are applied here in the same way, whatever the outcome: a message once said
        stays said. A ``done`` event of a successful run ends the session. The session goes
        back to sleep unless the user moved it meanwhile (interrupt, cancel, suspend);
        ``requeue`` makes a suspended session run again on resume (an HTTP step cannot be
        frozen, so suspending it interrupted it, and its partial reply stayed out of the
        context). A failed or timed-out run counts against the session: after ``fail_limit``
        of them in a row it is suspended with reason ``failing``, and its trigger-fired runs
        back off meanwhile. What the run asked a person and is still unanswered is withdrawn;
        but when the engine is ``stopping`` under a run that waits, the session waits on, its
        requests open (``permissions``: the answer goes to a new run).
        """
        tx = act.tx
        if not await rows.live_run(tx, sid, run):
            raise NotFound(f"run {run} of session {sid} is not live")
        row = await rows.session(tx, sid)
        state = State(row["state"])
        waits = stopping and (state is State.WAITING or state is State.SUSPENDED and row["resume_to"] == State.WAITING)
        if not waits:
            await rows.withdraw(tx, run=run)
        # an answer carried to this run and not asked for again is not kept for later ones
        await rows.forget_carried(tx, sid, run)
        if state is State.WAITING and not waits:
            state = State.RUNNING  # nothing waits any more: it ends as a running one does
        ended = state is State.TERMINATED
        problems = list(events.problems)
        if not ended:
            problems += await _apply(tx, row, run, events, self.store.count_tokens)
            if events.reply and outcome in (OK, INTERRUPTED, TIMEOUT):
                meta = {"run": run} if outcome == OK else {"outcome": outcome, "run": run}
                await rows.append(tx, await rows.session(tx, sid), [("assistant", events.reply, "runner", False, meta)],
                                  self.store.count_tokens)
        if state is State.RUNNING and requeue:
            state = State.READY  # interrupted by a suspend the user has undone since: run it again
        elif state is State.RUNNING:
            state = State.TERMINATED if outcome == OK and events.done else State.SLEEPING
        if problems:
            error = "\n".join(filter(None, [error, *problems]))
        if outcome in (INTERRUPTED, TIMEOUT, CANCELLED):  # what an agent said before it was stopped says so
            upto = await runs.prompt_upto(tx, run)
            if upto is not None:
                await rows.mark_stopped(tx, sid, run, upto, outcome)
        await runs.end_run(tx, run, outcome, exit_code, error[-4096:] or None, frozen_s)
        counts: dict[str, Any] = {"last_outcome": outcome}
        if outcome == OK:
            counts.update(failures=0, not_before=None)
        elif outcome in (FAILED, TIMEOUT):
            failures = row["failures"] + 1
            counts.update(failures=failures, not_before=act.now + backoff(failures))
            if row["fail_limit"] and failures >= row["fail_limit"] and state in (State.SLEEPING, State.READY):
                state = State.SUSPENDED
                counts.update(reason=Reason.FAILING.value, resume_to=State.SLEEPING.value, queued_at=None, causes=None)
                tx.follow("engine", Call.SUSPEND, sid, {"sid": sid, "why": "failing"},
                          {"failures": failures, "fail_limit": row["fail_limit"]})
        restart = state is State.SLEEPING and _restarts(row["restart"], outcome, stopping)
        if restart:  # said, as a restart after a crash is: faces tell the user what runs again and why
            tx.follow("engine", Call.ACTIVATE, sid, {"sid": sid, "why": "restart"},
                      {"run": run, "policy": row["restart"], "outcome": outcome})
        if restart and outcome in (FAILED, TIMEOUT):  # after the back-off (``release_held`` queues it)
            counts["causes"] = json.dumps([{"kind": "restart", "run": run, "why": outcome}])
        elif restart:
            state = State.READY
        if state is State.READY and row["state"] in (State.RUNNING, State.WAITING):
            await rows.update_session(tx, sid, **counts)
            cause = {"kind": "restart", "run": run, "why": outcome} if restart else {"kind": "resume", "run": run}
            await waking.queue(tx, await rows.session(tx, sid), [cause])
        else:
            changes: dict[str, Any] = {"state": state.value, **counts}
            if state is State.TERMINATED and row["state"] in (State.RUNNING, State.WAITING):
                changes["reason"] = Reason.DONE.value
            if state is State.SUSPENDED and "resume_to" not in changes and not waits:
                changes["resume_to"] = State.READY.value if requeue else State.SLEEPING.value
            await rows.update_session(tx, sid, **changes)
        await waking.release_pending(tx, sid)
        if outcome not in (CANCELLED, LOST) and not ended:
            for trig in await triggers.after(tx, sid):
                await waking.wake(tx, await rows.session(tx, trig["session_id"]), trig,
                                  {"session": sid, "run": run, "outcome": outcome})
        return Finish(sid, state)

    async def log(self, run: int, chunks: list[tuple[str, float, str]]) -> list[int]:
        """Append to a run's log (not a call: the log is the step's own output, not a change
        of any session)."""
        async with self.store.tx() as tx:
            return await runs.log_output(tx, run, chunks)

    async def drop_log(self, run: int, upto: int, after: int) -> None:
        async with self.store.tx() as tx:
            await runs.drop_output(tx, run, upto, after)

    async def trigger_changes(self, since: int) -> tuple[int, list[int], list[Row]]:
        """Triggers of the sessions changed after revision ``since`` (all for 0) that may fire
        (armed, of approved sessions that have not ended): the revision read up to, the changed
        sessions, their triggers. A trigger's change always stamps its session, so the engine
        recomputes only what changed. Only this host's: the folders they watch are here."""
        async with self.store.snapshot() as tx:
            rev = await rows.last_rev(tx)
            sessions = await rows.changed(tx, since)
            found = await triggers.changed(tx, since, hosts.this()) if sessions else []
        return rev, sessions, found

    async def sample(self, stats: list[tuple[float, int, int]]) -> None:
        """Store CPU% and RSS of live steps: ``(cpu, rss, run)`` rows. Not a call: not journaled,
        but the sessions are stamped changed so that monitors redraw their rows."""
        async with self.store.tx() as tx:
            await runs.sample_runs(tx, stats)

    # ------------------------------------------------------------------ triggers

    async def fire(self, trigger: int, cause: dict[str, Any], state: dict[str, Any] | None = None) -> str:
        """Fire one trigger (journaled by ``waking.wake``); ``state`` replaces its stored fingerprint."""
        async with self.store.tx() as tx:
            trig = await triggers.trigger(tx, trigger)
            if trig is None:
                return "gone"
            if state is not None:
                await triggers.set_trigger_state(tx, trigger, state)
            return await waking.wake(tx, await rows.session(tx, trig["session_id"]), trig, cause)

    async def commit_trigger(self, trigger: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """A commit trigger's spec and what it has seen, while it may fire (armed, of an approved
        session that has not ended); None otherwise."""
        async with self.store.snapshot() as tx:
            row = await triggers.live_commit(tx, trigger)
        if row is None:
            return None
        return json.loads(row["spec"]), json.loads(row["state"]) if row["state"] else {}

    async def fire_commits(self, trigger: int, causes: list[dict[str, Any]], state: dict[str, Any],
                           seen: dict[str, Any]) -> list[str]:
        """Fire a commit trigger once per branch that gained commits (each journaled by
        ``waking.wake``) and remember what it has now seen, in one transaction; a trigger whose
        state moved since it was read (``seen``) is left alone. A new problem, or one solved,
        stamps the session, so that faces show it."""
        async with self.store.tx() as tx:
            trig = await triggers.trigger(tx, trigger)
            if trig is None or (json.loads(trig["state"]) if trig["state"] else {}) != seen:
                return ["gone" for _ in causes]
            if state != seen:
                await triggers.set_trigger_state(tx, trigger, state)
            sid, results = trig["session_id"], []
            for cause in causes:  # read again each time: a wake may have kept the cause before on it
                again = await triggers.trigger(tx, trigger)
                assert again is not None
                results.append(await waking.wake(tx, await rows.session(tx, sid), again, cause))
            if not causes and (state.get("problem") != seen.get("problem") or state.get("last") != seen.get("last")):
                await tx.touch(sid)
            return results

    async def remember(self, trigger: int, state: dict[str, Any]) -> None:
        """Store a watch trigger's fingerprint (not a call: nothing the user sees changes)."""
        async with self.store.tx() as tx:
            await triggers.set_trigger_state(tx, trigger, state)

    # ------------------------------------------------------------------ recovery

    async def orphans(self, token: str) -> list[Orphan]:
        """Runs of this host's sessions left live by another engine (dead, since we hold this
        host's lease). Another host's runs are its own engine's to recover: their processes are there."""
        async with self.store.snapshot() as tx:
            found = await runs.orphans(tx, hosts.this(), token)
        return [Orphan(*r) for r in found]

    @syscall(Call.RECOVER, session=None, check=None)
    async def recover(self, act: Act, token: str) -> Recovered:
        """Close the runs of a dead engine as ``lost`` and put their sessions back to sleep, or
        queue them again if their restart policy says so; a session waiting for a person waits
        on (its answer goes to a new run)."""
        tx = act.tx
        found = await runs.orphans(tx, hosts.this(), token)
        sessions = []
        for run in found:
            await runs.end_run(tx, run["id"], LOST)
            row = await rows.session(tx, run["session_id"])
            state = State(row["state"])
            if state is State.RUNNING and _restarts(row["restart"], LOST, False):
                # a lost run counts as a failure: a run that takes its engine down is not run for ever
                failures = row["failures"] + 1
                if row["fail_limit"] and failures >= row["fail_limit"]:
                    await rows.update_session(tx, row["id"], state=State.SUSPENDED.value, reason=Reason.FAILING.value,
                                              resume_to=State.SLEEPING.value, failures=failures)
                    tx.follow("engine", Call.SUSPEND, row["id"], {"sid": row["id"], "why": "failing"},
                              {"failures": failures, "fail_limit": row["fail_limit"], "lost": run["id"]})
                else:
                    await rows.update_session(tx, row["id"], state=State.SLEEPING.value, failures=failures)
                    await waking.queue(tx, await rows.session(tx, row["id"]), [{"kind": "restart", "run": run["id"],
                                                                                "why": LOST}])
                    tx.follow("engine", Call.ACTIVATE, row["id"], {"sid": row["id"], "why": "restart"},
                              {"run": run["id"], "policy": row["restart"], "outcome": LOST})
            elif state is State.RUNNING:
                await rows.update_session(tx, row["id"], state=State.SLEEPING.value)
                await waking.release_pending(tx, row["id"])
            elif state is State.SUSPENDED and row["resume_to"] == State.RUNNING:
                await rows.update_session(tx, row["id"], resume_to=State.SLEEPING.value)
            sessions.append(row["id"])
        for sid in await rows.stray_running(tx, hosts.this()):
            await rows.update_session(tx, sid, state=State.SLEEPING.value)
            sessions.append(sid)
        return Recovered([r["id"] for r in found], sessions)


def _restarts(policy: str, outcome: str, stopping: bool) -> bool:
    """Whether a run that ended ``outcome`` runs again under restart ``policy`` (``stopping``:
    the engine stopped under it)."""
    if policy == Restart.NO:
        return False
    if outcome in (LOST, FAILED, TIMEOUT):
        return True
    return policy == Restart.ALWAYS and stopping and outcome == INTERRUPTED


def cause_text(cause: dict[str, Any]) -> str:
    """Why a trigger woke the session, in words an agent reads in its prompt."""
    match cause.get("kind"):
        case "watch":
            paths = cause.get("paths") or []
            return f"woken because these files changed: {', '.join(map(str, paths))}" if paths else "woken by a file change"
        case "cron" | "every":
            return f"woken by the schedule ({cause.get('at') or cause.get('time') or cause.get('kind')})"
        case "inbox":
            return "woken because a message arrived"
        case "after":
            return f"woken because session {cause.get('session')} finished a run ({cause.get('outcome')})"
        case "restart":
            how = {"lost": "the engine running it stopped (a crash or a restart)", "interrupted": "the engine"
                   " stopped", "failed": "it failed", "timeout": "it ran out of time"}.get(str(cause.get("why")), "")
            return f"run again: your last run did not finish ({how})" if how else "run again: your last run did not finish"
    return f"woken by {cause.get('kind')}"


def backoff(failures: int) -> float:
    """Seconds before a trigger may run a session again after ``failures`` failed runs in a row."""
    return float(min(BACKOFF_S * 2 ** (failures - 1), BACKOFF_MAX_S))


def _prompt(goal: str, messages: list[Any], woken: list[str]) -> str:
    """What an agent CLI is told: the session's goal (on its first run), the messages (one of
    the user's alone as it is; else each with who said it), and why it was woken."""
    parts = [f"Your goal: {goal}"] if goal else []
    if len(messages) == 1 and messages[0].author == "user":
        parts.append(messages[0].content)
    else:
        parts += [f"[{m.role} from {m.author}]\n{m.content}" for m in messages]
    if woken:
        parts.append("(" + "; ".join(woken) + ")")
    return "\n\n".join(parts) or "Continue."


#: What an agent reference keeps when its session announces itself again (a resumed run).
_KEPT: Final = ("position", "adopted", "was")


def _read_to(events: Events) -> dict[str, Any] | None:
    """Where the session's transcript is read to once ``events`` are stored, or None where they
    do not say. The run's end says it (``followed``: the transcript read past all the run
    wrote); before, a message that names its transcript record (Claude Code's ``agent_uuid``)
    is read to that record. Stored in the transaction that stores the messages: an engine that
    dies mid-run leaves a position past every message it stored, and no sync reads them again
    (offset 0: the format finds the record in the whole file)."""
    if events.followed is not None:
        return events.followed
    named = [meta["agent_uuid"] for _, _, meta in events.messages if meta and meta.get("agent_uuid")]
    return {"position": Position(0, str(named[-1])).as_json()} if named else None


async def _apply(tx: Tx, row: Row, run: int, events: Events, count: Any) -> list[str]:
    """A step's messages, memory changes, sends and usage; returns what could not be done."""
    sid = row["id"]
    if events.agent_ref:  # the agent has its own session now: it has seen what this run's prompt held
        seen = await runs.prompt_upto(tx, run)
        ref = dict(events.agent_ref)
        held = native.agent_ref(row) or {}
        if held.get("id") == ref["id"] and not held.get("fork"):  # the same session resumed: where it was read to
            ref.update({k: held[k] for k in _KEPT if k in held})
        ref[PROMPTED] = run  # announced before the CLI writes the prompt: it comes after the position
        await rows.update_session(tx, sid, agent_ref=json.dumps(ref), agent_seen=max(row["agent_seen"], seen or 0))
        row = await rows.session(tx, sid)
    if row["agent_ref"] and (read := _read_to(events)) is not None:
        ref = {k: v for k, v in json.loads(row["agent_ref"]).items() if k != PROMPTED}
        await rows.update_session(tx, sid, agent_ref=json.dumps({**ref, **read}))
        row = await rows.session(tx, sid)
    if events.messages:
        await rows.append(tx, row, [(role, text, "runner", False, {"run": run, **(meta or {})})
                                    for role, text, meta in events.messages], count)
    if events.tokens_in or events.tokens_out or events.cache_read or events.cache_write or events.cost:
        await runs.add_usage(tx, run, events.tokens_in, events.tokens_out, events.cache_read, events.cache_write,
                             events.cost)
    if events.calibrated:  # the server said what it was sent: the context figure follows it
        scale, samples = calibrate(row["token_scale"], row["token_samples"], events.reported, events.counted,
                                   events.calibrated)
        await rows.update_session(tx, sid, token_scale=scale, token_samples=samples)
    if events.context:
        tokens, window = events.context
        await rows.update_session(tx, sid, agent_context=tokens, **({"agent_window": window} if window else {}))
    if events.status:
        await runs.set_status(tx, run, events.status[:200])
        await tx.touch(sid)
    problems = []
    values = {}
    for key, value in events.memory_set.items():
        try:
            values[key] = canonical(value)
        except (TypeError, ValueError):
            problems.append(f"memory {key!r}: not JSON")
    await rows.put_memory(tx, sid, values)
    await rows.delete_memory(tx, sid, events.memory_delete)
    if values or events.memory_delete:
        await tx.touch(sid)
    for to, text in events.sends:
        try:
            target = await rows.session(tx, to)
        except SessionNotFound:
            target = None
        if target is None or target["state"] == State.TERMINATED or to == sid:
            problems.append(f"send to {to}: no such live session")
            continue
        await deliver(tx, target, [("user", text, f"session:{sid}", False, None)], f"session:{sid}")
    return problems
